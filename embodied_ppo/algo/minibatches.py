"""The order of an epoch: shuffled minibatch indices (transitions, whole env sequences or recurrent chunks) and the per-token aggregation weights of each minibatch."""

from __future__ import annotations

from collections.abc import Iterator

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
