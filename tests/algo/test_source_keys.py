"""Every source key of the `algorithm:` block is honored (docs/design.md, rule 4): each key's
own effect on the advantages or the update, against the same computation written out by hand
(tests/ppo_reference.py) with the key's value and at its default."""

from __future__ import annotations

import io

import ppo_reference
import pytest
import torch
from conftest import tiny_config

from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.snapshot import NumpyPolicy
from embodied_ppo.runner.trainer import Trainer

# Each source key's case: the blocks that set it (over KEY_BASE's, or EPISODIC's for the
# critic-free estimators), and what must show its effect. Every case is one iteration of a
# trainer whose update takes 3 full-batch steps: the later steps see ratios and values that the
# earlier ones moved, so the clips and the dual clip act as they do in training. What the update
# got (the rollout, the policy) is captured; the advantages and the update are then written out
# again by hand (ppo_reference) with the key's value, and the package must agree with that and
# differ from the same hand computation at the key's default.
KEY_BASE = {
    "env": {"num_envs": 2},
    "algorithm": {"rollout_steps": 16, "minibatch_size": 32, "update_epochs": 3},
    "optim": {"lr": 0.02},
    "trainer": {"total_steps": 32},
}
EPISODIC = {  # CartPole in groups of 2 envs, one episode each (pole falls or 20 steps)
    "env": {"num_envs": 4, "max_episode_steps": 20},
    "algorithm": {
        "adv_type": "grpo", "group_size": 2, "rollout_steps": 20, "minibatch_size": 80,
        "update_epochs": 3,
    },
    "optim": {"lr": 0.02},
    "trainer": {"total_steps": 80},
}  # fmt: skip
# The schema's defaults of the keys the hand computations read, written out.
DEFAULTS = {
    "normalize_advantages": True, "group_size": 1, "adv_type": "gae", "loss_type": "actor_critic",
    "loss_agg_func": "token-mean", "entropy_bonus": 0.0, "clip_ratio_high": 0.2,
    "clip_ratio_low": 0.2, "clip_ratio_c": None, "value_clip": 0.2, "gamma": 0.99,
    "gae_lambda": 0.95, "huber_delta": 10.0,
}  # fmt: skip
KEY_CASES = {
    "normalize_advantages": {"normalize_advantages": False},
    "group_size": {"group_size": 4},
    "adv_type": {"adv_type": "reinforce_plus_plus", "group_size": 1},
    "loss_type": {"loss_type": "actor"},
    "loss_agg_func-seq-mean-token-sum": {"loss_agg_func": "seq-mean-token-sum"},
    "loss_agg_func-seq-mean-token-mean": {"loss_agg_func": "seq-mean-token-mean"},
    "rollout_micro_batch_size": {"rollout_micro_batch_size": 1},
    "logprob_forward_micro_batch_size": {
        "recompute_old_logprobs": True, "logprob_forward_micro_batch_size": 5,
    },
    "entropy_bonus": {"entropy_bonus": 0.5},
    "clip_ratio_high": {"clip_ratio_high": 0.01},
    "clip_ratio_low": {"clip_ratio_low": 0.01},
    "clip_ratio_c": {"clip_ratio_c": 1.05},
    "value_clip": {"value_clip": 0.001},
    "gamma": {"gamma": 0.5},
    "gae_lambda": {"gae_lambda": 0.5},
    "huber_delta": {"huber_delta": 0.01},
}  # fmt: skip
EPISODIC_CASES = {"group_size", "adv_type", "loss_type", "loss_agg_func-seq-mean-token-mean"}


def key_run(tmp_path, name, case, env_id, grads=False):
    """One iteration with the case's keys; what its update got and gave (with `grads`, the
    gradient of each step), and the trainer."""
    base = EPISODIC if case in EPISODIC_CASES else KEY_BASE
    blocks = {block: dict(values) for block, values in base.items()}
    if case is not None:
        blocks["algorithm"].update(KEY_CASES[case])
    trainer = Trainer(tiny_config(env_id, **blocks), tmp_path / name, progress_stream=io.StringIO())
    seen = ppo_reference.capture(trainer, grads)
    trainer.train()
    return trainer, seen


def hand_advantages(rollout, keys):
    """(advantages, returns) of the captured rollout by the estimator `keys` name, by hand."""
    r, mask = rollout, rollout["mask"]
    if keys["adv_type"] == "gae":
        adv, ret = ppo_reference.gae(
            r["rewards"], r["values"], r["next_values"], r["terminated"], r["ends"],
            keys["gamma"], keys["gae_lambda"],
        )  # fmt: skip
    else:
        ret = ppo_reference.returns_to_go(r["rewards"], mask, keys["gamma"])
        if keys["adv_type"] == "grpo":
            adv = ppo_reference.grpo(r["rewards"], mask, keys["group_size"])
        else:  # reinforce_plus_plus
            adv = ppo_reference.standardize(ret, mask)
    if keys["normalize_advantages"]:
        adv = ppo_reference.standardize(adv, mask)
    return adv, ret


def hand_update(seen, keys):
    """The captured update done again by hand with the keys' values: (policy after, metrics)."""
    adv, ret = hand_advantages(seen.rollout, keys)
    rollout = {**seen.rollout, "advantages": adv, "returns": ret}
    terms = ppo_reference.Terms(
        clip_low=keys["clip_ratio_low"], clip_high=keys["clip_ratio_high"],
        dual_clip=keys["clip_ratio_c"], entropy_bonus=keys["entropy_bonus"],
        value_clip=keys["value_clip"], huber_delta=keys["huber_delta"],
        critic=keys["loss_type"] == "actor_critic", aggregation=keys["loss_agg_func"],
    )  # fmt: skip
    steps = ppo_reference.Steps(lr=0.02)
    policy, metrics = ppo_reference.adam_steps(seen.policy, rollout, terms, 3, steps)
    return policy, metrics


def count_rows(monkeypatch, cls, name, into):
    """Record the rows of the observations each call of `cls.name` gets."""
    method = getattr(cls, name)

    def spy(self, obs, *args, **kwargs):
        into.append(len(obs))
        return method(self, obs, *args, **kwargs)

    monkeypatch.setattr(cls, name, spy)


@pytest.mark.parametrize("case", list(KEY_CASES))
def test_each_source_key_is_honored(tmp_path, monkeypatch, case):
    env_id = "CartPole-v1" if case in EPISODIC_CASES else "Pendulum-v1"
    rows: list[int] = []  # observations per policy forward pass in collection
    sizes: list[int] = []  # rows per forward pass of the recomputed log-probs
    if case == "rollout_micro_batch_size":
        count_rows(monkeypatch, NumpyPolicy, "act", rows)
        count_rows(monkeypatch, ActorCritic, "act", rows)
    if case == "logprob_forward_micro_batch_size":
        count_rows(monkeypatch, ActorCritic, "evaluate", sizes)
    trainer, seen = key_run(tmp_path, "run", case, env_id, grads=case == "entropy_bonus")
    base_keys = dict(DEFAULTS)
    if case in EPISODIC_CASES:
        base_keys.update(adv_type="grpo", group_size=2)
    keys = {**base_keys, **{k: v for k, v in KEY_CASES[case].items() if k in DEFAULTS}}
    r = seen.rollout

    # The advantages and returns the update trained on are the estimator's, by hand.
    adv, ret = hand_advantages(r, keys)
    assert torch.allclose(r["advantages"], adv, atol=1e-5), case
    assert torch.allclose(r["returns"], ret, atol=1e-5), case
    # The update is the hand-written one with the key's value: parameters and metrics.
    policy, metrics = hand_update(seen, keys)
    assert ppo_reference.max_difference(trainer.policy, policy) < 1e-5, case
    for name, value in metrics.items():
        assert seen.metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), (case, name)
    if case == "loss_type":
        assert "value_loss" not in seen.metrics
        assert torch.equal(trainer.policy.value_head.weight, seen.policy.value_head.weight)

    # The key has its own effect here: at its default the same hand computation differs.
    key, default = case.split("-")[0], base_keys
    if key in ("normalize_advantages", "group_size", "adv_type", "gamma", "gae_lambda"):
        other, _ = hand_advantages(r, default)
        assert (other - adv).abs().max() > 0.05, case
    elif key in DEFAULTS:
        other_policy, other_metrics = hand_update(seen, default)
        effect = {  # the metric where the key shows
            "loss_type": "policy_loss", "loss_agg_func": "policy_loss", "entropy_bonus": None,
            "clip_ratio_high": "clipfrac", "clip_ratio_low": "clipfrac",
            "clip_ratio_c": "dual_clipfrac", "value_clip": "value_clipfrac",
            "huber_delta": "value_loss",
        }[key]  # fmt: skip
        if effect is not None:
            assert abs(metrics[effect] - other_metrics[effect]) > 1e-3, (case, effect)
        else:
            # The loss is lower by 0.5 x the entropy, the token mean of sum(log_std) + const:
            # the first step's gradient is the one without the bonus, less 0.5 on the log-std.
            rollout = {**r, "advantages": adv, "returns": ret}
            without = ppo_reference.gradient(seen.policy, rollout, ppo_reference.Terms())
            names = [n for n, _ in seen.policy.named_parameters()]
            numels = [p.numel() for _, p in seen.policy.named_parameters()]
            at = sum(numels[: names.index("log_std")])
            expected = without.clone()
            expected[at] -= 0.5  # Pendulum: one action dimension
            assert torch.allclose(seen.grads[0], expected, atol=1e-5)
        assert ppo_reference.max_difference(other_policy, policy) > 1e-3, case
    elif key == "rollout_micro_batch_size":
        # One env per forward pass, and the same collection and update as without it (rule 3).
        assert rows and max(rows) == 1
        _, plain = key_run(tmp_path, "plain", None, env_id)
        for name in ("obs", "actions", "logprobs", "values", "rewards", "advantages"):
            assert torch.allclose(r[name], plain.rollout[name], atol=1e-5), name
    else:  # logprob_forward_micro_batch_size
        # The old log-probs are recomputed in forward passes of 5 rows, and are the log-probs
        # of the actions under the policy that collected them.
        assert sizes == [5] * 6 + [2]
        dist, _ = ppo_reference.distribution(seen.policy, r["obs"].reshape(32, -1))
        with torch.no_grad():
            hand = dist.log_prob(r["actions"].reshape(32, -1)).reshape(16, 2)
        assert torch.allclose(r["logprobs"], hand, atol=1e-5)
