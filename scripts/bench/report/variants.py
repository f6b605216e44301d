"""The table of a variants benchmark's results file (scripts.bench.variants): per variant and set
of seeds, the statistics of its runs' evaluation returns, in markdown that docs can include."""

from __future__ import annotations

import statistics

from scripts.bench.lib import stats
from scripts.bench.lib.tasks import EVAL_SEED

POLICIES = (("final", "final"), ("kept", "kept (best.pt)"))


def _number(x: float) -> str:
    """A return as the table shows it: whole numbers from 100 up, one decimal below."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def _fmt(values: list[float]) -> str:
    """The format that shows every value of a row alike."""
    return ".0f" if all(abs(v) >= 100 for v in values) else ".1f"


def _wall(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _at_step(run: dict, key: str) -> str:
    """A kept policy's step, where its evaluation names it: ' (0.25M)'."""
    step = run[key].get("step")
    if key != "kept" or step is None:
        return ""
    return f" ({step / 1e6:.2f}M)" if step >= 1_000_000 else f" ({step / 1e3:.0f}k)"


def rows(results: dict, target: float | None) -> list[str]:
    """One row per variant, set of seeds and policy (the final one; the kept best.pt where
    every run of the row kept one)."""
    out = []
    for name, variant in results["variants"].items():
        overrides = ", ".join(f"`{o}`" for o in variant["overrides"]) or "as committed"
        for group, runs in stats.by_group(variant["runs"]).items():
            wall = _wall(statistics.mean(r["wall_s"] for r in runs.values()))
            for key, label in POLICIES:
                if not all(key in r for r in runs.values()):
                    continue
                per_seed = {s: r[key]["mean"] for s, r in runs.items()}
                summary = stats.summarize(per_seed, target)
                cell = stats.cells(summary, _fmt(list(per_seed.values())))
                each = ", ".join(_number(r[key]["mean"]) + _at_step(r, key) for r in runs.values())
                out.append(
                    f"| `{name}` | {overrides} | {group} {cell['seeds']} | {label} | "
                    f"{cell['iqm']} | {cell['median']} | {cell['worst']} | {cell['at_target']} | "
                    f"{each} | {wall} |"
                )
    return out


def provenance_line(results: dict) -> str:
    """Where the runs come from: their commits, dates and machines, as their records name them."""
    provs = [r["provenance"] for v in results["variants"].values() for r in v["runs"].values()
             if "provenance" in r]  # fmt: skip
    if not provs:
        return "No run recorded yet."
    commits = sorted({(p.get("commit") or "?")[:7] + (" (dirty)" if p.get("dirty") else "")
                      for p in provs})  # fmt: skip
    dates = sorted(p["date"][:10] for p in provs if p.get("date"))
    machines = sorted({f"{p['machine'].get('cpu')}, {p['machine'].get('cores')} cores, "
                       f"torch {p['machine'].get('torch')}" for p in provs
                       if isinstance(p.get("machine"), dict)})  # fmt: skip
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    settings = sorted({" ".join(s) for v in results["variants"].values()
                       for r in v["runs"].values() for s in r.get("settings", [])})  # fmt: skip
    commands = "; ".join(f"`{c}`" for c in dict.fromkeys(p["command"] for p in provs))
    return (
        f"Measured by {commands}: commit {', '.join(commits)}, {when}, "
        f"{'; '.join(machines)}; run settings {'; '.join(f'`{s}`' for s in settings) or 'none'}."
    )


def report_lines(results: dict, path: str, target: float | None = None) -> list[str]:
    """The table of a results file (at `path`, as the lines name it), the target `target` or the
    one the file records, with the provenance of its runs and its remarks."""
    target = results.get("target") if target is None else target
    episodes = results.get("episodes", 10)
    body = rows(results, target)
    at = f"at the target (>= {target:g})" if target is not None else "at the target"
    lines = [
        f"`{results['config']}`: each seed's policy scored on {episodes} deterministic episodes "
        f"(`embodied-ppo eval RUN --episodes {episodes} --seed {EVAL_SEED}`); IQM over seeds "
        f"[95% bootstrap CI, {stats.RESAMPLES:,} resamples], median, worst seed, seeds at "
        "the target; mean training wall time per run. From "
        f"{path} (`python -m scripts.bench.variants --report --out {path}`).",
        "",
        f"| variant | overrides | seeds | policy | IQM [95% CI] | median | worst (seed) | {at} | "
        "each seed | wall time |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- | ---: |",
        *(body or ["| - | - | - | - | - | - | - | - | - | - |"]),
        "",
        provenance_line(results),
    ]
    remarks = results.get("remarks", [])
    if remarks:
        lines += ["", *(f"- {text}" for text in remarks)]
    return lines
