"""Side-by-side throughput benchmark: raw env, our collection, our training, Stable-Baselines3 PPO.

Every contender runs in its own fresh subprocess (so thread settings of one cannot leak into
another) and the contenders alternate round by round, so drift of the machine hits all of them
alike. The raw env and our collection share one subprocess per round and alternate rollout by
rollout there, on the same envs (each rollout continues the episodes the other left): drift
within a round cancels, and so do differences of simulation cost between physical states. The
table reports the median steps/s over rounds and the ratios that matter:

    ours_train / sb3_train      full training, identical hyperparameters
    ours_collect / raw_env      how close collection gets to the simulator's own limit

Steady state (default): the first iteration of each training contender (compilation, warm-up)
is excluded. `--whole-process STEPS` instead times whole processes from start to exit, imports,
env creation and compilation included: `embodied-ppo train CONFIG trainer.total_steps=STEPS`
against Stable-Baselines3 training the same settings for STEPS, and, with `--baseline-src`,
the same command run from another checkout (a before/after comparison). Each round also
prints the gradient steps each process took, which early stopping makes differ from run to run.

Identical hyperparameters include the learning-rate schedule: with `early_stop_kl` the rate
decides how many gradient steps an update takes (a higher rate trips the stop sooner), so
Stable-Baselines3 gets the config's linear decay as a schedule of its own, at the rate ours
uses for the same iteration, and `target_kl` = early_stop_kl / 1.5 (it stops past 1.5 x
target_kl). A config with the KL-adaptive rate is refused: Stable-Baselines3 has none.

Threads: each contender gets its best setting by default, and the table says which. Ours
chooses its own (trainer.torch_threads: null). Stable-Baselines3 uses torch's default (every
core), which on a small machine makes its update's threads fight its env stepping; so before
the rounds both 1 thread and every core are tried for one iteration and the faster is kept
(`--sb3-threads N` fixes it instead).

Examples:
    python scripts/bench_throughput.py --env HalfCheetah-v5 --num-envs 1
    python scripts/bench_throughput.py --env HalfCheetah-v5 --num-envs 8
    python scripts/bench_throughput.py --config configs/humanoid.yaml --iterations 2
    python scripts/bench_throughput.py --config configs/humanoid.yaml --device cuda
    python scripts/bench_throughput.py --config configs/halfcheetah.yaml --whole-process 200000 \
        --baseline-src /tmp/before --baseline-config /tmp/before/configs/halfcheetah.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ("raw_env", "ours_collect", "ours_train", "sb3_train")
WHOLE = ("ours_whole", "sb3_whole", "before_whole")


# ----------------------------------------------------------------------------- settings


def settings_from_args(args: argparse.Namespace) -> dict:
    """The shared hyperparameters every contender uses, and the device both train on."""
    s = _settings(args)
    s["device"] = getattr(args, "device", "cpu")
    return s


def _settings(args: argparse.Namespace) -> dict:
    if args.config:
        sys.path.insert(0, str(ROOT))
        from embodied_ppo.config.loading import load_config

        cfg = load_config(args.config)
        return {
            "env": cfg.env.id,
            "num_envs": cfg.env.num_envs,
            "rollout_steps": cfg.algorithm.rollout_steps,
            "minibatch_size": cfg.algorithm.minibatch_size,
            "epochs": cfg.algorithm.update_epochs,
            "hidden": list(cfg.model.hidden_sizes),
            "activation": cfg.model.activation,
            "share_backbone": cfg.model.share_backbone,
            "log_std_init": cfg.model.log_std_init,
            "lr": cfg.optim.lr,
            "schedule": cfg.optim.schedule,
            "gamma": cfg.algorithm.gamma,
            "gae_lambda": cfg.algorithm.gae_lambda,
            "value_clip": cfg.algorithm.value_clip,
            "huber_delta": cfg.algorithm.huber_delta,
            "max_grad_norm": cfg.optim.max_grad_norm,
            "backend": cfg.env.backend,
            "env_threads": cfg.env.threads,
            "env_processes": cfg.env.processes,
            "early_stop_kl": cfg.algorithm.early_stop_kl,
        }
    return {
        "env": args.env,
        "num_envs": args.num_envs,
        "rollout_steps": args.rollout_steps // args.num_envs,
        "minibatch_size": args.minibatch_size,
        "epochs": args.epochs,
        "hidden": args.hidden,
        "activation": "tanh",
        "share_backbone": False,
        "log_std_init": 0.0,
        "lr": 3e-4,
        "schedule": "constant",
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "value_clip": None,
        "huber_delta": None,
        "max_grad_norm": 0.5,
        "backend": args.backend,
        "env_threads": args.env_threads,
        "env_processes": args.env_processes,
        "early_stop_kl": None,
    }


def ours_config(s: dict, iterations: int, run_dir: str, threads: int | None):
    from embodied_ppo.config.building import from_dict

    return from_dict(
        {
            "env": {
                "id": s["env"],
                "num_envs": s["num_envs"],
                "backend": s["backend"],
                "threads": s["env_threads"],
                "processes": s.get("env_processes", 1),
                "normalize_obs": True,
                "normalize_reward": True,
            },
            "model": {
                "hidden_sizes": s["hidden"],
                "activation": s["activation"],
                "share_backbone": s["share_backbone"],
                "log_std_init": s["log_std_init"],
            },
            "algorithm": {
                "rollout_steps": s["rollout_steps"],
                "minibatch_size": s["minibatch_size"],
                "update_epochs": s["epochs"],
                "gamma": s["gamma"],
                "gae_lambda": s["gae_lambda"],
                "value_clip": s["value_clip"],
                "huber_delta": s["huber_delta"],
                "early_stop_kl": s.get("early_stop_kl"),
                "entropy_bonus": 0.0,
            },
            "optim": {
                "lr": s["lr"],
                "schedule": s.get("schedule", "constant"),
                "max_grad_norm": s["max_grad_norm"],
            },
            "trainer": {
                "total_steps": iterations * s["rollout_steps"] * s["num_envs"],
                "device": s.get("device", "cpu"),
                "run_dir": run_dir,
                "checkpoint_interval": 10**9,
                "torch_threads": threads,
            },
        }
    )


# ----------------------------------------------------------------------------- workers


def raw_rollouts(s: dict, iterations: int, collector=None):
    """A function running one raw rollout (the vector env stepped with uniformly random
    actions; the collector's env when given, its next observation then updated)."""
    import numpy as np

    from embodied_ppo.config.schema import EnvConfig
    from embodied_ppo.vecenv import make_env

    env_cfg = EnvConfig(
        id=s["env"],
        num_envs=s["num_envs"],
        backend=s["backend"],
        threads=s["env_threads"],
        processes=s.get("env_processes", 1),
    )
    envs = make_env(env_cfg, seed=0) if collector is None else collector.envs
    if collector is None:
        envs.reset()
    rng = np.random.default_rng(0)
    info = envs.info
    low = np.asarray(info.action_low, dtype=np.float32)
    high = np.asarray(info.action_high, dtype=np.float32)
    actions = rng.uniform(
        low, high, size=(iterations + 1, s["rollout_steps"], s["num_envs"], low.shape[0])
    ).astype(np.float32)
    done = iter(range(iterations + 1))

    def rollout() -> None:
        rows = actions[next(done)]
        for t in range(s["rollout_steps"]):
            res = envs.step(rows[t])
        if collector is not None:
            collector.obs = res.obs.copy()  # the collector continues from here

    return rollout


def worker(name: str, s: dict, iterations: int, threads: int | None) -> dict:
    """Measure one contender in this process; returns steps and seconds (after a warm-up).

    `collect_pair` measures raw_env and ours_collect in one process, alternating rollout by
    rollout, so machine drift cancels within the pair; it returns both.
    """
    import tempfile

    sys.path.insert(0, str(ROOT))
    batch = s["rollout_steps"] * s["num_envs"]
    if name == "raw_env":
        rollout = raw_rollouts(s, iterations)
        rollout()  # warm-up
        start = time.perf_counter()
        for _ in range(iterations):
            rollout()
        elapsed = time.perf_counter() - start
        return {"steps": iterations * batch, "seconds": elapsed}
    if name in ("ours_collect", "ours_train", "collect_pair"):
        from embodied_ppo.runner.trainer import Trainer

        with tempfile.TemporaryDirectory() as tmp:
            cfg = ours_config(s, iterations + 1, str(Path(tmp) / "run"), threads)
            trainer = Trainer(cfg, Path(tmp) / "run", progress_stream=open(os.devnull, "w"))  # noqa: SIM115
            if name in ("ours_collect", "collect_pair"):
                runs = {"ours_collect": trainer.collector.collect}
                if name == "collect_pair":  # the same envs, continuing where the other left
                    runs["raw_env"] = raw_rollouts(s, iterations, trainer.collector)
                seconds = dict.fromkeys(runs, 0.0)
                for run in runs.values():  # warm-up
                    run()
                for _ in range(iterations):
                    for key, run in runs.items():
                        start = time.perf_counter()
                        run()
                        seconds[key] += time.perf_counter() - start
                trainer.envs.close()
                if name == "collect_pair":
                    return {
                        k: {"steps": iterations * batch, "seconds": v} for k, v in seconds.items()
                    }
                return {"steps": iterations * batch, "seconds": seconds["ours_collect"]}
            # Full training: time iterations 2..N+1 from the per-iteration metrics.
            trainer.train()
            records = [
                json.loads(x)
                for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()
            ]
            elapsed = records[-1]["time"] - records[0]["time"]
            return {"steps": iterations * batch, "seconds": elapsed}
    if name == "sb3_train":
        batch = s["rollout_steps"] * s["num_envs"]
        model, _ = sb3_model(s, threads, (iterations + 1) * batch)
        timer = sb3_timer()
        model.learn(total_timesteps=(iterations + 1) * batch, callback=timer)
        end = time.perf_counter()
        # marks[0] starts the warm-up iteration; marks[1] the first measured one.
        return {"steps": iterations * batch, "seconds": end - timer.marks[1]}
    if name == "sb3_whole":  # timed from outside, as a whole process
        model, _ = sb3_model(s, threads, iterations)
        taken = 0  # gradient steps: an early-stopped update takes fewer

        def count(*_: object) -> None:
            nonlocal taken
            taken += 1

        model.policy.optimizer.register_step_post_hook(count)
        model.learn(total_timesteps=iterations)
        return {"steps": iterations, "gradient_steps": taken}
    raise ValueError(name)


def sb3_model(s: dict, threads: int | None, total_steps: int):
    """Stable-Baselines3 PPO with the shared settings, to train for `total_steps`; (model,
    transitions per iteration)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    if threads is not None:
        torch.set_num_threads(threads)
    env = VecNormalize(
        make_vec_env(s["env"], n_envs=s["num_envs"], seed=0),
        gamma=s["gamma"],
        clip_obs=10.0,
        clip_reward=10.0,
    )
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[s["activation"]]
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=s["rollout_steps"],
        batch_size=s["minibatch_size"],
        n_epochs=s["epochs"],
        learning_rate=sb3_learning_rate(s, total_steps),
        gamma=s["gamma"],
        gae_lambda=s["gae_lambda"],
        clip_range=0.2,
        clip_range_vf=s["value_clip"],
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=s["max_grad_norm"],
        # Its epochs stop once a minibatch's approx_kl passes 1.5 x target_kl; ours skip the
        # minibatch whose approx_kl passes early_stop_kl, and the rest of the update with it.
        target_kl=None if s.get("early_stop_kl") is None else s["early_stop_kl"] / 1.5,
        policy_kwargs={
            "net_arch": {"pi": s["hidden"], "vf": s["hidden"]},
            "activation_fn": act,
            "log_std_init": s["log_std_init"],
        },
        device=s.get("device", "cpu"),
        seed=0,
        verbose=0,
    )
    return model, s["rollout_steps"] * s["num_envs"]


def sb3_learning_rate(s: dict, total_steps: int) -> float | Callable[[float], float]:
    """The config's learning-rate schedule as Stable-Baselines3 takes it.

    Under early stopping the schedule decides how many gradient steps an update takes, so both
    contenders must follow the same one. Ours sets iteration k's rate before its rollout from
    the k x batch steps done; Stable-Baselines3 asks its schedule after the rollout, with
    progress_remaining = 1 - (k + 1) x batch / total: one batch is added back.
    """
    if s.get("schedule", "constant") == "constant":
        return s["lr"]
    batch = s["rollout_steps"] * s["num_envs"]
    lr, back = s["lr"], batch / total_steps
    return lambda progress_remaining: lr * min(1.0, progress_remaining + back)


def sb3_timer():
    from stable_baselines3.common.callbacks import BaseCallback

    class Timer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.marks: list[float] = []

        def _on_rollout_start(self) -> None:
            self.marks.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

    return Timer()


# ----------------------------------------------------------------------------- driver


def machine() -> dict:
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads_default": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
    }


def run_worker(name: str, s: dict, iterations: int, threads: int | None) -> dict:
    """One contender's measurement, in a fresh subprocess."""
    cmd = [sys.executable, __file__, "--worker", name, "--settings", json.dumps(s)]
    cmd += ["--iterations", str(iterations)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"{name} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_sb3_threads(s: dict) -> tuple[int, dict[int, float]]:
    """The faster of 1 thread and every core for Stable-Baselines3 (one measured iteration)."""
    cores = os.cpu_count() or 1
    rates = {}
    for n in sorted({1, cores}):
        m = run_worker("sb3_train", s, 1, n)
        rates[n] = m["steps"] / m["seconds"]
    return max(rates, key=rates.__getitem__), rates


def run_whole(
    name: str, s: dict, args: argparse.Namespace, sb3_threads: int
) -> tuple[float, int | None]:
    """Wall seconds of one whole training process of `args.whole_process` steps, and the
    gradient steps it took (None where its metrics do not tell: iterations not all logged)."""
    import tempfile

    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if name == "sb3_whole":
            cmd = [sys.executable, __file__, "--worker", name, "--settings", json.dumps(s)]
            cmd += ["--iterations", str(args.whole_process), "--threads", str(sb3_threads)]
            cwd = ROOT
        else:
            config = args.config
            if name == "before_whole" and args.baseline_config:
                config = args.baseline_config
            cmd = [sys.executable, "-m", "embodied_ppo", "train", str(Path(config).resolve())]
            cmd += [f"trainer.total_steps={args.whole_process}", f"trainer.run_dir={tmp}/run"]
            if args.threads is not None:
                cmd.append(f"trainer.torch_threads={args.threads}")
            src = Path(args.baseline_src).resolve() if name == "before_whole" else ROOT
            # src first; what the caller had on the path stays after it (packages a machine carries
            # there, as a GPU machine without a package registry does)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
            cwd = tmp  # outside both checkouts: PYTHONPATH alone decides which code runs
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
        seconds = time.perf_counter() - start
        if out.returncode != 0:
            sys.exit(f"{name} failed:\n{out.stderr}")
        if name == "sb3_whole":
            return seconds, json.loads(out.stdout.strip().splitlines()[-1])["gradient_steps"]
        return seconds, logged_gradient_steps(Path(tmp) / "run" / "metrics.jsonl")


def logged_gradient_steps(metrics: Path) -> int | None:
    """The gradient steps of a run from its metrics.jsonl, if it logged every iteration."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    if [r["iteration"] for r in rows] != list(range(1, len(rows) + 1)):
        return None
    return int(sum(r.get("losses/num_gradient_steps", 0) for r in rows))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument(
        "--rollout-steps", type=int, default=2048, help="transitions per iteration (all envs)"
    )
    p.add_argument("--minibatch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--backend", default="sync", choices=["sync", "async", "envpool"])
    p.add_argument(
        "--env-threads", type=int, default=1, help="threads stepping the envs (sync backend)"
    )
    p.add_argument(
        "--env-processes",
        type=int,
        default=1,
        help="processes stepping the envs, this one included (sync backend)",
    )
    p.add_argument("--config", help="take every setting from this embodied-ppo config instead")
    p.add_argument(
        "--iterations", type=int, default=3, help="measured iterations per contender and round"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads for ours (default: its own)"
    )
    p.add_argument(
        "--sb3-threads",
        type=int,
        default=None,
        help="torch threads for SB3 (default: the faster of 1 and every core)",
    )
    p.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    p.add_argument(
        "--whole-process",
        type=int,
        metavar="STEPS",
        help="time whole training processes of STEPS steps instead (needs --config)",
    )
    p.add_argument("--baseline-src", help="with --whole-process: also run this checkout's code")
    p.add_argument(
        "--baseline-config",
        help="with --baseline-src: the config that checkout trains (default: --config), e.g. "
        "the config as it was before a key it does not know was added",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="where both learners' updates run: cpu (default) or cuda[:N] (steady state only)",
    )
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument(
        "--worker", choices=(*CONTENDERS, *WHOLE, "collect_pair"), help=argparse.SUPPRESS
    )
    p.add_argument("--settings", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.worker:
        print(
            json.dumps(
                worker(args.worker, json.loads(args.settings), args.iterations, args.threads)
            )
        )
        return
    if args.whole_process and not args.config:
        p.error("--whole-process needs --config (the file the train command runs)")
    if args.whole_process and args.device != "cpu":
        p.error("--whole-process times the config as written; set its trainer.device instead")

    s = settings_from_args(args)
    sb3_runs = "sb3_train" in args.only or args.whole_process
    if sb3_runs and s["schedule"] == "adaptive":
        p.error(
            "optim.schedule: adaptive has no Stable-Baselines3 counterpart; "
            "time it with --only raw_env ours_collect ours_train"
        )
    info = machine()
    sb3_threads, tried = args.sb3_threads, {}
    if sb3_threads is None and sb3_runs:
        sb3_threads, tried = best_sb3_threads(s)
    tried_text = ", ".join(f"{n}: {r:,.0f} steps/s" for n, r in tried.items())
    print(
        f"threads: ours {args.threads or 'its own default (trainer.torch_threads: null)'}; "
        f"sb3 {sb3_threads}" + (f" (tried {tried_text})" if tried else ""),
        flush=True,
    )
    if args.whole_process:
        whole(args, s, info, sb3_threads, tried)
        return

    results: dict[str, list[float]] = {c: [] for c in args.only}
    workers = [c for c in args.only if c not in ("raw_env", "ours_collect")]
    if "raw_env" in args.only and "ours_collect" in args.only:
        workers.insert(0, "collect_pair")
    else:
        workers[:0] = [c for c in args.only if c in ("raw_env", "ours_collect")]
    for r in range(args.rounds):
        for c in workers:
            m = run_worker(c, s, args.iterations, sb3_threads if c == "sb3_train" else args.threads)
            for name, one in m.items() if c == "collect_pair" else [(c, m)]:
                results[name].append(one["steps"] / one["seconds"])
                print(
                    f"round {r + 1}/{args.rounds} {name:13s} {results[name][-1]:10,.0f} steps/s",
                    flush=True,
                )

    med = {c: statistics.median(v) for c, v in results.items()}
    print()
    print(
        f"{s['env']}: {s['num_envs']} env(s) x {s['rollout_steps']} steps, minibatch "
        f"{s['minibatch_size']}, {s['epochs']} epochs, {s['hidden']} {s['activation']} MLP; "
        f"{args.rounds} rounds x {args.iterations} iterations"
    )
    print(
        f"machine: {info['cores']} cores, torch {info['torch']} "
        f"({info['torch_threads_default']} threads default), cuda={info['cuda']}"
        + (f" ({info['gpu']}); learners on {s['device']}" if info["gpu"] else "")
    )
    print(f"{'contender':14s} {'steps/s (median)':>18s}")
    for c, v in med.items():
        print(f"{c:14s} {v:18,.0f}")
    pairs = {
        "ours_train / sb3_train": ("ours_train", "sb3_train"),
        "ours_collect / raw_env": ("ours_collect", "raw_env"),
    }
    report(results, med, pairs, args, s, info, {"sb3_threads": sb3_threads, "tried": tried})


def whole(args: argparse.Namespace, s: dict, info: dict, sb3_threads: int, tried: dict) -> None:
    names = ["ours_whole", "sb3_whole"] + (["before_whole"] if args.baseline_src else [])
    results: dict[str, list[float]] = {c: [] for c in names}
    steps: dict[str, list[int | None]] = {c: [] for c in names}
    for r in range(args.rounds):
        for c in names:
            seconds, taken = run_whole(c, s, args, sb3_threads)
            results[c].append(seconds)
            steps[c].append(taken)
            print(
                f"round {r + 1}/{args.rounds} {c:13s} {seconds:8.1f} s, "
                f"{'?' if taken is None else f'{taken:,}'} gradient steps",
                flush=True,
            )
    med = {c: statistics.median(v) for c, v in results.items()}
    print()
    print(f"{args.config}: whole processes of {args.whole_process:,} steps (seconds, median)")
    for c, v in med.items():
        print(f"{c:14s} {v:8.1f} s  ({args.whole_process / v:,.0f} steps/s)")
    # Speed ratios: the other's seconds over ours.
    pairs = {"ours / sb3 (speed)": ("sb3_whole", "ours_whole")}
    if args.baseline_src:
        pairs["ours / before (speed)"] = ("before_whole", "ours_whole")
    threads = {"sb3_threads": sb3_threads, "tried": tried}
    report(results, med, pairs, args, s, info, threads, {"gradient_steps": steps})


def report(results, med, pairs, args, s, info, threads, extra: dict | None = None) -> None:
    """Median ratios and per-round ratios (contenders measured minutes apart at most)."""
    per_round = {
        k: [x / y for x, y in zip(results[a], results[b], strict=True)]
        for k, (a, b) in pairs.items()
        if a in results and b in results
    }
    ratios = {k: med[a] / med[b] for k, (a, b) in pairs.items() if k in per_round}
    for k, v in ratios.items():
        r = per_round[k]
        print(
            f"{k:26s} {v:6.2f}   per round: median {statistics.median(r):.2f}, "
            f"range {min(r):.2f}-{max(r):.2f}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "settings": s,
                    "machine": info,
                    "threads": threads,
                    "whole_process_steps": args.whole_process,
                    "results": results,
                    "median": med,
                    "ratios": ratios,
                    "per_round_ratios": per_round,
                    **(extra or {}),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
