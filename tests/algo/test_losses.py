"""Each loss term against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch
from support import KW, actor_critic_loss

from embodied_ppo.algo.losses import explained_variance, value_error


def policy_only(ratio, adv, **kw):
    ratio = torch.tensor(ratio, dtype=torch.float64)
    adv = torch.tensor(adv, dtype=torch.float64)
    lp = torch.log(ratio)
    zeros = torch.zeros_like(adv)
    return actor_critic_loss(lp, zeros, adv, zeros, zeros, zeros, zeros, **{**KW, **kw})


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.5, 2.0, -2.0 * 1.3),  # A > 0, ratio above 1 + high: clipped at 1.3
        (0.5, 2.0, -2.0 * 0.5),  # A > 0, ratio below 1 - low: unclipped (pessimistic) term
        (0.5, -2.0, 2.0 * 0.8),  # A < 0, ratio below 1 - low: clipped at 0.8
        (1.5, -2.0, 2.0 * 1.5),  # A < 0, ratio above 1 + high: unclipped
        (1.1, 1.0, -1.1),  # inside the trust region
    ],
)
def test_clipped_surrogate_both_sides(ratio, adv, expected):
    _, m = policy_only([ratio], [adv])
    assert m["policy_loss"].item() == pytest.approx(expected)


def test_clipfrac_uses_asymmetric_bounds():
    _, m = policy_only([0.85, 1.25, 1.35, 0.75], [1.0, 1.0, 1.0, 1.0])
    # low=0.2 -> 0.8, high=0.3 -> 1.3: only 1.35 and 0.75 are outside.
    assert m["clipfrac"].item() == pytest.approx(0.5)


def test_dual_clip_bounds_negative_advantages_only():
    # ratio 5 with A = -1: plain PPO loss 5.0; dual clip c = 3 bounds it at 3.0.
    _, plain = policy_only([5.0, 5.0], [-1.0, 1.0])
    _, dual = policy_only([5.0, 5.0], [-1.0, 1.0], clip_ratio_c=3.0)
    assert plain["policy_loss"].item() == pytest.approx((5.0 + -1.3) / 2)
    assert dual["policy_loss"].item() == pytest.approx((3.0 + -1.3) / 2)
    assert dual["dual_clipfrac"].item() == pytest.approx(0.5)
    # Below the bound nothing changes.
    _, small = policy_only([1.5], [-1.0], clip_ratio_c=3.0)
    assert small["policy_loss"].item() == pytest.approx(1.5)
    assert small["dual_clipfrac"].item() == 0.0


def test_ratio_uses_clamped_log_ratio():
    lp = torch.tensor([100.0])
    zeros = torch.zeros(1)
    loss, m = actor_critic_loss(lp, zeros, torch.tensor([-1.0]), zeros, zeros, zeros, zeros, **KW)
    assert math.isfinite(loss.item())
    assert m["policy_loss"].item() == pytest.approx(math.exp(20.0), rel=1e-5)


def value_only(v, v_old, ret, value_clip, huber_delta):
    v = torch.tensor(v, dtype=torch.float64)
    kw = {**KW, "value_clip": value_clip, "huber_delta": huber_delta, "value_loss_coef": 1.0}
    zeros = torch.zeros_like(v)
    return actor_critic_loss(
        zeros,
        zeros,
        zeros,
        v,
        torch.tensor(v_old, dtype=torch.float64),
        torch.tensor(ret, dtype=torch.float64),
        zeros,
        **kw,
    )


def test_value_loss_squared_error_without_clip():
    loss, m = value_only([1.0, 3.0], [0.0, 0.0], [2.0, 0.0], None, None)
    assert m["value_loss"].item() == pytest.approx((0.5 * 1 + 0.5 * 9) / 2)
    assert loss.item() == pytest.approx(m["value_loss"].item())


def test_value_clip_takes_the_max_of_clipped_and_unclipped():
    # v moved from 0 to 1 with clip 0.2: v_clip = 0.2; R = 2 -> max(0.5*1, 0.5*1.8^2) = 1.62
    _, m = value_only([1.0], [0.0], [2.0], 0.2, None)
    assert m["value_loss"].item() == pytest.approx(0.5 * 1.8**2)
    assert m["value_clipfrac"].item() == 1.0
    # Moving toward R beyond the clip is penalized; moving past R is the unclipped term.
    _, m = value_only([3.0], [0.0], [2.0], 0.2, None)
    assert m["value_loss"].item() == pytest.approx(max(0.5 * 1.0, 0.5 * 1.8**2))


def test_value_clip_with_huber():
    # delta 1: huber(1.8) = 1 * (1.8 - 0.5) = 1.3; huber(1.0) = 0.5
    _, m = value_only([1.0], [0.0], [2.0], 0.2, 1.0)
    assert m["value_loss"].item() == pytest.approx(1.3)
    _, m = value_only([1.9], [2.0], [2.0], 0.2, 1.0)  # inside the clip, small error: quadratic
    assert m["value_loss"].item() == pytest.approx(0.5 * 0.1**2)
    assert m["value_clipfrac"].item() == 0.0


def test_huber_matches_definition():
    e = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0])
    h = value_error(e, 1.0)
    expected = torch.tensor([2.5, 0.125, 0.0, 0.125, 2.5])
    assert torch.allclose(h, expected)
    assert torch.allclose(value_error(e, None), 0.5 * e**2)


def test_entropy_bonus_sign_lowers_loss_for_higher_entropy():
    zeros = torch.zeros(2)
    ent = torch.tensor([1.0, 3.0])
    kw = {**KW, "entropy_bonus": 0.1}
    loss, m = actor_critic_loss(zeros, zeros, zeros, zeros, zeros, zeros, ent, **kw)
    assert m["entropy"].item() == pytest.approx(2.0)
    assert loss.item() == pytest.approx(-0.1 * 2.0)
    # Gradient descent on the loss increases entropy.
    ent = torch.tensor([1.0], requires_grad=True)
    loss, _ = actor_critic_loss(
        zeros[:1], zeros[:1], zeros[:1], zeros[:1], zeros[:1], zeros[:1], ent, **kw
    )
    loss.backward()
    assert ent.grad.item() < 0


def test_total_loss_combines_terms_with_coefficients():
    lp = torch.log(torch.tensor([1.1, 0.9]))
    zeros = torch.zeros(2)
    adv = torch.tensor([1.0, -1.0])
    v, ret, ent = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]), torch.tensor([0.7, 0.7])
    kw = {**KW, "value_loss_coef": 0.5, "entropy_bonus": 0.01}
    loss, m = actor_critic_loss(lp, zeros, adv, v, zeros, ret, ent, **kw)
    pol = (-1.1 + 0.9) / 2
    val = (0.5 * 1.0 + 0.0) / 2
    assert m["policy_loss"].item() == pytest.approx(pol, abs=1e-6)
    assert loss.item() == pytest.approx(pol + 0.5 * val - 0.01 * 0.7, abs=1e-6)


def test_approx_kl_metric():
    r = torch.tensor([1.2, 0.8], dtype=torch.float64)
    _, m = policy_only(r.tolist(), [1.0, 1.0])
    expected = ((r - 1) - torch.log(r)).mean().item()
    assert m["approx_kl"].item() == pytest.approx(expected)


def test_approx_kl_takes_its_own_weights_where_given():
    """The symmetric update's approx_kl is its collected rows' alone (algo/minibatch_loss.py):
    kl_weights picks them while the loss keeps its weights."""
    r = torch.tensor([1.2, 0.8, 3.0], dtype=torch.float64)
    loss, m = policy_only(r.tolist(), [1.0, 1.0, 1.0])
    kl_w = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    loss_w, m_w = policy_only(r.tolist(), [1.0, 1.0, 1.0], kl_weights=kl_w)
    by_hand = 0.5 * sum(float(x - 1 - math.log(x)) for x in (1.2, 0.8))
    assert m_w["approx_kl"].item() == pytest.approx(by_hand, rel=1e-12)
    assert m["approx_kl"].item() > m_w["approx_kl"].item() + 0.1  # the third row counted
    assert loss_w.item() == loss.item()
    assert m_w["policy_loss"].item() == m["policy_loss"].item()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_approx_kl_is_exact_for_log_probabilities_one_rounding_step_apart(compiled):
    # A policy that has not moved, its old log-probabilities computed elsewhere (the host's
    # inference, another GPU kernel): they differ by rounding. The estimate must stay ~0.5 x^2
    # (1e-14 here), not the +-6e-8 a token that (r - 1) - log r in float32 cancels to, which an
    # early_stop_kl or desired_kl of 1e-8 would read as the policy moving (or below zero).
    # Compiled too: Inductor's CPU kernels take expm1 as exp(x) - 1.
    old = torch.linspace(-3.0, -0.3, 64)
    new = torch.nextafter(old, torch.zeros_like(old))  # one float32 step apart
    zeros = torch.zeros_like(old)
    loss = torch.compile(actor_critic_loss, fullgraph=True) if compiled else actor_critic_loss
    _, m = loss(new, old, zeros, zeros, zeros, zeros, zeros, **KW)
    assert m["approx_kl"].dtype == torch.float32
    exact = 0.5 * (new.double() - old.double()).square().mean().item()
    assert 0.0 <= m["approx_kl"].item() < 1e-12
    assert m["approx_kl"].item() == pytest.approx(exact, rel=0.5)


def test_explained_variance():
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(target, target).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), target).item() == pytest.approx(0.0)
