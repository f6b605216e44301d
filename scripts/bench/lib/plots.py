"""Figures of the benchmarks (matplotlib: the `plot` extra), drawn into PNG files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from scripts.bench.lib.stats import Band


def plot_bands(
    bands: Mapping[str, Band], out: Path, title: str, ylabel: str = "training return"
) -> None:
    """Draw IQM curves with their 95% bands (one per label) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, band in bands.items():
        line = ax.plot(band.steps, band.iqm, label=f"{label}: IQM of {len(band.seeds)} seeds")
        ax.fill_between(band.steps, band.low, band.high, color=line[0].get_color(), alpha=0.25)
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel)
    # Two lines: a long config name and its seeds fill the plot's width by themselves.
    ax.set_title(f"{title}\n(shaded: 95% bootstrap CI)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
