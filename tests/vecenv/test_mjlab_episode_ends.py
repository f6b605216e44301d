"""Where the mjlab backend resets ended episodes (vecenv/mjlab_resets.py): a fall inside mjlab's
step, as mjlab's own auto-reset (rsl_rl's loop) does it, with one forward pass; a time-out after
the step, once its final observation is read; and a task with `is_finite_horizon` ends its
episodes by termination. CPU, a few Go1s, a few dozen steps; needs the mjlab extra."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from embodied_ppo.config.building import from_dict

TASK = "Mjlab-Velocity-Flat-Unitree-Go1"
N = 6


@pytest.fixture(scope="module")
def mjlab():
    return pytest.importorskip("mjlab")


def env_config(**env):
    data = {"id": TASK, "backend": "mjlab", "num_envs": N, **env}
    return from_dict({"env": data, "model": {"actor_obs_keys": ["actor"]}}).env


def counting(env, calls: Counter) -> None:
    """Count mjlab's forward passes, observation computes and resets of `env`."""
    for owner, name, key in (
        (env.sim, "forward", "forward"),
        (env.observation_manager, "compute", "observations"),
        (env, "reset", "reset"),
    ):
        inner = getattr(owner, name)

        def wrapped(*args, _inner=inner, _key=key, **kwargs):
            calls[_key] += 1
            return _inner(*args, **kwargs)

        setattr(owner, name, wrapped)


def actions(steps: int, scale: float) -> list[torch.Tensor]:
    """Random joint targets, the same in every run; large ones make Go1s fall."""
    gen = torch.Generator().manual_seed(5)
    return [torch.randn(N, 12, generator=gen) * scale for _ in range(steps)]


def _copy(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def test_falls_reset_inside_mjlab_step_as_its_own_auto_reset(mjlab):
    from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv
    from embodied_ppo.vecenv.mjlab_tasks import build, task_config

    # Episodes far longer than the run: every end is a fall.
    cfg = env_config(max_episode_steps=1000)
    steps = actions(40, 3.0)
    ours = MjlabVecEnv(cfg, seed=0)
    # The reference: mjlab's env with its own auto-reset, stepped as rsl_rl's loop steps it.
    reference_cfg = task_config(cfg, N, ours.seed)
    reference_cfg.auto_reset = True
    reference = build(reference_cfg, torch.device("cpu"))
    calls: Counter = Counter()
    counting(ours.env, calls)
    got = [ours.reset()]
    results = [ours.step(a) for a in steps]
    got += [r.obs for r in results]
    expected = [reference.reset(seed=ours.seed)[0]]
    # mjlab hands back its own buffers, which the next step writes: copies.
    reference_steps = [[_copy(x) for x in reference.step(a)] for a in steps]
    expected += [out[0] for out in reference_steps]
    fell = sum(int(r.terminated.sum()) for r in results)
    assert fell >= 3, "the test needs falls"
    for t, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        for key in mine:
            assert torch.equal(mine[key], theirs[key]), (t, key)
    for r, (_, reward, terminated, truncated, _) in zip(results, reference_steps, strict=True):
        assert torch.equal(r.reward, reward) and torch.equal(r.terminated, terminated)
        assert not truncated.any() and not r.truncated.any()
        assert r.final_ids is None and not r.final_obs
    # One forward pass and one observation compute a step (and the first reset's); no reset
    # after a step.
    assert calls == Counter(forward=1 + len(steps), observations=1 + len(steps), reset=1)
    ours.close()
    reference.close()


def test_time_outs_pay_the_second_pass_and_keep_their_final_observation(mjlab):
    from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv

    # Episodes of 7 steps and zero actions: the Go1s stand, every end is a time-out.
    cfg = env_config(max_episode_steps=7)
    envs = MjlabVecEnv(cfg, seed=0)
    envs.reset()
    calls: Counter = Counter()
    counting(envs.env, calls)
    seen = []
    inner = envs.env.step

    def recorded(action):
        out = inner(action)
        seen.append({k: v.clone() for k, v in out[0].items()})
        return out

    envs.env.step = recorded
    results = [envs.step(torch.zeros(N, 12)) for _ in range(15)]
    ends = [t for t, r in enumerate(results) if r.ended]
    assert ends == [6, 13]  # the 7th and 14th steps: time limits of exactly 7 steps
    for t, r in enumerate(results):
        assert not r.terminated.any()
        if t not in ends:
            assert r.final_ids is None
            continue
        assert torch.equal(r.final_ids, torch.arange(N)) and r.truncated.all()
        for key, final in r.final_obs.items():
            # The final observation is the step's, before the reset; the one returned is the
            # reset's.
            assert torch.equal(final, seen[t][key])
            assert not torch.equal(r.obs[key], final)
        assert r.log["Episode_Termination/time_out"] == 1.0  # the share of the ended episodes
    assert calls == Counter(forward=15 + 2, observations=15 + 2, reset=2)
    envs.close()


def test_a_finite_horizon_ends_its_episodes_by_termination(mjlab):
    from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv

    cfg = env_config(max_episode_steps=5, kwargs={"is_finite_horizon": True})
    envs = MjlabVecEnv(cfg, seed=0)
    envs.reset()
    calls: Counter = Counter()
    counting(envs.env, calls)
    results = [envs.step(torch.zeros(N, 12)) for _ in range(5)]
    last = results[-1]
    assert last.ended == N and last.terminated.all() and not last.truncated.any()
    assert last.final_ids is None  # nothing to bootstrap: nothing valued
    assert all(not r.ended for r in results[:-1])
    # The time limit's resets run inside mjlab's step: no second pass.
    assert calls == Counter(forward=5, observations=5)
    envs.close()


def test_the_reset_benchmark_compares_the_three_designs(mjlab):
    import subprocess
    import sys

    from support import ROOT

    # Episodes of 3 steps and small actions: time-outs at steps 3 and 6, no falls; ours and the
    # design before pay a second pass on those two steps, mjlab's own loop none.
    args = [
        sys.executable, "-m", "scripts.bench.mjlab_resets", "configs/mjlab_go1_flat.yaml",
        "env.num_envs=4", "algorithm.minibatch_size=32", "env.max_episode_steps=3",
        "--steps", "6", "--action-scale", "0.05",
    ]  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and "design" not in line}  # fmt: skip
    assert set(rows) == {"ours", "after-step", "mjlab"}
    passes = {name: float(cells[2]) for name, cells in rows.items()}
    assert passes == {"ours": 1.333, "after-step": 1.333, "mjlab": 1.0}
    assert all(int(cells[4]) == 8 for cells in rows.values())  # 4 envs, twice
