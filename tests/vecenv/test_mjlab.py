"""env.backend mjlab: mjlab's batched MuJoCo Warp tasks on the training device (CPU here, a few
envs, a few steps). The test of the missing extra runs everywhere; the others need the mjlab
extra (pip install -e ".[mjlab]") and are skipped without it."""

from __future__ import annotations

import builtins
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from support import ROOT

from embodied_ppo.app.cli import main
from embodied_ppo.config.building import from_dict
from embodied_ppo.core.errors import ConfigError

TASK = "Mjlab-Velocity-Flat-Unitree-Go1"


def mjlab_config(**blocks: dict):
    """A tiny Go1 run on the CPU: 4 envs, episodes of 12 steps, a small network."""
    data: dict = {
        "env": {"id": TASK, "backend": "mjlab", "num_envs": 4, "max_episode_steps": 12},
        "model": {
            "hidden_sizes": [32],
            "share_backbone": False,
            "actor_obs_keys": ["actor"],
            "critic_obs_keys": ["critic"],
        },
        "algorithm": {"rollout_steps": 8, "update_epochs": 2, "minibatch_size": 16},
        "trainer": {"total_steps": 96, "seed": 0, "device": "cpu", "compile": False},
    }
    for block, values in blocks.items():
        data.setdefault(block, {}).update(values)
    return from_dict(data)


def test_missing_extra_is_a_one_line_error_naming_it(monkeypatch, tmp_path, capsys):
    real_import = builtins.__import__

    def no_mjlab(name, *args, **kwargs):
        if name.split(".")[0] in ("mjlab", "warp", "mujoco_warp"):
            raise ImportError(name, name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mjlab)
    monkeypatch.setattr("importlib.import_module", lambda name, *a: no_mjlab(name))
    config = tmp_path / "go1.yaml"
    config.write_text(
        f"env: {{id: {TASK}, backend: mjlab}}\nmodel: {{actor_obs_keys: [actor]}}\n"
        f"trainer: {{run_dir: {tmp_path / 'run'}, device: cpu}}\n"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(config)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    pin = f"torch=={torch.__version__}"  # the installed torch, which pip must keep
    assert err == [
        "embodied-ppo: error: env.backend: 'mjlab' needs the mjlab package: "
        f'pip install -e ".[mjlab]" {pin} in a clone '
        f"(pip install 'embodied-ppo[mjlab]' {pin} otherwise); naming the installed torch keeps "
        "pip from replacing it"
    ]
    assert not (tmp_path / "run").exists()


def test_config_checks_of_the_backend():
    with pytest.raises(ConfigError, match=r"model.actor_obs_keys: required with backend 'mjlab'"):
        mjlab_config(model={"actor_obs_keys": None})
    with pytest.raises(ConfigError, match=r"algorithm.adv_type: got 'grpo' with backend 'mjlab'"):
        mjlab_config(algorithm={"adv_type": "grpo", "group_size": 2})
    with pytest.raises(ConfigError, match=r"trainer.inference: got 'host'"):
        mjlab_config(trainer={"inference": "host"})
    assert mjlab_config(env={"random_episode_start": True}).env.random_episode_start
    with pytest.raises(ConfigError) as err:
        from_dict({"env": {"id": "CartPole-v1", "random_episode_start": True}})
    assert str(err.value).startswith(
        "env.random_episode_start: got true with backend 'sync'; it applies to the mjlab backend"
    ) and "\n" not in str(err.value)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_episode_starts_are_spread_on_the_envs_device(device):
    # The draw alone, on a stand-in for mjlab's env (no mjlab needed): on the device of its
    # episode counters, uniform below the time limit, the same for the same seed.
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from types import SimpleNamespace

    from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv

    vec = object.__new__(MjlabVecEnv)
    vec.env = SimpleNamespace(
        episode_length_buf=torch.zeros(4096, dtype=torch.long, device=device),
        max_episode_length=1000,
    )
    buf = vec.env.episode_length_buf
    vec._spread_episode_starts(7)
    first = buf.clone()
    assert first.device.type == device and first.dtype == torch.long
    assert first.min() >= 0 and first.max() < 1000 and len(first.unique()) > 900
    assert 0.45 < first.float().mean().item() / 1000 < 0.55
    vec._spread_episode_starts(7)
    assert torch.equal(buf, first) and vec.env.episode_length_buf is buf  # written in place
    # not the stream a generator seeded with the reset's seed gives (mjlab seeds torch with it)
    plain = torch.Generator(device=device).manual_seed(7)
    same_seed = torch.randint(0, 1000, buf.shape, generator=plain, device=device, dtype=buf.dtype)
    assert (same_seed == first).float().mean().item() < 0.01
    vec._spread_episode_starts(8)
    assert not torch.equal(buf, first)


# ------------------------------------------------------------------ with mjlab installed
@pytest.fixture(scope="module")
def mjlab():
    return pytest.importorskip("mjlab")


def _envs(cfg, seed=0):
    from embodied_ppo.vecenv import make_env

    return make_env(cfg.env, seed, device=torch.device("cpu"))


def test_protocol_spaces_and_device_tensors(mjlab):
    from embodied_ppo.vecenv.preflight import check_env

    cfg = mjlab_config()
    info = check_env(cfg)
    with _envs(cfg) as envs:
        assert envs.info == info and envs.on_device and envs.num_envs == 4
        assert {k: v.shape for k, v in info.obs_keys.items()} == {
            "actor": (48,),
            "critic": (72,),
        }
        assert info.action_kind == "gaussian" and info.action_dim == 12
        obs = envs.reset()
        assert set(obs) == {"actor", "critic"}
        assert all(v.shape == (4, info.obs_keys[k].shape[0]) for k, v in obs.items())
        res = envs.step(torch.zeros(4, 12))
        for tensor in (res.reward, res.terminated, res.truncated, *res.obs.values()):
            assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
        assert res.reward.dtype == torch.float32 and res.terminated.dtype == torch.bool
        # Nothing ended, nothing to value; finiteness is checked once per rollout.
        assert res.ended == 0 and res.final_ids is None and not res.final_obs
        assert res.finite is None


def test_actor_and_critic_read_their_groups(mjlab):
    from embodied_ppo.runner.build import policy_spec

    cfg = mjlab_config()
    with _envs(cfg) as envs:
        spec = policy_spec(cfg, envs.info)
    assert spec.dict_obs.actor_keys == ("actor",) and spec.dict_obs.critic_keys == ("critic",)


@pytest.mark.parametrize(
    "blocks, message",
    [
        ({"env": {"id": "Mjlab-Velocity-Flat-Unitree-Go2"}}, r"env.id: unknown mjlab task "
         r"'Mjlab-Velocity-Flat-Unitree-Go2'; did you mean 'Mjlab-Velocity-Flat-Unitree-Go1'"),
        ({"model": {"critic_obs_keys": None, "share_backbone": False}},
         r"model.critic_obs_keys: Mjlab-Velocity-Flat-Unitree-Go1's observation group 'critic' "
         r"is read by neither"),
        ({"model": {"critic_obs_keys": ["privileged"]}},
         r"model.critic_obs_keys\[0\]: got 'privileged'"),
        ({"env": {"kwargs": {"episode_length": 5}}},
         r"env.kwargs.episode_length: not a field .*did you mean 'episode_length_s'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_key(mjlab, blocks, message):
    from embodied_ppo.runner.preflight import check_run

    with pytest.raises(ConfigError, match=message) as err:
        check_run(mjlab_config(**blocks))
    assert "\n" not in str(err.value)


def test_too_many_envs_for_the_device_memory(mjlab, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("embodied_ppo.vecenv.mjlab_tasks.free_memory", lambda device: 2**30)
    config = tmp_path / "go1.yaml"
    config.write_text(
        f"env: {{id: {TASK}, backend: mjlab, num_envs: 10000000}}\n"
        "model: {actor_obs_keys: [actor], critic_obs_keys: [critic], share_backbone: false}\n"
        f"trainer: {{run_dir: {tmp_path / 'run'}, device: cpu}}\n"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(config)])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "embodied-ppo: error: env.num_envs: 10,000,000 envs of Mjlab-Velocity-Flat-Unitree"
    )
    assert "1.0 GiB is free; use at most about" in line
    assert not (tmp_path / "run").exists()


class _Recording:
    """Records mjlab's own termination terms at every step, before the backend resets."""

    def __init__(self, env):
        self.env, self.step, self.flags = env, env.step, []
        env.step = self

    def __call__(self, action):
        out = self.step(action)
        manager = self.env.termination_manager
        fell = manager.get_term("fell_over").clone()
        timed_out = manager.get_term("time_out").clone()
        self.flags.append((fell, timed_out, {k: v.clone() for k, v in out[0].items()}))
        return out


def test_time_outs_bootstrap_from_the_final_observation_and_falls_do_not(mjlab):
    from embodied_ppo.algo.reward_scaling import RewardScaler
    from embodied_ppo.model.actor_critic import ActorCritic
    from embodied_ppo.runner.build import make_buffer, policy_spec
    from embodied_ppo.runner.collector import CollectorSettings
    from embodied_ppo.runner.device_collector import DeviceCollector

    # Large random actions make some Go1s fall; the others time out after 20 steps.
    cfg = mjlab_config(
        env={"normalize_obs": False, "normalize_reward": False, "max_episode_steps": 20},
        model={"log_std_init": 2.0},
        algorithm={"rollout_steps": 48, "minibatch_size": 64},
    )
    torch.manual_seed(0)
    with _envs(cfg) as envs:
        recording = _Recording(envs.env)
        policy = ActorCritic(policy_spec(cfg, envs.info))
        buf = make_buffer(cfg, envs.info, policy, torch.device("cpu"))
        scaler = RewardScaler(4, 0.99, False, None)
        collector = DeviceCollector(
            envs, policy, buf, scaler, CollectorSettings(device=torch.device("cpu"))
        )
        collector.start()
        stats = collector.collect(noise_seed=3)
    fell = torch.stack([f for f, _, _ in recording.flags])
    timed_out = torch.stack([t for _, t, _ in recording.flags])
    assert fell.any() and timed_out.any(), "the test needs both kinds of episode end"
    assert torch.equal(buf.terminated.bool(), fell)
    assert torch.equal(buf.truncated, timed_out & ~fell)
    for t, (_, timeout, final) in enumerate(recording.flags):
        rows = timeout & ~fell[t]
        if rows.any():
            with torch.no_grad():
                expected = policy.value({k: v[rows] for k, v in final.items()})
            torch.testing.assert_close(buf.next_values[t][rows], expected)
            # the final observation, not the reset one the policy acts on next
            assert not torch.allclose(final["critic"][rows], buf.obs["critic"][t + 1][rows])
    # A fall's next value never enters the target: GAE multiplies it by 1 - terminated.
    assert stats.episode_lengths and all(n <= 20 for n in stats.episode_lengths)
    assert len(stats.episode_returns) == int(buf.ends.sum())
    log = stats.episode_logs[0]
    assert "Episode_Reward/track_linear_velocity" in log and all(
        math.isfinite(v) for v in log.values()
    )
    # mjlab counts the ended envs each termination term ended; the log holds their share of the
    # rollout's ended episodes (what a fall column compares with rsl_rl).
    ends = float(buf.ends.sum())
    assert log["Episode_Termination/fell_over"] == pytest.approx(float(fell.sum()) / ends)
    assert log["Episode_Termination/time_out"] == pytest.approx(float(timed_out.sum()) / ends)


@pytest.mark.parametrize("spread", [False, True], ids=["together", "spread"])
def test_random_episode_start_spreads_the_first_time_limits(mjlab, spread):
    # Zero actions hold the Go1s' default pose: no falls, every first episode ends at its time
    # limit, 12 steps after the reset, or earlier by the random start it was given.
    cfg = mjlab_config(env={"num_envs": 8, "random_episode_start": spread})
    with _envs(cfg) as envs:
        envs.reset()
        start = envs.env.episode_length_buf.clone()
        first_end = torch.full((8,), -1)
        for t in range(1, 13):
            res = envs.step(torch.zeros(8, 12))
            assert not res.terminated.any()
            newly = res.truncated.cpu() & (first_end < 0)
            first_end[newly] = t
        envs.reset()
        again = envs.env.episode_length_buf.clone()
    assert (first_end > 0).all(), "every env's first episode ends by the time limit"
    if not spread:
        assert not start.any() and (first_end == 12).all()
        return
    # Uniform in [0, 12): distinct steps; each first episode is the limit less its start.
    assert start.min() >= 0 and start.max() < 12 and len(set(start.tolist())) > 1
    assert torch.equal(first_end, 12 - start.cpu())
    assert torch.equal(again, start), "the same seed spreads them the same way"


def _train(run_dir, total_steps, resume=False, **blocks):
    from embodied_ppo.app import api

    if resume:
        return api.train(resume=run_dir, overrides=[f"trainer.total_steps={total_steps}"])
    cfg = mjlab_config(trainer={"total_steps": total_steps, "checkpoint_interval": 1}, **blocks)
    return api.train(cfg, run_dir=run_dir)


def test_training_and_exact_resume(mjlab, tmp_path):
    # Episodes of 10 steps: after the warm-up's 8, some end in the last of the 3 iterations.
    short = {"max_episode_steps": 10}
    straight = _train(tmp_path / "straight", 96, env=short)
    _train(tmp_path / "split", 64, env=short)
    resumed = _train(tmp_path / "split", 96, resume=True)
    a = torch.load(straight.checkpoint, weights_only=True)
    b = torch.load(resumed.checkpoint, weights_only=True)
    assert a["global_step"] == b["global_step"] == 96
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert torch.equal(a["collector_obs"]["actor"], b["collector_obs"]["actor"])
    assert "charts/episodic_return" in straight.metrics
    assert any(k.startswith("Episode_Reward/") for k in straight.metrics)


def test_export_equals_eager_on_the_actor_group(mjlab, tmp_path):
    from embodied_ppo.app.deploy import load_policy
    from embodied_ppo.app.export import export_policy

    run = _train(tmp_path / "run", 32)
    eager = load_policy(run.checkpoint)
    obs = {"actor": torch.randn(5, 48)}
    path, meta_path, _ = export_policy(run.checkpoint, "torchscript", tmp_path / "policy.pt")
    scripted = torch.jit.load(str(path))
    torch.testing.assert_close(scripted(obs), eager(obs), atol=1e-5, rtol=0)
    meta = json.loads(meta_path.read_text())
    assert json.dumps(meta).count("critic") == 0  # the deployed policy takes the actor group


def test_eval_runs_episodes_of_the_task(mjlab, tmp_path):
    from embodied_ppo.app.evaluate import evaluate_command

    run = _train(tmp_path / "run", 32)
    summary = evaluate_command(str(run.checkpoint), episodes=2, json_path=str(tmp_path / "e.json"))
    assert summary["lengths"] and all(n <= 12 for n in summary["lengths"])
    assert "Episode_Reward/track_linear_velocity" in summary["log"]


@pytest.mark.parametrize("mode", [["--physics-only"], []], ids=["physics-only", "split"])
def test_profile_script_runs_past_episode_ends(mjlab, mode):
    # Episodes of 5 steps: both modes step past many ends, which the envs must reset.
    tiny = [
        "trainer.device=cpu", "trainer.compile=false", "env.num_envs=4",
        "env.max_episode_steps=5", "model.hidden_sizes=[32]", "algorithm.rollout_steps=8",
        "algorithm.minibatch_size=16", "--iterations", "1",
    ]  # fmt: skip
    args = [sys.executable, "-m", "scripts.bench.profile_mjlab", "configs/mjlab_go1_flat.yaml",
            *tiny, *mode]  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = "physics alone" if mode else "whole iteration"
    assert expected in done.stdout


def test_learning_comparison_script_trains_both_sides_and_compares_them(mjlab, tmp_path):
    # scripts/bench/mjlab_learning.sh as on a GPU, shrunk to one iteration of 4 envs on the CPU: ours
    # and mjlab's own rsl_rl training, then the report reads both.
    env = dict(
        os.environ, PYTHON=sys.executable, ENVS="4", ITERATIONS="1",
        OURS_ARGS="trainer.device=cpu trainer.compile=false model.hidden_sizes=[32]",
        RSL_RL_ARGS="--gpu-ids None",
    )  # fmt: skip
    script = ROOT / "scripts" / "bench" / "mjlab_learning.sh"
    done = subprocess.run(["bash", str(script), str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "ours" / "metrics.jsonl").open()]
    assert rows[-1]["global_step"] == 96 and rows[-1]["iteration"] == 1
    assert list((tmp_path / "rsl_rl").glob("events.out.tfevents.*"))
    assert int((tmp_path / "rsl_rl.wall_s").read_text()) > 0
    report = subprocess.run(
        [sys.executable, "-m", "scripts.bench.mjlab_learning", str(tmp_path), "--envs", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    assert "| embodied-ppo | 1 |" in report.stdout and "| rsl_rl | 1 |" in report.stdout
