"""The distillation pipeline over seeds: the block of docs/distillation.md that
`python -m scripts.bench.headlines` writes from the pipeline's records, one per seed
(docs/bench/quadruped_rough_distillation*.json, each written by `python -m scripts.bench.quadruped
record` from one seed's runs and their evaluations from terrain levels 0, 4 and 9).

Each policy's tracking errors and falls at each level as the IQM over seeds with its 95%
bootstrap interval and the worst seed (scripts/bench/lib/stats.py); then the student against
its teacher (the bar: within 15%) and against blind PPO given the same wall time, each seed's
ratio of errors and the IQM of those ratios. A second block (`seeds_block`) gives each seed's
policies one by one: their wall time, steps and each level's errors and falls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.bench.lib import records, stats
from scripts.bench.lib.args import BadInput

PATTERN = "quadruped_rough_distillation*.json"
# (row, run, evaluation label): what every seed's record holds.
POLICIES = (
    ("teacher (height scan), 60 min", "teacher", "final"),
    ("blind student (GRU), distilled, +25 min", "student", "final"),
    ("blind PPO at the teacher's time, 60 min", "blind", "at_60_min"),
    ("blind PPO at teacher + student, 85 min", "blind", "at_85_min"),
    ("student + PPO fine-tune, warm-up, +12 min", "finetune_warmup", "final"),
    ("student + PPO fine-tune, no warm-up, +12 min", "finetune_no_warmup", "final"),
)
LEVELS = (0, 4, 9)
ERRORS = (("tracking_error_lin", "linear"), ("tracking_error_yaw", "yaw"))
WITHIN = 1.15  # the student's errors within 15% of the teacher's
# Runs a seed's record may hold beside POLICIES' (each evaluated as "final"), by their row.
EXTRA = {
    "finetune_low_std_warmup": "the same at the student's std (`finetune.log_std=-2.0`), warm-up",
    "finetune_low_std_no_warmup": "the same at the student's std, no warm-up",
}
# Whose wall time an evaluation's row shows: blind PPO's checkpoint at the end of the first
# phase was taken at the teacher's time; the other rows show their own run's.
CLOCK = {("blind", "at_60_min"): "teacher"}
# Runs that begin from another's policy: their wall time adds to it.
ADDED = ("student", "finetune")


def load_all(bench: Path | None = None) -> dict[str, dict]:
    """Every seed's record by its file name (docs/bench unless `bench`); none is refused."""
    paths = sorted((bench or records.BENCH).glob(PATTERN))
    if not paths:
        raise BadInput(f"no record docs/bench/{PATTERN}: the distillation block reads them")
    return {p.name: json.loads(p.read_text()) for p in paths}


def _levels(record: dict, run: str, label: str) -> dict[int, dict[str, Any]]:
    """One policy's evaluation of one seed, by terrain level."""
    try:
        evaluation = record["runs"][run]["eval"][label]
        sweep = evaluation["sweep"]
    except KeyError as e:
        raise BadInput(f"a distillation record lacks {run}:{label}'s sweep ({e})") from None
    return {int(s["value"]): {**s, "episodes": evaluation["episodes"]} for s in sweep}


def per_seed(recs: dict[str, dict]) -> dict[str, dict[tuple[str, str], dict[int, dict]]]:
    """seed -> (run, label) -> level -> that evaluation; a seed recorded twice is refused."""
    out: dict[str, dict] = {}
    for name, rec in recs.items():
        seed = str(_seed(rec))
        if seed in out:
            raise BadInput(f"seed {seed} has two distillation records ({name})")
        out[seed] = {(run, label): _levels(rec, run, label) for _, run, label in POLICIES}
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def _falls(level: dict[str, Any]) -> float:
    """The falls of an evaluation's episodes (its fall rate times their number)."""
    return level["fall_rate"] * level["episodes"]


def cell(values: dict[str, float], fmt: str) -> str:
    """IQM [95% CI], worst seed (the largest value: an error or a fall count)."""
    s = stats.summarize(values)
    worst = max(values, key=lambda k: values[k])
    return (f"{s.iqm:{fmt}} [{s.ci[0]:{fmt}}, {s.ci[1]:{fmt}}], "
            f"worst {values[worst]:{fmt}} ({worst})")  # fmt: skip


def _ratio_cell(ratios: dict[str, float]) -> str:
    each = ", ".join(f"{r:.2f}" for r in ratios.values())
    return f"{stats.iqm(list(ratios.values())):.2f} ({each})"


def block(bench: Path | None = None) -> list[str]:
    """The markdown lines of the block."""
    recs = load_all(bench)
    seeds = per_seed(recs)
    names = ", ".join(seeds)
    lines = [
        f"Seeds {names} ({len(seeds)}), each cell the IQM over seeds with its 95% bootstrap "
        "interval and the worst seed: linear error (m/s), yaw error (rad/s), falls in 20 episodes.",
        "",
        "| policy | level | linear | yaw | falls |",
        "| --- | ---: | --- | --- | --- |",
    ]
    for row, run, label in POLICIES:
        for level in LEVELS:
            got = {s: v[(run, label)][level] for s, v in seeds.items()}
            cells = [cell({s: g[key] for s, g in got.items()}, ".3f") for key, _ in ERRORS]
            falls = cell({s: _falls(g) for s, g in got.items()}, ".1f")
            lines.append(f"| {row if level == LEVELS[0] else ''} | {level} | "
                         f"{' | '.join(cells)} | {falls} |")  # fmt: skip
    lines += ["", *_comparison(seeds), "", _provenance(recs)]
    return lines


def _comparison(seeds: dict[str, dict]) -> list[str]:
    """The student's errors over the teacher's and over blind PPO's at 85 min, per level."""
    lines = [
        "The student's error over its teacher's and over blind PPO's at the same 85 minutes: the "
        f"IQM of the seeds' ratios (each seed's, in the order {', '.join(seeds)}); the bar is "
        f"{WITHIN:.2f} of the teacher's.",
        "",
        "| level | linear / teacher | yaw / teacher | within 15% of the teacher (IQM) "
        "| linear / blind PPO | yaw / blind PPO |",
        "| ---: | --- | --- | --- | --- | --- |",
    ]
    for level in LEVELS:
        row, within = [f"{level}"], []
        for other in (("teacher", "final"), ("blind", "at_85_min")):
            for key, _ in ERRORS:
                ratios = {s: v[("student", "final")][level][key] / v[other][level][key]
                          for s, v in seeds.items()}  # fmt: skip
                row.append(_ratio_cell(ratios))
                if other[0] == "teacher":
                    within.append(stats.iqm(list(ratios.values())) <= WITHIN)
            if other[0] == "teacher":
                row.append("yes" if all(within) else "no")
        lines.append(f"| {' | '.join(row)} |")
    return lines


def _provenance(recs: dict[str, dict]) -> str:
    """Each record with its commit, date and machine."""
    parts = []
    for name, rec in recs.items():
        prov = rec["provenance"]
        parts.append(f"[{name}](bench/{name}) ({(prov['commit'] or '?')[:7]}, "
                     f"{prov['date'][:10]}, {prov['machine']['cpu']})")  # fmt: skip
    return "Records: " + "; ".join(parts) + "."


def seeds_block(bench: Path | None = None) -> list[str]:
    """The markdown lines of the per-seed block: one table per seed, a row per policy."""
    lines = ["Each seed's policies, linear error (m/s) / yaw error (rad/s) / falls in 20 episodes "
             "from each level; steps are the evaluated checkpoint's."]  # fmt: skip
    for name, rec in sorted(load_all(bench).items(), key=lambda kv: _seed(kv[1])):
        prov = rec["provenance"]
        lines += [
            "",
            f"Seed {_seed(rec)}, on {prov['machine']['cpu']} (record [{name}](bench/{name}), "
            f"{(prov['commit'] or '?')[:7]}, {prov['date'][:10]}):",
            "",
            "| policy | wall time | steps | " + " | ".join(f"level {lv}" for lv in LEVELS) + " |",
            "| --- | ---: | ---: | " + " | ".join("---" for _ in LEVELS) + " |",
        ]
        rows = [(title.rsplit(", ", 1)[0], run, label) for title, run, label in POLICIES]
        rows += [(title, run, "final") for run, title in EXTRA.items() if run in rec["runs"]]
        for title, run, label in rows:
            levels = _levels(rec, run, label)
            clock = rec["runs"][CLOCK.get((run, label), run)]["wall_s"]
            added = "+" if run.startswith(ADDED) else ""
            step = rec["runs"][run]["eval"][label]["global_step"]
            cells = [f"{lv[ERRORS[0][0]]:.3f} / {lv[ERRORS[1][0]]:.3f} / {_falls(lv):.0f}"
                     for lv in (levels[level] for level in LEVELS)]  # fmt: skip
            lines.append(f"| {title} | {added}{clock / 60:.0f} min | {step / 1e6:.1f}M | "
                         f"{' | '.join(cells)} |")  # fmt: skip
    return lines


def _seed(record: dict) -> int:
    """The seed a distillation record ran (its teacher's)."""
    return int(record["runs"]["teacher"]["seed"])
