"""Value normalization, symmetry and RND in a run: the value targets and the values folded back
against a hand computation, the intrinsic reward on either collector's buffer, an exact resume
with all three on, and bad input refused before anything is written."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_config
from support import ROOT
from test_rollout import collectors, dict_config

from embodied_ppo.config.schema import with_values
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.auxiliary import Auxiliary
from embodied_ppo.runner.build import make_buffer, policy_spec
from embodied_ppo.runner.trainer import Trainer
from embodied_ppo.vecenv.spaces import SpaceInfo

CPU = torch.device("cpu")
PENDULUM = SpaceInfo(3, "gaussian", 1, [-2.0], [2.0])


def test_value_normalization_targets_and_folded_back_values_against_a_hand_computation():
    """After collection the critic's outputs v become values mean + std * v under the
    statistics they were trained on (each step's, the bootstrap values, the truncations'); the
    statistics then merge the returns of the steps that count, and the update trains on the old
    values and returns standardized with the merged statistics."""
    cfg = tiny_config(
        "Pendulum-v1",
        env={"num_envs": 3},
        algorithm={"normalize_value": True, "rollout_steps": 4, "minibatch_size": 4},
    )
    policy = ActorCritic(policy_spec(cfg, PENDULUM))
    aux = Auxiliary(cfg, PENDULUM, policy, CPU)
    earlier = np.array([3.0, -1.0, 4.0, 10.0, 2.5])
    aux.value_norm.stats.update(torch.tensor(earlier))
    buf = make_buffer(cfg, PENDULUM, policy, CPU)
    g = torch.Generator().manual_seed(0)
    outputs = {
        name: torch.randn(4, 3, generator=g) for name in ("values", "next_values", "final_values")
    }
    for name, v in outputs.items():
        getattr(buf, name).copy_(v)
    aux.after_collect(buf, 0)
    mean, std = earlier.mean(), np.sqrt(earlier.var() + 1e-8)
    for name, v in outputs.items():
        np.testing.assert_allclose(getattr(buf, name).numpy(), v.numpy() * std + mean, rtol=1e-6)

    buf.returns.copy_(torch.randn(4, 3, generator=g) * 5.0 + 2.0)
    buf.mask.copy_(torch.tensor([[1.0, 1, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]]))
    batch = buf.flat("obs", "actions", "logprobs", "values", "advantages", "returns", "mask")
    assert aux.prepare(buf, batch, None) is None
    counted = buf.returns.numpy()[buf.mask.numpy() == 1]
    merged = np.concatenate([earlier, counted])
    mean, std = merged.mean(), np.sqrt(merged.var() + 1e-8)
    np.testing.assert_allclose(
        batch["returns"].numpy(), (buf.returns.numpy().reshape(-1) - mean) / std, rtol=1e-5
    )
    np.testing.assert_allclose(
        batch["values"].numpy(), (buf.values.numpy().reshape(-1) - mean) / std, rtol=1e-5
    )
    # The rollout keeps the values and returns in the reward's units (explained variance).
    np.testing.assert_allclose(
        buf.values.numpy(),
        outputs["values"].numpy() * np.sqrt(earlier.var() + 1e-8) + earlier.mean(),
        rtol=1e-6,
    )


def test_the_intrinsic_reward_is_the_same_on_host_and_device_collection():
    """RND reads the rollout from the buffer, which both collectors fill the same way: the same
    rollouts get the same intrinsic rewards, added to the same scaled rewards."""
    cfg = with_values(
        dict_config(), algorithm__rnd=type(dict_config().algorithm.rnd)(enabled=True, minibatches=2)
    )
    host, device = collectors(cfg)
    auxiliaries = [Auxiliary(cfg, c.envs.info, c.policy, CPU) for c in (host, device)]
    for c in (host, device):
        c.start()
    for iteration in range(2):
        scalars = []
        for c, aux in zip((host, device), auxiliaries, strict=True):
            c.collect(noise_seed=3 + iteration)
            before = c.buffer.rewards.clone()
            scalars.append(aux.after_collect(c.buffer, 0))
            assert not torch.equal(before, c.buffer.rewards)
            aux.after_update(c.buffer)
        torch.testing.assert_close(host.buffer.rewards, device.buffer.rewards)
        assert scalars[0] == pytest.approx(scalars[1])
    for c in (host, device):
        c.envs.close()


def test_a_run_with_symmetry_rnd_and_value_normalization_resumes_bit_identically(tmp_path):
    cfg = tiny_config(
        "EmbodiedPPOTestMirrorPendulum-v0",
        env={"imports": ["mirror_envs"]},
        algorithm={
            "normalize_value": True,
            "symmetry": {"augment": True, "mirror_loss_coef": 0.2},
            "rnd": {"enabled": True, "minibatches": 2, "schedule": "linear"},
        },
        trainer={"total_steps": 128, "checkpoint_interval": 1},
    )
    straight = Trainer(cfg, tmp_path / "straight", progress_stream=io.StringIO())
    straight.train()
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_64.pt")
    assert {"rnd", "value_normalizer"} <= set(state)
    resumed = Trainer(cfg, tmp_path / "resumed", resume=state, progress_stream=io.StringIO())
    resumed.train()
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_128.pt")
    b = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "ckpt_128.pt")
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for k, v in a["value_normalizer"].items():
        assert torch.equal(v, b["value_normalizer"][k]), k
    for k, v in a["rnd"]["networks"].items():
        assert torch.equal(v, b["rnd"]["networks"][k]), k
    assert torch.equal(a["rnd"]["rng"], b["rnd"]["rng"])
    lines = [
        (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        for run in ("straight", "resumed")
    ]
    timing = ("time", "SPS", "collect_time", "update_time")

    def learned(line: str) -> dict:
        import json

        return {k: v for k, v in json.loads(line).items() if not any(t in k for t in timing)}

    assert [learned(x) for x in lines[1]] == [learned(x) for x in lines[0][2:]]
    assert "rewards/intrinsic" in learned(lines[0][-1]) and "losses/mirror_loss" in learned(
        lines[0][-1]
    )


def cli(*args: str, run) -> subprocess.CompletedProcess:
    """`embodied-ppo train` of a Pendulum-sized config, from the tests' folder (its env modules
    found there), into `run`."""
    overrides = [
        "env.num_envs=2",
        "algorithm.rollout_steps=16",
        "algorithm.minibatch_size=16",
        "trainer.total_steps=64",
        "trainer.compile=false",
        f"trainer.run_dir={run}",
    ]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "embodied_ppo",
            "train",
            str(ROOT / "configs" / "pendulum.yaml"),
            *overrides,
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT / "tests",
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=300,
    )


MIRRORED = ["env.imports=[mirror_envs]", "algorithm.symmetry.augment=true"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["env.id=EmbodiedPPOTestWrongSizeMirror-v0", *MIRRORED],
            "algorithm.symmetry: EmbodiedPPOTestWrongSizeMirror-v0's mirror (metadata['mirror']): "
            "observation.perm: 2 entries, expected 3",
        ),
        (
            ["env.id=EmbodiedPPOTestNotInvolutionMirror-v0", *MIRRORED],
            "observation: not an involution: mirroring twice changes the sign of entry 1",
        ),
        (["algorithm.symmetry.mirror_loss_coef=0.5"], "Pendulum-v1 declares no mirror"),
        (
            ["algorithm.rnd.enabled=true", "algorithm.rnd.weight=-0.5"],
            "algorithm.rnd.weight: got -0.5",
        ),
        (
            [
                "env.id=EmbodiedPPOTestSides-v0",
                "env.imports=[mirror_envs]",
                "algorithm.rnd.enabled=true",
                "algorithm.rnd.obs_keys=[left,middle]",
            ],
            "algorithm.rnd.obs_keys[1]: 'middle' is not a key",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_key_exit_2_nothing_written(tmp_path, args, fragment):
    run = tmp_path / "run"
    proc = cli(*args, run=run)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embodied-ppo: error: "), proc.stderr
    assert fragment in lines[0], lines[0]
    assert not run.exists()
