"""Our side of the steady-state timing (scripts.bench.throughput), one contender in its own
process on the shared settings (lib/ppo_settings.py):

    raw_env        the vector env stepped with uniformly random actions (no policy)
    ours_collect   our collection (the collector's rollouts)
    ours_train     our whole training iterations, the first (compilation, warm-up) excluded
    collect_pair   raw_env and ours_collect in one process on the same envs, alternating
                   rollout by rollout (each continues the episodes the other left), so drift
                   of the machine and the simulation's cost of its states cancel between them

    python -m scripts.bench.workers.throughput --contender collect_pair --settings JSON \\
        --iterations 3

Prints {"steps", "seconds"} as one JSON line (collect_pair: one such object per contender).
Each contender runs one rollout of warm-up before the timed `iterations`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.ppo_settings import ours_config

CONTENDERS = ("raw_env", "ours_collect", "ours_train", "collect_pair")


def raw_rollouts(s: dict[str, Any], iterations: int, collector=None) -> Callable[[], None]:
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


def measure(name: str, s: dict[str, Any], iterations: int, threads: int | None) -> dict:
    """Measure one contender in this process: its steps and seconds after a warm-up."""
    batch = s["rollout_steps"] * s["num_envs"]
    if name == "raw_env":
        rollout = raw_rollouts(s, iterations)
        rollout()  # warm-up
        start = time.perf_counter()
        for _ in range(iterations):
            rollout()
        return {"steps": iterations * batch, "seconds": time.perf_counter() - start}
    from embodied_ppo.runner.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = ours_config(s, iterations + 1, str(Path(tmp) / "run"), threads)
        trainer = Trainer(cfg, Path(tmp) / "run", progress_stream=open(os.devnull, "w"))  # noqa: SIM115
        if name == "ours_train":  # time iterations 2..N+1 from the per-iteration metrics
            trainer.train()
            rows = (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()
            records = [json.loads(x) for x in rows]
            return {
                "steps": iterations * batch,
                "seconds": records[-1]["time"] - records[0]["time"],
            }
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
        return {k: {"steps": iterations * batch, "seconds": v} for k, v in seconds.items()}
    return {"steps": iterations * batch, "seconds": seconds["ours_collect"]}


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, measure, print the JSON line."""
    p = cli_args.parser("scripts.bench.workers.throughput", __doc__)
    p.add_argument("--contender", choices=CONTENDERS, required=True)
    p.add_argument("--settings", required=True, help="the shared settings, as JSON")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: its own)")
    return cli_args.run_main(
        p,
        lambda a: print(
            json.dumps(measure(a.contender, json.loads(a.settings), a.iterations, a.threads))
        ),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
