"""Default GPU prices for `aisim plan`: US dollars per GPU-hour, on demand, each with its source and dates.

`aisim plan` ranks deployments by cost with these unless the plan's `prices` gives its own. Every price names
the page it comes from, the date the page gives for its figures (`published`) and the date it was read
(`read`: through a stored copy of the page, not a live visit). Where a page gives a range for a tier of
providers, the price is the range's midpoint (the method the first entries used, kept for the others).
Profiles without a published price found are listed with `usd_per_gpu_hour: None` and say so: a plan over
them needs `prices`. Tiers differ between sources (see each `note`): override them for your own provider.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

READ = "2026-12-06"
"""When the sources below were read."""

MERCATUS = ("Mercatus, \"Cloud GPU Pricing\" (on-demand $/hour by provider tier, May 2026)",
            "https://www.mercatus-ai.com/blog/cloud-gpu-pricing", "2026-05")


@dataclass(frozen=True)
class Price:
    """One profile's default price and where it comes from."""

    usd_per_gpu_hour: float | None
    """On-demand US dollars per GPU-hour; None: no published price found (give one in `plan.prices`)."""
    source: str = ""
    """The publication, in words."""
    url: str = ""
    """Where it is published."""
    published: str = ""
    """The date the source gives for its figures (`YYYY-MM-DD`, or `YYYY-MM` / `YYYY` where it gives no more)."""
    read: str = ""
    """When it was read."""
    note: str = ""
    """How the price was taken from the source (the range, the tier)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mercatus(usd: float, low: float, high: float) -> Price:
    source, url, published = MERCATUS
    return Price(usd, source, url, published, READ, f"midpoint of the specialty-provider range ${low:.2f}-{high:.2f}")


NOT_FOUND = "no published on-demand price found for this profile when the table was made; give it in plan.prices"

PRICES: dict[str, Price] = {
    "A100-80GB": _mercatus(1.30, 1.10, 1.50),
    "H100-SXM": _mercatus(3.00, 2.50, 3.50),
    "H200": _mercatus(4.00, 3.50, 4.50),
    "B200": Price(5.25, "Lyceum Technologies, \"NVIDIA B200 GPU Cloud Pricing 2026: True Costs & Architecture\"",
                  "https://lyceum.technology/magazine/nvidia-b200-gpu-cloud-pricing-2026/", "2026-03-11", READ,
                  "midpoint of \"standard on-demand pricing ... between $4.50 and $6.00 per hour on specialized clouds\""),
    "B300": Price(6.125, "Ornn, \"NVIDIA B200 vs B300: Why use one instead of the other?\" (Ornn GPU rental benchmark)",
                  "https://www.ornnai.com/research/nvidia-b200-vs-b300-why-use-one-instead-of-the-other", "2026", READ,
                  "midpoint of the B300 neocloud on-demand range $5.00-7.25 (the page gives the year only)"),
    "GB200": Price(4.54, "Spheron, \"NVIDIA H200 vs B200 vs GB200: Which GPU to Rent for AI in 2026?\"",
                   "https://www.spheron.network/blog/nvidia-h200-vs-b200-vs-gb200", "2026-03-17", READ,
                   "one provider's on-demand list price: $9.08/h per GB200 Superchip (two Blackwell GPUs), halved"),
    "MI300X": Price(1.99, "Cliff Center, \"AMD inference economics\" research note",
                    "https://www.cliffcenter.com/research/amd-inference-economics", "2026-05-18", READ,
                    "the median MI300X rental listing the note gives (TensorWave $1.50 to Azure and Oracle $6)"),
    "L40S": Price(1.861, "Modal, \"How much does it cost to run NVIDIA L40S GPUs in 2025?\"",
                  "https://modal.com/blog/nvidia-l40s-price-article", "2025-08-12", READ,
                  "median of the table's seven per-GPU on-demand prices ($0.86 RunPod to $3.51 Replicate): AWS G6e"),
    **{name: Price(None, note=NOT_FOUND) for name in (
        "A100-40GB", "A100-80GB-PCIe", "H100-PCIe", "H100-NVL", "H200-NVL", "GB300", "RTX-PRO-6000", "L4", "A10",
        "A10G", "T4", "RTX-4090")},
}
"""Every built-in GPU profile's default price (None where none was found)."""

DEFAULT_PRICES: dict[str, float] = {name: p.usd_per_gpu_hour for name, p in PRICES.items() if p.usd_per_gpu_hour is not None}
"""USD per GPU-hour of the profiles that have a default."""
