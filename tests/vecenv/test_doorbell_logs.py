"""Doorbell steps whose ended episodes carry info["log"]: the worker sends the logs on its pipe
just before its step counter rises, so this process may find the pipe readable while it still
waits for the counter; that is the step finishing, not a worker that died."""

from __future__ import annotations

import numpy as np
from toy_envs import LogEnv

from embodied_ppo.vecenv.workers import ProcessVectorEnv


def test_logs_on_the_pipe_ahead_of_the_counter_are_not_a_dead_worker():
    # Every step ends every episode with a log: a race at every step (before the fix, a run
    # like this one was taken for a dead worker within a few thousand steps).
    fns = [lambda: LogEnv(fall_at=1) for _ in range(4)]
    venv = ProcessVectorEnv(fns, 2, doorbell=True)
    try:
        venv.reset(seed=[0, 1, 2, 3])
        actions = np.zeros((4, 1), np.float32)
        for _ in range(20_000):
            _, _, terminated, _, info = venv.step(actions)
            assert terminated.all() and info["_final_obs"].all()
            logs = info["final_info"]["log"]
            assert [log["metrics/fall_rate"] for log in logs] == [1.0] * 4  # every one arrived
    finally:
        venv.close()
