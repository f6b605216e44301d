"""GAE against values computed by hand, one case per way an episode can end."""

from __future__ import annotations

import pytest
import torch

from embodied_ppo.algo.advantages import gae, linear_scan, masked_normalize

G, L = 0.9, 0.8


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), 1)


def run(rewards, values, next_values, terminated, ends):
    return gae(
        t(*rewards), t(*values), t(*next_values), t(*terminated), t(*ends), gamma=G, gae_lambda=L
    )


def test_no_episode_end_bootstraps_with_last_value():
    # 3 steps, V(s3) = 4.0 bootstraps the last step.
    r, v = [1.0, 2.0, 3.0], [0.5, 1.0, 1.5]
    nv = [1.0, 1.5, 4.0]
    d2 = 3.0 + G * 4.0 - 1.5
    d1 = 2.0 + G * 1.5 - 1.0
    d0 = 1.0 + G * 1.0 - 0.5
    a2 = d2
    a1 = d1 + G * L * a2
    a0 = d0 + G * L * a1
    adv, ret = run(r, v, nv, [0, 0, 0], [0, 0, 0])
    assert torch.allclose(adv.flatten(), torch.tensor([a0, a1, a2]))
    assert torch.allclose(ret.flatten(), torch.tensor([a0 + 0.5, a1 + 1.0, a2 + 1.5]))


def test_termination_bootstraps_zero_and_cuts_trace():
    # Episode terminates at step 1; step 2 belongs to a new episode.
    r, v = [1.0, 2.0, 3.0], [0.5, 1.0, 1.5]
    nv = [1.0, 99.0, 4.0]  # 99 = value of the reset obs: must not leak in
    a2 = 3.0 + G * 4.0 - 1.5
    a1 = 2.0 - 1.0  # terminal: no bootstrap, no trace from step 2
    a0 = (1.0 + G * 1.0 - 0.5) + G * L * a1
    adv, _ = run(r, v, nv, [0, 1, 0], [0, 1, 0])
    assert torch.allclose(adv.flatten(), torch.tensor([a0, a1, a2]))


def test_truncation_bootstraps_with_final_obs_value_and_cuts_trace():
    # Time limit at step 1: next_values[1] = V(final_obs) = 7.0.
    r, v = [1.0, 2.0, 3.0], [0.5, 1.0, 1.5]
    nv = [1.0, 7.0, 4.0]
    a2 = 3.0 + G * 4.0 - 1.5
    a1 = 2.0 + G * 7.0 - 1.0  # bootstrap with V(final_obs), trace cut
    a0 = (1.0 + G * 1.0 - 0.5) + G * L * a1
    adv, _ = run(r, v, nv, [0, 0, 0], [0, 1, 0])
    assert torch.allclose(adv.flatten(), torch.tensor([a0, a1, a2]))


def test_step_both_terminated_and_truncated_counts_as_termination():
    r, v = [1.0, 2.0], [0.5, 1.0]
    nv = [1.0, 7.0]
    a1 = 2.0 - 1.0
    a0 = (1.0 + G * 1.0 - 0.5) + G * L * a1
    adv, _ = run(r, v, nv, [0, 1], [0, 1])
    assert torch.allclose(adv.flatten(), torch.tensor([a0, a1]))


def test_envs_are_independent_columns():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 5.0]])
    values = torch.zeros(2, 2)
    nv = torch.tensor([[0.0, 0.0], [2.0, 3.0]])
    term = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    adv, _ = gae(rewards, values, nv, term, term, gamma=G, gae_lambda=L)
    assert adv[1, 0] == pytest.approx(1.0 + G * 2.0)
    assert adv[0, 0] == pytest.approx(1.0 + G * L * (1.0 + G * 2.0))
    assert adv[0, 1] == pytest.approx(0.0)
    assert adv[1, 1] == pytest.approx(5.0 + G * 3.0)


def test_lambda_one_gives_discounted_returns_minus_values():
    T = 5
    r = torch.rand(T, 3)
    v = torch.rand(T, 3)
    last = torch.rand(3)
    nv = torch.cat([v[1:], last[None]])
    zeros = torch.zeros(T, 3)
    adv, ret = gae(r, v, nv, zeros, zeros, gamma=0.97, gae_lambda=1.0)
    expected = torch.zeros(T, 3)
    acc = last
    for i in range(T - 1, -1, -1):
        acc = r[i] + 0.97 * acc
        expected[i] = acc
    assert torch.allclose(ret, expected, atol=1e-5)


def test_normalize_uses_population_statistics():
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    y = masked_normalize(x, torch.ones_like(x))
    assert y.mean().abs() < 1e-6
    assert y.std(correction=0) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("T", [1, 2, 3, 100, 2048])
def test_gae_scan_equals_the_backward_loop(T):
    g = torch.Generator().manual_seed(T)
    rewards, values, next_values = (torch.randn(T, 3, generator=g) for _ in range(3))
    terminated = (torch.rand(T, 3, generator=g) < 0.02).float()
    ends = torch.maximum(terminated, (torch.rand(T, 3, generator=g) < 0.02).float())
    adv, ret = gae(rewards, values, next_values, terminated, ends, gamma=0.99, gae_lambda=0.95)
    expected, last = torch.zeros(T, 3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for t in range(T - 1, -1, -1):
        delta = rewards[t] + 0.99 * (1 - terminated[t]) * next_values[t] - values[t]
        last = delta.double() + 0.99 * 0.95 * (1 - ends[t].double()) * last
        expected[t] = last
    assert torch.allclose(adv.double(), expected, atol=1e-5)
    assert torch.allclose(ret, adv + values)


def test_linear_scan_with_a_start_value():
    coef = torch.tensor([0.5, 2.0, 0.0, 3.0], dtype=torch.float64)
    inputs = torch.tensor([1.0, 1.0, 4.0, -1.0], dtype=torch.float64)
    # x0 = 0.5*10 + 1 = 6; x1 = 2*6 + 1 = 13; x2 = 0*13 + 4 = 4; x3 = 3*4 - 1 = 11
    assert linear_scan(coef, inputs, 10.0).tolist() == [6.0, 13.0, 4.0, 11.0]
