"""The order of an epoch: shuffled minibatch indices (transitions, whole env sequences or recurrent chunks) and the per-token aggregation weights of each minibatch."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from embodied_ppo.core.types import Reduce


def sequence_minibatch_indices(
    num_steps: int,
    num_envs: int,
    envs_per_minibatch: int,
    generator: torch.Generator,
    device: torch.device,
) -> Iterator[torch.Tensor]:
    """One epoch of minibatches made of whole env columns (sequences) of a (T, N) rollout.

    Yields flat indices t * N + n for every step t of the chosen columns; every column appears in
    exactly one minibatch.
    """
    perm = torch.randperm(num_envs, generator=generator).to(device, non_blocking=True)
    steps = torch.arange(num_steps, device=device).unsqueeze(1) * num_envs  # (T, 1)
    for start in range(0, num_envs, envs_per_minibatch):
        cols = perm[start : start + envs_per_minibatch]  # (k,)
        yield (steps + cols.unsqueeze(0)).T.reshape(-1)  # column-major: whole sequences together


def minibatch_indices(
    batch_size: int, minibatch_size: int, generator: torch.Generator, device: torch.device
) -> Iterator[torch.Tensor]:
    """One epoch of shuffled index tensors; every index appears exactly once.

    The permutation is drawn on the CPU generator (reproducible across devices) and moved once.
    """
    perm = torch.randperm(batch_size, generator=generator).to(device, non_blocking=True)
    for start in range(0, batch_size, minibatch_size):
        yield perm[start : start + minibatch_size]


def chunks_time_major(x: Tensor, length: int) -> Tensor:
    """Rows (C*L, ...) of C chunks of L = `length` steps, as a recurrent core runs them: (L, C, ...)."""
    return x.reshape(-1, length, *x.shape[1:]).transpose(0, 1)


def sequence_chunks(
    num_steps: int,
    num_envs: int,
    length: int,
    generator: torch.Generator,
    device: torch.device,
) -> tuple[Tensor, Tensor | None]:
    """One epoch's order of a (T, N) rollout in shuffled chunks of `length` steps of one env.

    Returns flat indices t * N + n, chunk after chunk, each chunk's steps in time order, and
    where `length` does not divide T the validity of each position (0.0 for the padding that
    ends the last chunk of each env, which repeats the env's last step); None otherwise. Every
    step of the rollout appears exactly once among the valid positions.
    """
    T, N, L = num_steps, num_envs, length
    C = -(-T // L)  # chunks per env
    perm = torch.randperm(C * N, generator=generator).to(device, non_blocking=True)
    first = (perm // N) * L  # (C*N,) each chunk's first step
    env = perm % N
    t = first.unsqueeze(1) + torch.arange(L, device=device)  # (C*N, L)
    order = (t.clamp(max=T - 1) * N + env.unsqueeze(1)).reshape(-1)
    if T % L == 0:
        return order, None
    return order, (t < T).to(torch.float32).reshape(-1)


def aggregation_weights(
    masks: Tensor, mode: str, seq_len: int, reduce: Reduce | None = None
) -> Tensor:
    """Per-token weights (K, M) of K minibatches of M tokens: sum(weights[k] * x) is the
    `loss_agg_func` of minibatch k.

    For the seq-* modes a minibatch is whole sequences laid out back to back (seq_len each).
    `reduce` sums the K denominators over the processes of a distributed run in one call, so
    every process weights its tokens as one process holding all of them would.
    """

    def total(x: Tensor) -> Tensor:
        """Denominators (K,) summed over processes, at least 1, as (K, 1)."""
        x = x.to(torch.float32)
        return (reduce(x) if reduce is not None else x).clamp(min=1.0).unsqueeze(1)

    masks = masks.to(torch.float32)
    if mode == "token-mean":
        return masks / total(masks.sum(dim=1))
    K, M = masks.shape
    seqs = masks.reshape(K, M // seq_len, seq_len)  # (K, S, T)
    lengths = seqs.sum(dim=2, keepdim=True)  # (K, S, 1)
    num_seqs = total((lengths > 0).sum(dim=(1, 2))).unsqueeze(2)  # (K, 1, 1)
    if mode == "seq-mean-token-sum":
        return (seqs / num_seqs).reshape(K, M)
    if mode == "seq-mean-token-mean":
        return (seqs / (lengths.clamp(min=1.0) * num_seqs)).reshape(K, M)
    raise ValueError(f"unknown loss_agg_func {mode!r}")


@dataclass(frozen=True)
class Share:
    """One process's part of an epoch's minibatches in a run of several processes.

    Attributes:
        rows: this process's flat rows (t * E + n of its own E envs), minibatch after minibatch,
            each minibatch's part padded to whole micro-batches.
        valid: 1.0 for a row of the minibatch (and a step, not the padding of a recurrent
            chunk), 0.0 for padding, which trains nothing.
        bounds: minibatch k is positions bounds[k]:bounds[k + 1] of `rows`.
    """

    rows: Tensor
    valid: Tensor
    bounds: list[int]


@dataclass(frozen=True)
class ShareLayout:
    """How an epoch's order is cut, and which envs are this process's (see `process_share`).

    Attributes:
        minibatches: the epoch's minibatches (equal parts of its order).
        unit: rows of one env that stay together (a step, a whole sequence, a recurrent chunk).
        num_envs, first_env: this process steps envs first_env .. first_env + num_envs - 1.
        world: the processes of the run (each with num_envs envs).
        micro_units: units per micro-batch; a process's part is padded to whole micro-batches.
    """

    minibatches: int
    unit: int
    num_envs: int
    first_env: int
    world: int
    micro_units: int


def process_share(order: Tensor, valid: Tensor | None, layout: ShareLayout) -> Share:
    """This process's rows of an epoch drawn over the envs of all `layout.world` processes.

    `order` is the epoch's order of the whole run's (T, world * num_envs) rollout as one process
    holding every env would draw it (flat rows t * N + g); minibatch k is its k-th of
    `minibatches` equal parts, made of units of `unit` rows of one env (a step, an env's whole
    sequence, a recurrent chunk). This process steps envs first_env .. first_env + num_envs - 1
    and takes the units of its envs, in the order drawn, padded (repeating its first row with
    validity 0) to a multiple of `micro_units` units, at least one micro-batch: every process
    then runs micro-batches of one shape, and their gradients, summed over the processes with
    the minibatch's global weights, are the minibatch's gradient.
    """
    minibatches, unit, micro_units = layout.minibatches, layout.unit, layout.micro_units
    num_envs, first_env = layout.num_envs, layout.first_env
    N = num_envs * layout.world
    units = order.reshape(minibatches, -1, unit)  # (K, U, unit)
    owner = units[:, :, 0] % N
    mine = (owner >= first_env) & (owner < first_env + num_envs)  # (K, U)
    local = (units // N) * num_envs + (units % N - first_env)
    ok = torch.ones_like(order, dtype=torch.float32) if valid is None else valid
    ok = ok.reshape(units.shape)
    counts = mine.sum(dim=1).tolist()  # one host sync per epoch
    rows, flags, bounds = [], [], [0]
    for k, count in enumerate(counts):
        rows.append(local[k][mine[k]].reshape(-1))
        flags.append(ok[k][mine[k]].reshape(-1))
        pad = max(1, -(-count // micro_units)) * micro_units - count
        if pad:
            rows.append(torch.zeros(pad * unit, dtype=local.dtype, device=local.device))
            flags.append(torch.zeros(pad * unit, dtype=torch.float32, device=local.device))
        bounds.append(bounds[-1] + (count + pad) * unit)
    return Share(torch.cat(rows), torch.cat(flags), bounds)


def share_weights(masks: list[Tensor], mode: str, seq_len: int, reduce: Reduce) -> list[Tensor]:
    """Per-token weights of each minibatch's part on this process (`masks`: its rows' masks
    times validity), with the denominators of the whole minibatches: summed over the processes
    in one call, so that every part weighs its tokens as `aggregation_weights` weighs them in a
    process holding the whole minibatch."""
    masks = [m.to(torch.float32) for m in masks]
    if mode == "token-mean":
        local = torch.stack([m.sum() for m in masks])
    else:
        local = torch.stack(
            [(m.reshape(-1, seq_len).sum(dim=1) > 0).sum().to(torch.float32) for m in masks]
        )
    totals = reduce(local).clamp(min=1.0)
    out = []
    for m, total in zip(masks, totals, strict=True):
        if mode == "token-mean":
            out.append(m / total)
            continue
        seqs = m.reshape(-1, seq_len)
        if mode == "seq-mean-token-sum":
            out.append((seqs / total).reshape(-1))
        elif mode == "seq-mean-token-mean":
            lengths = seqs.sum(dim=1, keepdim=True)
            out.append((seqs / (lengths.clamp(min=1.0) * total)).reshape(-1))
        else:
            raise ValueError(f"unknown loss_agg_func {mode!r}")
    return out
