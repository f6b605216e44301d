"""Memory on partially observed tasks: our recurrent PPO, the same config without memory, and
sb3-contrib's RecurrentPPO, side by side on the same machine.

For each task and seed, three contenders train for the same number of env steps, each in its own
subprocess, one after the other:

    ours        embodied-ppo train configs/<task>_pomdp.yaml            (an LSTM)
    memoryless  the same config with model.recurrent=null                (an MLP: the control)
    sb3         sb3_contrib.RecurrentPPO, RL Baselines3 Zoo's ppo_lstm settings for the task

and, when asked for (--contenders), ours_best: the config trained with its own periodic
evaluation (trainer.eval_interval; ours trains without it), scored by the policy the run keeps
as checkpoints/best.pt (its best periodic evaluation, on episodes of its own seed, none of
them test episodes), its final policy's returns kept beside.

Each policy is evaluated deterministically on the same episodes (those of
`embodied-ppo eval --seed 10000`; the recurrent state reset at every episode start). The JSON holds
every number (and our runs' training curves); the table prints, per contender and set of seeds
(evaluation seeds 100 and up, tuning seeds below; benchstats.py), the interquartile mean of the
evaluation returns with its 95% bootstrap interval, the median, the worst seed, the seeds at
the task's target, and the mean wall time of its process. With --out, every finished run is
saved at once and a seed already in the file is not run again, so an interrupted invocation
continues where it stopped; invocations side by side may share one --out (say ours in one, sb3
in another), each keeping the runs the others saved. --summarize prints the table of a results
file without running; --plot draws, per set of seeds, the IQM band of the training return of
each of our contenders (docs/images/recurrent_<task>_<set>_iqm.png).
`--set` gives our runs their share of a machine that other runs share (one thread each:
docs/performance.md), recorded with each seed; it takes only settings that do not change what
a run learns (benchmark_mujoco.py's RUN_SETTINGS).

Examples:
    python scripts/bench_recurrent.py --task cartpole --out docs/bench/recurrent_cartpole.json
    python scripts/bench_recurrent.py --task pendulum --seeds 100 --contenders ours sb3
    python scripts/bench_recurrent.py --task pendulum --contenders ours \
        --set trainer.torch_threads=1 env.threads=1
    python scripts/bench_recurrent.py --summarize docs/bench/recurrent_pendulum.json --plot
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchstats
from benchmark_mujoco import RUN_SETTINGS, run_settings

from embodied_ppo.config.loading import load_config

ROOT = Path(__file__).resolve().parents[1]

# The share of evaluation seeds on which a committed memory config must reach its target.
REQUIRED_SHARE = 0.9

# The evaluation episodes every final policy is scored on (`embodied-ppo eval --seed 10000`);
# no run's periodic evaluation draws them (those derive from the run's own seed).
TEST_SEED = 10000

CONTENDERS = ("ours", "ours_best", "memoryless", "sb3")

TASKS = {
    "cartpole": {
        "config": "configs/cartpole_pomdp.yaml",
        "env_id": "EmbodiedPPO/CartPoleNoVel-v1",
        "steps": 100_000,
        "target": 475.0,  # the deterministic return that counts a seed as solved
        # RL Baselines3 Zoo, hyperparams/ppo_lstm.yml, CartPoleNoVel-v1.
        "sb3": {
            "n_envs": 8,
            "normalize": True,
            "kwargs": {
                "n_steps": 32,
                "batch_size": 256,
                "gae_lambda": 0.8,
                "gamma": 0.98,
                "n_epochs": 20,
                "ent_coef": 0.0,
                "learning_rate": "lin_0.001",
                "clip_range": "lin_0.2",
                "policy_kwargs": {"ortho_init": False, "lstm_hidden_size": 64},
            },
        },
    },
    "pendulum": {
        "config": "configs/pendulum_pomdp.yaml",
        "env_id": "EmbodiedPPO/PendulumNoVel-v1",
        "steps": 100_000,
        "target": -300.0,
        # RL Baselines3 Zoo, hyperparams/ppo_lstm.yml, PendulumNoVel-v1.
        "sb3": {
            "n_envs": 4,
            "normalize": True,
            "kwargs": {
                "n_steps": 1024,
                "gae_lambda": 0.95,
                "gamma": 0.9,
                "n_epochs": 10,
                "ent_coef": 0.0,
                "learning_rate": 1e-3,
                "clip_range": 0.2,
                "use_sde": True,
                "sde_sample_freq": 4,
                "policy_kwargs": {
                    "ortho_init": False,
                    "activation_fn": "relu",
                    "lstm_hidden_size": 64,
                    "enable_critic_lstm": True,
                    "net_arch": {"pi": [64], "vf": [64]},
                },
            },
        },
    },
}


# ------------------------------------------------------------------------------ contenders


def evaluate(policy: Path, episodes: int, out: Path) -> dict:
    """`embodied-ppo eval` of a run folder (its final policy) or a checkpoint file on the test
    episodes (`--seed 10000`); the summary it writes to `out`."""
    cmd = [sys.executable, "-m", "embodied_ppo", "eval", str(policy), "--episodes", str(episodes),
           "--seed", str(TEST_SEED), "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def run_ours(
    task: dict, seed: int, steps: int, episodes: int, contender: str, work: Path,
    settings: list[str] | tuple[str, ...] = (),
) -> dict:  # fmt: skip
    """Train and evaluate one of our runs (`contender`: ours, ours_best or memoryless) with the
    run `settings` (RUN_SETTINGS overrides). ours_best trains with the config's periodic
    evaluation and is scored by the policy the run keeps as checkpoints/best.pt; its record
    also holds the final policy's returns."""
    run = work / f"{contender}_{seed}"
    extra = {
        "ours": ["trainer.eval_interval=null"],
        "ours_best": [],  # the config's own periodic evaluation picks best.pt
        "memoryless": ["model.recurrent=null", "algorithm.sequence_length=null",
                       "trainer.eval_interval=null"],
    }[contender]  # fmt: skip
    cmd = [sys.executable, "-m", "embodied_ppo", "train", task["config"], *extra,
           f"trainer.seed={seed}", f"trainer.total_steps={steps}", f"trainer.run_dir={run}",
           *settings]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    summary = evaluate(run, episodes, run / "eval.json")
    curve = [
        [row["global_step"], round(float(row["charts/episodic_return"]), 2)]
        for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "charts/episodic_return" in row
    ]
    record = {"wall_s": wall, "returns": summary["returns"], "mean": summary["mean_return"],
              "curve": curve}  # fmt: skip
    if contender == "ours_best":
        kept = run / "checkpoints" / "best.pt"
        if not kept.is_file():
            raise SystemExit(
                f"bench_recurrent.py: {run} kept no checkpoints/best.pt: its "
                f"{steps} steps ended before the config's first periodic evaluation"
            )
        best = evaluate(kept, episodes, run / "best_eval.json")
        record |= {"returns": best["returns"], "mean": best["mean_return"],
                   "best_step": best["global_step"], "final_returns": summary["returns"],
                   "final_mean": summary["mean_return"]}  # fmt: skip
    if settings:
        record["settings"] = list(settings)
    return record


SB3_CHILD = r"""
import json, sys, time
import numpy as np
import torch
import gymnasium as gym
import embodied_ppo_envs  # registers the tasks
from embodied_ppo.runner.episodes import eval_seeds
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

spec, seed, steps, episodes = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
kw = dict(spec["kwargs"])
def schedule(value):
    if isinstance(value, str) and value.startswith("lin_"):
        v = float(value[4:])
        return lambda progress: progress * v
    return value
for key in ("learning_rate", "clip_range"):
    kw[key] = schedule(kw[key])
pk = dict(kw.pop("policy_kwargs"))
if "activation_fn" in pk:
    pk["activation_fn"] = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[pk["activation_fn"]]
start = time.perf_counter()
env = make_vec_env(spec["env_id"], n_envs=spec["n_envs"], seed=seed)
if spec["normalize"]:
    env = VecNormalize(env, gamma=kw["gamma"])
model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", policy_kwargs=pk, **kw)
model.learn(steps)
wall = time.perf_counter() - start
returns = []
for episode_seed in eval_seeds(10000, episodes):  # the episodes `embodied-ppo eval --seed 10000` runs
    e = gym.make(spec["env_id"])
    obs, _ = e.reset(seed=episode_seed)
    state, start_flag, total, done = None, np.ones((1,), dtype=bool), 0.0, False
    while not done:
        x = env.normalize_obs(obs[None]) if spec["normalize"] else obs[None]
        action, state = model.predict(x, state=state, episode_start=start_flag, deterministic=True)
        obs, reward, terminated, truncated, _ = e.step(action[0])
        total += float(reward)
        start_flag = np.zeros((1,), dtype=bool)
        done = terminated or truncated
    returns.append(total)
print(json.dumps({"wall_s": wall, "returns": returns, "mean": float(np.mean(returns))}))
"""


def run_sb3(task: dict, seed: int, steps: int, episodes: int) -> dict:
    spec = {**task["sb3"], "env_id": task["env_id"]}
    out = subprocess.run(
        [sys.executable, "-c", SB3_CHILD, json.dumps(spec), str(seed), str(steps), str(episodes)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------- main


def summaries(record: dict):
    """Per contender and set of seeds (tuning, evaluation) of a results file: the contender's
    name, the group, the statistics of its evaluation returns against the task's target
    (benchstats.py) and its mean wall time."""
    target = TASKS[record["task"]]["target"]
    for name, per_seed in record["results"].items():
        for group, runs in benchstats.by_group(per_seed).items():
            means = {s: r["mean"] for s, r in runs.items()}
            wall = statistics.mean(r["wall_s"] for r in runs.values())
            yield name, group, benchstats.summarize(means, target), wall


def summary_lines(record: dict) -> list[str]:
    """The table of a results file: per contender and set of seeds, the statistics of the
    evaluation returns (benchstats.py) and the mean wall time."""
    target = TASKS[record["task"]]["target"]
    lines = [
        f"{record['task']}: {record['steps']:,} steps, {record['episodes']} deterministic "
        f"episodes per seed, target {target:g}; IQM [95% bootstrap CI, "
        f"{benchstats.RESAMPLES:,} resamples]",
        f"{'contender':>26} | seeds | IQM [95% CI] | median | worst (seed) | at target | "
        "mean wall time | steps/s",
    ]
    for name, group, summary, wall in summaries(record):
        cell = benchstats.cells(summary, ".1f")
        lines.append(
            f"{name:>26} | {group} {cell['seeds']} | {cell['iqm']} | {cell['median']} | "
            f"{cell['worst']} | {cell['at_target']} | {wall:.0f} s | "
            f"{record['steps'] / wall:,.0f}"
        )
    return lines


def plot(record: dict, images: Path) -> list[Path]:
    """Per set of seeds (evaluation, tuning), the IQM band of the training return of each of
    our contenders (ours, ours_best, memoryless) with a curve for every seed, at least two
    seeds, into images/recurrent_<task>_<set>_iqm.png; the images written."""
    written = []
    for group in benchstats.GROUPS:
        bands = {}
        for name in CONTENDERS:
            runs = benchstats.by_group(record["results"].get(name, {})).get(group, {})
            curves = {s: ([p[0] for p in r["curve"]], [p[1] for p in r["curve"]])
                      for s, r in runs.items() if r.get("curve")}  # fmt: skip
            if len(curves) > 1 and len(curves) == len(runs):
                bands[f"{name}, seeds {benchstats.seeds_text(list(runs))}"] = benchstats.curve_band(
                    curves
                )
        if bands:
            out = images / f"recurrent_{record['task']}_{group}_iqm.png"
            title = f"{record['task']}, {group} seeds"
            benchstats.plot_bands(bands, out, title, ylabel="training return (stochastic)")
            written.append(out)
    return written


def save_run(out: Path, record: dict, contender: str, seed: int, run: dict) -> dict:
    """Write one finished run into the results file `out`, keeping the runs other invocations
    (side by side, on other seeds or contenders) wrote since this one started; the record as
    written. `record` is this invocation's, used while `out` does not exist yet."""
    written = benchstats.read_results(out) or record
    written["results"].setdefault(contender, {})[str(seed)] = run
    benchstats.write_results(out, written)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 110)))
    parser.add_argument("--steps", type=int, default=None, help="default: the task's 100k")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument(
        "--contenders", nargs="+", default=["ours", "memoryless", "sb3"], choices=CONTENDERS,
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="the results JSON: written after every run, its runs kept")  # fmt: skip
    parser.add_argument("--summarize", type=Path, default=None,
                        help="print the table of this results JSON and exit")  # fmt: skip
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help=f"a run setting for our runs: {', '.join(RUN_SETTINGS)}")  # fmt: skip
    parser.add_argument("--plot", action="store_true",
                        help="draw the IQM bands of our contenders' training returns into "
                             "docs/images")  # fmt: skip
    args = parser.parse_args()
    settings = run_settings(args.set)
    if args.summarize:
        if not args.summarize.is_file():
            parser.error(f"{args.summarize} not found")
        record = benchstats.read_results(args.summarize)
        if not isinstance(record.get("results"), dict):
            parser.error(f"{args.summarize} is not a results file of this script")
        print("\n".join(summary_lines(record)))
        if args.plot:
            for out in plot(record, ROOT / "docs" / "images"):
                print(f"wrote {out}")
        return
    if args.task is None:
        parser.error("--task is required (or --summarize)")
    task = TASKS[args.task]
    steps = args.steps or task["steps"]
    if (
        "ours_best" in args.contenders
        and not load_config(ROOT / task["config"]).trainer.eval_interval
    ):
        parser.error(
            f"--contenders ours_best: {task['config']} has no periodic evaluation "
            "(trainer.eval_interval), so its runs keep no best.pt"
        )
    record = {
        "task": args.task,
        "steps": steps,
        "episodes": args.episodes,
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "results": {},
    }
    if args.out and args.out.exists():
        kept = benchstats.read_results(args.out)
        held = tuple(kept.get(key) for key in ("task", "steps", "episodes"))
        if None in held:
            parser.error(f"{args.out} is not a results file of this script")
        if held != (args.task, steps, args.episodes):
            parser.error(f"{args.out} holds another task, budget or episode count")
        record = kept
    results = record["results"]
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name in args.contenders:
                if str(seed) in results.get(name, {}):
                    continue  # finished by an earlier invocation
                if name == "sb3":
                    r = run_sb3(task, seed, steps, args.episodes)
                else:
                    r = run_ours(task, seed, steps, args.episodes, name, Path(tmp), settings)
                print(f"{args.task} seed {seed} {name:>10}: return {r['mean']:8.1f} "
                      f"({r['wall_s']:.0f} s)", flush=True)  # fmt: skip
                if args.out:
                    record = save_run(args.out, record, name, seed, r)
                else:
                    record["results"].setdefault(name, {})[str(seed)] = r
                results = record["results"]
    print()
    print("\n".join(summary_lines(record)))
    if args.plot:
        for out in plot(record, ROOT / "docs" / "images"):
            print(f"wrote {out}")


if __name__ == "__main__":
    main()
