"""The algorithm surface: estimators, KL control, aggregation, step-size control (each source
key's own effect: test_source_keys.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import tiny_config
from support import random_batch, spec

from embodied_ppo.algo.advantages import (
    discounted_returns,
    episode_returns,
    grpo,
    masked_normalize,
    reinforce_plus_plus,
    rloo,
)
from embodied_ppo.algo.kl import adaptive_kl_coef, kl_estimate
from embodied_ppo.algo.minibatches import aggregation_weights
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.schema import AlgorithmConfig, OptimConfig, with_values
from embodied_ppo.core.errors import CheckpointError, ConfigError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import Categorical, DiagGaussian
from embodied_ppo.runner.trainer import Trainer
from embodied_ppo.vecenv.seeding import group_seeds

# ----------------------------------------------------------------------------- estimators


def test_grpo_hand_computed():
    scores = torch.tensor([1.0, 3.0, 10.0, 10.0, 0.0, 2.0])
    adv = grpo(scores, group_size=2)
    s = math.sqrt(2.0)  # sample std of (1, 3) and of (0, 2)
    assert adv.tolist() == pytest.approx([-1 / s, 1 / s, 0.0, 0.0, -1 / s, 1 / s], abs=1e-5)


def test_rloo_hand_computed():
    scores = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 3.0])
    adv = rloo(scores, group_size=3)
    assert adv.tolist() == pytest.approx([1 - 4, 2 - 3.5, 6 - 1.5, 0 - 1.5, 0 - 1.5, 3 - 0.0])


def test_discounted_and_episode_returns_respect_mask():
    rewards = torch.tensor([[1.0, 2.0], [1.0, 2.0], [1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    g = discounted_returns(rewards, mask, 0.5)
    assert g[:, 0].tolist() == [1 + 0.5 + 0.25, 1 + 0.5, 1.0]
    assert g[:, 1].tolist() == [2.0, 0.0, 0.0]
    assert episode_returns(rewards, mask).tolist() == [3.0, 2.0]


def test_reinforce_plus_plus_whitens_discounted_returns_over_valid_steps():
    rewards = torch.tensor([[1.0, 2.0], [1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = reinforce_plus_plus(rewards, mask, 1.0)
    g = torch.tensor([2.0, 1.0, 2.0])  # valid returns-to-go
    expected = (g - g.mean()) / g.std(correction=0)
    assert adv[0, 0].item() == pytest.approx(expected[0].item(), abs=1e-5)
    assert adv[1, 0].item() == pytest.approx(expected[1].item(), abs=1e-5)
    assert adv[0, 1].item() == pytest.approx(expected[2].item(), abs=1e-5)
    assert adv[1, 1].item() == 0.0


def test_masked_normalize_ignores_masked_entries():
    x = torch.tensor([1.0, 2.0, 3.0, 1000.0])
    m = torch.tensor([1.0, 1.0, 1.0, 0.0])
    y = masked_normalize(x, m)
    assert y[:3].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert y[:3].std(correction=0).item() == pytest.approx(1.0, abs=1e-5)
    assert y[3].item() == 0.0


# ----------------------------------------------------------------------------- KL estimators


def gaussian_pair():
    p = DiagGaussian(torch.tensor([[0.3, -0.2]]), torch.tensor([-0.1, 0.2]))
    q = DiagGaussian(torch.tensor([[0.0, 0.1]]), torch.tensor([0.1, 0.0]))
    return p, q


def test_kl_estimators_against_closed_form_gaussian():
    torch.manual_seed(0)
    p, q = gaussian_pair()
    exact = p.kl(q).item()
    # Closed form by hand for diagonal Gaussians.
    by_hand = sum(
        math.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2 * sq**2) - 0.5
        for mp, mq, sp, sq in zip(
            [0.3, -0.2], [0.0, 0.1], [math.exp(-0.1), math.exp(0.2)], [math.exp(0.1), 1.0]
        )
    )
    assert exact == pytest.approx(by_hand, rel=1e-5)
    n = 400_000
    big_p = DiagGaussian(p.mean.expand(n, 2), p.log_std[0])
    big_q = DiagGaussian(q.mean.expand(n, 2), q.log_std[0])
    a = big_p.sample()
    lp, lq = big_p.log_prob(a), big_q.log_prob(a)
    k1 = kl_estimate("k1", lp, lq)
    k3 = kl_estimate("low_var_kl", lp, lq)
    assert k1.mean().item() == pytest.approx(exact, abs=3e-3)  # unbiased
    assert k3.mean().item() == pytest.approx(exact, abs=3e-3)  # unbiased
    assert (k3 >= 0).all()
    assert k3.var() < k1.var()  # the low-variance estimator
    assert kl_estimate("full", lp[:3], lq[:3], big_p, big_q)[0].item() == pytest.approx(
        exact, rel=1e-5
    )
    assert torch.allclose(kl_estimate("abs", lp, lq), (lp - lq).abs())
    assert torch.allclose(kl_estimate("mse", lp, lq), 0.5 * (lp - lq) ** 2)
    assert torch.allclose(kl_estimate("k2", lp, lq), kl_estimate("mse", lp, lq))


def test_kl_estimators_against_closed_form_categorical():
    torch.manual_seed(0)
    pl, ql = torch.tensor([0.5, 0.3, 0.2]).log(), torch.tensor([0.2, 0.2, 0.6]).log()
    exact = sum(p * math.log(p / q) for p, q in zip([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]))
    n = 400_000
    p, q = Categorical(pl.expand(n, 3)), Categorical(ql.expand(n, 3))
    a = p.sample()
    lp, lq = p.log_prob(a), q.log_prob(a)
    assert kl_estimate("kl", lp, lq).mean().item() == pytest.approx(exact, abs=3e-3)
    assert kl_estimate("k3", lp, lq).mean().item() == pytest.approx(exact, abs=3e-3)
    assert kl_estimate("full", lp, lq, p, q)[0].item() == pytest.approx(exact, rel=1e-5)


def test_the_k3_estimate_of_one_token_is_capped():
    """k3 = exp(-log r) - 1 + log r explodes where the policy gives an action far less
    probability than the reference (log r = -19.9: 4e8); it is capped at K3_CAP, as verl's is,
    so one token cannot dominate a batch, and its gradient is bounded there."""
    from embodied_ppo.algo.kl import K3_CAP

    lp = torch.tensor([-19.9, -2.0, 0.0, 3.0], requires_grad=True)
    k3 = kl_estimate("k3", lp, torch.zeros(4))
    assert k3[0].item() == K3_CAP == 10.0
    uncapped = torch.expm1(-lp.detach()) + lp.detach()
    assert torch.allclose(k3[1:], uncapped[1:])  # below the cap: the estimator unchanged
    k3.sum().backward()
    assert torch.isfinite(lp.grad).all() and lp.grad.abs().max() < 10.0


def test_adaptive_kl_controller_update():
    # kl 2x the target: error clipped to 0.2; coef *= 1 + 0.2 * 100 / 1000
    assert adaptive_kl_coef(0.1, 0.2, 0.1, 100, 1000) == pytest.approx(0.1 * 1.02)
    # kl at half the target: error -0.5 clipped to -0.2
    assert adaptive_kl_coef(0.1, 0.05, 0.1, 100, 1000) == pytest.approx(0.1 * 0.98)
    # small error passes through unclipped
    assert adaptive_kl_coef(0.1, 0.11, 0.1, 500, 1000) == pytest.approx(0.1 * (1 + 0.1 * 0.5))


# ----------------------------------------------------------------------------- aggregation


def test_aggregation_weights():
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0, 0.0]])  # two sequences of 3: lengths 2 and 1
    tok = aggregation_weights(mask, "token-mean", 3)[0]
    assert tok.tolist() == pytest.approx([1 / 3, 1 / 3, 0, 1 / 3, 0, 0])
    ssum = aggregation_weights(mask, "seq-mean-token-sum", 3)[0]
    assert ssum.tolist() == pytest.approx([0.5, 0.5, 0, 0.5, 0, 0])
    smean = aggregation_weights(mask, "seq-mean-token-mean", 3)[0]
    assert smean.tolist() == pytest.approx([0.25, 0.25, 0, 0.5, 0, 0])


def test_aggregation_weights_of_an_epoch_reduce_once():
    # The denominators of all minibatches of an epoch travel in one all-reduce.
    calls = []

    def reduce(x):
        calls.append(x.shape)
        return x * 2  # as if a second process had the same tokens

    masks = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    w = aggregation_weights(masks, "token-mean", 2, reduce)
    assert calls == [torch.Size([2])]
    assert w.flatten().tolist() == pytest.approx([0.25, 0.25, 0, 0] + [0.125] * 4)


def make_updater(algo_kw=None, optim_kw=None, reference=None, seed=0):
    torch.manual_seed(seed)
    policy = ActorCritic(spec())
    algo = AlgorithmConfig(minibatch_size=16, update_epochs=4, **(algo_kw or {}))
    optim = OptimConfig(lr=1e-2, **(optim_kw or {}))
    return policy, PPOUpdate(
        policy,
        torch.Generator().manual_seed(1),
        UpdateSettings(algo, optim),
        reference,
    )


def test_masked_tokens_do_not_affect_the_update():
    batch = random_batch(n=48)
    batch["mask"][40:] = 0.0
    a, upd = make_updater()
    upd.update(batch, 8)
    poisoned = {k: v.clone() for k, v in batch.items()}
    poisoned["advantages"][40:] = 1e3
    poisoned["returns"][40:] = -1e3
    b, upd = make_updater()
    upd.update(poisoned, 8)
    for k, v in a.state_dict().items():
        assert torch.allclose(v, b.state_dict()[k], atol=1e-6), k


# ----------------------------------------------------------------------------- step-size control


def on_policy_batch(policy):
    batch = random_batch()
    with torch.no_grad():
        batch["logprobs"], _, batch["values"], _ = policy.evaluate(batch["obs"], batch["actions"])
    return batch


def test_early_stopping_triggers_at_the_threshold():
    policy, upd = make_updater({"early_stop_kl": 1e-9})
    m = upd.update(on_policy_batch(policy), 8)
    # The first minibatch has ratio 1 (kl 0): it steps; the next one exceeds the threshold.
    assert m["num_gradient_steps"] == 1 and m["early_stopped"] == 1.0
    policy, upd = make_updater({"early_stop_kl": 1e9})
    m = upd.update(on_policy_batch(policy), 8)
    assert m["num_gradient_steps"] == 4 * 3 and m["early_stopped"] == 0.0


def test_adaptive_schedule_moves_the_learning_rate():
    _, upd = make_updater(
        optim_kw={"schedule": "adaptive", "desired_kl": 1e-6, "lr_min": 1e-5, "lr_max": 1e-1}
    )
    upd.update(random_batch(), 8)
    assert upd.lr < 1e-2  # KL far above the tiny target: the rate fell
    _, upd = make_updater(
        optim_kw={"schedule": "adaptive", "desired_kl": 10.0, "lr_min": 1e-5, "lr_max": 1e-1}
    )
    upd.update(random_batch(), 8)
    assert upd.lr == pytest.approx(1e-1)  # far below: rose until the clamp


def test_every_update_reads_one_learning_rate_tensor(monkeypatch):
    # A CUDA graph replays from the addresses it captured: the steps must get the same tensor
    # at every update (filled with that update's rate), and the adaptive schedule's in-place
    # change of it must reach the optimizer.
    _, upd = make_updater(
        optim_kw={"schedule": "adaptive", "desired_kl": 1e-6, "lr_min": 1e-5, "lr_max": 1e-1}
    )
    seen: list[tuple[torch.Tensor, float]] = []  # the tensors are kept, so no id is reused
    targets: list[tuple[torch.Tensor, float]] = []  # the KL target's, the same way
    impl = upd.step._step

    def spy(flat, mb, weights, rates, adam):
        lr, kl_target = rates
        seen.append((lr, float(lr)))
        targets.append((kl_target, float(kl_target)))
        return impl(flat, mb, weights, rates, adam)

    monkeypatch.setattr(upd.step, "_step", spy)
    upd.update(random_batch(), 8)
    first = upd.lr
    upd.set_lr(0.5)  # the schedule's values for the next update
    upd.set_kl_target(0.25)
    upd.update(random_batch(), 8)
    assert all(t is seen[0][0] for t, _ in seen)
    assert seen[0][1] == pytest.approx(1e-2) and first < 1e-2  # the KL lowered it in place
    assert seen[len(seen) // 2][1] == pytest.approx(0.5)  # refilled, not the old value
    assert all(t is targets[0][0] for t, _ in targets)
    assert targets[0][1] == pytest.approx(1e-6) and targets[-1][1] == pytest.approx(0.25)


@pytest.mark.parametrize("micro", [8, None], ids=["grads-then-apply", "one-step"])
def test_under_cuda_graphs_every_tensor_a_step_writes_is_marked_static(micro):
    # A CUDA graph that writes an input not marked static is not captured at all (torch runs the
    # step without CUDA graphs): the flat parameters, Adam's state and the learning rate must go
    # in as the very tensors marked static. The mark is an attribute of the tensor object, so an
    # alias such as `flat.detach()` loses it. Checked on the CPU, where the marks are the same.
    _, upd = make_updater(
        {"micro_batch_size": micro}, optim_kw={"schedule": "adaptive", "max_grad_norm": 0.5}
    )
    step = upd.step
    step.cudagraphs = True  # what a compiled step on a GPU sets
    calls: dict[str, list[tuple]] = {"grads": [], "apply": [], "step": []}

    def spy(name, impl):
        def call(*args):
            calls[name].append(args)
            return impl(*args)

        return call

    step.compiled = True  # the calls take the compiled path (`_guarded`), here with spies
    step._grads, step._apply, step._step = (
        spy(n, f) for n, f in zip(calls, step._impls, strict=True)
    )
    upd.update(random_batch(), 8)
    upd.update(random_batch(), 8)

    def static(t) -> bool:
        return getattr(t, "_dynamo_static_input_type", None) is not None

    used = ["grads", "apply"] if micro else ["step"]
    assert [n for n in calls if calls[n]] == used
    for flat, *_ in calls["grads"]:
        assert flat is step.flat and static(flat)
    for args in calls["apply"] + calls["step"]:
        flat, (lr, kl_target), adam = args[0], args[-2], args[-1]
        assert flat is step.flat and lr is step.learning_rate() and adam is step.adam.tensors
        assert kl_target is step._kl_target  # read, not written, but its address is kept too
        assert all(static(t) for t in (flat, lr, kl_target, *adam))


# ----------------------------------------------------------------------------- KL loss


@pytest.mark.parametrize("kind", ["k1", "abs", "mse", "low_var_kl", "full"])
def test_kl_loss_is_logged_and_changes_the_update(kind):
    kw = {"use_kl_loss": True, "kl_loss_type": kind}
    torch.manual_seed(5)
    ref = ActorCritic(spec())
    ref.requires_grad_(False)
    a, upd = make_updater({**kw, "kl_loss_coef": 0.0}, reference=ref)
    m0 = upd.update(random_batch(), 8)
    b, upd = make_updater({**kw, "kl_loss_coef": 10.0}, reference=ref)
    m1 = upd.update(random_batch(), 8)
    assert "kl_loss" in m0 and m0["kl_loss"] != 0.0
    assert not torch.equal(a.action_head.weight, b.action_head.weight)
    assert m1["kl_loss"] < m0["kl_loss"] or kind == "k1"


# ----------------------------------------------------------------------------- training runs


def run(tmp_path, name, env_id="CartPole-v1", **blocks):
    cfg = tiny_config(env_id, **blocks)
    trainer = Trainer(cfg, tmp_path / name)
    trainer.train()
    return trainer


def grpo_blocks(**algo):
    return {
        "env": {"num_envs": 4, "max_episode_steps": 20},
        "algorithm": {
            "adv_type": "grpo",
            "group_size": 2,
            "loss_type": "actor",
            "rollout_steps": 20,
            "minibatch_size": 40,
            **algo,
        },
        "trainer": {"total_steps": 160},
    }


def test_group_members_start_from_identical_observations(tmp_path):
    cfg = tiny_config("Pendulum-v1", **grpo_blocks())
    trainer = Trainer(cfg, tmp_path)
    starts = []
    for it in range(2):
        trainer.collector.collect(group_seeds(cfg.trainer.seed, 4, 2, it))
        starts.append(trainer.buffer.obs[0].clone())
    trainer.envs.close()
    for obs in starts:
        assert torch.equal(obs[0], obs[1]) and torch.equal(obs[2], obs[3])
        assert not torch.equal(obs[0], obs[2])
    assert not torch.equal(starts[0][0], starts[1][0])  # fresh seeds each rollout


def test_episodic_collection_masks_steps_after_the_episode(tmp_path):
    cfg = tiny_config("CartPole-v1", **grpo_blocks())
    trainer = Trainer(cfg, tmp_path)
    stats = trainer.collector.collect(group_seeds(0, 4, 2, 0))
    trainer.envs.close()
    mask = trainer.buffer.mask
    lengths = mask.sum(0).long().tolist()
    assert sorted(lengths) == sorted(stats.episode_lengths)  # one episode per env
    for n, length in enumerate(lengths):
        assert mask[:length, n].all() and not mask[length:, n].any()


def test_critic_free_actor_loss_leaves_the_value_head_untouched(tmp_path):
    t = run(tmp_path, "a", **grpo_blocks())
    init = Trainer(tiny_config("CartPole-v1", **grpo_blocks()), tmp_path / "b")
    init.envs.close()
    assert torch.equal(t.policy.value_head.weight, init.policy.value_head.weight)
    assert not torch.equal(t.policy.action_head.weight, init.policy.action_head.weight)


def base_blocks():
    return {
        "env": {"num_envs": 2},
        "algorithm": {"rollout_steps": 16, "minibatch_size": 8, "update_epochs": 8},
        "optim": {"lr": 0.02},
        "trainer": {"total_steps": 64},
    }


def merged(extra):
    blocks = base_blocks()
    for block, values in extra.items():
        blocks.setdefault(block, {}).update(values)
    return blocks


def test_dual_clip_is_active_in_a_real_update(tmp_path):
    t = run(tmp_path, "a", "Pendulum-v1", **merged({"algorithm": {"clip_ratio_c": 1.05}}))
    state = load_checkpoint(t.run_dir)
    assert state["global_step"] == 64
    records = [json.loads(x) for x in (t.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["losses/dual_clipfrac"] for r in records) > 0


# ----------------------------------------------------------------------------- reference and fine-tuning


def test_init_from_and_reference_checkpoint(tmp_path):
    src = run(tmp_path, "src", "Pendulum-v1")
    ft = Trainer(
        tiny_config(
            "Pendulum-v1", model={"init_from": str(src.run_dir)}, algorithm={"use_kl_loss": True}
        ),
        tmp_path / "ft",
    )
    for k, v in src.policy.state_dict().items():
        assert torch.equal(ft.policy.state_dict()[k], v)  # weights and normalizer statistics
        assert torch.equal(ft.reference.state_dict()[k], v)  # snapshot at the start
    ft.envs.close()
    ref = Trainer(
        tiny_config(
            "Pendulum-v1",
            algorithm={"use_kl_in_reward": True, "reference_checkpoint": str(src.run_dir)},
        ),
        tmp_path / "ref",
    )
    assert torch.equal(ref.reference.action_head.weight, src.policy.action_head.weight)
    assert not torch.equal(ref.policy.action_head.weight, src.policy.action_head.weight)
    ref.envs.close()
    with pytest.raises(CheckpointError, match="has obs_dim 4"):
        Trainer(
            tiny_config(
                "Pendulum-v1",
                algorithm={
                    "use_kl_loss": True,
                    "reference_checkpoint": str(run(tmp_path, "cp", "CartPole-v1").run_dir),
                },
            ),
            tmp_path / "x",
        )
    with pytest.raises(CheckpointError, match="model.init_from"):
        Trainer(
            tiny_config("Pendulum-v1", model={"init_from": str(src.run_dir), "hidden_sizes": [8]}),
            tmp_path / "y",
        )


def test_kl_in_reward_penalizes_rewards_and_adapts_the_coefficient(tmp_path):
    src = run(tmp_path, "src", "Pendulum-v1", optim={"lr": 0.05})
    cfg = tiny_config(
        "Pendulum-v1",
        env={"normalize_reward": False, "clip_reward": None},
        algorithm={
            "use_kl_in_reward": True,
            "kl_penalty": "full",
            "reference_checkpoint": str(src.run_dir),
            "kl_ctrl": {"type": "adaptive", "kl_coef": 0.5, "target_kl": 1e-6, "horizon": 100},
        },
    )
    t = Trainer(cfg, tmp_path / "kl")
    t.collector.collect()
    batch = t.buffer.flat("obs", "actions", "logprobs")
    raw = t.buffer.rewards.clone()
    scalars = t.in_reward_kl.penalize(t.buffer.rewards, t.buffer.mask, batch)
    t.envs.close()
    with torch.no_grad():
        exact = t.policy(batch["obs"])[0].kl(t.reference(batch["obs"])[0]).reshape(raw.shape)
    assert torch.allclose(t.buffer.rewards, raw - 0.5 * exact, atol=1e-5)
    assert scalars["charts/kl_in_reward"] == pytest.approx(exact.mean().item(), rel=1e-4)
    assert scalars["charts/kl_coef"] == 0.5
    assert t.in_reward_kl.coef == pytest.approx(
        0.5 * (1 + 0.2 * 32 / 100)
    )  # KL above target: coefficient rises


# ----------------------------------------------------------------------------- combinations


@pytest.mark.parametrize(
    "algo, env, fragment",
    [
        ({"adv_type": "grpo"}, {}, "algorithm.group_size: got 1 with adv_type 'grpo'"),
        (
            {"adv_type": "rloo", "group_size": 3},
            {"num_envs": 4},
            "env.num_envs: got 4, expected a multiple of algorithm.group_size = 3",
        ),
        ({"group_size": 2}, {}, "algorithm.group_size: got 2 with adv_type 'gae'"),
        ({"loss_type": "actor"}, {}, "GAE needs a critic"),
        ({"value_loss_coef": 0.0}, {}, "trains no critic"),
        (
            {"loss_agg_func": "seq-mean-token-mean", "minibatch_size": 8},
            {},
            "must be a multiple of algorithm.rollout_steps = 16",
        ),
        ({"reference_checkpoint": "runs/x"}, {}, "neither use_kl_loss nor use_kl_in_reward"),
        ({"kl_loss_type": "k4"}, {}, "algorithm.kl_loss_type: got 'k4'"),
        (
            {"kl_ctrl": {"type": "pid"}},
            {},
            "algorithm.kl_ctrl.type: got 'pid', allowed: fixed | adaptive",
        ),
        (
            {"kl_ctrl": {"horizn": 3}},
            {},
            "algorithm.kl_ctrl.horizn: unknown key; did you mean 'horizon'",
        ),
        ({"early_stop_kl": 0.0}, {}, "algorithm.early_stop_kl: got 0.0"),
    ],
)
def test_invalid_combinations_are_rejected(algo, env, fragment):
    with pytest.raises(ConfigError) as info:
        tiny_config("CartPole-v1", algorithm=algo, env=env)
    assert fragment in str(info.value)


def test_episodic_estimators_need_a_fitting_time_limit(tmp_path):
    cfg = tiny_config("CartPole-v1", **grpo_blocks())
    # CartPole's registered limit is 500 > rollout_steps 20
    cfg = with_values(cfg, env__max_episode_steps=None)
    with pytest.raises(ConfigError, match="must be >= the episode limit 500"):
        Trainer(cfg, tmp_path)
