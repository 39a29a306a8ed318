"""The plan's HTML report in a real headless browser: Debian's chromium driven by selenium through Debian's
chromium-driver (`.ci/run` installs both). The check reads the plots back from the live page, point by
point, against the plan's JSON: the data plotly holds, the markers it drew, and where it drew them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aisim.plan import plan_file
from aisim.plan.charts import chart_data, html_report, pareto_image

from .test_plan import PLAN, _write

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("report")
    return plan_file(_write(folder, PLAN.replace("replicas: [1, 2]", "replicas: [1, 2, 3]")), jobs=1)


@pytest.fixture(scope="module")
def browser() -> Any:
    if not (CHROMIUM and DRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    yield driver
    driver.quit()


def test_the_report_plots_the_planned_values(planned: dict[str, Any], browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(html_report(planned), encoding="utf-8")
    browser.get(page.as_uri())
    expected = chart_data(planned)
    meeting = [r for r in planned["configurations"] if r["status"] == "meets"]
    assert len(meeting) == len(expected["pareto_all"]["x"]) >= 4
    drawn = browser.execute_script("""
        const figure = (id) => {
          const gd = document.getElementById(id);
          return {
            data: gd.data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y), text: t.text ? Array.from(t.text) : null})),
            // the markers plotly drew: their count and their place in data units, from the axes' own mapping
            points: Array.from(gd.querySelectorAll('.scatterlayer .trace')).map(trace =>
              Array.from(trace.querySelectorAll('.points path')).map(p => {
                const m = p.getAttribute('transform').match(/translate\\(([-\\d.e]+),\\s*([-\\d.e]+)\\)/);
                const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
                return [xa.p2l(parseFloat(m[1])), ya.p2l(parseFloat(m[2]))];
              })),
          };
        };
        return {pareto: figure('pareto'), cost: figure('cost'), curves: figure('curves'),
                answer: document.getElementById('answer').textContent,
                rows: document.querySelectorAll('#ranking tr').length};
    """)
    pareto = drawn["pareto"]
    assert [t["name"] for t in pareto["data"]] == ["configurations", "Pareto front"]
    assert pareto["data"][0]["x"] == expected["pareto_all"]["x"] and pareto["data"][0]["y"] == expected["pareto_all"]["y"]
    assert pareto["data"][0]["text"] == [r["key"] for r in meeting]
    assert pareto["data"][1]["text"] == planned["pareto"]
    for plotted, (xs, ys) in ((pareto["points"][0], (expected["pareto_all"]["x"], expected["pareto_all"]["y"])),
                              (pareto["points"][1], (expected["pareto_front"]["x"], expected["pareto_front"]["y"]))):
        assert len(plotted) == len(xs)
        for (px, py), x, y in zip(plotted, xs, ys):
            assert px == pytest.approx(x, rel=0.02, abs=0.5) and py == pytest.approx(y, rel=0.02, abs=0.05)
    assert drawn["cost"]["data"][0]["x"] == [r["max_rate"] for r in meeting]
    assert drawn["cost"]["data"][0]["y"] == [r["cost_per_hour"] for r in meeting]
    assert len(drawn["cost"]["points"][0]) == len(meeting)
    curves = {t["name"]: t for t in drawn["curves"]["data"]}
    for row in meeting:
        assert curves[row["key"]]["x"] == [p["rate"] for p in row["curve"]]
        assert curves[row["key"]]["y"] == pytest.approx([p["ttft"] * 1e3 for p in row["curve"]])
    assert drawn["answer"] == planned["answer"]["text"]
    assert drawn["rows"] == len(planned["configurations"]) + 1
    image = tmp_path / "pareto.svg"
    pareto_image(planned, image)
    pareto_image(planned, tmp_path / "again.svg")
    assert image.read_bytes() == (tmp_path / "again.svg").read_bytes() and b"<svg" in image.read_bytes()
    assert json.loads(page.read_text().split('id="plan-data">')[1].split("</script>")[0]) == json.loads(json.dumps(expected))


def test_the_report_states_the_slo_and_target_and_each_rows_status(browser: Any, tmp_path: Path) -> None:
    """A target between the configurations' capacities: some rows carry it, some fall short, and the page says
    which of them does, beside the SLO and the target it was asked for."""
    folder = tmp_path / "plan"
    folder.mkdir()
    result = plan_file(_write(folder, PLAN.replace("goal: goodput_per_gpu", "goal: cheapest\n  targetRate: 30/s")), jobs=1)
    meeting = [r for r in result["configurations"] if r["status"] == "meets"]
    assert {r["carries_target"] for r in meeting} == {True, False}, [(r["key"], r["max_rate"]) for r in meeting]
    page = tmp_path / "report.html"
    page.write_text(html_report(result), encoding="utf-8")
    browser.get(page.as_uri())
    shown = browser.execute_script("""
        return {slo: document.getElementById('slo').textContent,
                rows: Array.from(document.querySelectorAll('#ranking tr[data-key]')).map(tr =>
                  [tr.dataset.key, tr.cells[2].textContent, tr.cells[3].textContent, tr.cells[4].textContent])};
    """)
    assert "TTFT p99 <= 400 ms" in shown["slo"] and "ITL p99 <= 60 ms" in shown["slo"]
    assert "target 30 requests/s" in shown["slo"]
    by_key = {key: (status, low, high) for key, status, low, high in shown["rows"]}
    assert len(by_key) == len(result["configurations"])
    for row in result["configurations"]:
        status, low, high = by_key[row["key"]]
        if row["status"] == "meets":
            expected = "carries the target" if row["max_rate"] >= 30 else "below the target"
            assert status == expected, (row["key"], row["max_rate"], status)
            assert float(low) == pytest.approx(row["max_rate"], rel=0.01)
            assert float(high) == pytest.approx(row["capacity"]["optimistic"], rel=0.01) and float(high) > float(low)
        elif row["status"] == "pruned":  # could not rank first even at its ceiling: not simulated
            assert status == "cannot win" and not high.strip(), (row["key"], low, high)
        else:
            assert status in ("misses the SLO", "infeasible")
