"""End to end on tiny configs: run directory, determinism (Rule 6), Rule 3, resume."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_config

from embodied_ppo.algo.advantages import Estimator, Trajectories, compute_advantages
from embodied_ppo.algo.batch import prepare_batch, refresh_advantages
from embodied_ppo.config.schema import with_values
from embodied_ppo.core.errors import CheckpointError, TrainingError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.trainer import Trainer

TAGS = [
    "charts/SPS",
    "charts/learning_rate",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/dual_clipfrac",
    "losses/value_clipfrac",
    "losses/explained_variance",
    "losses/grad_norm",
]


def train(cfg, run_dir, resume=None):
    trainer = Trainer(cfg, run_dir, resume=resume)
    trainer.train()
    return trainer


def params(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def test_run_directory_contents(tmp_path):
    cfg = tiny_config("Pendulum-v1", trainer={"total_steps": 96, "checkpoint_interval": 2})
    trainer = train(cfg, tmp_path)
    assert trainer.global_step == 96 and trainer.iteration == 3
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == [32, 64, 96]
    for tag in TAGS + ["losses/std"]:
        assert tag in records[-1], tag
    assert list(tmp_path.glob("events.out.tfevents.*"))
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt_64.pt", "ckpt_96.pt", "latest.pt"]
    state = load_checkpoint(tmp_path)
    assert state["global_step"] == 96 and state["config"] == cfg.to_dict()


def test_same_seed_same_numbers_different_seed_different(tmp_path):
    cfg = tiny_config("Pendulum-v1")
    a = train(cfg, tmp_path / "a")
    b = train(cfg, tmp_path / "b")
    c = train(tiny_config("Pendulum-v1", trainer={"seed": 1}), tmp_path / "c")
    pa, pb, pc = params(a), params(b), params(c)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not all(torch.equal(pa[k], pc[k]) for k in pa)
    ma = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    mb = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()

    def strip(line):
        timing = ("time", "charts/SPS", "charts/collect_time", "charts/update_time")
        return {k: v for k, v in json.loads(line).items() if k not in timing}

    assert [strip(x) for x in ma] == [strip(x) for x in mb]


def test_resume_continues_the_run(tmp_path):
    cfg = tiny_config("Pendulum-v1", trainer={"total_steps": 64, "checkpoint_interval": 1})
    first = train(cfg, tmp_path)
    state = load_checkpoint(tmp_path)
    cfg = with_values(cfg, trainer__total_steps=128)
    resumed = Trainer(cfg, tmp_path, resume=state)
    assert resumed.global_step == 64 and resumed.iteration == 2
    # Everything the run learned is restored before training continues.
    for k, v in first.policy.state_dict().items():
        assert torch.equal(resumed.policy.state_dict()[k], v)
    assert torch.equal(resumed.reward_scaler.stats.var, first.reward_scaler.stats.var)
    assert (
        resumed.updater.optimizer_state()["state"][0]["step"]
        == first.updater.optimizer_state()["state"][0]["step"]
    )
    resumed.train()
    assert resumed.global_step == 128
    steps = [
        json.loads(x)["global_step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [32, 64, 96, 128]


def test_resume_rejects_other_architecture(tmp_path):
    train(tiny_config("Pendulum-v1"), tmp_path)
    state = load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="different environment or architecture"):
        Trainer(
            tiny_config("Pendulum-v1", model={"hidden_sizes": [8]}), tmp_path / "x", resume=state
        )


def test_checkpoint_rebuilds_the_policy(tmp_path):
    trainer = train(tiny_config("CartPole-v1"), tmp_path)
    state = load_checkpoint(tmp_path)
    policy = ActorCritic(state["model_spec"])
    policy.load_state_dict(state["model"])
    rebuilt, trained = policy.state_dict(), trainer.policy.state_dict()
    assert rebuilt.keys() == trained.keys()
    assert all(torch.equal(rebuilt[k], trained[k]) for k in rebuilt)  # every weight, exactly
    obs = torch.randn(5, 4)
    d1, v1 = policy(obs)
    d2, v2 = trainer.policy(obs)
    # The same weights in other memory can take another matmul kernel (seen on AMD EPYC: the
    # value differed in its last bit), so the outputs agree to float32 rounding.
    torch.testing.assert_close(d1.logits, d2.logits, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(v1, v2, rtol=1e-6, atol=1e-6)
    # Statistics travel with the checkpoint: 128 steps trained on, 32 of the warm-up before.
    assert policy.obs_normalizer.count.item() == 32 + 128


def test_non_finite_loss_stops_with_a_clear_message(tmp_path, monkeypatch):
    trainer = Trainer(tiny_config("Pendulum-v1", trainer={"checkpoint_interval": 1}), tmp_path)
    real = trainer.updater.update
    calls = {"n": 0}

    def poisoned(batch, num_steps, refresh=None):
        calls["n"] += 1
        if calls["n"] == 2:
            batch["returns"][0] = float("inf")
        return real(batch, num_steps, refresh)

    monkeypatch.setattr(trainer.updater, "update", poisoned)
    with pytest.raises(
        TrainingError,
        match=r"iteration 1: non-finite value_loss .*last good checkpoint: .*ckpt_32.pt",
    ):
        trainer.train()
    assert load_checkpoint(tmp_path)["global_step"] == 32


def test_normalizer_starts_from_a_warm_up_and_merges_each_rollout_after_its_update(tmp_path):
    cfg = tiny_config("Pendulum-v1", trainer={"total_steps": 64})
    trainer = Trainer(cfg, tmp_path)
    seen = []
    real = trainer.updater.update

    def spy(batch, num_steps, refresh=None):
        seen.append(trainer.policy.obs_normalizer.count.item())
        return real(batch, num_steps, refresh)

    trainer.updater.update = spy
    trainer.train()
    norm = trainer.policy.obs_normalizer
    # Every update sees the statistics its rollout was collected with: the first rollout's are
    # the warm-up's (one rollout's length, 32 rows, not trained on); each rollout is merged once
    # after its update.
    assert seen == [32.0, 64.0]
    assert norm.count.item() == 96
    obs = trainer.buffer.obs.reshape(-1, 3).double()
    assert not torch.allclose(norm.mean, obs.mean(0))  # every rollout, not the last one only


def test_first_ratio_of_an_update_is_one(tmp_path):
    cfg = tiny_config("Pendulum-v1", algorithm={"update_epochs": 1, "minibatch_size": 32})
    trainer = Trainer(cfg, tmp_path)
    trainer.train()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # One minibatch per epoch: approx_kl is measured before the step, at ratio 1.
    assert all(r["losses/approx_kl"] < 1e-10 for r in records)
    assert all(r["losses/clipfrac"] == 0.0 for r in records)


@pytest.mark.parametrize("inference", ["host", "device"])
def test_recomputed_advantages_are_gae_under_the_critic_as_it_is(tmp_path, inference):
    # 10-step episodes in 16-step rollouts: truncations inside the rollout and at its end.
    cfg = tiny_config(
        "Pendulum-v1",
        env={"max_episode_steps": 10},
        model={"share_backbone": False},
        algorithm={"recompute_advantages": True},
        trainer={"inference": inference},
    )
    trainer = Trainer(cfg, tmp_path)
    trainer.collector.start()
    for _ in range(2):  # the second rollout: after an update, normalizer merged
        trainer.collector.collect()
        buf = trainer.buffer
        batch, _ = prepare_batch(buf, trainer.policy, cfg.algorithm, None, None)
        collected = {k: getattr(buf, k).clone() for k in ("values", "next_values", "advantages")}
        assert buf.truncated.any() and buf.final_obs
        # With the critic unchanged, the refresh reproduces what collection computed: every
        # bootstrap observation is the one the collector valued.
        refresh_advantages(buf, trainer.policy, cfg.algorithm, None)
        for name, before in collected.items():
            torch.testing.assert_close(getattr(buf, name), before, atol=1e-5, rtol=1e-5)
        trainer.updater.update(batch, buf.num_steps)
        trainer.collector.merge_obs_statistics()
    # After the critic moved: the values are the current critic's, the advantages GAE of them;
    # a value head's bias moved by 1 moves every bootstrap value (V(s_T), V(final_obs)) by 1.
    refresh_advantages(buf, trainer.policy, cfg.algorithm, None)
    before = buf.next_values.clone()
    with torch.no_grad():
        trainer.policy.value_head.bias.add_(1.0)
    refresh_advantages(buf, trainer.policy, cfg.algorithm, None)
    with torch.no_grad():
        values = trainer.policy.value(buf.flat("obs")["obs"]).reshape(buf.values.shape)
    torch.testing.assert_close(buf.values, values)
    torch.testing.assert_close(
        buf.next_values[:-1][~buf.truncated[:-1]], values[1:][~buf.truncated[:-1]]
    )
    torch.testing.assert_close(buf.next_values, before + 1.0)
    a = cfg.algorithm
    adv, ret = compute_advantages(
        Trajectories(buf.rewards, values, buf.next_values, buf.terminated, buf.ends, buf.mask),
        Estimator("gae", a.gamma, a.gae_lambda, normalize=a.normalize_advantages),
    )
    torch.testing.assert_close(buf.advantages, adv)
    torch.testing.assert_close(buf.returns, ret)


def test_recompute_advantages_refreshes_before_every_epoch_after_the_first(tmp_path):
    cfg = tiny_config("Pendulum-v1", algorithm={"update_epochs": 3, "recompute_advantages": True})
    trainer = Trainer(cfg, tmp_path)
    real = trainer.updater.update
    refreshes = []

    def spy(batch, num_steps, refresh=None):
        def counted():
            refreshes.append(batch["advantages"].clone())
            refresh()

        return real(batch, num_steps, counted)

    trainer.updater.update = spy
    trainer.train()
    assert len(refreshes) == 2 * trainer.iteration  # epochs 2 and 3 of every update
    # and the key changes training: the same run without it ends elsewhere
    plain = train(tiny_config("Pendulum-v1", algorithm={"update_epochs": 3}), tmp_path / "b")
    assert any(not torch.equal(v, params(plain)[k]) for k, v in params(trainer).items())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("inference", ["host", "device"])
def test_cuda_training_matches_cpu(tmp_path, inference):
    cpu = train(tiny_config("Pendulum-v1", trainer={"inference": inference}), tmp_path / "cpu")
    gpu = train(
        tiny_config("Pendulum-v1", trainer={"device": "cuda", "inference": inference}),
        tmp_path / "gpu",
    )
    for k, v in cpu.policy.state_dict().items():
        assert torch.allclose(v, gpu.policy.state_dict()[k].cpu(), atol=1e-4), k
    assert gpu.buffer.obs.device.type == "cuda"


def test_collection_runs_numpy_blas_and_torch_on_one_thread(tmp_path):
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    trainer = Trainer(tiny_config("Pendulum-v1"), tmp_path)
    real, seen = trainer.collector.collect, []

    def collect(*args, **kwargs):
        seen.append((blas_threads(), torch.get_num_threads()))
        return real(*args, **kwargs)

    trainer.collector.collect = collect
    before = blas_threads()
    assert before  # numpy's BLAS is loaded and seen
    trainer.train()
    assert seen and all(blas == [1] * len(before) and n == 1 for blas, n in seen)
    assert blas_threads() == before  # given back after each collection


def test_update_threads_count_the_products_a_step_runs(monkeypatch):
    # Two cores: a second update thread for a step whose products are large; one for small
    # ones. A recurrent policy's products are one time step over the minibatch's sequences.
    from support import spec

    from embodied_ppo.runner import build

    monkeypatch.setattr(build, "usable_cores", lambda: 2)
    cpu = torch.device("cpu")
    wide = ActorCritic(spec(hidden_sizes=[256, 256]))  # ~70k parameters
    assert build.update_threads(cpu, wide, 4096) == 2
    assert build.update_threads(cpu, wide, 64) == 1
    lstm = ActorCritic(
        spec(hidden_sizes=[256, 256], recurrent="lstm", recurrent_size=64, recurrent_layers=1)
    )
    assert lstm.state_size > 0
    assert build.update_threads(cpu, lstm, 1024) == 2  # were it 1024 rows a product
    assert build.update_threads(cpu, lstm, 1024, sequence_length=32) == 1  # 32 sequences
