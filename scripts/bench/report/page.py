"""docs/benchmarks.md, written from the benchmarks' results files: the MuJoCo and classic-control
table (docs/bench/mujoco.json), its curves and time-to-reach table, the configs' headers, how
to run every benchmark, and the memory and arm tasks' sections (docs/bench/recurrent_*.json,
docs/bench/arm.json)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from scripts.bench.lib import records, stats
from scripts.bench.lib.proc import ROOT
from scripts.bench.lib.tasks import DEFAULT_SB3_SEEDS, DEFAULT_SEEDS, EVAL_SEED
from scripts.bench.report import arm, memory, mujoco_rows, running
from scripts.bench.report.curves import group_curves

INTRO = (
    "Written by `python -m scripts.bench.mujoco` from its results (`docs/bench/mujoco.json`) and "
    "runs under `{root}`. Each final policy: deterministic evaluation of 10 episodes "
    f"(`embodied-ppo eval --seed {EVAL_SEED}`); the statistics below are over seeds of those "
    "means. A config with a periodic evaluation (trainer.eval_interval) keeps its best policy "
    "as checkpoints/best.pt, chosen on the run's own evaluation episodes (those of its training "
    "seed, none of them the test episodes): its `kept policy (best.pt)` row scores those "
    "policies on the same test episodes, each seed with the step it was kept at. "
    "Stable-Baselines3: PPO with RL Baselines3 Zoo's hyperparameters for the task (its -v3 "
    "entries; Ant: PPO's defaults), same budget, same machine, same evaluation episodes."
)
TABLE_HEAD = [
    "| config | steps | seeds | ours: IQM [95% CI] | median | worst (seed) | "
    "at the target (seeds) | each seed | SB3 + zoo: IQM (seeds) | wall time, ours | "
    "steps/s, ours | wall time, SB3 | Tianshou / RL Zoo / CleanRL, 1M (published) | "
    "best published: IQM above, worst seed >= 0.8 of it | target for the budget: IQM |",
    "| --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: "
    "| --- | --- |",
]


def protocol_lines(results: dict) -> list[str]:
    """The seed protocol, and which configs still lack numbers on evaluation seeds."""
    pending = [
        f"`{name}`"
        for name, rec in results.items()
        if not any(stats.seed_group(s) == "evaluation" and "eval" in r
                   for s, r in rec["ours"].items())
    ]  # fmt: skip
    tuning = stats.TUNING_SEEDS
    lines = [
        "## Protocol: tuning seeds and evaluation seeds",
        "",
        f"- Configs are tuned on seeds {tuning.start}-{tuning.stop - 1} (tuning seeds) and "
        f"reported on seeds {stats.EVALUATION_FROM} and up (evaluation seeds), which no "
        f"tuning has seen. A seed below {stats.EVALUATION_FROM} counts as a tuning seed.",
        "- Every number says which seeds it used: each row of the tables below is one set of "
        "seeds, evaluation or tuning, never both mixed.",
        "- Per config and set of seeds: the interquartile mean (IQM, the mean of the middle 50% "
        "of the seeds' evaluation returns, a seed straddling a quartile weighted by its share "
        "inside) with its 95% percentile bootstrap confidence interval "
        f"({stats.RESAMPLES:,} resamples of the seeds, generator seed "
        f"{stats.BOOTSTRAP_SEED}), the median, the worst seed, and the seeds whose return "
        "reached the budget's target (k of n, and which). With 3 seeds the interval is wide and "
        "the IQM weighs the middle seed most: read them as such (`scripts/bench/lib/stats.py`).",
        "- Learning curves: every seed's training return, and the IQM over seeds with its 95% "
        "band where every seed's curve is kept.",
        "- The classic-control configs (cartpole.yaml, pendulum.yaml, cartpole_grpo.yaml) are "
        "in the first table at their own budgets. The memory tasks "
        "(`python -m scripts.bench.recurrent`, docs/recurrent.md: ten evaluation seeds by "
        "default) and the arm tasks (`python -m scripts.bench.arm`, docs/tasks.md: five "
        "evaluation seeds, three for reach_pixels.yaml) report the same statistics in the tables "
        "that close this page, computed from their results files (docs/bench/recurrent_*.json, "
        "docs/bench/arm.json).",
    ]
    if pending:
        lines.append(
            "- Not yet measured on evaluation seeds: "
            + ", ".join(pending)
            + ". Their rows below are on tuning seeds; evaluation seeds "
            f"{stats.seeds_text([str(x) for x in DEFAULT_SEEDS])} (Stable-Baselines3 on "
            f"{stats.seeds_text([str(x) for x in DEFAULT_SB3_SEEDS])}) are yet to be run."
        )
    return [*lines, ""]


def machine_text(m: dict | None) -> str:
    """A run's machine as the page names it, from its provenance."""
    if not m:
        return "not recorded"
    cpu = m.get("cpu") or "CPU model not recorded"
    return f"{cpu}, {m.get('cores') or '?'} cores, Python {m.get('python')}, torch {m.get('torch')}"


def machines_line(results: dict) -> str:
    """Which machines the runs of the table ran on, as their records name them."""
    seen: Counter = Counter()
    for rec in results.values():
        for side in ("ours", "sb3"):
            for r in rec[side].values():
                if "eval" in r:
                    seen[machine_text(r.get("provenance", {}).get("machine"))] += 1
    named = "; ".join(f"{m} ({n} run{'s' if n > 1 else ''})" for m, n in seen.most_common())
    return (
        f"Machines, as each run's record names them: {named}. Wall times are whole processes "
        "(compilation included). Ours ran alone on the machine; Stable-Baselines3 uses one "
        "core (one env and one torch thread, its faster setting here), so two of its runs may "
        "share the machine, one per core."
    )


def report(results: dict, out: Path, root: Path) -> None:
    """Write the page `out` from the MuJoCo results and the results files in bench/ beside it,
    its curves drawn (into images/ beside it) from the runs under `root`."""
    out.write_text(page_text(results, root, out.parent, draw=True))


def page_text(results: dict, root: Path, docs: Path, draw: bool = False) -> str:
    """The page's text from the MuJoCo results and the memory and arm tasks' results files in
    docs/bench; where `draw`, its curves are drawn into docs/images (from the runs under
    `root`), otherwise the images there are linked."""
    shown = root.relative_to(ROOT) if root.is_relative_to(ROOT) else root
    lines = ["# Benchmarks: MuJoCo and classic control", "", INTRO.format(root=shown), ""]
    lines += running.section()
    lines += [*protocol_lines(results), machines_line(results), "", *TABLE_HEAD]
    reach, config_notes, curves, remarks, noted = [], [], [], [], set()
    for name, rec in results.items():
        remarks += [f"- `{name}`: {text}" for text in rec.get("remarks", [])]
        for group, ours in mujoco_rows.finished(rec["ours"]).items():
            lines.append(mujoco_rows.final_row(name, rec, group, ours))
            if all("kept" in r for r in ours.values()):
                lines.append(mujoco_rows.kept_row(name, rec, group, ours))
            reach += mujoco_rows.reach_rows(name, rec, group, ours)
            curves += group_curves(name, group, ours, docs / "images", root, draw)
        notes = mujoco_rows.header_comment(ROOT / rec["config"]) if "config" in rec else ""
        if notes and rec["config"] not in noted:
            noted.add(rec["config"])
            config_notes += [f"### `{rec['config']}`", "", notes, ""]
    if remarks:  # what a record says of how it was measured (`"remarks"` in the results)
        lines += ["", *remarks]
    if curves:
        lines += ["", "## Learning curves (training return, ours)", "", *curves]
    lines += [
        "",
        "## Time to reach a return (training episodes, ours)",
        "",
        "The first iteration whose mean return over the training episodes it finished reached the "
        "value (a single noisy iteration counts; the curves above show how steady it was).",
        "",
        "| config | seeds | return | mean over the seeds that reached it | seeds that did |",
        "| --- | --- | ---: | ---: | ---: |",
        *reach,
        "",
    ]
    if config_notes:
        lines += ["## The configs: what was tuned, and what mattered", "",
                  "Each config's own header, as measured above.", "", *config_notes]  # fmt: skip
    lines += memory.memory_lines(docs / "bench", draw)
    arm_results = records.read_results(docs / "bench" / "arm.json", name="arm benchmark")
    lines += arm.report_lines(arm_results, docs / "images", draw)
    return "\n".join(lines) + "\n"
