"""The environment layer: the Gymnasium backends, seeding, and Gymnasium's env checker."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from conftest import tiny_config
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from support import ROOT
from toy_envs import register

from embodied_ppo.core.errors import ConfigError, TrainingError
from embodied_ppo.vecenv import make_env
from embodied_ppo.vecenv.gym_backend import GymnasiumVecEnv as VecEnv
from embodied_ppo.vecenv.make import make_one
from embodied_ppo.vecenv.preflight import check_env, check_env_id
from embodied_ppo.vecenv.seeding import env_seeds, group_seeds, noise_seed
from embodied_ppo.vecenv.serial import SerialVectorEnv, group_bounds
from embodied_ppo.vecenv.state import TrackedEnv
from embodied_ppo.vecenv.workers import ProcessVectorEnv


def test_unknown_env_id_suggests_close_matches():
    with pytest.raises(
        ConfigError, match=r"unknown environment 'Humanoid-v9'.*did you mean 'Humanoid-v\d'"
    ):
        check_env_id("Humanoid-v9")
    with pytest.raises(ConfigError, match="unknown environment"):
        check_env_id("zzzzzzzz")


def test_space_info_box_and_discrete():
    box = check_env(tiny_config("Pendulum-v1"))
    assert (box.obs_dim, box.action_kind, box.action_dim) == (3, "gaussian", 1)
    assert box.action_low == [-2.0] and box.action_high == [2.0]
    disc = check_env(tiny_config("CartPole-v1"))
    assert (disc.obs_dim, disc.action_kind, disc.action_dim) == (4, "categorical", 2)
    with make_env(tiny_config("Pendulum-v1").env, seed=0) as envs:
        assert envs.info == box  # what the backend reports is what validation saw


def test_unsupported_spaces_and_kwargs_are_config_errors():
    with pytest.raises(ConfigError, match="supported: a flat Box, or a Dict of flat Boxes"):
        check_env(tiny_config("FrozenLake-v1"))
    with pytest.raises(ConfigError, match="env.kwargs"):
        check_env(tiny_config("CartPole-v1", env={"kwargs": {"no_such_arg": 1}}))


@pytest.mark.filterwarnings("ignore:.*WARN:")  # the checker's advice on infinite Box bounds
@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "Humanoid-v5", "counting"]
)
def test_every_member_passes_gymnasiums_env_checker(env_id):
    # A vector env member as the backends build it: the env inside our TrackedEnv wrapper.
    env_id = register() if env_id == "counting" else env_id
    member = TrackedEnv(make_one(tiny_config(env_id).env), index=0)
    gymnasium_check_env(member, skip_render_check=True)
    member.close()


def test_group_and_noise_seeds():
    seeds = group_seeds(0, 8, 4, rollout=0)
    assert seeds[:4] == [seeds[0]] * 4 and seeds[4:] == [seeds[4]] * 4 and seeds[0] != seeds[4]
    assert group_seeds(0, 4, 4, rollout=0, offset=4) == seeds[4:]  # global env numbering
    assert group_seeds(0, 8, 4, rollout=1) != seeds  # fresh states every rollout
    assert noise_seed(0, 3) == noise_seed(0, 3) != noise_seed(0, 4) != noise_seed(1, 4)


def test_env_seeds_depend_on_run_seed_and_index():
    a, b = env_seeds(0, 4), env_seeds(1, 4)
    assert len(set(a)) == 4 and set(a).isdisjoint(b)
    assert env_seeds(0, 2, offset=2) == a[2:]  # env k is the same env whatever the split
    assert env_seeds(0, 4, generation=1) != a


@pytest.mark.parametrize("backend, processes", [("sync", 1), ("sync", 2), ("async", 1)])
def test_vec_env_same_step_autoreset_and_episode_stats(backend, processes):
    cfg = tiny_config(
        "CartPole-v1",
        env={"num_envs": 3, "backend": backend, "processes": processes, "max_episode_steps": 5},
    )
    with VecEnv(cfg.env, seed=0) as envs:
        obs = envs.reset()
        assert obs.shape == (3, 4) and obs.dtype == np.float32
        for _ in range(4):
            res = envs.step(np.zeros(3, dtype=np.int64))
            assert not res.truncated.any()
        res = envs.step(np.zeros(3, dtype=np.int64))
        # Step 5 hits the time limit (unless the pole fell earlier, which it cannot in 5 steps).
        assert res.truncated.all() and not res.terminated.any()
        assert res.episode_lengths == [5, 5, 5] and res.episode_returns == [5.0, 5.0, 5.0]
        # SAME_STEP: obs is already the reset observation; final_obs is the last one of the episode.
        assert not np.allclose(res.final_obs, res.obs)
        assert np.abs(res.obs).max() <= 0.05


def test_vec_env_reset_is_seeded():
    cfg = tiny_config("Pendulum-v1", env={"num_envs": 2})
    with VecEnv(cfg.env, seed=3) as a, VecEnv(cfg.env, seed=3) as b, VecEnv(cfg.env, seed=4) as c:
        oa, ob, oc = a.reset(), b.reset(), c.reset()
    assert np.array_equal(oa, ob) and not np.array_equal(oa, oc)
    assert not np.array_equal(oa[0], oa[1])


def _trajectory(venv, steps: int, seed: int = 0, dtype=np.float64, pause: float = 0.0) -> list:
    """Every array a vector env reports over `steps` random steps (copied); Box actions of
    `dtype`, `pause` seconds between steps."""
    rng = np.random.default_rng(seed)
    space = venv.single_action_space
    out = [venv.reset(seed=[11 * (k + 1) for k in range(venv.num_envs)])[0].copy()]
    for _ in range(steps):
        time.sleep(pause)
        if isinstance(space, gym.spaces.Discrete):
            actions = rng.integers(0, space.n, size=venv.num_envs)
        else:
            actions = rng.uniform(space.low, space.high, (venv.num_envs, *space.shape))
            actions = actions.astype(dtype)
        obs, reward, term, trunc, info = venv.step(actions)
        out += [obs.copy(), reward.copy(), term.copy(), trunc.copy()]
        if "final_obs" in info:
            out += [np.stack([o for o in info["final_obs"] if o is not None])]
    venv.close()
    return out


@pytest.mark.parametrize("env_id, limit", [("CartPole-v1", 40), ("Hopper-v5", 60)])
def test_serial_vector_env_equals_gymnasiums_sync_vector_env(env_id, limit):
    fns = [lambda: gym.make(env_id, max_episode_steps=limit) for _ in range(3)]
    ours = _trajectory(SerialVectorEnv(fns), 150)
    theirs = _trajectory(
        gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), 150
    )
    assert len(ours) == len(theirs) > 4 * 150  # some episodes ended (final_obs reported)
    for a, b in zip(ours, theirs, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_threaded_stepping_gives_the_same_trajectories(threads):
    fns = [lambda: gym.make("Hopper-v5", max_episode_steps=60) for _ in range(5)]
    serial = _trajectory(SerialVectorEnv(fns), 120)
    threaded = _trajectory(SerialVectorEnv(fns, threads=threads), 120)
    assert len(serial) == len(threaded)
    for a, b in zip(serial, threaded, strict=True):
        assert np.array_equal(a, b)


def test_threaded_env_failure_names_the_env():
    cfg = tiny_config("CartPole-v1", env={"num_envs": 4, "threads": 2}).env
    venv = VecEnv(cfg, seed=0)
    venv.reset()

    def broken(action):
        raise RuntimeError("simulator exploded")

    venv.env.envs[3].unwrapped.step = broken
    with pytest.raises(TrainingError, match="environment 3"):
        for _ in range(3):
            venv.step(np.zeros(4, dtype=np.int64))
    venv.close()


def test_group_bounds_split_members_into_contiguous_near_equal_groups():
    assert group_bounds(5, 2) == [range(0, 2), range(2, 5)]
    assert group_bounds(64, 2) == [range(0, 32), range(32, 64)]
    assert group_bounds(3, 5) == [range(0, 1), range(1, 2), range(2, 3)]  # one member each
    assert group_bounds(4, 1) == [range(0, 4)]


@pytest.mark.parametrize(
    "processes, threads, doorbell, dtype",
    [
        (2, 1, True, np.float32),
        (3, 1, True, np.float32),
        (2, 2, True, np.float32),
        (2, 1, False, np.float32),
        (3, 1, False, np.float32),
        # Actions of another dtype than the doorbell's shared array go by message, as given.
        (2, 1, True, np.float64),
    ],
)
def test_envs_split_over_processes_give_the_same_trajectories(processes, threads, doorbell, dtype):
    fns = [lambda: gym.make("Hopper-v5", max_episode_steps=60) for _ in range(5)]
    serial = _trajectory(SerialVectorEnv(fns), 120, dtype=dtype)
    venv = ProcessVectorEnv(fns, processes, threads, doorbell=doorbell)
    assert venv.doorbell is doorbell
    assert len(venv.processes) == processes - 1  # this process steps the first group
    assert all(p.is_alive() for p in venv.processes)
    split = _trajectory(venv, 120, dtype=dtype)
    assert len(serial) == len(split) > 4 * 120  # some episodes ended (final_obs reported)
    for a, b in zip(serial, split, strict=True):
        assert np.array_equal(a, b)
    assert venv.closed and all(p.exitcode == 0 for p in venv.processes)


def test_env_workers_do_not_inherit_the_locks_of_this_process():
    # A worker forked from this process would hold every lock another of its threads held at
    # the fork (torch's, a compile pool's, a logger's), with no thread there to release it
    # (with context="fork" this reads (True, True, True)). Workers come from a forkserver: a
    # lock held here is free there. Their env factories, lambdas, reach them by cloudpickle.
    import toy_envs

    probe = toy_envs.LockProbeEnv
    with toy_envs.HELD:
        venv = ProcessVectorEnv([lambda: probe() for _ in range(3)], 3)
        assert venv.call("lock_held") == (True, False, False)  # this process's member; workers'
    venv.close()


def test_a_script_that_trains_at_import_is_told_to_guard_it(tmp_path):
    # Env workers start by importing the main script (forkserver); one that calls train() at
    # import would train again in every worker: the worker stops with the fix in one line.
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "import embodied_ppo\n"
        "embodied_ppo.train('configs/cartpole.yaml', ['env.processes=2', "
        f"'trainer.total_steps=512', 'trainer.compile=false'], run_dir={str(tmp_path / 'run')!r})\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode != 0
    assert 'call it under `if __name__ == "__main__":`' in out.stderr
    assert "WorkerDied" in out.stderr.splitlines()[-1]


def test_doorbell_steps_reach_workers_past_their_spin_and_wait_past_this_ones(monkeypatch):
    # No spinning at all: every wait, the worker's for a step and this process's for its
    # reply, is the sleeping one (the counter looked at between polls of the pipe). With
    # pauses between steps the workers are asleep when each step is rung.
    from embodied_ppo.vecenv import workers

    monkeypatch.setattr(workers, "WAIT_SPIN_SECONDS", 0.0)
    fns = [lambda: gym.make("CartPole-v1", max_episode_steps=9) for _ in range(4)]
    serial = _trajectory(SerialVectorEnv(fns), 30)
    venv = ProcessVectorEnv(fns, 2, doorbell=True, worker_spin=0.0)
    split = _trajectory(venv, 30, pause=0.003)
    assert len(serial) == len(split)
    for a, b in zip(serial, split, strict=True):
        assert np.array_equal(a, b)


def test_doorbells_only_where_every_thread_has_a_core_on_x86(monkeypatch):
    from embodied_ppo.vecenv import shared, workers

    monkeypatch.setattr(shared.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(shared.platform, "machine", lambda: "x86_64")
    assert shared.can_spin(2, 1) and shared.can_spin(4, 1) and shared.can_spin(2, 2)
    assert not shared.can_spin(5, 1) and not shared.can_spin(3, 2)
    monkeypatch.setattr(shared.platform, "machine", lambda: "aarch64")
    assert not shared.can_spin(2, 1)  # stores may be reordered there: pipes
    monkeypatch.setattr(workers, "can_spin", lambda processes, threads: False)
    venv = ProcessVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)], 2)
    assert not venv.doorbell
    venv.close()


@pytest.mark.parametrize("doorbell", [True, False])
def test_envs_split_over_processes_carry_dict_observations_and_success(doorbell, monkeypatch):
    from toy_envs import register_dict

    from embodied_ppo.vecenv import workers

    monkeypatch.setattr(workers, "can_spin", lambda processes, threads: doorbell)
    env = {"num_envs": 4, "max_episode_steps": 7}
    serial = VecEnv(tiny_config(register_dict(), env=env).env, seed=1)
    split = VecEnv(tiny_config(register_dict(), env={**env, "processes": 2}).env, seed=1)
    assert isinstance(split.env, ProcessVectorEnv) and isinstance(serial.env, SerialVectorEnv)
    assert split.env.doorbell is doorbell
    with serial, split:
        a, b = serial.reset(), split.reset()
        rng = np.random.default_rng(0)
        ended: list[int] = []
        for _ in range(20):
            for k in a:
                assert np.array_equal(a[k], b[k]), k
            actions = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
            ra, rb = serial.step(actions), split.step(actions)
            a, b = ra.obs, rb.obs
            assert np.array_equal(ra.reward, rb.reward)
            assert ra.episode_envs == rb.episode_envs
            assert ra.episode_successes == rb.episode_successes
            for k in a:
                assert np.array_equal(ra.final_obs[k], rb.final_obs[k]), k
            ended += ra.episode_envs
        assert set(ended) == {0, 1, 2, 3}  # episodes ended in both groups


@pytest.mark.parametrize("doorbell", [True, False])
def test_a_process_that_never_closes_its_env_workers_still_exits_and_ends_them(doorbell):
    # Workers ignore SIGTERM (Ctrl-C and SIGTERM are the main process's to handle), which is
    # how multiprocessing would end them at exit: the vector env must end them itself, also
    # while they wait for the next step by doorbell.
    import os
    import subprocess
    import sys

    code = (
        "import gymnasium as gym\n"
        "from embodied_ppo.vecenv.workers import ProcessVectorEnv\n"
        "v = ProcessVectorEnv([lambda: gym.make('CartPole-v1') for _ in range(4)], 3, "
        f"doorbell={doorbell})\n"
        "v.reset(seed=[1, 2, 3, 4])\n"
        "v.step(v.action_space.sample())\n"
        "print(*(p.pid for p in v.processes))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    for pid in pids:  # gone, or a zombie (dead, not yet reaped by its vanished parent)
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:
                alive = stat.read().split(")")[1].split()[0] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, pid


@pytest.mark.parametrize(
    "backend, processes, doorbell",
    [("sync", 1, None), ("sync", 2, True), ("sync", 2, False), ("async", 1, None)],
)
def test_episode_logs_of_ended_episodes_reach_the_step_result(
    backend, processes, doorbell, monkeypatch
):
    from toy_envs import register_log

    from embodied_ppo.vecenv import workers

    if doorbell is not None:
        monkeypatch.setattr(workers, "can_spin", lambda processes, threads: doorbell)
    # Envs 0-1 fall at step 3, envs 2-3 (the second process's group) are cut at the limit 5:
    # the log of an episode's last step is reported, even when a TimeLimit wrapper cut it.
    env = {"num_envs": 4, "backend": backend, "processes": processes, "kwargs": {"fall_at": 3}}
    venv = VecEnv(tiny_config(register_log(), env=env).env, seed=0)
    with venv:
        venv.reset()
        seen = {}
        for t in range(1, 6):
            res = venv.step(np.zeros((4, 1), np.float32))
            if t < 3:
                assert res.episode_logs is None or res.episode_logs == []
            for env_index, log in zip(res.episode_envs, res.episode_logs or [], strict=True):
                seen.setdefault(env_index, log)
        for i in range(4):
            assert seen[i] == {"rewards/alive": 3.0, "metrics/fall_rate": 1.0, "steps": 3.0}


def test_episode_logs_of_truncated_episodes_are_their_last_steps():
    from toy_envs import register_log

    venv = VecEnv(tiny_config(register_log(), env={"num_envs": 2}).env, seed=0)
    with venv:
        venv.reset()
        for _ in range(4):
            assert not venv.step(np.zeros((2, 1), np.float32)).episode_envs
        res = venv.step(np.zeros((2, 1), np.float32))
        assert res.episode_envs == [0, 1]
        assert (
            res.episode_logs == [{"rewards/alive": 5.0, "metrics/fall_rate": 0.0, "steps": 5.0}] * 2
        )


def test_a_tasks_refusal_of_an_argument_names_its_key_in_env_kwargs():
    from toy_envs import register_strict

    env_id = register_strict()
    check_env(tiny_config(env_id, env={"kwargs": {"gains": {"kp": 1.0}}}))
    for gains, message in [
        ({"kq": 1.0}, "env.kwargs.gains.kq: unknown gain 'kq'; allowed: kp, kd"),
        ({"kd": -1.0}, "env.kwargs.gains.kd: got -1.0, expected a number >= 0"),
    ]:
        with pytest.raises(ConfigError) as info:
            check_env(tiny_config(env_id, env={"kwargs": {"gains": gains}}))
        assert str(info.value) == message
