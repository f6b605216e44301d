"""The deployable policy: load_policy, TorchScript and ONNX exports, and their bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from support import ROOT

from embodied_ppo.app.cli import main
from embodied_ppo.app.deploy import load_policy, policy_from_state
from embodied_ppo.app.export import export_policy
from embodied_ppo.core.errors import CheckpointError, ExportError, ObservationError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.trainer import Trainer

ENVS = {"gaussian": "Pendulum-v1", "categorical": "CartPole-v1"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained run per head type; the normalizer has real statistics."""
    out = {}
    for kind, env_id in ENVS.items():
        run_dir = tmp_path_factory.mktemp(kind)
        cfg = tiny_config(env_id, trainer={"total_steps": 64})
        trainer = Trainer(cfg, run_dir)
        trainer.train()
        # Tiny training leaves near-zero outputs; scale the head so actions reach the bounds.
        with torch.no_grad():
            trainer.policy.action_head.weight.mul_(300.0)
        trainer.save()
        out[kind] = run_dir
    return out


def random_obs(obs_dim: int, batch: int | None, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    shape = (obs_dim,) if batch is None else (batch, obs_dim)
    return torch.randn(shape, generator=gen) * 5.0  # wide enough to hit normalizer and action clips


def reference_actions(run_dir: Path, obs: torch.Tensor) -> torch.Tensor:
    """What the training module itself says: distribution mode, clipped to the bounds."""
    state = load_checkpoint(run_dir)
    ac = ActorCritic(state["model_spec"])
    ac.load_state_dict(state["model"])
    with torch.no_grad():
        dist, _ = ac(obs.reshape(-1, obs.shape[-1]))
        action = dist.mode()
        if ac.is_gaussian:
            action = torch.maximum(torch.minimum(action, ac.action_high), ac.action_low)
    return action.reshape(obs.shape[:-1] + action.shape[1:])


@pytest.mark.parametrize("kind", list(ENVS))
def test_load_policy_matches_the_training_module(runs, kind):
    policy = load_policy(runs[kind])
    obs_dim = policy.obs_dim
    batch = random_obs(obs_dim, 64)
    expected = reference_actions(runs[kind], batch)
    got = policy(batch)
    if kind == "gaussian":
        assert got.dtype == torch.float32 and got.shape == (64, 1)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
        assert (got.abs() <= 2.0).all() and (got.abs() == 2.0).any()  # clipped to [-2, 2]
    else:
        assert got.dtype == torch.int64 and got.shape == (64,)
        assert torch.equal(got, expected)
    single = policy(batch[3])
    assert single.shape == expected[3].shape
    torch.testing.assert_close(single, expected[3], atol=1e-6, rtol=0)
    # numpy in (float64 too), numpy out
    as_np = policy(batch.numpy().astype(np.float64))
    assert isinstance(as_np, np.ndarray)
    np.testing.assert_allclose(as_np, expected.numpy(), atol=1e-5)
    assert policy.metadata["env_id"] == ENVS[kind]
    assert not any(p.requires_grad for p in policy.parameters())


def test_observation_normalizer_is_folded_in(runs):
    """Raw observations in: the stored statistics normalize and clip them inside the policy."""
    state = load_checkpoint(runs["gaussian"])
    model = state["model"]
    assert model["obs_normalizer.count"] > 0
    ac = ActorCritic(state["model_spec"])
    ac.load_state_dict(model)
    obs = random_obs(3, 32, seed=3)
    std = torch.sqrt(model["obs_normalizer.var"] + 1e-8)
    x = ((obs.double() - model["obs_normalizer.mean"]) / std).float().clamp(-10.0, 10.0)
    with torch.no_grad():
        by_hand = ac.action_head(ac.actor_backbone(x)).clamp(-2.0, 2.0)
    deployed = policy_from_state(state)(obs)
    torch.testing.assert_close(deployed, by_hand, atol=1e-4, rtol=0)
    model["obs_normalizer.mean"] = model["obs_normalizer.mean"] + 3.0
    assert not torch.allclose(policy_from_state(state)(obs), deployed)


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("kind", list(ENVS))
def test_torchscript_export_equals_eager(runs, kind, tmp_path):
    out = tmp_path / "policy.pt"
    path, meta_path, _ = export_policy(runs[kind], "torchscript", out)
    assert path == out and meta_path == tmp_path / "policy.pt.json"
    scripted = torch.jit.load(str(out))
    eager = load_policy(runs[kind])
    batch = random_obs(eager.obs_dim, 17, seed=1)
    torch.testing.assert_close(scripted(batch), eager(batch), atol=1e-5, rtol=0)
    torch.testing.assert_close(scripted(batch[0]), eager(batch[0]), atol=1e-5, rtol=0)
    with pytest.raises(torch.jit.Error, match=rf"expected shape \({eager.obs_dim},\)"):
        scripted(torch.zeros(3, eager.obs_dim + 1))

    meta = json.loads(meta_path.read_text())
    assert meta["format"] == "torchscript"
    assert meta["input_shapes"] == [[eager.obs_dim], ["batch", eager.obs_dim]]
    assert meta["env_id"] == ENVS[kind]
    assert meta["observation"]["shape"] == [eager.obs_dim]
    assert meta["source_checkpoint"].endswith("latest.pt")
    assert meta["package_version"]
    if kind == "gaussian":
        assert meta["action"] == {
            "kind": "gaussian",
            "shape": [1],
            "dtype": "float32",
            "low": [-2.0],
            "high": [2.0],
        }
    else:
        assert meta["action"] == {
            "kind": "categorical",
            "shape": [],
            "dtype": "int64",
            "num_actions": 2,
        }


@pytest.mark.parametrize("kind", list(ENVS))
def test_onnx_export_equals_eager(runs, kind, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "policy.onnx"
    export_policy(runs[kind], "onnx", out)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (inp,), (outp,) = session.get_inputs(), session.get_outputs()
    assert inp.name == "obs" and outp.name == "action"
    assert isinstance(inp.shape[0], str)  # dynamic batch dimension
    eager = load_policy(runs[kind])
    for batch_size in (1, 9):  # a single observation is a batch of one in ONNX
        batch = random_obs(eager.obs_dim, batch_size, seed=batch_size)
        (got,) = session.run(None, {"obs": batch.numpy()})
        np.testing.assert_allclose(got, eager(batch).numpy(), atol=1e-5, rtol=0)
    meta = json.loads((tmp_path / "policy.onnx.json").read_text())
    assert (
        meta["format"] == "onnx" and meta["input_name"] == "obs" and meta["output_name"] == "action"
    )
    assert meta["input_shapes"] == [["batch", eager.obs_dim]]


def test_default_export_path_is_in_the_run_directory(runs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(runs["gaussian"]), "--format", "torchscript"])
    assert exit_info.value.code == 0
    step = load_checkpoint(runs["gaussian"])["global_step"]
    expected = runs["gaussian"] / "exported" / f"policy-{step}.pt"
    assert expected.is_file() and Path(str(expected) + ".json").is_file()
    assert str(expected) in capsys.readouterr().out


BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = ("gymnasium", "mujoco", "tensorboard", "imageio", "matplotlib", "onnx", "yaml")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    import numpy as np
    import torch
    import embodied_ppo

    policy = embodied_ppo.load_policy(sys.argv[1])
    obs = np.load(sys.argv[2])
    np.save(sys.argv[3], policy(obs))
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
    assert not loaded, loaded
    print("ok")
    """
)


def test_load_policy_needs_torch_only(runs, tmp_path):
    """A robot stack without gymnasium, mujoco or tensorboard (even without yaml) can deploy."""
    script = tmp_path / "deploy.py"
    script.write_text(BLOCKER)
    obs = random_obs(3, 5, seed=7).numpy()
    np.save(tmp_path / "obs.npy", obs)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            str(runs["gaussian"]),
            str(tmp_path / "obs.npy"),
            str(tmp_path / "act.npy"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    expected = load_policy(runs["gaussian"])(obs)
    np.testing.assert_array_equal(np.load(tmp_path / "act.npy"), expected)


@pytest.mark.parametrize(
    "obs, fragment",
    [
        (np.zeros(4, dtype=np.float32), r"expected shape \(3,\) or \(batch, 3\), got \(4,\)"),
        (np.zeros((2, 2), dtype=np.float32), r"got \(2, 2\)"),
        (np.zeros((2, 2, 3), dtype=np.float32), r"got \(2, 2, 3\)"),
        (np.zeros((), dtype=np.float32), r"got \(\)"),
        (
            np.zeros(3, dtype=np.int64),
            r"floating-point array of shape \(3,\) or \(batch, 3\).*int64",
        ),
        (torch.zeros(3, dtype=torch.bool), r"floating-point .*bool"),
        (["a", "b", "c"], r"expected a float array of shape \(3,\)"),
    ],
)
def test_bad_observations_name_the_expected_shape(runs, obs, fragment):
    policy = load_policy(runs["gaussian"])
    with pytest.raises(ObservationError, match=fragment) as info:
        policy(obs)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)  # robot code may catch it as a ValueError


def bad_checkpoints(tmp_path: Path) -> dict[str, Path]:
    """Missing, truncated and foreign files, each inside a run-like directory."""
    good = tmp_path / "good.pt"
    torch.save(
        {"format": "embodied-ppo/checkpoint", "format_version": 1, "x": torch.zeros(3)}, good
    )
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:100])
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, foreign)
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    pickled = tmp_path / "pickled.pt"
    torch.save({"f": Path("x")}, pickled)  # arbitrary objects are refused by weights_only
    no_model = good  # our format, but no model inside
    return {
        "missing": tmp_path / "nope.pt",
        "truncated": truncated,
        "foreign": foreign,
        "text": text,
        "pickled": pickled,
        "no_model": no_model,
    }


@pytest.mark.parametrize("name", ["missing", "truncated", "foreign", "text", "pickled", "no_model"])
def test_load_policy_bad_checkpoint(tmp_path, name):
    path = bad_checkpoints(tmp_path)[name]
    with pytest.raises(CheckpointError) as info:
        load_policy(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("name", ["missing", "truncated", "foreign", "text", "pickled", "no_model"])
@pytest.mark.parametrize("command", ["export", "eval"])
def test_cli_bad_checkpoint_is_one_line_and_changes_nothing(tmp_path, capsys, name, command):
    path = bad_checkpoints(tmp_path)[name]
    before = snapshot(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([command, str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("embodied-ppo: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert snapshot(tmp_path) == before


def test_unsupported_export_format(runs, capsys):
    before = snapshot(runs["categorical"])
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(runs["categorical"]), "--format", "tflite"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == "embodied-ppo: error: --format: got 'tflite', allowed: torchscript | onnx\n"
    assert snapshot(runs["categorical"]) == before


def test_onnx_without_its_extra_says_what_to_install(runs, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import fails as if not installed
    with pytest.raises(ExportError, match=r"pip install 'embodied-ppo\[onnx\]'"):
        export_policy(runs["categorical"], "onnx", tmp_path / "p.onnx")
    assert not list(tmp_path.iterdir())
