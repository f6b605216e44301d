"""Whole training processes side by side: ours against Stable-Baselines3 PPO on the same
hyperparameters, from start to exit (imports, env creation and compilation included).

For each config, each round runs `embodied-ppo train CONFIG trainer.total_steps=STEPS` (ours)
and Stable-Baselines3 training the same settings for STEPS (scripts.bench.workers.sb3_ppo; the
config's learning-rate schedule and its `early_stop_kl` as `target_kl`, as
scripts.bench.throughput explains), and, with `--baseline-src`, the same command run from
another checkout (a before/after comparison), one after the other, each in a fresh process;
the rounds repeat that, so drift of the machine hits every contender alike. Each round prints
the gradient steps each process took, which early stopping makes differ from run to run (equal
counts: equal work). The summary gives, per config, the median seconds over rounds and the
speed ratios (the other's seconds over ours) with the range of the per-round ratios.

Without --config it measures the README's speed table: configs/halfcheetah.yaml for 200,000
steps and configs/humanoid.yaml for 500,000, and writes docs/bench/whole_process.json, from
which `python -m scripts.bench.headlines` rewrites the table:

    python -m scripts.bench.whole_process --rounds 5
    python -m scripts.bench.whole_process --config configs/halfcheetah.yaml --steps 200000 \\
        --baseline-src /tmp/before --out /tmp/before_after.json

Threads: ours chooses its own (trainer.torch_threads: null; `--threads N` fixes it);
Stable-Baselines3 gets the faster of 1 thread and every core, tried for one iteration per
config before the rounds (`--sb3-threads N` fixes it). A config with the KL-adaptive rate is
refused: Stable-Baselines3 has none.

The record holds, per config, every round's seconds and gradient steps per contender, their
medians, the ratios and per-round ratios, the settings and threads, and the record's
provenance (command, commit, date, machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import ppo_settings, proc, records, sidebyside
from scripts.bench.lib.tasks import SPEED_HEADLINE

MODULE = "scripts.bench.whole_process"
HEADLINE = SPEED_HEADLINE  # the README's speed table: each config with its budget
HEADLINE_RECORD = records.BENCH / "whole_process.json"
PAIRS = {"ours / sb3 (speed)": ("sb3_whole", "ours_whole")}
BASELINE_PAIR = {"ours / before (speed)": ("before_whole", "ours_whole")}


def logged_gradient_steps(metrics: Path) -> int | None:
    """The gradient steps of a run from its metrics.jsonl, if it logged every iteration."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    if [r["iteration"] for r in rows] != list(range(1, len(rows) + 1)):
        return None
    return int(sum(r.get("losses/num_gradient_steps", 0) for r in rows))


def time_process(name: str, job: dict[str, Any], args) -> tuple[float, int | None]:
    """Wall seconds of one whole training process (`name`: ours_whole, sb3_whole or
    before_whole) of the job's config and steps, and the gradient steps it took (None where
    its metrics do not tell: iterations not all logged)."""
    steps = job["steps"]
    with tempfile.TemporaryDirectory() as tmp:
        if name == "sb3_whole":
            cmd = proc.worker_command("sb3_ppo", "--mode", "whole", "--steps", str(steps),
                                      "--settings", json.dumps(job["settings"]),
                                      "--threads", str(job["sb3_threads"]))  # fmt: skip
            cwd, env = proc.ROOT, None
        else:
            config = args.baseline_config if name == "before_whole" and args.baseline_config else (
                job["config"]
            )  # fmt: skip
            cmd = [sys.executable, "-m", "embodied_ppo", "train", str(Path(config).resolve()),
                   f"trainer.total_steps={steps}", f"trainer.run_dir={tmp}/run"]  # fmt: skip
            if args.threads is not None:
                cmd.append(f"trainer.torch_threads={args.threads}")
            src = Path(args.baseline_src).resolve() if name == "before_whole" else proc.ROOT
            # outside both checkouts: PYTHONPATH alone decides which code runs
            cwd, env = Path(tmp), proc.checkout_env(src)
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
        seconds = time.perf_counter() - start
        if out.returncode != 0:
            sys.exit(f"{name} failed:\n{out.stderr}")
        if name == "sb3_whole":
            return seconds, proc.last_json(out.stdout)["gradient_steps"]
        return seconds, logged_gradient_steps(Path(tmp) / "run" / "metrics.jsonl")


def jobs_of(args) -> list[dict[str, Any]]:
    """The configs to time, each with its steps and shared settings; bad input refused."""
    if args.config is None:
        pairs = list(HEADLINE)
    else:
        steps = args.steps or []
        if len(steps) not in (1, len(args.config)):
            raise cli_args.BadInput("--steps: one value, or one per --config")
        pairs = list(zip(args.config, steps * len(args.config) if len(steps) == 1 else steps))
    if args.baseline_config and len(pairs) != 1:
        raise cli_args.BadInput("--baseline-config names the config of one --config only")
    jobs = []
    for config, steps in pairs:
        if not Path(config).is_file():
            raise cli_args.BadInput(f"--config {config}: no such file")
        if steps < 1:
            raise cli_args.BadInput(f"--steps {steps}: must be at least 1")
        s = ppo_settings.from_config(config)
        if s["schedule"] == "adaptive":
            raise cli_args.BadInput(
                f"{config}: optim.schedule: adaptive has no Stable-Baselines3 counterpart"
            )
        jobs.append({"config": config, "steps": steps, "settings": s})
    return jobs


def summary_lines(config: str, rec: dict) -> list[str]:
    """A config's medians and ratios, as printed after the rounds."""
    steps = rec["whole_process_steps"]
    lines = [f"{config}: whole processes of {steps:,} steps (seconds, median)"]
    for c, v in rec["median"].items():
        lines.append(f"{c:14s} {v:8.1f} s  ({steps / v:,.0f} steps/s)")
    lines += sidebyside.ratio_lines(rec)
    return lines


def run(args, argv: list[str]) -> None:
    """The rounds, the summary, the record."""
    jobs = jobs_of(args)
    out = Path(args.out) if args.out else (HEADLINE_RECORD if args.config is None else None)
    prov = records.provenance(MODULE, argv)
    names = ["ours_whole", "sb3_whole"] + (["before_whole"] if args.baseline_src else [])
    for job in jobs:
        job["sb3_threads"], job["tried"] = args.sb3_threads, {}
        if args.sb3_threads is None:
            job["sb3_threads"], job["tried"] = sidebyside.best_sb3_threads(job["settings"])
        print(f"{job['config']}: " + sidebyside.threads_line(
            args.threads, job["sb3_threads"], job["tried"]), flush=True)  # fmt: skip
        job["results"] = {c: [] for c in names}
        job["gradient_steps"] = {c: [] for c in names}
    for r in range(args.rounds):
        for job in jobs:
            for c in names:
                seconds, taken = time_process(c, job, args)
                job["results"][c].append(seconds)
                job["gradient_steps"][c].append(taken)
                print(
                    f"round {r + 1}/{args.rounds} {Path(job['config']).name} {c:13s} "
                    f"{seconds:8.1f} s, {'?' if taken is None else f'{taken:,}'} gradient steps",
                    flush=True,
                )
    info = records.torch_machine()
    configs = {}
    for job in jobs:
        pairs = {**PAIRS, **(BASELINE_PAIR if args.baseline_src else {})}
        configs[job["config"]] = {
            "settings": job["settings"],
            "machine": info,
            "threads": {"sb3_threads": job["sb3_threads"], "tried": job["tried"]},
            "whole_process_steps": job["steps"],
            "results": job["results"],
            **sidebyside.ratios(job["results"], pairs),
            "gradient_steps": job["gradient_steps"],
        }
        print()
        print("\n".join(summary_lines(job["config"], configs[job["config"]])))
    if out is not None:
        record = {"rounds": args.rounds, "configs": configs, "provenance": prov}
        if args.baseline_src:
            record["baseline_src"] = str(args.baseline_src)
        records.write_results(out, record)
        print(f"wrote {out}")


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--config", nargs="+", default=None,
                   help="configs to time (default: the README's, each at its budget)")  # fmt: skip
    p.add_argument("--steps", nargs="+", type=int, default=None,
                   help="steps of each process: one value, or one per --config")  # fmt: skip
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for ours (default: its own)")  # fmt: skip
    p.add_argument("--sb3-threads", type=int, default=None,
                   help="torch threads for SB3 (default: the faster of 1 and every core)")  # fmt: skip
    p.add_argument("--baseline-src", help="also run this checkout's code (before/after)")
    p.add_argument("--baseline-config",
                   help="with --baseline-src: the config that checkout trains (default: "
                   "--config), e.g. the config as it was before a key it does not know was "
                   "added")  # fmt: skip
    p.add_argument("--out", default=None,
                   help="the record (default: docs/bench/whole_process.json without --config, "
                   "none with it)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        if args.rounds < 1:
            raise cli_args.BadInput("--rounds must be at least 1")
        if args.config is None and args.steps is not None:
            raise cli_args.BadInput("--steps needs --config (the README's configs have theirs)")
        if args.config is not None and args.steps is None:
            raise cli_args.BadInput("--config needs --steps")
        if args.baseline_config and not args.baseline_src:
            raise cli_args.BadInput("--baseline-config needs --baseline-src")
        if args.baseline_src and not Path(args.baseline_src).is_dir():
            raise cli_args.BadInput(f"--baseline-src {args.baseline_src}: no such folder")
        run(args, argv)

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
