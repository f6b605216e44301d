"""Exact resume: N iterations straight == N/2, a checkpoint, a resume and N/2 more (bitwise, CPU)."""

from __future__ import annotations

import io
import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import tiny_config
from gymnasium import spaces

from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer
from embodied_ppo.vecenv.state import (
    NotCapturable,
    capture_env,
    from_checkpoint,
    restore_env,
    to_checkpoint,
)

# Keys of metrics.jsonl that measure wall time, not what was computed.
TIMING = {"time", "charts/SPS", "charts/collect_time", "charts/update_time"}


class _Sim:
    """State kept in an object the generic capture cannot look into."""

    def __init__(self) -> None:
        self.x = np.zeros(2)


class OpaqueEnv(gym.Env):
    """A small stochastic task whose state lives in a `_Sim` (not capturable)."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.sim = _Sim()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.sim.x = self.np_random.normal(size=2)
        return self.sim.x.astype(np.float32), {}

    def step(self, action):
        noise = self.np_random.normal(size=2) * 0.1
        self.sim.x = 0.9 * self.sim.x + (float(action) - 0.5) + noise
        terminated = bool(np.abs(self.sim.x).max() > 3.0)
        return (
            self.sim.x.astype(np.float32),
            float(-np.abs(self.sim.x).sum()),
            terminated,
            False,
            {},
        )


class HookEnv(OpaqueEnv):
    """The same task, made capturable through state_dict / load_state_dict."""

    def state_dict(self) -> dict:
        return {"x": self.sim.x.copy(), "rng": self.np_random.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.sim.x = np.array(state["x"], copy=True)
        self.np_random.bit_generator.state = state["rng"]


for _name, _cls in (("Opaque", OpaqueEnv), ("Hook", HookEnv)):
    if f"EmbodiedPPOTest{_name}-v0" not in gym.registry:
        gym.register(f"EmbodiedPPOTest{_name}-v0", entry_point=_cls, max_episode_steps=25)


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def _assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _metrics(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING} for x in lines]


def _straight_then_resumed(tmp_path, cfg, half: int):
    """Train `cfg` straight through; then resume its checkpoint at `half` iterations elsewhere."""
    straight = Trainer(cfg, tmp_path / "straight", progress_stream=io.StringIO())
    straight.train()
    step = half * cfg.batch_size
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / f"ckpt_{step}.pt")
    resumed = Trainer(cfg, tmp_path / "resumed", resume=state, progress_stream=io.StringIO())
    return straight, resumed


@pytest.mark.parametrize(
    "env_id, env, optim",
    [
        ("CartPole-v1", {}, {}),
        # The adaptive schedule aiming at a KL target that falls over the run: each update's
        # target is that of its step, after the resume as before it.
        (
            "CartPole-v1",
            {},
            {"schedule": "adaptive", "desired_kl": 0.002, "desired_kl_final": 0.0001},
        ),
        # Short episodes, so that the envs reset (drawing from their own RNGs) on both sides of
        # the checkpoint; observation and reward normalization are on.
        ("Hopper-v5", {"max_episode_steps": 20}, {}),
        # The same with the envs stepped by two threads (the straight run too).
        ("Hopper-v5", {"max_episode_steps": 20, "threads": 2}, {}),
        # The project's own arm task: a target drawn at every reset, success at episode ends.
        ("EmbodiedPPO/Reach-v0", {"max_episode_steps": 24}, {}),
    ],
)
def test_resume_is_bitwise_identical_to_an_uninterrupted_run(tmp_path, env_id, env, optim):
    trainer = {"total_steps": 128, "checkpoint_interval": 1}
    cfg = tiny_config(env_id, env=env, optim=optim, trainer=trainer)
    straight, resumed = _straight_then_resumed(tmp_path, cfg, half=2)
    assert resumed.resume_note is None  # the envs were captured, mid-episode
    assert resumed.global_step == 64 and resumed.iteration == 2
    resumed.train()
    assert resumed.global_step == straight.global_step == 128
    _assert_same_params(_params(straight), _params(resumed))
    for a, b in zip(
        straight.updater.optimizer_state()["state"].values(),
        resumed.updater.optimizer_state()["state"].values(),
    ):
        for key in a:
            assert torch.equal(a[key], b[key]), key
    assert torch.equal(straight.reward_scaler.returns, resumed.reward_scaler.returns)
    assert torch.equal(straight.reward_scaler.stats.var, resumed.reward_scaler.stats.var)
    assert np.array_equal(straight.collector.obs, resumed.collector.obs)
    assert np.array_equal(straight.envs._ep_return, resumed.envs._ep_return)
    # 64 vector steps trained on (the warm-up's before the first rollout are not counted)
    assert straight.envs.steps == resumed.envs.steps == 64
    # Every logged number after the resume is the number the straight run logged.
    assert _metrics(tmp_path / "resumed") == _metrics(tmp_path / "straight")[2:]


def test_async_envs_are_captured_through_their_workers(tmp_path):
    cfg = tiny_config(
        "CartPole-v1",
        env={"backend": "async"},
        trainer={"total_steps": 96, "checkpoint_interval": 1},
    )
    straight, resumed = _straight_then_resumed(tmp_path, cfg, half=1)
    assert resumed.resume_note is None
    resumed.train()
    _assert_same_params(_params(straight), _params(resumed))


def test_envs_split_over_processes_are_captured_through_their_workers(tmp_path):
    cfg = tiny_config(
        "Hopper-v5",
        env={"num_envs": 3, "processes": 2},
        trainer={"total_steps": 192, "checkpoint_interval": 1},
    )
    straight, resumed = _straight_then_resumed(tmp_path, cfg, half=2)
    assert resumed.resume_note is None  # every member, in both processes, mid-episode
    resumed.train()
    _assert_same_params(_params(straight), _params(resumed))
    assert np.array_equal(straight.collector.obs, resumed.collector.obs)
    # The split changes where the envs are stepped, not what they do: one process, same run.
    single = Trainer(
        tiny_config("Hopper-v5", env={"num_envs": 3}, trainer={"total_steps": 192}),
        tmp_path / "single",
        progress_stream=io.StringIO(),
    )
    single.train()
    _assert_same_params(_params(straight), _params(single))


def test_env_with_state_dict_hook_resumes_exactly(tmp_path):
    cfg = tiny_config(
        "EmbodiedPPOTestHook-v0", trainer={"total_steps": 128, "checkpoint_interval": 1}
    )
    straight, resumed = _straight_then_resumed(tmp_path, cfg, half=2)
    assert resumed.resume_note is None
    resumed.train()
    _assert_same_params(_params(straight), _params(resumed))


def test_uncapturable_env_resumes_deterministically_and_says_so(tmp_path):
    cfg = tiny_config(
        "EmbodiedPPOTestOpaque-v0", trainer={"total_steps": 128, "checkpoint_interval": 1}
    )
    straight = Trainer(cfg, tmp_path / "straight", progress_stream=io.StringIO())
    straight.train()
    ckpt = tmp_path / "straight" / "checkpoints" / "ckpt_64.pt"
    assert load_checkpoint(ckpt)["envs"]["members"] is None
    finals = []
    for name in ("r1", "r2"):
        resumed = Trainer(
            cfg, tmp_path / name, resume=load_checkpoint(ckpt), progress_stream=io.StringIO()
        )
        assert "fresh episodes" in resumed.resume_note and "OpaqueEnv.sim" in resumed.resume_note
        assert resumed.envs.steps == 32  # error messages still count steps from the run's start
        resumed.train()
        finals.append(_params(resumed))
    _assert_same_params(finals[0], finals[1])  # two resumes from one checkpoint agree
    assert _metrics(tmp_path / "r1") == _metrics(tmp_path / "r2")


def test_resume_drops_metrics_logged_after_the_checkpoint(tmp_path):
    cfg = tiny_config(trainer={"total_steps": 128, "checkpoint_interval": 2})
    Trainer(cfg, tmp_path, progress_stream=io.StringIO()).train()
    # As if killed after logging step 96 but before its checkpoint, mid-way through a line.
    state = load_checkpoint(tmp_path / "checkpoints" / "ckpt_64.pt")
    path = tmp_path / "metrics.jsonl"
    lines = path.read_text().splitlines()[:3]
    path.write_text("\n".join(lines) + '\n{"global_step": 12')
    Trainer(cfg, tmp_path, resume=state, progress_stream=io.StringIO()).train()
    steps = [json.loads(x)["global_step"] for x in path.read_text().splitlines()]
    assert steps == [32, 64, 96, 128]


@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0", "Ant-v5"]
)
def test_env_state_round_trip_through_a_checkpoint(env_id):
    """A captured env, restored into one seeded differently, then behaves identically."""
    a = gym.make(env_id, max_episode_steps=15)
    b = gym.make(env_id, max_episode_steps=15)
    a.reset(seed=1)
    b.reset(seed=2)
    a.action_space.seed(0)
    actions = [a.action_space.sample() for _ in range(60)]

    def run(env, acts):
        out = []
        for act in acts:
            obs, reward, term, trunc, _ = env.step(act)
            out.append((obs.copy(), reward, term, trunc))
            if term or trunc:
                out.append((env.reset()[0].copy(),))  # draws from the env's own RNG
        return out

    run(a, actions[:20])
    buf = io.BytesIO()
    torch.save(to_checkpoint(capture_env(a)), buf)
    buf.seek(0)
    restore_env(b, from_checkpoint(torch.load(buf, weights_only=True)))
    ra, rb = run(a, actions[20:]), run(b, actions[20:])
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        assert all(np.array_equal(p, q) for p, q in zip(x, y))


def test_env_state_refuses_what_it_cannot_see():
    env = gym.make("EmbodiedPPOTestOpaque-v0")
    env.reset(seed=0)
    with pytest.raises(NotCapturable, match="OpaqueEnv.sim is a _Sim"):
        capture_env(env)
    state = capture_env(gym.make("CartPole-v1"))
    with pytest.raises(NotCapturable, match="wrapper stack"):
        restore_env(gym.make("CartPole-v1", disable_env_checker=True), state)


def _largest_miss(expected: dict, ours: dict) -> float:
    """The largest difference between two checkpoints' weights, normalizers, reward scaler and
    Adam moments, each relative to the largest entry of its tensor in `expected`."""
    pairs = [
        (v, ours[name][k]) for name in ("model", "reward_scaler") for k, v in expected[name].items()
    ]
    pairs += [(v, ours["optimizer"]["state"][i][k]) for i, state in expected["optimizer"]["state"].items()
              for k, v in state.items() if k != "step"]  # fmt: skip
    misses = [
        ((a.double() - b.double()).abs().max() / a.double().abs().max().clamp_min(1e-30)).item()
        for a, b in pairs
        if a.is_floating_point() and a.numel()
    ]
    return max(misses)


def test_a_run_saved_before_the_checkpoint_was_a_typed_state_resumes_where_it_stopped(tmp_path):
    """tests/data/run_v0: a Pendulum run of two iterations (in-reward KL: a reference policy
    and its coefficient; reward scaling) as the package wrote it before checkpoints were a
    typed state and before the gradient step kept Adam's state (a torch.optim.Adam's state
    dict, one step count shared by every parameter). Resumed from its first checkpoint through
    the command's path, the second iteration is the one that run took: its bookkeeping (steps,
    learning rate, random streams, KL coefficient) exactly, its arithmetic to the last bits the
    CPU's kernels round alike. The run was written on one CPU model and BLAS picks its kernels
    by the CPU, so on another model a weight may differ from it in its last bit or two (1.5e-7
    of the tensor's largest entry between an Intel Xeon and an AMD EPYC); the same resume with
    Adam's step counts taken as a fresh optimizer's misses by 0.18. In-process resumes stay
    bit-exact (the tests above)."""
    import shutil

    from support import ROOT

    import embodied_ppo
    from embodied_ppo.io.checkpoint_state import RunCheckpoint

    saved = ROOT / "tests" / "data" / "run_v0"
    run = tmp_path / "run_v0"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(saved / "config.yaml", run / "config.yaml")
    shutil.copy(saved / "checkpoints" / "ckpt_32.pt", run / "checkpoints" / "ckpt_32.pt")
    old = load_checkpoint(run / "checkpoints" / "ckpt_32.pt")
    typed = RunCheckpoint.from_dict(old)
    assert typed.global_step == 32 and typed.reference is not None and typed.kl_coef is not None
    assert not typed.envs.empty and typed.lr_extension is None  # the key came later
    steps = [s["step"] for s in old["optimizer"]["state"].values()]
    assert all(s is steps[0] for s in steps)  # the old form: one shared step count

    result = embodied_ppo.train(resume=run / "checkpoints" / "ckpt_32.pt", progress=io.StringIO())
    assert result.global_step == 64
    expected = load_checkpoint(saved / "checkpoints" / "ckpt_64.pt")
    ours = load_checkpoint(run / "checkpoints" / "ckpt_64.pt")
    assert _largest_miss(expected, ours) < 1e-5  # ~1.5e-7 across CPU models, 0 on the same one
    for i, state in expected["optimizer"]["state"].items():
        assert torch.equal(state["step"], ours["optimizer"]["state"][i]["step"]), i
    assert (
        ours["optimizer"]["param_groups"][0]["lr"] == expected["optimizer"]["param_groups"][0]["lr"]
    )
    assert same(ours["rng"], expected["rng"]) and ours["kl_coef"] == expected["kl_coef"]
    assert ours["recent_returns"] == expected["recent_returns"]
    # Written now, its plain form is the typed state's, entry for entry.
    plain = {k: v for k, v in ours.items() if k not in ("format", "format_version")}
    assert same(RunCheckpoint.from_dict(ours).to_dict(), plain)

    # The bound tells a wrong conversion from rounding: Adam restarted (every step count 1).
    restarted = tmp_path / "restarted"
    (restarted / "checkpoints").mkdir(parents=True)
    shutil.copy(saved / "config.yaml", restarted / "config.yaml")
    for state in old["optimizer"]["state"].values():
        state["step"] = torch.tensor(1.0)
    torch.save(old, restarted / "checkpoints" / "ckpt_32.pt")
    embodied_ppo.train(resume=restarted / "checkpoints" / "ckpt_32.pt", progress=io.StringIO())
    assert _largest_miss(expected, load_checkpoint(restarted / "checkpoints" / "ckpt_64.pt")) > 0.01


def same(a, b) -> bool:
    """Equal plain data: tensors by value, containers entry by entry."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
