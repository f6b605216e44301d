"""The distillation pipelines over seeds: the blocks of docs/distillation.md that
`python -m scripts.bench.headlines` writes from the pipelines' records (docs/bench, each written
by `python -m scripts.bench.quadruped record` from runs and their evaluations from terrain
levels 0, 4 and 9).

Two pipelines: the height-scan teacher trained from nothing (`SCAN`, one record per seed,
docs/bench/quadruped_rough_distillation*.json) and the teacher grown from blind PPO's run
(`GROWN`, docs/bench/quadruped_rough_grown_teacher*.json, whose records may hold several seeds,
each run named `<role>_<seed>`). Each policy's tracking errors and falls at each level as the
IQM over seeds with its 95% bootstrap interval and the worst seed (scripts/bench/lib/stats.py);
then the student against its teacher (the bar: within 15%) and against blind PPO given the same
wall time, each seed's ratio of errors and the IQM of those ratios. A second block
(`seeds_block`) gives each seed's policies one by one: their wall time, steps and each level's
errors and falls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench.lib import records, stats
from scripts.bench.lib.args import BadInput

LEVELS = (0, 4, 9)
ERRORS = (("tracking_error_lin", "linear"), ("tracking_error_yaw", "yaw"))
WITHIN = 1.15  # the student's errors within 15% of the teacher's
STUDENT, TEACHER, BLIND = ("student", "final"), ("teacher", "final"), ("blind", "at_85_min")
# A run named for its seed: <role>_<seed> (several seeds in one record).
SEEDED = re.compile(r"(.+)_(\d+)")
# An evaluation labelled by the run's wall time at its checkpoint (at_60_min).
AT_MINUTES = re.compile(r"at_(\d+)_min")


@dataclass(frozen=True)
class Pipeline:
    """What a pipeline's records hold and how its blocks show them."""

    pattern: str  # the records' file names in docs/bench
    # (row, role, evaluation label): what every seed holds, in the block over seeds.
    policies: tuple[tuple[str, str, str], ...]
    # (row, role, evaluation label): runs a seed may hold beside them, in its own table only.
    extra: tuple[tuple[str, str, str], ...] = ()
    # Whose wall time an evaluation's row shows where not its own run's (an `at_N_min` label
    # shows N minutes).
    clock: dict[tuple[str, str], str] = field(default_factory=dict)
    added: tuple[str, ...] = ()  # roles that begin from another's policy: "+" their time


SCAN = Pipeline(
    pattern="quadruped_rough_distillation*.json",
    policies=(
        ("teacher (height scan), 60 min", "teacher", "final"),
        ("blind student (GRU), distilled, +25 min", "student", "final"),
        ("blind PPO at the teacher's time, 60 min", "blind", "at_60_min"),
        ("blind PPO at teacher + student, 85 min", "blind", "at_85_min"),
        ("student + PPO fine-tune, warm-up, +12 min", "finetune_warmup", "final"),
        ("student + PPO fine-tune, no warm-up, +12 min", "finetune_no_warmup", "final"),
    ),
    extra=(
        (
            "the same at the student's std (`finetune.log_std=-2.0`), warm-up",
            "finetune_low_std_warmup",
            "final",
        ),
        ("the same at the student's std, no warm-up", "finetune_low_std_no_warmup", "final"),
    ),  # fmt: skip
    # Blind PPO's checkpoint at the end of the first phase was taken at the teacher's time.
    clock={("blind", "at_60_min"): "teacher"},
    added=("student", "finetune"),
)
GROWN = Pipeline(
    pattern="quadruped_rough_grown_teacher*.json",
    policies=(
        ("blind PPO, 60 min (the teacher's start)", "blind", "at_60_min"),
        ("teacher grown from it, +15 min", "teacher", "final"),
        ("its blind student (GRU), distilled, +10 min", "student", "final"),
        ("blind PPO at the same total time, 85 min", "blind", "at_85_min"),
    ),
    extra=(
        ("blind PPO, 75 min (the student's start)", "blind", "at_75_min"),
        ("feed-forward student from blind PPO's weights", "ff_student", "final"),
    ),
    added=("teacher", "student", "ff_student"),
)


def load_all(bench: Path | None = None, pipeline: Pipeline = SCAN) -> dict[str, dict]:
    """Every record of the pipeline by its file name (docs/bench unless `bench`)."""
    paths = sorted((bench or records.BENCH).glob(pipeline.pattern))
    if not paths:
        raise BadInput(
            f"no record docs/bench/{pipeline.pattern}: the distillation block reads them"
        )
    return {p.name: json.loads(p.read_text()) for p in paths}


@dataclass
class Seed:
    """One seed's runs by role, and the record that holds them."""

    record: str
    provenance: dict
    runs: dict[str, dict] = field(default_factory=dict)

    def levels(self, role: str, label: str) -> dict[int, dict[str, Any]]:
        """One policy's evaluation of this seed, by terrain level."""
        try:
            evaluation = self.runs[role]["eval"][label]
            sweep = evaluation["sweep"]
        except KeyError as e:
            raise BadInput(f"a distillation record lacks {role}:{label}'s sweep ({e})") from None
        return {int(s["value"]): {**s, "episodes": evaluation["episodes"]} for s in sweep}


def seeds_of(recs: dict[str, dict], pipeline: Pipeline = SCAN) -> dict[str, Seed]:
    """seed -> its runs, in the seeds' order. A run named `<role>_<seed>` is that seed's; any
    other is the seed of its record's teacher. A seed's role recorded twice is refused, and so
    is a seed that lacks a policy of the block over seeds."""
    out: dict[str, Seed] = {}
    for name, rec in recs.items():
        for run_name, run in rec["runs"].items():
            m = SEEDED.fullmatch(run_name)
            role, seed = (m[1], m[2]) if m else (run_name, str(_seed(rec)))
            entry = out.setdefault(seed, Seed(name, rec["provenance"]))
            if role in entry.runs:
                raise BadInput(f"seed {seed} has two distillation records of {role} ({name})")
            entry.runs[role] = run
    for seed in out.values():
        for _, role, label in pipeline.policies:
            seed.levels(role, label)
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


def block(bench: Path | None = None, pipeline: Pipeline = SCAN) -> list[str]:
    """The markdown lines of the block over seeds."""
    recs = load_all(bench, pipeline)
    seeds = seeds_of(recs, pipeline)
    names = ", ".join(seeds)
    lines = [
        f"Seeds {names} ({len(seeds)}), each cell the IQM over seeds with its 95% bootstrap "
        "interval and the worst seed: linear error (m/s), yaw error (rad/s), falls in 20 episodes.",
        "",
        "| policy | level | linear | yaw | falls |",
        "| --- | ---: | --- | --- | --- |",
    ]
    for row, role, label in pipeline.policies:
        for level in LEVELS:
            got = {s: v.levels(role, label)[level] for s, v in seeds.items()}
            cells = [cell({s: g[key] for s, g in got.items()}, ".3f") for key, _ in ERRORS]
            falls = cell({s: _falls(g) for s, g in got.items()}, ".1f")
            lines.append(f"| {row if level == LEVELS[0] else ''} | {level} | "
                         f"{' | '.join(cells)} | {falls} |")  # fmt: skip
    lines += ["", *_comparison(seeds), "", _provenance(recs)]
    return lines


def _comparison(seeds: dict[str, Seed]) -> list[str]:
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
        for other in (TEACHER, BLIND):
            for key, _ in ERRORS:
                ratios = {s: v.levels(*STUDENT)[level][key] / v.levels(*other)[level][key]
                          for s, v in seeds.items()}  # fmt: skip
                row.append(_ratio_cell(ratios))
                if other == TEACHER:
                    within.append(stats.iqm(list(ratios.values())) <= WITHIN)
            if other == TEACHER:
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


def seeds_block(bench: Path | None = None, pipeline: Pipeline = SCAN) -> list[str]:
    """The markdown lines of the per-seed block: one table per seed, a row per policy."""
    lines = ["Each seed's policies, linear error (m/s) / yaw error (rad/s) / falls in 20 episodes "
             "from each level; steps are the evaluated checkpoint's."]  # fmt: skip
    for seed, entry in seeds_of(load_all(bench, pipeline), pipeline).items():
        prov, name = entry.provenance, entry.record
        lines += [
            "",
            f"Seed {seed}, on {prov['machine']['cpu']} (record [{name}](bench/{name}), "
            f"{(prov['commit'] or '?')[:7]}, {prov['date'][:10]}):",
            "",
            "| policy | wall time | steps | " + " | ".join(f"level {lv}" for lv in LEVELS) + " |",
            "| --- | ---: | ---: | " + " | ".join("---" for _ in LEVELS) + " |",
        ]
        rows = [(title.rsplit(", ", 1)[0], role, label) for title, role, label in pipeline.policies]
        rows += [(title, role, label) for title, role, label in pipeline.extra
                 if label in entry.runs.get(role, {}).get("eval", {})]  # fmt: skip
        for title, role, label in rows:
            levels = entry.levels(role, label)
            added = "+" if role.startswith(pipeline.added) else ""
            step = entry.runs[role]["eval"][label]["global_step"]
            cells = [f"{lv[ERRORS[0][0]]:.3f} / {lv[ERRORS[1][0]]:.3f} / {_falls(lv):.0f}"
                     for lv in (levels[level] for level in LEVELS)]  # fmt: skip
            lines.append(f"| {title} | {added}{_minutes(entry, pipeline, role, label):.0f} min | "
                         f"{step / 1e6:.1f}M | {' | '.join(cells)} |")  # fmt: skip
    return lines


def _minutes(entry: Seed, pipeline: Pipeline, role: str, label: str) -> float:
    """The wall time an evaluation's row shows: its clock's run's, else the minutes its
    `at_N_min` label names, else its own run's."""
    if (role, label) in pipeline.clock:
        return entry.runs[pipeline.clock[(role, label)]]["wall_s"] / 60
    m = AT_MINUTES.fullmatch(label)
    return float(m[1]) if m else entry.runs[role]["wall_s"] / 60


def _seed(record: dict) -> int:
    """The seed a one-seed record ran (its teacher's)."""
    return int(record["runs"]["teacher"]["seed"])
