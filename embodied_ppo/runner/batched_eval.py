"""Evaluation episodes stepped together: one env per episode in the task's own vector env.

Where the evaluated task has a member-exact vector env (`vecenv.task_vector`, env.batched) and
the policy keeps no state between steps, the periodic evaluation runs its episodes at once,
env i of a vector of as many envs as episodes reset with episode i's seed: each env steps
exactly as the single evaluation env would with that seed, and each action is the policy's on
that env's observation alone, so every episode, and the result, is the one-by-one
evaluation's bit for bit (tests/runner/test_batched_eval.py); only the env's own work is
shared. An env whose episode has ended keeps stepping (with zero actions) until the last one
ends; what it does then is not counted.
"""

from __future__ import annotations

import numpy as np

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.obs import map_obs
from embodied_ppo.runner.episodes import Action, EvalResult
from embodied_ppo.vecenv.protocol import episode_log
from embodied_ppo.vecenv.spaces import describe_spaces, obs_cast
from embodied_ppo.vecenv.task_vector import TaskVectorGroup, vector_entry


def batched_episodes(env_cfg: EnvConfig, act: Action, seeds: list[int]) -> EvalResult | None:
    """One episode per seed, stepped together (see the module); None where the task has no
    member-exact vector env or `act` keeps a state (a recurrent policy: one by one instead)."""
    if hasattr(act, "reset") or vector_entry(env_cfg) is None:
        return None
    n = len(seeds)
    group = TaskVectorGroup(env_cfg, range(n))
    try:
        info = describe_spaces(group.single_observation_space, group.single_action_space)
        obs, _ = group.reset(seed=[int(s) for s in seeds])
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        done = np.zeros(n, dtype=bool)
        logs: list[dict[str, float] | None] = [None] * n
        successes: list[float | None] = [None] * n
        actions = np.zeros((n, *group.single_action_space.shape), np.float32)
        while not done.all():
            for i in np.flatnonzero(~done).tolist():
                actions[i] = act(obs_cast(map_obs(lambda x, i=i: x[i], obs), info))
            obs, reward, _, _, step_info = group.step(actions)
            live = ~done
            returns[live] += reward[live]  # as the one-by-one loop adds float(reward)
            lengths[live] += 1
            final = step_info.get("final_info", {})
            for i in np.flatnonzero(step_info.get("_final_obs", np.zeros(n, bool))).tolist():
                if done[i]:
                    continue
                done[i] = True
                actions[i] = 0.0
                if "log" in final:
                    logs[i] = episode_log(final["log"][i])
                if "_is_success" in final and final["_is_success"][i]:
                    successes[i] = float(final["is_success"][i])
    finally:
        group.close()
    result = EvalResult()
    result.returns = [float(r) for r in returns]
    result.lengths = [int(x) for x in lengths]
    result.seeds = [int(s) for s in seeds]
    result.successes = [s for s in successes if s is not None]
    result.logs = [log for log in logs if log is not None]
    return result
