"""The quadruped's speed against its simulator's limit: raw MuJoCo steps per second on one core,
the env alone, and training as a user runs it, one run alone and two runs side by side.

    python -m scripts.bench.quadruped_speed --version before=/tmp/before --version after=. \\
        --steps 300000

Each `--version LABEL=SRC[:KEY=VALUE,...]` is a version of the code (SRC: this checkout `.`, or
another checkout of the repository, whose package and tasks then run) with the run settings of
its run alone (e.g. `after_2threads=.:env.threads=2,trainer.torch_threads=2`); the versions
are measured side by side, alternating within each part and round, and their numbers written
under their labels into the record (docs/bench/quadruped_speed.json by default), beside the
labels already there:

    physics     scripts.bench.workers.quadruped_physics pinned to one core: mj_step/s on the
                states of an untrained policy's rollout, the limit in policy steps per second
                (mj_step/s over the physics steps of a policy step), one env's steps/s and the
                config's vector env's steps/s
    alone       `embodied-ppo train CONFIG trainer.total_steps=STEPS`: the config as committed
                (with the version's run settings), the only training on the machine
    two_runs    two such trainings at once (seeds 0 and 1), each with `--set` run settings
                (default: one core each: trainer.torch_threads=1 env.threads=1
                env.processes=1), as several runs share a machine (docs/performance.md)

With `--model ONE TWO` (two labels of one code: trained on one thread, and with two env
processes and two update threads) it predicts the config's rate on 2, 4 and 16 cores from
their costs per env step (`lib.legged.cores_model`: the physics over every core, the env's own
Python over the processes, the policy's inference alone, the update by Amdahl's law from its
1- and 2-thread times), written into TWO's entry as `cores_model`; 2 cores is measured too.

A training's rate is its steady one: env steps per second from the end of its `--skip`-th
iteration (compiling the update and the first evaluation behind it) to its last, read from its
metrics.jsonl; its whole process's seconds are kept too. The machine's load average before
each part is kept with it: only the parts of one invocation compare, and only on a quiet
machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import legged, proc, records
from scripts.bench.lib.runs import metrics, run_settings

MODULE = "scripts.bench.quadruped_speed"
RECORD = records.BENCH / "quadruped_speed.json"
PAIR_SETTINGS = ["trainer.torch_threads=1", "env.threads=1", "env.processes=1"]


def steady_rate(run: Path, skip: int) -> dict:
    """A run's steady env steps per second (after iteration `skip`), its last step, and the
    median seconds an iteration collected and updated and an evaluation took."""
    rows = [r for r in metrics(run) if "time" in r]
    first = next((r for r in rows if r["iteration"] >= skip), rows[0])
    last = rows[-1]
    seconds = last["time"] - first["time"]
    steps = last["global_step"] - first["global_step"]
    steady = [r for r in rows if r["iteration"] >= skip]

    def median(key: str) -> float | None:
        values = [r[key] for r in steady if key in r]
        return statistics.median(values) if values else None

    evals = sum(1 for r in steady if "eval/time" in r)
    return {
        "steps_per_s": steps / seconds if seconds > 0 else None,
        "from_step": first["global_step"],
        "to_step": last["global_step"],
        "batch": rows[-1]["global_step"] - rows[-2]["global_step"] if len(rows) > 1 else None,
        "eval_per_step_s": (median("eval/time") or 0.0) * evals / steps if steps else None,
        "collect_s": median("charts/collect_time"),
        "update_s": median("charts/update_time"),
        "eval_s": median("eval/time"),
    }


def train_command(args, version: dict, run_dir: Path, seed: int, extra: list[str]) -> list[str]:
    """The training command of one run of `version`."""
    config = Path(version["src"]) / args.config
    return [sys.executable, "-m", "embodied_ppo", "train", str(config),
            f"trainer.total_steps={args.steps}", f"trainer.seed={seed}",
            f"trainer.run_dir={run_dir}", *extra]  # fmt: skip


def child_env(version: dict) -> dict[str, str] | None:
    """The environment of `version`'s child processes: its package and tasks first on
    PYTHONPATH (None: this checkout's). The tasks install as embodied_ppo_envs from envs/: a
    folder of links (`version["links"]`) gives the version's under that name, ahead of this
    checkout's install."""
    if version["links"] is None:
        return None
    env = proc.checkout_env(Path(version["src"]))
    env["PYTHONPATH"] = os.pathsep.join([str(version["links"]), env["PYTHONPATH"]])
    return env


def trainings(args, version: dict, seeds: list[int], extra: list[str]) -> list[dict]:
    """Train one run per seed, all at once; each run's steady rate and wall seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        started, jobs = time.perf_counter(), []
        for seed in seeds:
            run = Path(tmp) / f"seed{seed}"
            cmd = train_command(args, version, run, seed, extra)
            out = subprocess.Popen(cmd, cwd=version["src"], env=child_env(version),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
            jobs.append((seed, run, out))
        results = []
        for seed, run, job in jobs:
            _, err = job.communicate()
            if job.returncode != 0:
                sys.exit(f"training seed {seed} failed:\n{err}")
            results.append({"seed": seed, "wall_s": time.perf_counter() - started,
                            **steady_rate(run, args.skip)})  # fmt: skip
        return results


def physics(args, version: dict) -> dict:
    """The worker's rates, pinned to the last core."""
    cmd = proc.worker_command("quadruped_physics", "--config", args.config,
                              "--steps", str(args.physics_steps),
                              "--core", str((os.cpu_count() or 1) - 1))  # fmt: skip
    return proc.run_worker("quadruped_physics", cmd, cwd=proc.ROOT, env=child_env(version))


def measure(args, versions: list[dict]) -> dict[str, dict]:
    """Every part for every version, the versions alternating within each part and round."""
    out: dict[str, dict] = {v["label"]: {"load_before": {}} for v in versions}
    parts = [p for p in ("physics", "alone", "two_runs") if p not in args.skip_part]
    for part in parts:
        for round_ in range(args.rounds):
            for version in versions:
                entry = out[version["label"]]
                entry["load_before"].setdefault(part, []).append(os.getloadavg()[0])
                print(f"{version['label']}: {part}, round {round_ + 1} ...", flush=True)
                if part == "physics":
                    result: object = physics(args, version)
                elif part == "alone":
                    result = trainings(args, version, [0], version["alone"])[0]
                else:
                    result = trainings(args, version, [0, 1], args.set or PAIR_SETTINGS)
                entry.setdefault(part, []).append(result)
                print(json.dumps(result), flush=True)
    for version in versions:
        entry = out[version["label"]]
        entry["commit"] = subprocess.run(["git", "-C", version["src"], "rev-parse", "HEAD"],
                                         capture_output=True, text=True).stdout.strip()  # fmt: skip
        entry["src"] = version["src"]
        entry["alone_settings"] = version["alone"]
    return out


def summary(label: str, entry: dict) -> list[str]:
    """The lines printed at the end: the rates (medians over rounds) against the limit."""
    lines = []
    limit = None
    if entry.get("physics"):
        ph = entry["physics"]
        mj = statistics.median(r["mj_step_per_s"] for r in ph)
        limit = statistics.median(r["limit_policy_steps_per_s"] for r in ph)
        member = statistics.median(r["member_steps_per_s"] for r in ph)
        vector = statistics.median(r["vector_steps_per_s"] for r in ph)
        lines.append(f"{label}: mj_step/s {mj:,.0f} on one core -> limit {limit:,.0f} policy "
                     f"steps/s; one env {member:,.0f}, vector env {vector:,.0f}")  # fmt: skip
    for key in ("alone", "two_runs"):
        if not entry.get(key):
            continue
        totals = [sum(r["steps_per_s"] for r in (runs if isinstance(runs, list) else [runs]))
                  for runs in entry[key]]  # fmt: skip
        total = statistics.median(totals)
        share = f" ({total / limit:.1%} of one core's limit)" if limit else ""
        lines.append(f"{label}: {key}: {total:,.0f} steps/s in all{share}")
    return lines


def model(measured: dict[str, dict], one: str, two: str) -> dict[str, float] | None:
    """Predicted steps/s on 2, 4 and 16 cores (`legged.cores_model`) from the version `one`
    (trained on one thread) and `two` (the same code, two env processes and two update threads),
    where both trained alone with their times recorded."""
    try:
        a, b = measured[one], measured[two]
        ph, run1, run2 = a["physics"][0], a["alone"][0], b["alone"][0]
        batch = run1["batch"]
        costs = legged.Costs(
            physics_us=1e6 * ph["physics_steps_per_policy_step"] / ph["mj_step_per_s"],
            env_us=1e6 / ph["vector_steps_per_s"],
            collect_us=1e6 * run1["collect_s"] / batch,
            update_us=1e6 * run1["update_s"] / batch,
            update2_us=1e6 * run2["update_s"] / batch,
            eval_us=1e6 * run1["eval_per_step_s"],
        )
    except (KeyError, TypeError, IndexError, ZeroDivisionError):
        return None
    return {str(n): legged.cores_model(costs, n) for n in (2, 4, 16)}


def build_parser() -> cli_args.Parser:
    """The command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--version", action="append", default=[], metavar="LABEL=SRC",
                   help="a version to measure: its name in the record and its checkout (.: "
                        "this one); default: this checkout as 'current'")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="rounds of every part")
    p.add_argument("--config", default="configs/quadruped_flat.yaml")
    p.add_argument("--steps", type=int, default=300_000, help="env steps per training")
    p.add_argument("--skip", type=int, default=10, help="iterations before the steady rate")
    p.add_argument("--physics-steps", type=int, default=4000)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="run settings of the two side-by-side runs")  # fmt: skip
    p.add_argument("--skip-part", action="append", default=[],
                   choices=["physics", "alone", "two_runs"])  # fmt: skip
    p.add_argument("--out", type=Path, default=RECORD)
    p.add_argument("--model", nargs=2, metavar=("ONE_THREAD", "TWO_PROCESSES"), default=None,
                   help="two labels of one code, trained on one thread and with two env "
                        "processes: predict 2, 4 and 16 cores from their costs")  # fmt: skip
    return p


def versions_of(args, links: Path) -> list[dict]:
    """The versions `--version` names, each with its checkout and, for another checkout, the
    folder that links its tasks (see `child_env`)."""
    out = []
    for item in args.version or ["current=."]:
        label, eq, rest = item.partition("=")
        src, _, settings = rest.partition(":")
        path = Path(src).resolve() if src != "." else proc.ROOT
        if not eq or not label or not (path / "embodied_ppo").is_dir():
            raise cli_args.BadInput(
                f"--version {item}: expected LABEL=SRC[:KEY=VALUE,...], SRC a checkout"
            )
        link = None
        if path != proc.ROOT:
            link = links / label
            link.mkdir()
            (link / "embodied_ppo_envs").symlink_to(path / "envs")
        alone = run_settings(settings.split(",")) if settings else []
        out.append({"label": label, "src": str(path), "links": link, "alone": alone})
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure the versions, side by side, and add them to the record."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        if args.steps < 10_000 or args.skip < 1 or args.rounds < 1:
            raise cli_args.BadInput(
                "--steps must be at least 10000, --skip and --rounds at least 1"
            )
        run_settings(args.set)
        labels = [v.partition("=")[0] for v in args.version] or ["current"]
        if args.model and not set(args.model) <= set(labels):
            raise cli_args.BadInput(f"--model {' '.join(args.model)}: not labels of --version")
        results = records.read_results(args.out, records="provenance", name=MODULE)
        with tempfile.TemporaryDirectory() as links:
            versions = versions_of(args, Path(links))
            measured = measure(args, versions)
        settings = {"config": args.config, "steps": args.steps, "skip": args.skip,
                    "rounds": args.rounds, "pair_settings": args.set or PAIR_SETTINGS}  # fmt: skip
        predicted = model(measured, *args.model) if args.model else None
        for label, entry in measured.items():
            results[label] = {**entry, "settings": settings,
                              "provenance": records.provenance(MODULE, argv)}  # fmt: skip
            if predicted is not None and label == args.model[1]:
                results[label]["cores_model"] = predicted
            print("\n".join(summary(label, entry)))
        if predicted is not None:
            print("predicted steps/s by cores: "
                  + ", ".join(f"{n}: {r:,.0f}" for n, r in predicted.items()))  # fmt: skip
        records.write_results(args.out, results)
        print(f"wrote {args.out}")

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
