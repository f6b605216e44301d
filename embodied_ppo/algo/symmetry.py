"""Mirror symmetry in the update (`algorithm.symmetry`): the behaviour critic's values and a
recurrent policy's states on the mirrored samples, and the minibatch's forward pass over its rows
and their mirrors, for augmentation and the mirror loss.

Each row of a minibatch carries its mirror: the mirrored observation and action are computed
from the row inside the loss (`Mirror`). A mirrored sample (M s, M a) was drawn by the mirrored
behaviour policy, pi_old(M . | M .), not by pi_old: its old log-probability, the density of what
drew it, is the row's own log pi_old(a | s) (M is a signed permutation, so the densities are
equal). What needs the behaviour critic, the value at M s that clips the value loss, is computed
once per update before the first step (`behaviour_fields`). A row and its mirror are weighted
together from the row's aggregation weight (each half of it with augmentation), so the loss of a
minibatch is still the sum of its micro-batches' and of its processes' parts (docs/design.md,
rules 3 and 7).

A recurrent policy's mirrored samples run through its core as their own trajectories: the
behaviour policy is stepped along each env's mirrored observations from a zero state at the
rollout's first step (the mirror of a memory is not defined), zeroed where episodes start, and
the states it reaches before each step are what the mirrored chunks start from in the update.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from embodied_ppo.algo.minibatches import chunks_time_major
from embodied_ppo.algo.mirror import Mirror
from embodied_ppo.core.obs import map_obs, obs_rows
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import Categorical, DiagGaussian, Distribution

Obs = Tensor | dict[str, Tensor]

# The batch fields a symmetric update adds, after the minibatch's own (and a recurrent policy's).
MIRROR_FIELDS = ("mirror_values",)
MIRROR_STATE_FIELDS = ("mirror_states",)


def mirror_fields(mirror: Mirror | None, recurrent: bool) -> tuple[str, ...]:
    """The batch fields the update hands the loss for `mirror` (none without one)."""
    if mirror is None:
        return ()
    return MIRROR_FIELDS + (MIRROR_STATE_FIELDS if recurrent else ())


# ------------------------------------------------------------------ before the update
@torch.no_grad()
def behaviour_fields(
    policy: ActorCritic,
    mirror: Mirror,
    batch: dict[str, Obs],
    num_steps: int,
    chunk: int | None = None,
) -> dict[str, Tensor]:
    """The behaviour critic's values on the mirrored observations (the policy as it is,
    before the update's first step), and a recurrent policy's states along the mirrored
    trajectories, for a flattened (T*N) batch of T = `num_steps`; `chunk` rows (a recurrent
    policy's: envs) per forward pass."""
    obs = batch["obs"]
    rows = obs_rows(obs)
    if policy.state_size:
        return _recurrent_fields(policy, mirror, batch, num_steps, chunk)
    size = chunk or rows
    values = [
        policy.value(mirror.obs(map_obs(lambda x, i=i: x[i : i + size], obs)))
        for i in range(0, rows, size)
    ]
    return {"mirror_values": torch.cat(values)}


def _recurrent_fields(
    policy: ActorCritic,
    mirror: Mirror,
    batch: dict[str, Obs],
    num_steps: int,
    chunk: int | None,
) -> dict[str, Tensor]:
    """`behaviour_fields` of a recurrent policy: its core stepped along each env's mirrored
    trajectory, envs in groups of `chunk`."""
    T = num_steps
    obs, starts = batch["obs"], batch["starts"]
    assert isinstance(starts, Tensor)
    N = obs_rows(obs) // T
    size = chunk or N

    def steps(x: Tensor) -> Tensor:
        """Rows (T*N, ...) as (T, N, ...)."""
        return x.reshape(T, N, *x.shape[1:])

    seq_obs, seq_starts = map_obs(steps, obs), steps(starts)
    values = torch.zeros(T, N, device=starts.device)
    states = torch.zeros(T, N, policy.state_size, device=starts.device)
    for lo in range(0, N, size):
        envs = slice(lo, lo + size)
        state = policy.initial_state(min(size, N - lo), starts.device)
        for t in range(T):
            state = state * (1.0 - seq_starts[t, envs]).unsqueeze(1)
            states[t, envs] = state
            o = mirror.obs(map_obs(lambda x, t=t, e=envs: x[t, e], seq_obs))
            _, value, state = policy.step(o, state)
            values[t, envs] = value
    return {"mirror_values": values.reshape(T * N), "mirror_states": states.reshape(T * N, -1)}


# ------------------------------------------------------------------ in the loss
@dataclass(frozen=True)
class Pairing:
    """How a minibatch's rows and their mirrors are laid out in one forward pass: `join` puts
    a per-row field (B, ...) and its mirror's (B, ...) in the forward's row order, `split`
    takes a forward output (2B, ...) apart into the rows' and the mirrors' (each in the
    forward's order of the rows), and `order` puts a per-row field (B, ...) in that order."""

    join: Callable[[Tensor, Tensor], Tensor]
    split: Callable[[Tensor], tuple[Tensor, Tensor]]
    order: Callable[[Tensor], Tensor]


def flat_pairing(rows: int) -> Pairing:
    """A feed-forward minibatch of `rows` rows: the rows, then their mirrors."""
    return Pairing(
        join=lambda a, b: torch.cat([a, b]),
        split=lambda y: (y[:rows], y[rows:]),
        order=lambda x: x,
    )


def chunk_pairing(chunks: int, length: int) -> Pairing:
    """A recurrent minibatch of `chunks` chunks of `length` steps, run time-major with the
    mirrored chunks beside the originals: (L, 2C) flattened."""
    L, C = length, chunks

    time_major = partial(chunks_time_major, length=L)

    def join(a: Tensor, b: Tensor) -> Tensor:
        """The chunks' rows (C*L, ...) and their mirrors' side by side: (L*2C, ...)."""
        return torch.cat([time_major(a), time_major(b)], dim=1).reshape(L * 2 * C, *a.shape[1:])

    def split(y: Tensor) -> tuple[Tensor, Tensor]:
        """A forward output (L*2C, ...) as the chunks' (L*C, ...) and their mirrors'."""
        y = y.reshape(L, 2 * C, *y.shape[1:])
        return y[:, :C].reshape(L * C, *y.shape[2:]), y[:, C:].reshape(L * C, *y.shape[2:])

    return Pairing(join, split, lambda x: time_major(x).reshape(L * C, *x.shape[1:]))


def join_obs(a: Obs, b: Obs, dim: int) -> Obs:
    """Observations `a` and `b` side by side along `dim` (key by key)."""
    if isinstance(a, Tensor):
        assert isinstance(b, Tensor)
        return torch.cat([a, b], dim=dim)
    assert isinstance(b, dict)
    return {k: torch.cat([a[k], b[k]], dim=dim) for k in a}


def action_means(dist: Distribution) -> Tensor:
    """The mean of the action distribution (B, A): a Gaussian's mean, or a Discrete
    distribution's probabilities (the mean of its one-hot actions)."""
    if isinstance(dist, DiagGaussian):
        return dist.mean
    assert isinstance(dist, Categorical)
    return dist.probs


def mirror_loss(dist: Distribution, mirror: Mirror, pairing: Pairing, weights: Tensor) -> Tensor:
    """The mirror loss of a forward pass over rows and their mirrors (`mirror_loss_of`), the
    rows' `weights` in the forward's order."""
    original, mirrored = pairing.split(action_means(dist))
    return mirror_loss_of(original, mirrored, mirror, weights)


def mirror_loss_of(original: Tensor, mirrored: Tensor, mirror: Mirror, weights: Tensor) -> Tensor:
    """The mirror loss of the rows' action means (`original`) and those on their mirrored
    observations (`mirrored`), row for row: for each row, the mean over the action's entries of
    (mean(mirrored obs) - mirror(mean(obs)))^2, the original's mean a fixed target (no gradient
    flows through it), aggregated with the rows' `weights`."""
    target = mirror.means(original).detach()
    return ((mirrored - target).square().mean(dim=-1) * weights).sum()
