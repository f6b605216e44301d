"""The PPO update: mini-epochs over shuffled minibatches, micro-batch gradient accumulation,
gradient all-reduce across processes, early stopping and learning-rate schedules.

The gradient step itself (forward, loss, backward, clipping, Adam) is `gradient_step`, compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TextIO

import torch
from torch import Tensor

from embodied_ppo.advantages import compute_advantages
from embodied_ppo.buffer import RolloutBuffer, minibatch_indices, sequence_minibatch_indices
from embodied_ppo.config import AlgorithmConfig, OptimConfig
from embodied_ppo.gradient_step import STEP_FIELDS, GradientStep
from embodied_ppo.losses import adaptive_kl_coef, kl_estimate
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.obs import map_obs, obs_rows

# The flattened rollout fields the update reads (buffer.flat(*BATCH_FIELDS)).
BATCH_FIELDS = (
    "obs", "actions", "logprobs", "values", "advantages", "returns", "mask", "states", "starts"
)  # fmt: skip
# The fields of a minibatch handed to the gradient step, in its order (a recurrent policy's
# also take the stored states and episode starts).
MINIBATCH_FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns")
RECURRENT_FIELDS = ("states", "starts")
VALUE_ROWS = 8192  # rows per critic forward pass when advantages are recomputed

Reduce = Callable[[Tensor], Tensor]


def _rows(x: Tensor | dict[str, Tensor], rows: slice) -> Tensor | dict[str, Tensor]:
    """Rows of a field (a tensor, or a dict of them for Dict observations): views."""
    return x[rows] if isinstance(x, Tensor) else {k: v[rows] for k, v in x.items()}


def _signature(batch: dict[str, Tensor], num_steps: int) -> tuple:
    """What decides the shapes, dtypes and devices of every input an update's steps get."""
    fields = []
    for name, x in sorted(batch.items()):
        for key, t in sorted(x.items()) if isinstance(x, dict) else [("", x)]:
            fields.append((name, key, tuple(t.shape), t.dtype, t.device))
    return (num_steps, tuple(fields))


class NonFiniteError(RuntimeError):
    """A loss term or the gradient became NaN/Inf; the step was not taken."""

    def __init__(self, what: str, epoch: int, minibatch: int) -> None:
        super().__init__(f"non-finite {what} in epoch {epoch}, minibatch {minibatch}")
        self.what, self.epoch, self.minibatch = what, epoch, minibatch


def make_optimizer(policy: ActorCritic, optim: OptimConfig) -> torch.optim.Adam:
    """Adam with the configured eps (it holds the state; `gradient_step` takes its steps)."""
    return torch.optim.Adam(list(policy.parameters()), lr=optim.lr, eps=optim.adam_eps)


def learning_rate(optim: OptimConfig, progress: float, current: float | None = None) -> float:
    """The learning rate at `progress` = global_step / total_steps in [0, 1).

    constant: lr; linear: lr * (1 - progress); adaptive: the current (KL-adapted) rate.
    """
    if optim.schedule == "linear":
        return optim.lr * (1.0 - progress)
    if optim.schedule == "adaptive" and current is not None:
        return current
    return optim.lr


def aggregation_weights(
    masks: Tensor, mode: str, seq_len: int, reduce: Reduce | None = None
) -> Tensor:
    """Per-token weights (K, M) of K minibatches of M tokens: sum(weights[k] * x) is the
    `loss_agg_func` of minibatch k.

    For the seq-* modes a minibatch is whole sequences laid out back to back (seq_len each).
    `reduce` sums the K denominators over the processes of a distributed run in one call, so
    every process weights its tokens as one process holding all of them would.
    """

    def total(x: Tensor) -> Tensor:  # (K,) -> (K, 1), summed over processes
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


class PPOUpdate:
    """Runs `update_epochs` passes of clipped-PPO gradient steps over one rollout batch.

    Each epoch shuffles the batch once and cuts it into minibatches. For a recurrent policy the
    rollout of each env is cut into chunks of `sequence_length` steps (the last one padded
    with zero-weight steps where it does not divide the rollout) and the chunks are shuffled:
    a minibatch is whole chunks, each starting from the state stored at its first step.
    A minibatch is one call of the (compiled) gradient step; with `micro_batch_size`, or across processes, its gradient is
    accumulated over micro-batches (weighted with the minibatch's aggregation weights, so the sum
    is the minibatch gradient: Rule 3), all-reduced, then applied.

    Args:
        generator: CPU generator for minibatch shuffling (its state is checkpointed).
        reference: frozen policy of the KL loss (algo.use_kl_loss).
        reduce: sums a tensor over the processes of a distributed run; None in one process.
        compile: compile the gradient step (see `gradient_step`).
    """

    def __init__(
        self,
        policy: ActorCritic,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        optimizer: torch.optim.Adam,
        generator: torch.Generator,
        reference: ActorCritic | None = None,
        reduce: Reduce | None = None,
        compile: bool = False,
        notes: TextIO | None = None,
    ) -> None:
        self.algo, self.optim, self.optimizer = algo, optim, optimizer
        self.generator, self.reduce = generator, reduce
        self.recurrent = policy.state_size > 0
        self.fields = MINIBATCH_FIELDS + (RECURRENT_FIELDS if self.recurrent else ())
        self.step = GradientStep(policy, optimizer, algo, optim, reference, compile, notes)
        self.names = self.step.metric_names

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _epoch_order(
        self, size: int, num_steps: int, device: torch.device
    ) -> tuple[Tensor, Tensor | None]:
        """One epoch's shuffled row order (minibatch k is rows [k*M, (k+1)*M) of it), and
        where it pads recurrent chunks (0.0: a padding step; None: no padding)."""
        a = self.algo
        if self.recurrent:
            return sequence_chunks(
                num_steps, size // num_steps, a.sequence_length or num_steps, self.generator, device
            )
        parts: Iterator[Tensor]
        if a.loss_agg_func == "token-mean":
            parts = minibatch_indices(size, a.minibatch_size, self.generator, device)
        else:
            envs = size // num_steps
            parts = sequence_minibatch_indices(
                num_steps, envs, a.minibatch_size // num_steps, self.generator, device
            )
        return torch.cat(list(parts)), None

    def update(
        self,
        batch: dict[str, Tensor],
        num_steps: int,
        refresh: Callable[[], None] | None = None,
    ) -> dict[str, float]:
        """One PPO update on a flattened (T*N) batch (fields of BATCH_FIELDS), T = `num_steps`.

        `refresh`, where given, runs before every epoch after the first and rewrites the
        batch's values, advantages and returns in place (`refresh_advantages`)."""
        device = batch["advantages"].device
        lr = torch.tensor(self.lr, dtype=torch.float32, device=device)
        adam = self.step.adam_state()
        records: list[Tensor] = []  # one vector per step taken: metrics + STEP_FIELDS
        where: list[tuple[int, int]] = []  # (epoch, minibatch) of each record
        with self.step.calls(_signature(batch, num_steps)):
            stopped = self._epochs(batch, num_steps, lr, adam, records, where, refresh)
        self.set_lr(float(lr))
        if not records:
            return {"num_gradient_steps": 0.0, "early_stopped": float(stopped)}
        table = torch.stack(records)  # (steps, metrics + STEP_FIELDS)
        if not self._checks_each_step(device):
            bad = table[:, -1] > 0
            if bool(bad.any()):  # one host sync per update
                first = int(bad.nonzero()[0, 0])
                raise NonFiniteError(self._culprit(table[first]), *where[first])
        return self._summary(table, stopped)

    def _epochs(
        self,
        batch: dict[str, Tensor],
        num_steps: int,
        lr: Tensor,
        adam: tuple,
        records: list[Tensor],
        where: list[tuple[int, int]],
        refresh: Callable[[], None] | None = None,
    ) -> bool:
        """The update's epochs of minibatch steps: appends each step's vector to `records` and
        its (epoch, minibatch) to `where`; True where early stopping ended them."""
        a = self.algo
        size, M = batch["advantages"].shape[0], a.minibatch_size
        micro = a.micro_batch_size or M
        split = micro < M or self.reduce is not None
        sync_each_step = self._checks_each_step(batch["advantages"].device)
        for epoch in range(a.update_epochs):
            if epoch and refresh is not None:
                refresh()
            order, valid = self._epoch_order(size, num_steps, batch["advantages"].device)
            # Gathered once per epoch (observations key by key).
            rows = [map_obs(lambda x, o=order: x[o], batch[f]) for f in self.fields]
            mask = batch["mask"][order]
            if valid is not None:
                mask = mask * valid
            weights = aggregation_weights(
                mask.reshape(-1, M), a.loss_agg_func, num_steps, self.reduce
            )  # (K, M)
            for k in range(weights.shape[0]):
                mb = tuple(_rows(x, slice(k * M, (k + 1) * M)) for x in rows)
                if split:
                    out = self._accumulated_step(mb, weights[k], micro, lr, adam)
                else:
                    out = self.step.step(mb, weights[k], lr, adam)
                if sync_each_step and bool(out[-2]):  # skipped
                    if bool(out[-1]):
                        raise NonFiniteError(self._culprit(out), epoch, k)
                    return True  # early stop: this minibatch's step was not taken
                records.append(out)
                where.append((epoch, k))
        return False

    def _checks_each_step(self, device: torch.device) -> bool:
        """On the CPU a host sync costs nothing: stop at the first skipped step. Elsewhere, look
        at the steps' flags once at the end (unless early stopping must end the loop)."""
        return device.type == "cpu" or self.algo.early_stop_kl is not None

    def _accumulated_step(
        self, mb: tuple[Tensor, ...], weights: Tensor, micro: int, lr: Tensor, adam: tuple
    ) -> Tensor:
        """One minibatch's gradient summed over micro-batches (and processes), then applied."""
        total: Tensor | None = None
        metrics: Tensor | None = None
        for start in range(0, weights.shape[0], micro):
            part = tuple(_rows(x, slice(start, start + micro)) for x in mb)
            grad, m = self.step.grads(part, weights[start : start + micro])
            total = grad if total is None else total + grad
            metrics = m if metrics is None else metrics + m
        assert total is not None and metrics is not None
        loss = metrics[self.names.index("loss")]
        kl = metrics[self.names.index("approx_kl")]
        if self.reduce is not None:
            # Every process's gradient, weighted with global denominators, sums to the gradient
            # of the whole minibatch; the loss too, so all processes agree on a skipped step.
            flat = self.reduce(torch.cat([total, loss.reshape(1)]))
            total, loss = flat[:-1], flat[-1]
            if self.algo.early_stop_kl is not None or self.optim.schedule == "adaptive":
                kl = self.reduce(kl.reshape(1).clone())[0]
                metrics = metrics.clone()
                metrics[self.names.index("approx_kl")] = kl
        return torch.cat([metrics, self.step.apply(total, loss, kl, lr, adam)])

    def _summary(self, table: Tensor, stopped: bool) -> dict[str, float]:
        """Mean over the update's steps of every metric (summed over processes first)."""
        names = [*self.names, *STEP_FIELDS]
        out: dict[str, float] = {}
        if self.reduce is not None:
            # Token metrics are weighted per process: their sum over processes is the global
            # value. The gradient norm is already global; so is approx_kl where it was reduced
            # for the step-size rules.
            local = [
                i
                for i, n in enumerate(names)
                if n in self.names
                and not (
                    n == "approx_kl"
                    and (self.algo.early_stop_kl is not None or self.optim.schedule == "adaptive")
                )
            ]
            table = table.clone()
            table[:, local] = self.reduce(table[:, local].contiguous())
        means = table.mean(dim=0).tolist()
        for name, value in zip(names, means, strict=True):
            if name not in ("loss", "skipped", "nonfinite"):
                out[name] = value
        out["num_gradient_steps"] = float(table.shape[0])
        out["early_stopped"] = float(stopped)
        return out

    def _culprit(self, vector: Tensor) -> str:
        values = dict(zip([*self.names, *STEP_FIELDS], vector.tolist(), strict=True))
        for name in ("policy_loss", "value_loss", "entropy", "kl_loss"):
            if name in values and not torch.isfinite(torch.tensor(values[name])):
                return name
        return "gradient"


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


def recompute_logprobs(
    policy: ActorCritic, obs: Tensor, actions: Tensor, chunk: int | None
) -> Tensor:
    """Log-probs of `actions` under `policy` now, `chunk` transitions per forward pass."""
    rows = obs_rows(obs)
    chunk = chunk or rows
    with torch.no_grad():
        return torch.cat(
            [
                policy.evaluate(
                    map_obs(lambda x, i=i: x[i : i + chunk], obs), actions[i : i + chunk]
                )[0]
                for i in range(0, rows, chunk)
            ]
        )


def advantages_into(buf: RolloutBuffer, algo: AlgorithmConfig, reduce: Reduce | None) -> None:
    """Advantages and returns of the buffer's rewards and values (`algo.adv_type`), written
    into the buffer."""
    a = algo
    adv, ret = compute_advantages(
        a.adv_type, buf.rewards, buf.values, buf.next_values, buf.terminated, buf.ends,
        buf.mask, a.gamma, a.gae_lambda, a.group_size, a.normalize_advantages, reduce,
    )  # fmt: skip
    buf.advantages.copy_(adv)
    buf.returns.copy_(ret)


def prepare_batch(
    buf: RolloutBuffer,
    policy: ActorCritic,
    algo: AlgorithmConfig,
    in_reward_kl: InRewardKL | None,
    reduce: Reduce | None,
) -> tuple[dict, dict[str, float]]:
    """The update's batch of a collected rollout, and the in-reward KL's scalars.

    Applies the in-reward KL penalty to the rewards, computes advantages and returns (into the
    buffer) with `algo.adv_type`, and recomputes the old log-probs where asked.
    """
    a = algo
    batch = buf.flat(*BATCH_FIELDS)
    extra: dict[str, float] = {}
    if in_reward_kl is not None:
        extra = in_reward_kl.penalize(buf.rewards, buf.mask, batch)
    advantages_into(buf, a, reduce)
    if a.recompute_old_logprobs:
        chunk = a.logprob_forward_micro_batch_size
        batch["logprobs"] = recompute_logprobs(policy, batch["obs"], batch["actions"], chunk)
    return batch, extra


def refresh_advantages(
    buf: RolloutBuffer, policy: ActorCritic, algo: AlgorithmConfig, reduce: Reduce | None
) -> None:
    """`algorithm.recompute_advantages`: the rollout's values under the critic as it is now,
    and GAE advantages and returns from them, written into the buffer (and so into the update's
    batch, whose fields are views of it).

    Every bootstrap is valued again too: V(s_T) from the observation after the last step and
    V(final_obs) of each truncation, both kept by the collector. The rewards are the rollout's
    own (scaled, and KL-penalized where that applies). The stored values change with them, so
    value clipping is measured from the values the epoch starts with.
    """
    assert buf.last_obs is not None, "the collector did not keep the bootstrap observations"
    T, N = buf.num_steps, buf.num_envs
    obs = buf.flat("obs")["obs"]
    with torch.no_grad():
        values = [
            policy.value(map_obs(lambda x, i=i: x[i : i + VALUE_ROWS], obs))
            for i in range(0, T * N, VALUE_ROWS)
        ]
        buf.values.copy_(torch.cat(values).reshape(T, N))
        for t, rows, final in buf.final_obs:
            buf.final_values[t, rows] = policy.value(final)
        buf.finalize_next_values(policy.value(buf.last_obs))
    advantages_into(buf, algo, reduce)


class InRewardKL:
    """The in-reward KL penalty: r_t -= coef * KL_t(behaviour || reference), with the fixed or
    adaptive (InstructGPT) coefficient controller of `algorithm.kl_ctrl`.

    Args:
        coef: the current coefficient (the configured kl_coef, or a resumed run's).
        reduce: sums over processes, so the controller sees the mean KL of all of them.
    """

    def __init__(
        self,
        algo: AlgorithmConfig,
        policy: ActorCritic,
        reference: ActorCritic,
        coef: float,
        reduce: Reduce | None = None,
    ) -> None:
        self.algo, self.policy, self.reference = algo, policy, reference
        self.coef, self.reduce = coef, reduce

    @torch.no_grad()
    def penalize(self, rewards: Tensor, mask: Tensor, batch: dict[str, Tensor]) -> dict[str, float]:
        """Subtract the penalty from `rewards` (T, N) in place; returns the scalars to log."""
        a = self.algo
        obs, actions = batch["obs"], batch["actions"]
        rows = obs_rows(obs)
        chunk = a.logprob_forward_micro_batch_size or rows
        parts = []
        for i in range(0, rows, chunk):
            sl = slice(i, i + chunk)
            part = map_obs(lambda x, sl=sl: x[sl], obs)
            ref_dist, _ = self.reference(part)
            dist = self.policy(part)[0] if a.kl_penalty == "full" else None
            lp_ref = ref_dist.log_prob(actions[sl])
            parts.append(kl_estimate(a.kl_penalty, batch["logprobs"][sl], lp_ref, dist, ref_dist))
        kl = torch.cat(parts).reshape(rewards.shape)  # (T, N)
        coef = self.coef
        rewards.sub_(coef * kl)
        n, kl_sum = mask.sum(), (kl * mask).sum()
        if self.reduce is not None:  # the mean over every process's transitions
            packed = self.reduce(torch.stack([n, kl_sum]).to(torch.float64))
            n, kl_sum = packed[0], packed[1]
        mean_kl = float(kl_sum / n)
        if a.kl_ctrl.type == "adaptive":
            self.coef = adaptive_kl_coef(
                coef, mean_kl, a.kl_ctrl.target_kl, int(n), a.kl_ctrl.horizon
            )
        return {"charts/kl_in_reward": mean_kl, "charts/kl_coef": coef}
