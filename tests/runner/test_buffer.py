"""The rollout buffer: shapes and dtypes, next values at episode ends, flat views, minibatches."""

from __future__ import annotations

import pytest
import torch

from embodied_ppo.algo.minibatches import minibatch_indices, sequence_minibatch_indices
from embodied_ppo.runner.buffer import BufferLayout, RolloutBuffer

CPU = torch.device("cpu")


def test_fields_are_preallocated_with_their_shapes_and_dtypes():
    buf = RolloutBuffer(BufferLayout(5, 3, 4, (2,), torch.float32), CPU)
    assert buf.obs.shape == (5, 3, 4) and buf.actions.shape == (5, 3, 2)
    assert buf.truncated.dtype == torch.bool and buf.mask.all()
    assert buf.size == 15
    discrete = RolloutBuffer(BufferLayout(5, 3, 4, (), torch.int64), CPU)
    assert discrete.actions.shape == (5, 3) and discrete.actions.dtype == torch.int64


def test_next_values_follow_the_episode_and_bootstrap_truncations():
    buf = RolloutBuffer(BufferLayout(4, 2, 1, (), torch.int64), CPU)
    buf.values.copy_(torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]]))
    buf.truncated[1, 0] = True  # env 0 was cut by its time limit at step 1
    buf.final_values[1, 0] = 99.0  # V(final observation) of that episode
    buf.finalize_next_values(torch.tensor([5.0, 50.0]))
    assert buf.next_values[:, 0].tolist() == [2.0, 99.0, 4.0, 5.0]
    assert buf.next_values[:, 1].tolist() == [20.0, 30.0, 40.0, 50.0]


def test_flat_views_share_storage_in_step_major_order():
    buf = RolloutBuffer(BufferLayout(3, 2, 4, (2,), torch.float32), CPU)
    flat = buf.flat("obs", "actions", "values")
    assert flat["obs"].shape == (6, 4) and flat["actions"].shape == (6, 2)
    buf.values[1, 0] = 7.0
    assert flat["values"][2] == 7.0  # row t * N + n, a view of the buffer


def test_minibatches_cover_every_transition_once_per_epoch():
    g = torch.Generator().manual_seed(0)
    batches = list(minibatch_indices(60, 12, g, CPU))
    assert [b.numel() for b in batches] == [12] * 5
    assert sorted(torch.cat(batches).tolist()) == list(range(60))


@pytest.mark.parametrize("envs_per_minibatch", [1, 2, 4])
def test_sequence_minibatches_hold_whole_env_columns(envs_per_minibatch):
    T, N = 3, 4
    g = torch.Generator().manual_seed(0)
    batches = list(sequence_minibatch_indices(T, N, envs_per_minibatch, g, CPU))
    assert sorted(torch.cat(batches).tolist()) == list(range(T * N))
    for b in batches:
        columns = (b % N).reshape(envs_per_minibatch, T)  # each env's T steps, back to back
        steps = (b // N).reshape(envs_per_minibatch, T)
        assert (columns == columns[:, :1]).all()
        assert (steps == torch.arange(T)).all()
