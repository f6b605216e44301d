"""The PPO update: mini-epochs over shuffled minibatches, micro-batch gradient accumulation, gradient all-reduce across processes, early stopping."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from embodied_ppo.algo.distill_loss import KICKSTART_FIELDS
from embodied_ppo.algo.gradient_step import STEP_FIELDS, GradientStep, StepLoss
from embodied_ppo.algo.minibatches import (
    Share,
    ShareLayout,
    aggregation_weights,
    minibatch_indices,
    process_share,
    sequence_chunks,
    sequence_minibatch_indices,
    share_weights,
)
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.symmetry import mirror_fields
from embodied_ppo.core.obs import map_obs
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.model.actor_critic import ActorCritic

# The fields of a minibatch handed to the gradient step, in its order (a recurrent policy's
# also take the stored states and episode starts).
MINIBATCH_FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns")


RECURRENT_FIELDS = ("states", "starts")


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


class PPOUpdate:
    """Runs `update_epochs` passes of clipped-PPO gradient steps over one rollout batch.

    Each epoch shuffles the batch once and cuts it into minibatches. For a recurrent policy the
    rollout of each env is cut into chunks of `sequence_length` steps (the last one padded
    with zero-weight steps where it does not divide the rollout) and the chunks are shuffled:
    a minibatch is whole chunks, each starting from the state stored at its first step.
    A minibatch is one call of the (compiled) gradient step; with `micro_batch_size`, or across processes, its gradient is
    accumulated over micro-batches (weighted with the minibatch's aggregation weights, so the sum
    is the minibatch gradient: docs/design.md, rule 3), all-reduced, then applied.

    The gradient step keeps Adam's state (`optimizer_state` is what a checkpoint saves) and the
    learning rate; the policy's parameters hold the update's result when `update` returns.

    Args:
        generator: CPU generator for minibatch shuffling (its state is checkpointed).
        settings: the algorithm and optimizer blocks, compilation and the run's scale.
        reference: frozen policy of the KL loss (algo.use_kl_loss).
        loss: the minibatch loss in place of PPO's (a distillation's: `algo.distill_loss`).
    """

    def __init__(
        self,
        policy: ActorCritic,
        generator: torch.Generator,
        settings: UpdateSettings,
        reference: ActorCritic | None = None,
        loss: StepLoss | None = None,
    ) -> None:
        self.algo, self.optim = settings.algo, settings.optim
        self.generator, self.reduce = generator, settings.reduce
        self.world, self.rank, self.minibatch = settings.world, settings.rank, settings.minibatch
        self.recurrent = policy.state_size > 0
        self.fields = MINIBATCH_FIELDS + (RECURRENT_FIELDS if self.recurrent else ())
        self.fields += mirror_fields(settings.mirror, self.recurrent)  # algorithm.symmetry
        self.fields += KICKSTART_FIELDS if settings.distill is not None else ()
        self.step = GradientStep(policy, settings, reference, loss)
        self.names = self.step.metric_names

    @property
    def lr(self) -> float:
        """The learning rate of the next update."""
        return self.step.lr

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of the next update."""
        self.step.lr = lr

    def set_kl_target(self, kl: float) -> None:
        """Set the approx_kl the adaptive schedule aims at in the next update."""
        self.step.kl_target = kl

    def optimizer_state(self) -> CheckpointState:
        """Adam's state and the learning rate, as a checkpoint keeps them (torch.optim.Adam's
        form)."""
        return self.step.state_dict()

    def load_optimizer_state(self, state: CheckpointState) -> None:
        """Continue from `optimizer_state()`; ValueError where it does not fit the policy."""
        self.step.load_state_dict(state)

    def _epoch_order(
        self, size: int, num_steps: int, device: torch.device
    ) -> tuple[Tensor, Tensor | None]:
        """One epoch's shuffled row order of a (T, N) rollout of `size` = T * N rows (minibatch
        k is rows [k*M, (k+1)*M) of it), and where it pads recurrent chunks (0.0: a padding
        step; None: no padding)."""
        a, M = self.algo, self.minibatch
        if self.recurrent:
            return sequence_chunks(
                num_steps, size // num_steps, a.sequence_length or num_steps, self.generator, device
            )
        parts: Iterator[Tensor]
        if a.loss_agg_func == "token-mean":
            parts = minibatch_indices(size, M, self.generator, device)
        else:
            envs = size // num_steps
            parts = sequence_minibatch_indices(
                num_steps, envs, M // num_steps, self.generator, device
            )
        return torch.cat(list(parts)), None

    def _unit(self, num_steps: int) -> int:
        """Rows of one env that stay together in a minibatch: a step, a whole sequence
        (seq-* aggregation) or a recurrent chunk."""
        if self.recurrent:
            return self.algo.sequence_length or num_steps
        return 1 if self.algo.loss_agg_func == "token-mean" else num_steps

    def _share(self, size: int, num_steps: int, device: torch.device) -> Share:
        """This process's part of one epoch drawn over every process's envs: the same order,
        drawn from the same generator state on every process, as one process holding all the
        envs draws (so the minibatches are the same at any number of processes)."""
        order, valid = self._epoch_order(size * self.world, num_steps, device)
        envs = size // num_steps
        layout = ShareLayout(
            minibatches=order.numel() // self.minibatch,
            unit=self._unit(num_steps),
            num_envs=envs,
            first_env=self.rank * envs,
            world=self.world,
            micro_units=self._micro_units(num_steps),
        )
        return process_share(order, valid, layout)

    def _micro_units(self, num_steps: int) -> int:
        """Units (`_unit`) per micro-batch of a process's share: micro_batch_size's, else a
        process's even part of the minibatch."""
        rows = self.algo.micro_batch_size or -(-self.minibatch // self.world)
        return max(1, -(-rows // self._unit(num_steps)))

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
        self.step.pull()
        lr = self.step.learning_rate()
        records: list[Tensor] = []  # one vector per step taken: metrics + STEP_FIELDS
        where: list[tuple[int, int]] = []  # (epoch, minibatch) of each record
        try:
            with self.step.calls(_signature(batch, num_steps)):
                stopped = self._epochs(batch, num_steps, records, where, refresh)
        finally:
            self.step.push()  # the policy holds every step taken, even where one failed
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
        records: list[Tensor],
        where: list[tuple[int, int]],
        refresh: Callable[[], None] | None = None,
    ) -> bool:
        """The update's epochs of minibatch steps: appends each step's vector to `records` and
        its (epoch, minibatch) to `where`; True where early stopping ended them."""
        a = self.algo
        size, M = batch["advantages"].shape[0], self.minibatch
        micro = a.micro_batch_size or M
        split = micro < M or self.reduce is not None
        sync_each_step = self._checks_each_step(batch["advantages"].device)
        for epoch in range(a.update_epochs):
            if epoch and refresh is not None:
                self.step.push()  # the critic values the batch as the update has left it
                refresh()
            for k, (mb, weights, micro) in enumerate(self._minibatches(batch, num_steps, size)):
                if split:
                    out = self._accumulated_step(mb, weights, micro)
                else:
                    out = self.step.step(mb, weights)
                if sync_each_step and bool(out[-2]):  # skipped
                    if bool(out[-1]):
                        raise NonFiniteError(self._culprit(out), epoch, k)
                    return True  # early stop: this minibatch's step was not taken
                records.append(out)
                where.append((epoch, k))
        return False

    def _minibatches(
        self, batch: dict[str, Tensor], num_steps: int, size: int
    ) -> Iterator[tuple[tuple[Tensor | dict[str, Tensor], ...], Tensor, int]]:
        """One epoch's minibatches: (fields, per-token weights, rows per micro-batch) of each.

        In one process, minibatch k is rows [k*M, (k+1)*M) of the epoch's order; in a run of
        several, this process's share of it (`process_share`), weighted with the whole
        minibatch's denominators."""
        a, M = self.algo, self.minibatch
        device = batch["advantages"].device
        if self.reduce is None or self.world == 1:
            order, valid = self._epoch_order(size, num_steps, device)
            # Gathered once per epoch (observations key by key).
            rows = [map_obs(lambda x, o=order: x[o], batch[f]) for f in self.fields]
            mask = batch["mask"][order]
            if valid is not None:
                mask = mask * valid
            weights = aggregation_weights(
                mask.reshape(-1, M), a.loss_agg_func, num_steps, self.reduce
            )  # (K, M)
            micro = a.micro_batch_size or M
            for k in range(weights.shape[0]):
                yield tuple(_rows(x, slice(k * M, (k + 1) * M)) for x in rows), weights[k], micro
            return
        share = self._share(size, num_steps, device)
        rows = [map_obs(lambda x, o=share.rows: x[o], batch[f]) for f in self.fields]
        mask = batch["mask"][share.rows] * share.valid
        spans = [slice(lo, hi) for lo, hi in zip(share.bounds, share.bounds[1:], strict=False)]
        weights = share_weights([mask[s] for s in spans], a.loss_agg_func, num_steps, self.reduce)
        micro = self._micro_units(num_steps) * self._unit(num_steps)
        for span, w in zip(spans, weights, strict=True):
            yield tuple(_rows(x, span) for x in rows), w, micro

    def _checks_each_step(self, device: torch.device) -> bool:
        """On the CPU a host sync costs nothing: stop at the first skipped step. Elsewhere, look
        at the steps' flags once at the end (unless early stopping must end the loop)."""
        return device.type == "cpu" or self.algo.early_stop_kl is not None

    def _accumulated_step(self, mb: tuple[Tensor, ...], weights: Tensor, micro: int) -> Tensor:
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
        return torch.cat([metrics, self.step.apply(total, loss, kl)])

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
