"""Rule 3: micro-batch sizes only bound memory. Each key is honored (the batches it bounds are
seen at that size) on every path, and no value of it changes the numbers.

The keys: `algorithm.micro_batch_size` (update, eager and compiled, and across processes in
test_distributed.py), `algorithm.rollout_micro_batch_size` (collection, host and device
inference: test_collector.py), `algorithm.logprob_forward_micro_batch_size` (recomputed old
log-probs and the in-reward KL). At the bottom of it all, the loss of micro-batches weighted with
their minibatch's denominators sums to the minibatch loss.
"""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from support import KW, actor_critic_loss, make_update, random_batch

from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.trainer import Trainer


def params(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def train(cfg, run_dir):
    trainer = Trainer(cfg, run_dir)
    trainer.train()
    return trainer


def test_the_loss_of_micro_batches_sums_to_the_minibatch_loss():
    torch.manual_seed(0)
    n = 10
    args = [torch.randn(n) for _ in range(7)]
    args[6] = args[6].abs()
    kw = {
        **KW,
        "value_clip": 0.2,
        "huber_delta": 1.0,
        "value_loss_coef": 0.5,
        "entropy_bonus": 0.01,
        "clip_ratio_c": 3.0,
    }
    full, fm = actor_critic_loss(*args, **kw)
    a, am = actor_critic_loss(*[x[:4] for x in args], denom=n, **kw)
    b, bm = actor_critic_loss(*[x[4:] for x in args], denom=n, **kw)
    assert (a + b).item() == pytest.approx(full.item(), abs=1e-6)
    for key in fm:
        assert (am[key] + bm[key]).item() == pytest.approx(fm[key].item(), abs=1e-6)


def record_grad_batches(monkeypatch) -> list[int]:
    """The batch size of every gradient computation of the update (eager or compiled)."""
    from embodied_ppo.algo.gradient_step import GradientStep

    sizes: list[int] = []
    for name in ("grads", "step"):
        original = getattr(GradientStep, name)

        def spy(self, mb, *args, _original=original):
            sizes.append(mb[0].shape[0])
            return _original(self, mb, *args)

        monkeypatch.setattr(GradientStep, name, spy)
    return sizes


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("micro", [None, 5, 16])
def test_the_update_takes_micro_batches_of_the_given_size(monkeypatch, compile, micro):
    sizes = record_grad_batches(monkeypatch)
    make_update("gaussian", micro, compile=compile)
    per_minibatch = {None: [16], 5: [5, 5, 5, 1], 16: [16]}[micro]
    assert sizes == per_minibatch * 9  # 3 epochs x 3 minibatches of 16


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
@pytest.mark.parametrize("compile", [False, True])
def test_micro_batch_size_does_not_change_the_update(kind, compile):
    ref, ref_m = make_update(kind, None, compile=compile)
    for micro in (1, 5, 16):
        other, m = make_update(kind, micro, compile=compile)
        for (name, a), b in zip(ref.state_dict().items(), other.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-5), (micro, name)
        for key in ref_m:
            assert m[key] == pytest.approx(ref_m[key], rel=1e-4, abs=1e-6), (micro, key)


@pytest.mark.parametrize("mode", ["seq-mean-token-sum", "seq-mean-token-mean"])
def test_seq_aggregation_micro_batches_do_not_change_the_update(mode):
    batch = random_batch(n=48)
    batch["mask"][5:8] = 0.0
    kw = {"loss_agg_func": mode, "rollout_steps": 8, "minibatch_size": 16}
    ref, _ = make_update("gaussian", None, algo_kw=kw, batch=batch)
    other, _ = make_update("gaussian", 8, algo_kw=kw, batch=batch)
    for k, v in ref.state_dict().items():
        assert torch.allclose(v, other.state_dict()[k], atol=1e-5), k


def test_logprob_forward_micro_batch_size_is_honored(monkeypatch, tmp_path):
    sizes: list[int] = []
    original = ActorCritic.evaluate

    def spy(self, obs, action):
        sizes.append(obs.shape[0])
        return original(self, obs, action)

    monkeypatch.setattr(ActorCritic, "evaluate", spy)
    algo = {
        "rollout_steps": 16,
        "minibatch_size": 16,
        "update_epochs": 1,
        "recompute_old_logprobs": True,
        "logprob_forward_micro_batch_size": 12,
    }
    train(tiny_config("Pendulum-v1", algorithm=algo, trainer={"total_steps": 32}), tmp_path)
    # One rollout of 2 envs x 16 steps, in chunks of 12: the first rollout evaluated again
    # under its newly merged observation statistics, then the recomputed old log-probs.
    assert sizes == [12, 12, 8] * 2


def test_in_reward_kl_takes_logprob_forward_micro_batches(monkeypatch, tmp_path):
    sizes: list[int] = []
    original = ActorCritic.forward

    def spy(self, obs):
        if not self.training:  # the frozen reference
            sizes.append(obs.shape[0])
        return original(self, obs)

    monkeypatch.setattr(ActorCritic, "forward", spy)
    algo = {
        "rollout_steps": 16,
        "minibatch_size": 16,
        "update_epochs": 1,
        "use_kl_in_reward": True,
        "logprob_forward_micro_batch_size": 10,
    }
    train(tiny_config("Pendulum-v1", algorithm=algo, trainer={"total_steps": 32}), tmp_path)
    assert sizes == [10, 10, 10, 2]


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_micro_batch_sizes_do_not_change_training(tmp_path, env_id):
    base = {"rollout_steps": 16, "minibatch_size": 16, "update_epochs": 2}
    ref = train(tiny_config(env_id, env={"num_envs": 3}, algorithm=base), tmp_path / "ref")
    variants = [
        {"micro_batch_size": 5},
        {"rollout_micro_batch_size": 1},
        {"recompute_old_logprobs": True, "logprob_forward_micro_batch_size": 7},
    ]
    ref_recompute = train(
        tiny_config(
            env_id, env={"num_envs": 3}, algorithm={**base, "recompute_old_logprobs": True}
        ),
        tmp_path / "rr",
    )
    for i, extra in enumerate(variants):
        other = train(
            tiny_config(env_id, env={"num_envs": 3}, algorithm={**base, **extra}), tmp_path / str(i)
        )
        target = ref_recompute if extra.get("recompute_old_logprobs") else ref
        pr, po = params(target), params(other)
        for k in pr:
            assert torch.allclose(pr[k], po[k], atol=1e-5), (extra, k)


def test_rollout_micro_batch_size_does_not_change_collection():
    from support import build

    for inference in ("host", "device"):
        results = []
        for micro in (None, 1, 3):
            cfg = tiny_config(
                "Pendulum-v1",
                env={"num_envs": 5},
                algorithm={"rollout_steps": 12, "minibatch_size": 12},
            )
            envs, _, buf, col = build(cfg, micro, inference)
            col.collect()
            envs.close()
            results.append(buf)
        for other in results[1:]:
            for name in ("obs", "actions", "logprobs", "values", "next_values", "rewards"):
                a, b = getattr(results[0], name), getattr(other, name)
                assert torch.allclose(a, b, atol=1e-6), (inference, name)
