"""The MuJoCo benchmark: our configs over several seeds, and Stable-Baselines3 beside them.

For each config and seed, `embodied-ppo train CONFIG trainer.seed=S trainer.total_steps=STEPS`
trains in its own process under ROOT/<name>/seed<S>; each final policy is evaluated
deterministically (`embodied-ppo eval --episodes 10 --seed 10000`). Stable-Baselines3 PPO with
RL Baselines3 Zoo's hyperparameters for the task trains the same number of steps on the same
machine (ROOT/<name>/sb3_seed<S>) and is evaluated on the same episodes. <name> is the
config's name for the default budget of 1M steps, with the budget appended for any other
(`humanoid_10M`), so one ROOT and one report hold several budgets. The classic-control configs
(cartpole.yaml, pendulum.yaml, cartpole_grpo.yaml) are measured the same way at their own
budgets (`--steps 100000`: `cartpole_100k`), without Stable-Baselines3 (no zoo settings here
for them: `--sb3-seeds` with no seeds). The report
(docs/benchmarks.md by default) opens with the seed protocol (benchstats.py: tuning seeds 0-9,
evaluation seeds 100 and up; a config's seeds below 100 and from 100 are reported on separate
rows) and gives, per config and set of seeds: the interquartile mean (IQM) of the evaluation
returns with its 95% bootstrap confidence interval, the median, the worst seed, the seeds at
the budget's target, every seed's value, wall time and steps/s, the steps and training time at
which the training return first reached each threshold, and the learning curves: every seed's
(`embodied-ppo plot`) and the IQM over seeds with its 95% band. A config that keeps its best
policy (`trainer.eval_interval`: checkpoints/best.pt, chosen on episodes of the run's own seed)
has that policy scored on the same test episodes too, in a row of its own under the final
policies' row.

Every invocation continues where the last one stopped: finished runs are kept, an
interrupted run of ours resumes from its last checkpoint
(`train --resume`, exact), an interrupted Stable-Baselines3 run from its last save (every
`--sb3-save-every` steps). So long budgets can be split over several invocations; the
wall time of a run is the sum over its invocations.

The results (every seed's evaluation, wall time and threshold crossings) are kept in a JSON
file that outlives the runs: docs/bench/mujoco.json, tracked with the report, for the default
ROOT; ROOT/results.json for any other ROOT (experiments), unless --results names one. So the
report can be rewritten (`--report-only`) on a clone that holds none of the runs: a learning
curve is redrawn where every seed's run folder is present and kept as it is otherwise.
Each record keeps a digest of its config's settings: a config changed since (comments aside)
is refused, so runs of old settings are never mixed with new ones. A record's "remarks" (a
list of sentences, written into the results file by hand) are printed under the table: how
its runs were measured where the report's own sentences do not say it (e.g. beside other work).

    python scripts/benchmark_mujoco.py --configs configs/hopper.yaml configs/walker2d.yaml \\
        --seeds 100 101 102 103 104 --steps 1000000 --sb3-seeds 100 101 102
    python scripts/benchmark_mujoco.py --configs configs/humanoid.yaml --seeds 100 \\
        --sb3-seeds --steps 10000000                    # recorded as humanoid_10M
    python scripts/benchmark_mujoco.py --report-only      # rewrite the report from ROOT

Runs that share the machine with other runs are given their share of it with `--set` (how
a run runs, not what it learns; each seed's record names the settings it ran with):

    python scripts/benchmark_mujoco.py --configs configs/ant.yaml --seeds 100 101 \\
        --set trainer.torch_threads=1 env.processes=1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import benchstats

ROOT = Path(__file__).resolve().parents[1]
EVAL_SEED = 10000  # evaluation episodes: those of `embodied-ppo eval --seed 10000`

# RL Baselines3 Zoo, hyperparams/ppo.yml: the tuned MuJoCo entries (written for -v3; used here
# unchanged on -v5). Ant has no tuned entry: the zoo trains it with PPO's defaults and
# VecNormalize. Every entry normalizes observations and rewards (VecNormalize, the entry's gamma).
RELU_256 = {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
            "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
SB3_ZOO: dict[str, dict[str, Any]] = {
    "HalfCheetah": {"n_steps": 512, "batch_size": 64, "gamma": 0.98, "learning_rate": 2.0633e-05,
                    "ent_coef": 0.000401762, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.92,
                    "max_grad_norm": 0.8, "vf_coef": 0.58096, "policy_kwargs": RELU_256},
    "Hopper": {"n_steps": 512, "batch_size": 32, "gamma": 0.999, "learning_rate": 9.80828e-05,
               "ent_coef": 0.00229519, "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99,
               "max_grad_norm": 0.7, "vf_coef": 0.835671, "policy_kwargs": RELU_256},
    "Walker2d": {"n_steps": 512, "batch_size": 32, "gamma": 0.99, "learning_rate": 5.05041e-05,
                 "ent_coef": 0.000585045, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.95,
                 "max_grad_norm": 1.0, "vf_coef": 0.871923},
    "Ant": {},
    "Humanoid": {"n_steps": 512, "batch_size": 256, "gamma": 0.95, "learning_rate": 3.56987e-05,
                 "ent_coef": 0.00238306, "clip_range": 0.3, "n_epochs": 5, "gae_lambda": 0.9,
                 "max_grad_norm": 2.0, "vf_coef": 0.431892, "policy_kwargs": RELU_256},
}  # fmt: skip

# Published PPO results at 1M steps (the issue tracker's table; versions differ from -v5):
# Tianshou examples/mujoco README (10 seeds, -v3), RL Zoo benchmark.md (-v3), CleanRL
# docs/benchmark/ppo_continuous_action.md (-v4).
PEERS = {
    "HalfCheetah": (5784, 5819, 1443),
    "Hopper": (2609, 2410, 2383),
    "Walker2d": (3589, 3479, 2288),
    "Ant": (3258, 1327, None),
    "Humanoid": (787, None, 716),
}
# What issue-level targets ask for, per step budget (above every published PPO of PEERS at 1M;
# Humanoid at 10M: the best public PPO-family result, Sample Factory's APPO, 5439).
TARGETS = {
    1_000_000: {
        "HalfCheetah": 5800,
        "Hopper": 3300,
        "Walker2d": 4500,
        "Ant": 3300,
        "Humanoid": 1300,
    },
    10_000_000: {"Humanoid": 5500},
    # The classic-control configs at their own budgets: CartPole-v1's reward threshold in
    # Gymnasium (475 of the 500 steps); Pendulum-v1, which has none, the usual -200.
    100_000: {"CartPole": 475},
    150_000: {"CartPole": 475},
    200_000: {"Pendulum": -200},
}
# Returns whose first crossing the report times, besides the targets.
MILESTONES = {
    "HalfCheetah": (1500, 3000),
    "Hopper": (1000, 2000),
    "Walker2d": (1000, 3000),
    "Ant": (1000, 2000),
    "Humanoid": (700,),
}
DEFAULT_STEPS = 1_000_000
DEFAULT_SEEDS = [100, 101, 102, 103, 104]  # evaluation seeds (benchstats.py: the protocol)
DEFAULT_SB3_SEEDS = [100, 101, 102]
DEFAULT_ROOT = ROOT / "runs" / "benchmark"
DEFAULT_RESULTS = ROOT / "docs" / "bench" / "mujoco.json"


def thresholds(fam: str) -> tuple[float, ...]:
    """The returns whose first crossing is timed: the milestones, then every budget's target."""
    targets = sorted({t[fam] for t in TARGETS.values() if fam in t})
    return (*MILESTONES.get(fam, ()), *targets)


def steps_label(steps: int) -> str:
    """10000000 -> '10M', 500000 -> '500k', 256 -> '256'."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if steps >= size and steps % size == 0:
            return f"{steps // size}{unit}"
    return str(steps)


def record_name(config: Path, steps: int) -> str:
    """A config's key in results.json and its folder under ROOT: the config's name, with the
    budget appended where it is not the default (so one ROOT holds several budgets)."""
    return config.stem if steps == DEFAULT_STEPS else f"{config.stem}_{steps_label(steps)}"


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit status 2, nothing written."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def family(env_id: str) -> str:
    return env_id.split("-")[0]


def env_id_of(config: Path) -> str:
    import yaml

    return yaml.safe_load(config.read_text())["env"]["id"]


def config_digest(config: Path) -> str:
    """What a config trains, as a short hash of its settings. Its comments do not count, nor
    do the keys that change how a run runs but not what it learns (those a resume may change:
    env.threads, env.processes, trainer.torch_threads, ...)."""
    import hashlib

    import yaml

    from embodied_ppo.config.resume import RESUMABLE_KEYS

    data = yaml.safe_load(config.read_text())
    for key in RESUMABLE_KEYS:
        block, _, name = key.partition(".")
        if isinstance(data.get(block), dict):
            data[block].pop(name, None)
    settings = json.dumps(data, sort_keys=True)
    return hashlib.sha256(settings.encode()).hexdigest()[:16]


# How a run runs, not what it learns: what `--set` may give every run of an invocation (e.g.
# one thread each where several runs share the machine; docs/performance.md).
RUN_SETTINGS = ("trainer.torch_threads", "env.threads", "env.processes")


def run_settings(values: list[str]) -> list[str]:
    """`--set` values as train overrides, each KEY=VALUE with KEY one of RUN_SETTINGS."""
    for value in values:
        key, eq, _ = value.partition("=")
        if not eq or key not in RUN_SETTINGS:
            fail(f"--set {value}: expected KEY=VALUE with KEY one of {', '.join(RUN_SETTINGS)}")
    return list(values)


# ------------------------------------------------------------------------------------ ours
def run_ours(
    config: Path, seed: int, steps: int, run: Path, episodes: int, settings: Sequence[str] = ()
) -> dict:
    """Train (or resume) one run of ours with the run `settings` (RUN_SETTINGS overrides),
    evaluate it; the run's record (which names the settings of each invocation that trained)."""
    state_file = run / "benchmark.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"wall_s": 0.0}
    if "eval" in state:
        return state
    latest = run / "checkpoints" / "latest.pt"
    if latest.exists():
        cmd = ["train", "--resume", str(run)]
    else:
        cmd = ["train", str(config), f"trainer.seed={seed}", f"trainer.total_steps={steps}",
               f"trainer.run_dir={run}"]  # fmt: skip
    cmd += settings
    if settings:
        state.setdefault("settings", []).append(list(settings))
    start = time.perf_counter()
    try:
        cli(cmd)
    finally:  # an interrupted invocation's time still counts
        state["wall_s"] += time.perf_counter() - start
        run.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state, indent=2) + "\n")
    summary = score(run, run / "benchmark_eval.json", episodes)
    state["eval"] = {"mean": summary["mean_return"], "std": summary["std_return"]}
    kept = run / "checkpoints" / "best.pt"
    if kept.is_file():  # a config with a periodic evaluation keeps its best policy: score it too
        best = score(kept, run / "benchmark_eval_kept.json", episodes)
        state["kept"] = {"mean": best["mean_return"], "std": best["std_return"],
                         "step": best["global_step"]}  # fmt: skip
    state["steps"] = steps
    state["reached"] = first_reached(run, thresholds(family(env_id_of(config))))
    state["curve"] = training_curve(run)
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    return state


def score(policy: Path, out: Path, episodes: int) -> dict:
    """`embodied-ppo eval` of a run (its final policy) or a checkpoint on the test episodes
    (`--seed 10000`), its JSON summary written to `out` and returned."""
    cli(["eval", str(policy), "--episodes", str(episodes), "--seed", str(EVAL_SEED),
         "--json", str(out)])  # fmt: skip
    return json.loads(out.read_text())


def cli(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "embodied_ppo", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def first_reached(run: Path, thresholds: tuple[float, ...]) -> dict[str, list[float] | None]:
    """For each threshold, (steps, training seconds) when the logged training return first
    reached it, or None. Training seconds continue across resumes (each process's clock
    restarts at 0: its times are added to where the previous one stopped)."""
    offset, last, points = 0.0, 0.0, []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["time"] < last:  # a resumed process
            offset += last
        last = row["time"]
        if "charts/episodic_return" in row:
            points.append((row["global_step"], offset + row["time"], row["charts/episodic_return"]))
    out: dict[str, list[float] | None] = {}
    for threshold in thresholds:
        hit = next(((s, t) for s, t, r in points if r >= threshold), None)
        out[str(threshold)] = None if hit is None else [hit[0], hit[1]]
    return out


def training_curve(run: Path, points: int = 200) -> list[list[float]]:
    """The logged training return against steps, thinned to at most `points` rows
    ([step, return]): kept in the results file, so the IQM band is redrawn without the runs."""
    rows = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "charts/episodic_return" in row:
            rows.append([row["global_step"], round(float(row["charts/episodic_return"]), 2)])
    if len(rows) > points:
        keep = sorted({round(i * (len(rows) - 1) / (points - 1)) for i in range(points)})
        rows = [rows[i] for i in keep]
    return rows


# ------------------------------------------------------------------------ Stable-Baselines3
def sb3_worker(
    env_id: str, seed: int, steps: int, run: Path, save_every: int, episodes: int
) -> None:
    """Train (or continue) Stable-Baselines3 PPO with the zoo's hyperparameters; evaluate."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from embodied_ppo.runner.episodes import eval_seeds

    torch.set_num_threads(1)  # its faster setting on 2 cores (scripts/bench_throughput.py)
    hp = dict(SB3_ZOO[family(env_id)])
    policy_kwargs = dict(hp.pop("policy_kwargs", {}))
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = {"relu": torch.nn.ReLU}[policy_kwargs["activation_fn"]]
    run.mkdir(parents=True, exist_ok=True)
    state_file, model_file, norm_file = run / "state.json", run / "model.zip", run / "norm.pkl"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"wall_s": 0.0}
    start = time.perf_counter()
    venv = make_vec_env(env_id, n_envs=1, seed=seed)
    if model_file.exists():
        env = VecNormalize.load(str(norm_file), venv)
        model = PPO.load(str(model_file), env=env, device="cpu")
    else:
        env = VecNormalize(venv, gamma=hp.get("gamma", 0.99))
        model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0,
                    policy_kwargs=policy_kwargs or None, **hp)  # fmt: skip
    while model.num_timesteps < steps:
        model.learn(min(save_every, steps - model.num_timesteps), reset_num_timesteps=False)
        model.save(str(model_file))
        env.save(str(norm_file))
        state["wall_s"] += time.perf_counter() - start
        start = time.perf_counter()
        state_file.write_text(json.dumps(state, indent=2) + "\n")
    env.training = False
    returns = []
    for episode_seed in eval_seeds(EVAL_SEED, episodes):
        e = gym.make(env_id)
        obs, _ = e.reset(seed=episode_seed)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(env.normalize_obs(obs[None]), deterministic=True)
            obs, reward, terminated, truncated, _ = e.step(action[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        e.close()
    state["eval"] = {"mean": float(np.mean(returns)), "std": float(np.std(returns))}
    state["steps"] = int(model.num_timesteps)
    state_file.write_text(json.dumps(state, indent=2) + "\n")


def run_sb3(env_id: str, seed: int, steps: int, run: Path, save_every: int, episodes: int) -> dict:
    state_file = run / "state.json"
    if state_file.exists() and "eval" in json.loads(state_file.read_text()):
        return json.loads(state_file.read_text())
    subprocess.run(
        [sys.executable, __file__, "--sb3-worker", env_id, str(seed), str(steps), str(run),
         str(save_every), str(episodes)],
        cwd=ROOT, check=True,
    )  # fmt: skip
    return json.loads(state_file.read_text())


# ---------------------------------------------------------------------------------- report
def target_of(fam: str, steps: int) -> float | None:
    return TARGETS.get(steps, {}).get(fam)


def target_status(fam: str, steps: int, means: list[float]) -> str:
    """'met' or 'missed (IQM)' for the IQM over seeds against the target for this budget, '-'
    where none applies."""
    target = target_of(fam, steps)
    if target is None or not means:
        return "-"
    center = benchstats.iqm(means)
    return f">= {target}: met" if center >= target else f">= {target}: **missed** ({center:.0f})"


def peer_status(fam: str, steps: int, summary: benchstats.Summary) -> str:
    """Against the best published PPO mean at 1M steps (PEERS): the IQM above it and the worst
    seed at least 0.8 of it; '-' for other budgets and tasks without published results."""
    best = max((p for p in PEERS.get(fam, ()) if p is not None), default=None)
    if steps != 1_000_000 or best is None:
        return "-"
    held = summary.iqm > best and summary.worst >= 0.8 * best
    return f"> {best}, worst >= {0.8 * best:.0f}: {'met' if held else '**missed**'}"


def header_comment(config: Path) -> str:
    """The comment block that opens a config file, without its '#' marks."""
    if not config.is_file():
        return ""
    lines = []
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines).strip()


def protocol_lines(results: dict) -> list[str]:
    """The seed protocol, and which configs still lack numbers on evaluation seeds."""
    pending = [
        f"`{name}`"
        for name, rec in results.items()
        if not any(benchstats.seed_group(s) == "evaluation" and "eval" in r
                   for s, r in rec["ours"].items())
    ]  # fmt: skip
    tuning = benchstats.TUNING_SEEDS
    lines = [
        "## Protocol: tuning seeds and evaluation seeds",
        "",
        f"- Configs are tuned on seeds {tuning.start}-{tuning.stop - 1} (tuning seeds) and "
        f"reported on seeds {benchstats.EVALUATION_FROM} and up (evaluation seeds), which no "
        f"tuning has seen. A seed below {benchstats.EVALUATION_FROM} counts as a tuning seed.",
        "- Every number says which seeds it used: each row of the tables below is one set of "
        "seeds, evaluation or tuning, never both mixed.",
        "- Per config and set of seeds: the interquartile mean (IQM, the mean of the middle 50% "
        "of the seeds' evaluation returns, a seed straddling a quartile weighted by its share "
        "inside) with its 95% percentile bootstrap confidence interval "
        f"({benchstats.RESAMPLES:,} resamples of the seeds, generator seed "
        f"{benchstats.BOOTSTRAP_SEED}), the median, the worst seed, and the seeds whose return "
        "reached the budget's target (k of n, and which). With 3 seeds the interval is wide and "
        "the IQM weighs the middle seed most: read them as such (`scripts/benchstats.py`).",
        "- Learning curves: every seed's training return, and the IQM over seeds with its 95% "
        "band where every seed's curve is kept.",
        "- The classic-control configs (cartpole.yaml, pendulum.yaml, cartpole_grpo.yaml) are "
        "in the first table at their own budgets. The memory tasks (`scripts/bench_recurrent.py`, "
        "docs/recurrent.md: ten evaluation seeds by default) and the arm tasks "
        "(`scripts/bench_arm.py`, docs/tasks.md: five evaluation seeds, three for "
        "reach_pixels.yaml) report the same statistics in the tables that close this page, "
        "computed from their results files (docs/bench/recurrent_*.json, docs/bench/arm.json).",
    ]
    if pending:
        lines.append(
            "- Not yet measured on evaluation seeds: "
            + ", ".join(pending)
            + ". Their rows below are on tuning seeds; evaluation seeds "
            f"{benchstats.seeds_text([str(x) for x in DEFAULT_SEEDS])} (Stable-Baselines3 on "
            f"{benchstats.seeds_text([str(x) for x in DEFAULT_SB3_SEEDS])}) are yet to be run."
        )
    return [*lines, ""]


def memory_lines(bench: Path) -> list[str]:
    """The memory tasks' section: per task, contender and set of seeds, the statistics of
    `scripts/bench_recurrent.py`'s results files (bench/recurrent_<task>.json) beside the report,
    and the IQM bands of our contenders' training returns (drawn into images/ beside it); empty
    where there are none."""
    import bench_recurrent

    rows, notes, curves = [], [], []
    for path in sorted(bench.glob("recurrent_*.json")):
        record = json.loads(path.read_text())
        task = bench_recurrent.TASKS.get(record.get("task"))
        if task is None:
            continue
        for name, group, summary, wall in bench_recurrent.summaries(record):
            cell = benchstats.cells(summary, ".1f")
            held = "-"
            if group == "evaluation" and name in ("ours", "ours_best"):
                need = bench_recurrent.REQUIRED_SHARE
                met = summary.fraction_at_target >= need
                held = f"{need:.0%} of seeds: {'met' if met else '**missed**'}"
            rows.append(
                f"| `{task['config']}` | {record['steps']:,} | {name} | {group} "
                f"{cell['seeds']} | {cell['iqm']} | {cell['median']} | {cell['worst']} | "
                f">= {task['target']:g}: {cell['at_target']} | {held} | "
                f"{', '.join(f'{m:.1f}' for m in summary.values)} | {wall:.0f} s |"
            )
        if record.get("note"):
            notes.append(f"- `{path.name}`: {record['note']}")
        for image in bench_recurrent.plot(record, bench.parent / "images"):
            group = image.stem.split("_")[-2]
            curves.append(f"![{record['task']}, {group} seeds](images/{image.name})")
    if not rows:
        return []
    return [
        "## Memory tasks (`scripts/bench_recurrent.py`)",
        "",
        "From docs/bench/recurrent_*.json (`python scripts/bench_recurrent.py --summarize FILE` "
        "prints the same). Each seed: deterministic evaluation of 20 episodes after the budget. "
        "`ours`: the config as committed; `memoryless`: the same without its LSTM; `sb3`: "
        "RecurrentPPO with RL Baselines3 Zoo's settings for the task; `*_rl_zoo_settings`: ours "
        "with the zoo's hyperparameters; `ours_best`: the committed config trained with its own "
        "periodic evaluation, scored by the policy it keeps as checkpoints/best.pt (chosen on "
        "the run's own evaluation episodes, none of them the 20 test episodes). The requirement: "
        "the committed config (its final policy, or the one it keeps) at the target on at least "
        "that share of the evaluation seeds. Wall time is the mean over the seeds, beside other "
        "work unless a note says otherwise.",
        "",
        "| config | steps | contender | seeds | IQM [95% CI] | median | worst (seed) | "
        "at the target | the config's requirement | each seed | wall time |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | --- | --- | --- | ---: |",
        *rows,
        "",
        *notes,
        *([""] if notes else []),
        *(
            [
                "The training return (stochastic actions) of our contenders: the IQM over seeds, "
                "shaded its 95% bootstrap interval (`bench_recurrent.py --plot`).",
                "",
            ]
            if curves
            else []
        ),
        *(line for image in curves for line in (image, "")),
    ]


def arm_lines(results_file: Path, images: Path) -> list[str]:
    """The arm tasks' section: `scripts/bench_arm.py`'s results file beside the report (its
    statistics, requirements and IQM bands); empty where there is none."""
    import bench_arm

    return bench_arm.report_lines(benchstats.read_results(results_file), images)


def seed_curves(rec: dict, seeds: dict, run_of) -> dict[str, tuple[list, list]] | None:
    """Every seed's training curve, from the results file or the run folder; None if one lacks
    both."""
    curves = {}
    for seed, r in seeds.items():
        rows = r.get("curve")
        if rows is None and (run_of(seed) / "metrics.jsonl").is_file():
            rows = training_curve(run_of(seed))
        if not rows:
            return None
        curves[seed] = ([row[0] for row in rows], [row[1] for row in rows])
    return curves


def report(results: dict, out: Path, root: Path) -> None:
    import torch

    lines = [
        "# Benchmarks: MuJoCo and classic control",
        "",
        "Written by `scripts/benchmark_mujoco.py` from its results "
        "(`docs/bench/mujoco.json`) and runs under "
        f"`{root.relative_to(ROOT) if root.is_relative_to(ROOT) else root}`. Each final policy: "
        f"deterministic evaluation of 10 episodes (`embodied-ppo eval --seed {EVAL_SEED}`); "
        "the statistics below are over seeds of those means. A config with a periodic "
        "evaluation (trainer.eval_interval) keeps its best policy as checkpoints/best.pt, chosen "
        "on the run's own evaluation episodes (those of its training seed, none of them the "
        "test episodes): its `kept policy (best.pt)` row scores those policies on the same test "
        "episodes, each seed with the step it was kept at. Stable-Baselines3: PPO with RL "
        "Baselines3 Zoo's hyperparameters for the task (its -v3 entries; Ant: PPO's defaults), "
        "same budget, same machine, same evaluation episodes.",
        "",
        *protocol_lines(results),
        f"Machine: {platform.machine()}, Python {platform.python_version()}, torch "
        f"{torch.__version__}; wall times are whole processes (compilation included). Ours "
        "ran alone on the machine; Stable-Baselines3 uses one core (one env and one torch "
        "thread, its faster setting here), so two of its runs may share the machine, one per core.",
        "",
        "| config | steps | seeds | ours: IQM [95% CI] | median | worst (seed) | "
        "at the target (seeds) | each seed | SB3 + zoo: IQM (seeds) | wall time, ours | "
        "steps/s, ours | wall time, SB3 | Tianshou / RL Zoo / CleanRL, 1M (published) | "
        "best published: IQM above, worst seed >= 0.8 of it | target for the budget: IQM |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: "
        "| --- | --- |",
    ]
    reach_lines, config_notes, curves, remarks = [], [], [], []
    noted = set()
    for name, rec in results.items():
        remarks += [f"- `{name}`: {text}" for text in rec.get("remarks", [])]
        fam = family(rec["env_id"])
        peers = " / ".join("-" if p is None else str(p) for p in PEERS.get(fam, ()))
        target = target_of(fam, rec["steps"])
        sb3_groups = benchstats.by_group({s: r for s, r in rec["sb3"].items() if "eval" in r})
        ours_groups = benchstats.by_group({s: r for s, r in rec["ours"].items() if "eval" in r})
        for group, ours in ours_groups.items():
            means = {s: r["eval"]["mean"] for s, r in ours.items()}
            summary = benchstats.summarize(means, target)
            cell = benchstats.cells(summary)
            walls = [r["wall_s"] for r in ours.values()]
            wall = statistics.mean(walls)
            each = ", ".join(f"{m:.0f}" for m in means.values())
            sb3 = sb3_groups.get(group, {})
            sb3_walls = [r["wall_s"] for r in sb3.values()]
            sb3_cell = "none finished"
            if sb3:
                sb3_iqm = benchstats.iqm([r["eval"]["mean"] for r in sb3.values()])
                sb3_cell = f"{sb3_iqm:.0f} ({benchstats.seeds_text(list(sb3))})"
            lines.append(
                f"| `{name}` | {rec['steps']:,} | {group} {cell['seeds']} | {cell['iqm']} | "
                f"{cell['median']} | {cell['worst']} | {cell['at_target']} | {each} | "
                f"{sb3_cell} | {wall / 60:.1f} min | {rec['steps'] / wall if wall else 0:,.0f} | "
                f"{f'{statistics.mean(sb3_walls) / 60:.1f} min' if sb3_walls else '-'} | "
                f"{peers or '-'} | {peer_status(fam, rec['steps'], summary)} | "
                f"{target_status(fam, rec['steps'], list(means.values()))} |"
            )
            if all("kept" in r for r in ours.values()):
                lines.append(kept_row(name, rec, group, ours, target, peers))
            for threshold in thresholds(fam):
                hits = [r["reached"].get(str(threshold)) for r in ours.values()]
                done = [h for h in hits if h]
                text = "not reached" if not done else (
                    f"{statistics.mean(h[0] for h in done):,.0f} steps, "
                    f"{statistics.mean(h[1] for h in done) / 60:.1f} min"
                )  # fmt: skip
                reach_lines.append(
                    f"| `{name}` | {group} {cell['seeds']} | {threshold} | {text} | "
                    f"{len(done)} of {len(hits)} |"
                )
            curves += group_curves(name, group, rec, ours, out, root)
        notes = header_comment(ROOT / rec["config"]) if "config" in rec else ""
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
        *reach_lines,
        "",
    ]
    if config_notes:
        lines += [
            "## The configs: what was tuned, and what mattered",
            "",
            "Each config's own header, as measured above.",
            "",
            *config_notes,
        ]
    lines += memory_lines(out.parent / "bench")
    lines += arm_lines(out.parent / "bench" / "arm.json", out.parent / "images")
    out.write_text("\n".join(lines) + "\n")


def kept_row(name: str, rec: dict, group: str, ours: dict, target, peers: str) -> str:
    """The table row of the policies a config with a periodic evaluation keeps
    (checkpoints/best.pt), scored on the same test episodes as the final policies: the same
    runs, so no wall time or Stable-Baselines3 of its own; each seed with the step it was
    kept at."""
    fam, steps = family(rec["env_id"]), rec["steps"]
    means = {s: r["kept"]["mean"] for s, r in ours.items()}
    summary = benchstats.summarize(means, target)
    cell = benchstats.cells(summary)
    each = ", ".join(f"{m:.0f} ({r['kept']['step'] / 1e6:.2f}M)"
                     for m, r in zip(means.values(), ours.values()))  # fmt: skip
    return (
        f"| `{name}`, kept policy (best.pt) | {steps:,} | {group} {cell['seeds']} | "
        f"{cell['iqm']} | {cell['median']} | {cell['worst']} | {cell['at_target']} | {each} | "
        f"- | same runs | - | - | {peers or '-'} | {peer_status(fam, steps, summary)} | "
        f"{target_status(fam, steps, list(means.values()))} |"
    )


def group_curves(name: str, group: str, rec: dict, ours: dict, out: Path, root: Path) -> list:
    """One set of seeds' curves for the report: every seed's (`embodied-ppo plot`, drawn where
    every run folder is present, kept as it is otherwise) and the IQM band (drawn where every
    seed's curve is kept, in the results file or its run folder)."""
    lines = []
    label = f"{name}, {group} seeds {benchstats.seeds_text(list(ours))}"
    images = out.parent / "images"
    each = images / f"benchmark_{name}_{group}.png"
    runs = [root / name / f"seed{s}" for s in ours]
    if all((run / "metrics.jsonl").is_file() for run in runs):
        cli(["plot", *map(str, runs), "--out", str(each), "--smooth", "5", "--title", label])
    if each.is_file():  # drawn now, or kept from the runs that are gone
        lines += [f"![{label}](images/{each.name})", ""]
    band = images / f"benchmark_{name}_{group}_iqm.png"
    kept = seed_curves(rec, ours, lambda s: root / name / f"seed{s}")
    if kept and len(kept) > 1:
        benchstats.plot_bands({group: benchstats.curve_band(kept)}, band, label)
    if band.is_file():
        lines += [f"![{label}: IQM and 95% band](images/{band.name})", ""]
    return lines


def save_record(results_file: Path, name: str, rec: dict) -> None:
    """Write one config's record into results.json, keeping the records other invocations
    (running at the same time, on other configs) wrote since this one started."""
    current = benchstats.read_results(results_file, records="env_id")
    current[name] = rec
    benchstats.write_results(results_file, current)


# ------------------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--configs", nargs="+", type=Path, default=[])
    p.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS)
    p.add_argument("--sb3-seeds", nargs="*", type=int, default=DEFAULT_SB3_SEEDS)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--results", type=Path, default=None,
                   help="the results file (default: docs/bench/mujoco.json for the default "
                   "--root, ROOT/results.json otherwise)")  # fmt: skip
    p.add_argument("--sb3-save-every", type=int, default=100_000)
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"a run setting for every run of ours: {', '.join(RUN_SETTINGS)}")  # fmt: skip
    p.add_argument("--report-only", action="store_true", help="rewrite the report from ROOT")
    p.add_argument("--sb3-worker", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sb3_worker:
        env_id, seed, steps, run, save_every, episodes = args.sb3_worker
        sb3_worker(env_id, int(seed), int(steps), Path(run), int(save_every), int(episodes))
        return
    settings = run_settings(args.set)
    root = args.root.resolve()
    if args.results is not None:
        results_file = args.results.resolve()
    else:
        results_file = DEFAULT_RESULTS if root == DEFAULT_ROOT.resolve() else root / "results.json"
    results = benchstats.read_results(results_file, records="env_id")
    if not args.report_only:
        if not args.configs:
            fail("--configs is required (or --report-only)")
        for config in args.configs:
            if not config.is_file():
                fail(f"no such config: {config}")
            known = results.get(record_name(config, args.steps), {}).get("config_digest")
            if known is not None and known != config_digest(config):
                fail(
                    f"{config} changed since the runs recorded as "
                    f"{record_name(config, args.steps)!r} in {results_file}; remove that record "
                    "(its runs are of the old settings) or use another --root"
                )
            lacking = family(env_id_of(config)) not in SB3_ZOO
            if args.sb3_seeds and lacking:
                fail(f"no RL Zoo settings here for {env_id_of(config)}: pass --sb3-seeds with "
                     "no seeds")  # fmt: skip
        root.mkdir(parents=True, exist_ok=True)
        for config in args.configs:
            name, env_id = record_name(config, args.steps), env_id_of(config)
            rec = results.setdefault(name, {"env_id": env_id, "steps": args.steps,
                                            "ours": {}, "sb3": {}})  # fmt: skip
            path = config.resolve()
            rec["config"] = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
            rec["config_digest"] = config_digest(config)
            if rec["steps"] != args.steps:
                fail(f"{root / name} holds runs of {rec['steps']:,} steps; use another --root")
            for seed in args.seeds:
                if "eval" in rec["ours"].get(str(seed), {}):  # finished, its folder maybe gone
                    continue
                run = root / name / f"seed{seed}"
                r = run_ours(config, seed, args.steps, run, args.episodes, settings)
                rec["ours"][str(seed)] = r
                save_record(results_file, name, rec)
                print(f"{name} seed {seed}: {r['eval']['mean']:.1f} ({r['wall_s'] / 60:.1f} min)")
            for seed in args.sb3_seeds:
                if "eval" in rec["sb3"].get(str(seed), {}):
                    continue
                r = run_sb3(env_id, seed, args.steps, root / name / f"sb3_seed{seed}",
                            args.sb3_save_every, args.episodes)  # fmt: skip
                rec["sb3"][str(seed)] = r
                save_record(results_file, name, rec)
                print(
                    f"{name} SB3 seed {seed}: {r['eval']['mean']:.1f} ({r['wall_s'] / 60:.1f} min)"
                )
        results = json.loads(results_file.read_text())  # with other invocations' records
    if not results:
        fail(f"no results in {results_file}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report(results, args.out.resolve(), root)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
