"""The MuJoCo benchmark's learning curves on docs/benchmarks.md: every seed's training return
(`embodied-ppo plot` of the run folders) and the IQM over seeds with its 95% band."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scripts.bench.lib import proc, stats
from scripts.bench.lib.plots import plot_bands
from scripts.bench.lib.runs import training_curve


def seed_curves(seeds: dict, run_of: Callable[[str], Path]) -> dict[str, tuple[list, list]] | None:
    """Every seed's training curve, from its record (its "curve") or its run folder
    (`run_of(seed)`); None if one lacks both."""
    curves = {}
    for seed, r in seeds.items():
        rows = r.get("curve")
        if rows is None and (run_of(seed) / "metrics.jsonl").is_file():
            rows = training_curve(run_of(seed))
        if not rows:
            return None
        curves[seed] = ([row[0] for row in rows], [row[1] for row in rows])
    return curves


def group_curves(name: str, group: str, ours: dict, images: Path, root: Path, draw: bool) -> list:
    """One set of seeds' curves for the report, its images in `images`: every seed's
    (`embodied-ppo plot`, drawn where every run folder under `root` is present, kept as it is
    otherwise) and the IQM band (drawn where every seed's curve is kept, in the results file or
    its run folder); without `draw`, the images already there are linked and none is drawn."""
    lines = []
    label = f"{name}, {group} seeds {stats.seeds_text(list(ours))}"
    each = images / f"benchmark_{name}_{group}.png"
    runs = [root / name / f"seed{s}" for s in ours]
    if draw and all((run / "metrics.jsonl").is_file() for run in runs):
        proc.cli(["plot", *map(str, runs), "--out", str(each), "--smooth", "5", "--title", label])
    if each.is_file():  # drawn now, or kept from the runs that are gone
        lines += [f"![{label}](images/{each.name})", ""]
    band = images / f"benchmark_{name}_{group}_iqm.png"
    kept = seed_curves(ours, lambda s: root / name / f"seed{s}")
    if draw and kept and len(kept) > 1:
        plot_bands({group: stats.curve_band(kept)}, band, label)
    if band.is_file():
        lines += [f"![{label}: IQM and 95% band](images/{band.name})", ""]
    return lines
