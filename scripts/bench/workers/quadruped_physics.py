"""The quadruped's simulator against its env, in a process of its own pinned to one core: how
many physics steps MuJoCo takes per second on the states training visits, and how many env
steps per second the task and the vector env give on top of them.

    python -m scripts.bench.workers.quadruped_physics --config configs/quadruped_flat.yaml \\
        --steps 4000

The numbers, each a median over `--rounds`:

    mj_step/s        raw MuJoCo: the states of a rollout replayed (mj_setState, then one
                     mj_step of the same controls), the cost of setting the states subtracted;
                     the physics steps of one policy step (the task's decimation) divide it
                     into the limit in policy steps per second
    mj_step/s fast   the same states under the task's "fast" physics (env.kwargs.physics),
                     where the version of the task has it
    member steps/s   one env (`gymnasium.make` with the config's env.kwargs), stepped alone
    vector steps/s   the config's vector env as the collector sees it (`make_env`: its
                     num_envs, backend, processes and threads, clipping, checks and episode
                     statistics included)

The rollout's actions are Gaussian with the config's initial policy std (model.log_std_init)
on the action scale: the states an untrained policy visits, falls and resets included. Prints
one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from scripts.bench.lib import args as cli_args

MODULE = "scripts.bench.workers.quadruped_physics"


def _actions(steps: int, rows: int, std: float, seed: int):
    import numpy as np

    return np.random.default_rng(seed).normal(0.0, std, (steps, rows, 12)).astype(np.float32)


def member_rate(cfg, actions) -> tuple[float, object, list, int]:
    """Env steps per second of one env alone, its model, the physics states (controls
    included) before each physics step of a second pass, and that pass's policy steps."""
    import mujoco

    from embodied_ppo.vecenv.make import make_one

    env = make_one(cfg)
    env.reset(seed=0)
    inner = env.unwrapped
    model = inner.model
    kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    size = mujoco.mj_stateSize(model, kind)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action[0])
        if terminated or truncated:
            env.reset()
    rate = len(actions) / (time.perf_counter() - start)
    # The states again, recorded after every physics step of a second pass (not timed).
    import numpy as np

    states = []
    step = mujoco.mj_step

    def recording(m, d, nstep=1):
        for _ in range(nstep):
            state = np.empty(size)
            mujoco.mj_getState(m, d, state, kind)
            states.append(state)
            step(m, d)

    mujoco.mj_step = recording
    replayed = actions[: max(1, len(actions) // 4)]
    try:
        env.reset(seed=0)
        for action in replayed:
            _, _, terminated, truncated, _ = env.step(action[0])
            if terminated or truncated:
                env.reset()
    finally:
        mujoco.mj_step = step
    env.close()
    return rate, model, states, len(replayed)


def physics_rate(model, states, repeats: int = 5) -> float:
    """mj_step per second on `states` (the cost of mj_setState subtracted). Each pass is timed
    `repeats` times and the fastest kept: a difference of two single timings goes wrong, even
    below zero, when the process loses its core during the pass that is subtracted."""
    import mujoco

    data = mujoco.MjData(model)
    kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)

    def fastest(step: bool) -> float:
        """The shortest time of a pass over the states (setting each; stepping it if `step`)."""
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for s in states:
                mujoco.mj_setState(model, data, s, kind)
                if step:
                    mujoco.mj_step(model, data)
            times.append(time.perf_counter() - start)
        return min(times)

    return len(states) / (fastest(True) - fastest(False))


def fast_model(cfg):
    """The config's robot under the task's "fast" physics (None where this version of the task
    has none)."""
    import gymnasium as gym

    try:
        from embodied_ppo_envs.quadruped_robot import robot_spec
        from embodied_ppo_envs.quadruped_settings import parse_settings
    except ImportError:
        return None
    registered = gym.spec(cfg.id).kwargs  # the task's own (the terrain of QuadrupedRough)
    s = parse_settings(**{**registered, **cfg.kwargs, "physics": "fast"})
    spec, _ = robot_spec(s.terrain, s.terrain_options, s.kp, s.kd, physics="fast")
    return spec.compile()


def vector_rate(cfg, actions) -> float:
    """Env steps per second of the config's vector env (what the collector sees)."""
    from embodied_ppo.vecenv import make_env

    envs = make_env(cfg, seed=0)
    try:
        envs.reset()
        for action in actions[:10]:
            envs.step(action)
        start = time.perf_counter()
        for action in actions:
            envs.step(action)
        return len(actions) * cfg.num_envs / (time.perf_counter() - start)
    finally:
        envs.close()


def measure(args) -> dict:
    """The three rates of the config, medians over the rounds."""
    import math

    from embodied_ppo.config.loading import load_config

    cfg = load_config(args.config, list(args.overrides))
    std = math.exp(cfg.model.log_std_init)
    single = _actions(args.steps, 1, std, 0)
    vector_steps = max(1, args.steps // cfg.env.num_envs)
    batch = _actions(vector_steps, cfg.env.num_envs, std, 1)
    rates: dict[str, list[float]] = {"mj_step": [], "mj_step_fast": [], "member": [], "vector": []}
    fast = fast_model(cfg.env)
    decimation = None
    for _ in range(args.rounds):
        member, model, states, policy_steps = member_rate(cfg.env, single)
        rates["member"].append(member)
        rates["mj_step"].append(physics_rate(model, states))
        if fast is not None:  # the same states, under the fast physics
            rates["mj_step_fast"].append(physics_rate(fast, states))
        rates["vector"].append(vector_rate(cfg.env, batch))
        decimation = round(len(states) / policy_steps)
    med = {k: statistics.median(v) if v else None for k, v in rates.items()}
    return {
        "config": args.config,
        "overrides": list(args.overrides),
        "num_envs": cfg.env.num_envs,
        "processes": cfg.env.processes,
        "threads": cfg.env.threads,
        "action_std": std,
        "physics_steps_per_policy_step": decimation,
        "mj_step_per_s": med["mj_step"],
        "limit_policy_steps_per_s": med["mj_step"] / decimation,
        "mj_step_fast_per_s": med["mj_step_fast"],
        "member_steps_per_s": med["member"],
        "vector_steps_per_s": med["vector"],
        "rounds": rates,
        "core": args.core,
    }


def build_parser() -> cli_args.Parser:
    """The worker's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--config", default="configs/quadruped_flat.yaml")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    p.add_argument("--steps", type=int, default=4000, help="env steps per rate and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--core", type=int, default=None, help="pin to this core (default: none)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Measure and print one JSON line."""

    def body(args) -> None:
        if args.steps < 100 or args.rounds < 1:
            raise cli_args.BadInput("--steps must be at least 100 and --rounds at least 1")
        if args.core is not None:
            os.sched_setaffinity(0, {args.core})
        print(json.dumps(measure(args)))

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
