"""Random network distillation (`algorithm.rnd`): the intrinsic reward falls where the agent
has been and stays high where it has not; its state is all a checkpoint needs to continue."""

from __future__ import annotations

import io

import pytest
import torch

from embodied_ppo.algo.rnd import RandomNetworkDistillation
from embodied_ppo.config.auxiliary import RNDConfig, rnd_weight

CPU = torch.device("cpu")
CFG = RNDConfig(enabled=True, hidden_sizes=[64, 64], output_size=32, minibatches=4, epochs=2)


def states(center: list[float], n: int, seed: int) -> torch.Tensor:
    """`n` states (T * N rows) scattered around `center`."""
    g = torch.Generator().manual_seed(seed)
    return torch.tensor(center) + 0.3 * torch.randn(n, len(center), generator=g)


def test_the_intrinsic_reward_falls_on_states_seen_often_and_not_on_new_ones():
    """A rollout after rollout from one region of the state space: the predictor learns it,
    and the reward there falls; a region never visited keeps the reward of a first visit."""
    rnd = RandomNetworkDistillation(CFG, None, 4, CPU, seed=0)
    seen, new = [2.0, 0.0, -1.0, 0.5], [-2.0, 3.0, 1.0, -1.5]
    T, N = 16, 8
    mask = torch.ones(T * N)
    first = None
    for iteration in range(60):
        obs = states(seen, T * N, seed=iteration)
        reward, scalars = rnd.reward(obs, mask, weight=1.0)
        assert scalars["rewards/intrinsic"] == pytest.approx(float(reward.mean()), rel=1e-5)
        if first is None:
            first = float(rnd.novelty(states(seen, 256, 999)).mean())
        rnd.train(obs, mask, T)
    often = float(rnd.novelty(states(seen, 256, 999)).mean())
    never = float(rnd.novelty(states(new, 256, 998)).mean())
    assert often < 0.2 * first  # seen often: the reward fell
    assert never > 5.0 * often and never > 0.5 * first  # never seen: it did not


def test_the_weight_follows_its_schedule():
    linear = RNDConfig(
        weight=2.0, final_weight=0.5, schedule="linear", schedule_start=100, schedule_end=300
    )
    assert [rnd_weight(linear, s, 1000) for s in (0, 100, 200, 300, 900)] == [
        2.0,
        2.0,
        1.25,
        0.5,
        0.5,
    ]
    step = RNDConfig(weight=1.0, final_weight=0.0, schedule="step")
    assert [rnd_weight(step, s, 1000) for s in (0, 999, 1000)] == [1.0, 1.0, 0.0]
    assert rnd_weight(RNDConfig(weight=0.3), 10**9, 10) == 0.3


def test_the_state_round_trips_through_a_checkpoint():
    """Both networks, their statistics, Adam's state and the shuffling generator, saved as a
    checkpoint saves them and loaded into a differently seeded instance: the rewards and the
    training that follow are the original's, bit for bit."""
    T, mask = 8, torch.ones(64)
    a = RandomNetworkDistillation(CFG, None, 4, CPU, seed=1)
    for i in range(3):
        obs = states([0.0, 1.0, 2.0, 3.0], 64, i)
        a.reward(obs, mask, 1.0)
        a.train(obs, mask, T)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = RandomNetworkDistillation(CFG, None, 4, CPU, seed=2)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    for i in range(3, 6):
        obs = states([0.0, 1.0, 2.0, 3.0], 64, i)
        ra, sa = a.reward(obs, mask, 1.0)
        rb, sb = b.reward(obs, mask, 1.0)
        assert torch.equal(ra, rb) and sa == sb
        assert a.train(obs, mask, T) == b.train(obs, mask, T)
    for k, v in a.state_dict()["networks"].items():
        assert torch.equal(v, b.state_dict()["networks"][k]), k


def test_the_dict_keys_it_reads_and_the_masked_steps():
    """A Dict observation's keys side by side; steps outside the episodes (mask 0) get no
    reward and do not enter the statistics."""
    rnd = RandomNetworkDistillation(CFG, ["a", "c"], 3, CPU, seed=0)
    obs = {"a": torch.randn(8, 2), "b": torch.randn(8, 5), "c": torch.randn(8, 1)}
    assert torch.equal(rnd.inputs(obs), torch.cat([obs["a"], obs["c"]], dim=1))
    mask = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0])
    reward, _ = rnd.reward(obs, mask, 1.0)
    assert torch.all(reward[4:] == 0) and torch.all(reward[:4] > 0)
    assert float(rnd.nets.obs_stats.count) == 4
