"""The plan's charts: one self-contained HTML report (plotly) and the Pareto plot as SVG or PNG (matplotlib).

Why these libraries: plotly draws interactive charts (hover shows each configuration's name and figures,
traces toggle from the legend) and writes its JavaScript inline, so the report is one file that opens
offline; the figures stay plain data on the page (`document.getElementById("pareto").data`), which the
browser test reads back. Plotly's own static export needs kaleido and a downloaded Chrome, so the
Pareto image comes from matplotlib, which writes SVG and PNG with no browser (SVG with a fixed hash
salt and no date, so the same plan gives the same bytes). Both are imported only when a chart is asked for.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

CURVES = 12
"""Latency-versus-rate curves drawn: those of the best-ranked configurations."""


def _meeting(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in result["configurations"] if r["status"] == "meets"]


def _latency_metric(result: dict[str, Any]) -> str:
    return "ttft" if "ttft" in result["slo"] else next(iter(result["slo"]))


def chart_data(result: dict[str, Any]) -> dict[str, Any]:
    """What each chart plots, as plain lists (the HTML page, the image and the tests use the same)."""
    meeting = _meeting(result)
    metric = _latency_metric(result)
    front = set(result["pareto"])
    by_key = {r["key"]: r for r in meeting}
    return {
        "metric": metric,
        "pareto_all": {"keys": [r["key"] for r in meeting],
                       "x": [r["at_max"][metric] * 1e3 for r in meeting],
                       "y": [r["goodput"]["requests_per_s_per_gpu"] for r in meeting]},
        "pareto_front": {"keys": result["pareto"],
                         "x": [by_key[k]["at_max"][metric] * 1e3 for k in result["pareto"]],
                         "y": [by_key[k]["goodput"]["requests_per_s_per_gpu"] for k in result["pareto"]]},
        "cost": {"keys": [r["key"] for r in meeting], "x": [r["max_rate"] for r in meeting],
                 "y": [r["cost_per_hour"] for r in meeting], "front": [r["key"] in front for r in meeting]},
        "curves": [{"key": r["key"], "x": [p["rate"] for p in r["curve"]],
                    "y": [None if p.get(metric) is None else p[metric] * 1e3 for p in r["curve"]]}
                   for r in meeting[:CURVES]],
    }


def _figures(result: dict[str, Any]) -> dict[str, Any]:
    import plotly.graph_objects as go

    data = chart_data(result)
    label = f"{data['metric'].upper()} p{result['slo'][data['metric']]['attainment'] * 100:g} (ms) at the highest rate"
    pareto = go.Figure()
    pareto.add_scatter(name="configurations", mode="markers", x=data["pareto_all"]["x"], y=data["pareto_all"]["y"],
                       text=data["pareto_all"]["keys"], hovertemplate="%{text}<br>%{x:.1f} ms, %{y:.3g}/s per GPU")
    pareto.add_scatter(name="Pareto front", mode="lines+markers", x=data["pareto_front"]["x"], y=data["pareto_front"]["y"],
                       text=data["pareto_front"]["keys"], hovertemplate="%{text}<br>%{x:.1f} ms, %{y:.3g}/s per GPU")
    pareto.update_layout(title="Goodput per GPU against tail latency", xaxis_title=label,
                         yaxis_title="requests/s per GPU within the SLO")
    cost = go.Figure()
    cost.add_scatter(name="configurations", mode="markers", x=data["cost"]["x"], y=data["cost"]["y"], text=data["cost"]["keys"],
                     hovertemplate="%{text}<br>%{x:.3g} requests/s, $%{y:.2f}/h")
    cost.update_layout(title="Cost against the rate carried within the SLO", xaxis_title="requests/s within the SLO",
                       yaxis_title="USD per hour")
    curves = go.Figure()
    for curve in data["curves"]:
        curves.add_scatter(name=curve["key"], mode="lines+markers", x=curve["x"], y=curve["y"])
    bound = result["slo"][data["metric"]]["max_s"] * 1e3
    curves.add_hline(y=bound, line_dash="dash", annotation_text="SLO")
    curves.update_layout(title=f"{data['metric'].upper()} against the arrival rate (the rates the search visited)",
                         xaxis_title="requests/s", yaxis_title=f"{data['metric'].upper()} (ms)", yaxis_type="log")
    return {"pareto": pareto, "cost": cost, "curves": curves}


def html_report(result: dict[str, Any]) -> str:
    """The whole report as one HTML page: verdict, ranked table, three charts, the data as JSON."""
    from plotly.offline import get_plotlyjs

    charts = "\n".join(figure.to_html(full_html=False, include_plotlyjs=False, div_id=name)
                       for name, figure in _figures(result).items())
    from .output import MEANING, heading

    rows = []
    for row in result["configurations"]:
        at, goodput = row.get("at_max", {}), row.get("goodput", {})
        capacity = row.get("capacity") or {}
        cells = [row["rank"], row["key"], row.get("standing", row["status"]),
                 _number(row.get("max_rate")), _number(capacity.get("optimistic")),
                 "" if at.get("ttft") is None else f"{at['ttft'] * 1e3:,.1f}",
                 "" if at.get("itl") is None else f"{at['itl'] * 1e3:,.1f}",
                 _number(goodput.get("requests_per_s_per_gpu")),
                 "" if "requests_per_dollar" not in goodput else f"{goodput['requests_per_dollar']:,.0f}",
                 f"{row['cost_per_hour']:,.2f}", row.get("reason", "")]
        rows.append(f"<tr data-key=\"{html.escape(row['key'])}\" data-status=\"{html.escape(row.get('standing', row['status']))}\">"
                    + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("#", "configuration", "status", "carries from /s (conservative)",
                                               "up to /s (optimistic)", "TTFT ms", "ITL ms", "req/s per GPU",
                                               "requests per $", "$/h", "reason"))
    asked = heading(result)
    stated = (f"<ul id=\"asked\"><li id=\"slo\">{html.escape(asked[1])}</li>"
              + "".join(f"<li class=\"workload\">{html.escape(line)}</li>" for line in asked[2:-1])
              + f"<li id=\"meaning\">{html.escape(MEANING)}</li></ul>")
    winner = f"<pre>{html.escape(result['vllm_serve'])}</pre>" if result.get("vllm_serve") else ""
    payload = json.dumps(chart_data(result)).replace("</", "<\\/")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>aisim plan {html.escape(result['scenario'])}</title>"
            f"<script>{get_plotlyjs()}</script>"
            "<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;font-size:12px}"
            " td,th{border:1px solid #ccc;padding:2px 6px} tr[data-status='below the target'] td,"
            " tr[data-status='misses the SLO'] td{color:#a33} tr[data-status='infeasible'] td,tr[data-status='cannot win'] td{color:#888}</style>"
            "</head><body>"
            f"<h1>aisim plan: {html.escape(result['scenario'])}</h1>{stated}"
            f"<p id=\"answer\">{html.escape(result['answer']['text'])}</p>{winner}\n{charts}\n"
            f"<h2>Configurations</h2><table id=\"ranking\"><tr>{head}</tr>{''.join(rows)}</table>"
            f"<script type=\"application/json\" id=\"plan-data\">{payload}</script></body></html>\n")


def _number(value: float | None) -> str:
    """A rate for people: three significant figures, thousands separated."""
    if value is None:
        return ""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def pareto_image(result: dict[str, Any], path: str | Path) -> None:
    """The Pareto plot as SVG or PNG (by the file's suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = chart_data(result)
    matplotlib.rcParams["svg.hashsalt"] = "aisim-plan"
    figure, axes = plt.subplots(figsize=(8, 5), dpi=100)
    axes.scatter(data["pareto_all"]["x"], data["pareto_all"]["y"], s=14, alpha=0.5, label="configurations")
    axes.plot(data["pareto_front"]["x"], data["pareto_front"]["y"], "o-", color="#d62728", label="Pareto front")
    for index, (key, x, y) in enumerate(zip(data["pareto_front"]["keys"], data["pareto_front"]["x"], data["pareto_front"]["y"])):
        # alternate sides and heights so that neighbouring labels on the front do not overlap
        side = 1 if index % 2 == 0 else -1
        axes.annotate(key.split(" tokens=")[0], (x, y), fontsize=7, xytext=(6 * side, 10 * side - (index % 4 > 1) * 8),
                      textcoords="offset points", ha="left" if side > 0 else "right",
                      arrowprops={"arrowstyle": "-", "color": "#999", "lw": 0.5})
    metric = data["metric"]
    axes.set_xlabel(f"{metric.upper()} p{result['slo'][metric]['attainment'] * 100:g} at the highest rate within the SLO (ms)")
    axes.set_ylabel("requests/s per GPU within the SLO")
    axes.set_title(f"aisim plan {result['scenario']}: goodput per GPU against tail latency")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    metadata = {"Date": None} if str(path).endswith(".svg") else {}
    figure.savefig(path, metadata=metadata)
    plt.close(figure)
