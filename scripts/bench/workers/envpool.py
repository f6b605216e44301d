"""One contender of the env-backend timing (scripts.bench.envpool), in its own process: random
actions (drawn before timing) stepped through one backend, no policy.

    python -m scripts.bench.workers.envpool --contender sync_processes --env Humanoid-v5 \\
        --num-envs 8 --steps 1000

Contenders: `envpool`, `sync`, `sync_threads` (2 threads), `sync_processes` (2 processes) and
`async` through our wrappers (`make_env`: what the collector sees, SAME_STEP resets and
statistics included); `envpool_lib` and `sync_lib` step the vector env alone (envpool's `step`
with its NEXT_STEP resets; our serial vector env behind the sync backend). Prints [steps/s,
steps per CPU second] as one JSON line.
"""

from __future__ import annotations

import json
import os
import time

from scripts.bench.lib import args as cli_args

CONTENDERS = (
    "envpool",
    "sync",
    "sync_threads",
    "sync_processes",
    "async",
    "envpool_lib",
    "sync_lib",
)


def measure(contender: str, env_id: str, num_envs: int, steps: int) -> tuple[float, float]:
    """Env steps per wall-clock second and per CPU second of one contender (in this process).

    CPU time counts every thread of the process and, for `async`, its worker processes too; it
    says what a step costs whatever else the machine runs.
    """
    import numpy as np

    from embodied_ppo.config.building import from_dict
    from embodied_ppo.vecenv import make_env

    backend = contender.split("_")[0]
    threads = 2 if contender == "sync_threads" else 1
    processes = 2 if contender == "sync_processes" else 1
    env = {"id": env_id, "num_envs": num_envs, "backend": backend, "threads": threads}
    cfg = from_dict({"env": {**env, "processes": processes}}).env
    envs = make_env(cfg, seed=0)
    envs.reset()
    actions = [envs.sample_actions() for _ in range(steps)]
    if contender == "envpool_lib":
        pool = envs._pool
        actions = [np.clip(a, envs._low, envs._high).astype(np.float64) for a in actions]
        step = pool.step
    elif contender == "sync_lib":
        step = envs.env.step
    else:
        step = envs.step
    for a in actions[:20]:  # warm up
        step(a)
    cpu0, start = _cpu_seconds(envs), time.perf_counter()
    for a in actions:
        step(a)
    elapsed, cpu = time.perf_counter() - start, _cpu_seconds(envs) - cpu0
    envs.close()
    return steps * num_envs / elapsed, steps * num_envs / cpu


def _cpu_seconds(envs: object) -> float:
    """CPU seconds used so far by this process (all threads) and its env worker processes."""
    total = time.process_time()
    for process in getattr(getattr(envs, "env", None), "processes", []):
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, measure, print the JSON line."""
    p = cli_args.parser("scripts.bench.workers.envpool", __doc__)
    p.add_argument("--contender", choices=CONTENDERS, required=True)
    p.add_argument("--env", required=True)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000)
    return cli_args.run_main(
        p,
        lambda a: print(json.dumps(measure(a.contender, a.env, a.num_envs, a.steps))),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
