"""env.backend envpool: the same semantics as the gymnasium backend (Rule 1), on tasks both provide.

Hopper-v5 with `reset_noise_scale: 0` starts from the same state in both backends and both run
the same MuJoCo model, so with the same actions the two backends must agree step for step:
observations, rewards, which episodes end and how, the final observations and the resets.
"""

from __future__ import annotations

import builtins
import json
import threading

import numpy as np
import pytest
from conftest import tiny_config

from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import ConfigError, TrainingError
from embodied_ppo.vecenv import make_env
from embodied_ppo.vecenv.gym_backend import GymnasiumVecEnv as VecEnv
from embodied_ppo.vecenv.preflight import check_env


@pytest.fixture
def envpool():
    return pytest.importorskip("envpool")


def space_info(env_cfg):
    """What validation finds for an env block (the rest of the config at its defaults)."""
    return check_env(Config(env=env_cfg))


def hopper(backend: str, num_envs: int = 2, max_episode_steps: int | None = None, **kwargs):
    env = {
        "num_envs": num_envs,
        "backend": backend,
        "kwargs": {"reset_noise_scale": 0.0, **kwargs},
        "max_episode_steps": max_episode_steps,
    }
    return tiny_config("Hopper-v5", env=env).env


def run(cfg, actions):
    """Reset, then step with each action batch; returns the reset obs and every StepResult."""
    with make_env(cfg, seed=0) as envs:
        first = envs.reset()
        return first, [envs.step(a) for a in actions]


def test_missing_envpool_is_a_one_line_config_error(monkeypatch):
    real_import = builtins.__import__

    def no_envpool(name, *args, **kwargs):
        if name == "envpool" or name.startswith("envpool."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_envpool)
    cfg = tiny_config("CartPole-v1", env={"backend": "envpool"}).env
    with pytest.raises(ConfigError) as err:
        space_info(cfg)
    assert str(err.value) == (
        "env.backend: 'envpool' needs the envpool package: pip install 'embodied-ppo[envpool]'"
    )


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"id": "CartPole-v9"},
            r"envpool does not provide 'CartPole-v9'; did you mean 'CartPole-v1'.*sync or async",
        ),
        ({"id": "HumanoidRun-v1"}, "Gymnasium does not provide"),
        (
            {"kwargs": {"ctrl_cost_weigth": 0.1}},
            r"env.kwargs.ctrl_cost_weigth: .*did you mean 'ctrl_cost_weight'",
        ),
        (
            {"kwargs": {"healthy_z_rang": [0.7, 2.0]}},
            r"env.kwargs.healthy_z_rang: envpool's Hopper-v5 has no such argument; "
            "did you mean 'healthy_z_range'",
        ),
        ({"kwargs": {"frame_stack": 2}}, "evaluation runs the Gymnasium task"),
        ({"kwargs": {"num_threads": 4}}, "env.kwargs.num_threads: an envpool pool setting"),
        ({"kwargs": {"max_episode_steps": 5}}, "set env.max_episode_steps instead"),
        ({"kwargs": {"xml_file": "hopper.xml"}}, "env.kwargs.xml_file: not supported"),
        ({"kwargs": {"frame_skip": 2.5}}, r"env.kwargs.frame_skip: got 2.5, expected a int"),
        # envpool takes it, Gymnasium (which evaluation runs) does not.
        ({"kwargs": {"healthy_z_min": 0.5}}, "evaluation runs the Gymnasium task"),
    ],
)
def test_config_errors_name_the_key(envpool, env, message):
    cfg = tiny_config("Hopper-v5", env={"backend": "envpool", **env}).env
    with pytest.raises(ConfigError, match=message) as err:
        space_info(cfg)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Hopper-v5"])
def test_spaces_shapes_and_dtypes_match_gymnasium(envpool, env_id):
    cfg = tiny_config(env_id, env={"num_envs": 3, "backend": "envpool"}).env
    sync = tiny_config(env_id, env={"num_envs": 3}).env
    assert space_info(cfg) == space_info(sync)
    with make_env(cfg, seed=0) as envs, VecEnv(sync, seed=0) as ref:
        assert type(envs).__name__ == "EnvPoolVecEnv" and envs.num_envs == 3
        obs, ref_obs = envs.reset(), ref.reset()
        assert obs.shape == ref_obs.shape and obs.dtype == np.float32
        actions = envs.sample_actions()
        assert actions.shape == ref.sample_actions().shape
        res, ref_res = envs.step(actions), ref.step(actions)
        for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
            a, b = getattr(res, name), getattr(ref_res, name)
            assert a.shape == b.shape and a.dtype == b.dtype, name


def test_truncation_same_step_final_obs_matches_gymnasium(envpool):
    # Small actions: Hopper stays up, so every episode ends by the 5-step limit.
    actions = np.random.default_rng(0).uniform(-0.1, 0.1, (12, 2, 3)).astype(np.float32)
    first, steps = run(hopper("envpool", max_episode_steps=5), actions)
    ref_first, ref_steps = run(hopper("sync", max_episode_steps=5), actions)
    np.testing.assert_allclose(first, ref_first, atol=1e-6)
    for t, (res, ref) in enumerate(zip(steps, ref_steps), start=1):
        at_limit = t % 5 == 0
        assert res.truncated.tolist() == [at_limit] * 2, t
        assert not res.terminated.any() and not ref.terminated.any()
        assert res.truncated.tolist() == ref.truncated.tolist()
        np.testing.assert_allclose(res.obs, ref.obs, atol=1e-5)
        np.testing.assert_allclose(res.reward, ref.reward, atol=1e-5)
        if at_limit:
            # final_obs is the successor of the previous step's obs (the gymnasium backend's
            # final observation), while obs is already the next episode's reset state.
            np.testing.assert_allclose(res.final_obs, ref.final_obs, atol=1e-5)
            np.testing.assert_allclose(res.obs, first, atol=1e-6)
            assert np.abs(res.final_obs - res.obs).max(axis=1).min() > 1e-3
            assert res.episode_lengths == [5, 5] and res.episode_envs == [0, 1]
            np.testing.assert_allclose(res.episode_returns, ref.episode_returns, rtol=1e-5)
        else:
            assert res.episode_returns == [] and res.episode_envs == []


def _falls_at(actions, **kwargs) -> int:
    """The first step at which env 0 of the gymnasium backend terminates."""
    _, steps = run(hopper("sync", **kwargs), actions)
    return next(t for t, res in enumerate(steps, start=1) if res.terminated[0])


def test_termination_and_termination_at_the_time_limit(envpool):
    actions = np.tile(np.array([1.0, -1.0, 1.0], dtype=np.float32), (60, 2, 1))
    actions[:, 1] *= 0.05  # env 1 keeps standing
    fall = _falls_at(actions)
    _, steps = run(hopper("envpool"), actions[:fall])
    _, ref_steps = run(hopper("sync"), actions[:fall])
    res, ref = steps[-1], ref_steps[-1]
    assert res.terminated.tolist() == [True, False] and not res.truncated.any()
    assert not any(r.terminated.any() for r in steps[:-1])
    np.testing.assert_allclose(res.final_obs[0], ref.final_obs[0], atol=1e-4)
    assert res.episode_envs == [0] and res.episode_lengths == [fall]
    # Terminating on the last step of the time limit is both, as with gymnasium's TimeLimit (so
    # the collector bootstraps it with 0, not with V(final_obs)).
    _, steps = run(hopper("envpool", max_episode_steps=fall), actions[:fall])
    _, ref_steps = run(hopper("sync", max_episode_steps=fall), actions[:fall])
    for res in (steps[-1], ref_steps[-1]):
        assert res.terminated.tolist() == [True, False] and res.truncated.tolist() == [True, True]


def test_gymnasium_range_kwargs_map_to_envpool_bounds(envpool):
    # Gymnasium's healthy_angle_range is envpool's healthy_angle_min / healthy_angle_max.
    actions = np.tile(np.array([1.0, -1.0, 1.0], dtype=np.float32), (60, 2, 1))
    strict = {"healthy_angle_range": [-0.05, 0.05]}
    fall = _falls_at(actions, **strict)
    assert fall < _falls_at(actions)
    _, steps = run(hopper("envpool", **strict), actions[:fall])
    assert steps[-1].terminated[0] and not any(r.terminated[0] for r in steps[:-1])
    # Hopper's healthy_z_range has no upper bound in envpool: only .inf is accepted there.
    space_info(hopper("envpool", healthy_z_range=[0.5, float("inf")]))
    with pytest.raises(ConfigError, match="no healthy_z_max, so that bound must be .inf"):
        space_info(hopper("envpool", healthy_z_range=[0.5, 2.0]))


def test_per_env_seeds(envpool):
    cfg = tiny_config("Pendulum-v1", env={"num_envs": 4, "backend": "envpool"}).env
    with make_env(cfg, seed=3) as a, make_env(cfg, seed=3) as b, make_env(cfg, seed=4) as c:
        oa, ob, oc = a.reset(), b.reset(), c.reset()
        assert np.array_equal(oa, ob) and not np.array_equal(oa, oc)
        assert len({tuple(row) for row in oa}) == 4
        a.step(a.sample_actions())
        assert np.array_equal(a.reset(), oa)  # reset() starts again from the run's seeds
        shared = [7, 7, 9, 9]  # episodic group sampling: envs of a group share a seed
        grouped = a.reset(shared)
        assert np.array_equal(grouped[0], grouped[1]) and np.array_equal(grouped[2], grouped[3])
        assert not np.array_equal(grouped[0], grouped[2])
        assert a.get_state()["members"] is None


def test_non_finite_observation_names_the_env(envpool):
    cfg = tiny_config("Pendulum-v1", env={"num_envs": 3, "backend": "envpool"}).env
    with make_env(cfg, seed=0) as envs:
        envs.reset()
        step = envs._pool.step

        def broken(action):
            obs, *rest = step(action)
            obs = np.array(obs)
            obs[2, 0] = np.nan
            return (obs, *rest)

        envs._pool.step = broken
        with pytest.raises(TrainingError, match="environment 2 returned a non-finite observation"):
            envs.step(envs.sample_actions())


def test_pool_rebuilds_leave_no_threads_behind(envpool):
    cfg = tiny_config("Pendulum-v1", env={"num_envs": 2, "backend": "envpool"}).env

    def os_threads() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))

    with make_env(cfg, seed=0) as envs:
        envs.reset()
        before = os_threads()
        for k in range(20):
            envs.reset([k, k + 1])
        # Threads left over from earlier tests may still exit meanwhile; a leak would add
        # envpool's worker threads with every rebuild.
        assert os_threads() <= before and threading.active_count() >= 1


def test_training_run_completes(envpool, tmp_path):
    from embodied_ppo.runner.trainer import Trainer

    cfg = tiny_config("CartPole-v1", env={"backend": "envpool"}, trainer={"total_steps": 96})
    trainer = Trainer(cfg, tmp_path)
    trainer.train()
    assert trainer.global_step == 96
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["global_step"] == 96
