"""The PPO update: mini-epochs over shuffled minibatches, micro-batch gradient accumulation,
KL loss against a frozen reference, early stopping and the KL-adaptive learning rate."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from embodied_ppo import distributed
from embodied_ppo.buffer import minibatch_indices, sequence_minibatch_indices
from embodied_ppo.config import AlgorithmConfig, OptimConfig
from embodied_ppo.losses import kl_estimate, ppo_loss
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.distributions import DiagGaussian

BATCH_FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns", "mask")


class NonFiniteError(RuntimeError):
    """A loss term or the gradient became NaN/Inf; the weights were not touched."""

    def __init__(self, what: str, epoch: int, minibatch: int) -> None:
        super().__init__(f"non-finite {what} in epoch {epoch}, minibatch {minibatch}")
        self.what, self.epoch, self.minibatch = what, epoch, minibatch


def make_optimizer(policy: ActorCritic, optim: OptimConfig) -> torch.optim.Adam:
    """Adam with the configured eps; the fused kernel where torch provides it for the device."""
    params = list(policy.parameters())
    try:
        return torch.optim.Adam(params, lr=optim.lr, eps=optim.adam_eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=optim.lr, eps=optim.adam_eps)


def learning_rate(optim: OptimConfig, progress: float, current: float | None = None) -> float:
    """The learning rate at `progress` = global_step / total_steps in [0, 1).

    constant: lr; linear: lr * (1 - progress); adaptive: the current (KL-adapted) rate.
    """
    if optim.schedule == "linear":
        return optim.lr * (1.0 - progress)
    if optim.schedule == "adaptive" and current is not None:
        return current
    return optim.lr


def adapt_learning_rate(lr: float, kl: float, optim: OptimConfig) -> float:
    """KL-adaptive rule: kl > 2 desired -> lr / 1.5; kl < desired / 2 -> lr * 1.5; clamped."""
    if kl > 2.0 * optim.desired_kl:
        lr = lr / 1.5
    elif kl < 0.5 * optim.desired_kl:
        lr = lr * 1.5
    return min(max(lr, optim.lr_min), optim.lr_max)


def aggregation_weights(
    mask: torch.Tensor,
    mode: str,
    seq_len: int,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Per-token weights (B,) for a minibatch so that sum(weights * x) is the `loss_agg_func`.

    For the seq-* modes the minibatch is whole sequences laid out back to back (seq_len each).
    `reduce` sums the denominators over the ranks of a distributed run, so every rank weights
    its tokens as one process holding all ranks' minibatches would.
    """

    def total(x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32).reshape(1)
        return (reduce(x) if reduce is not None else x)[0].clamp(min=1.0)

    if mode == "token-mean":
        return mask / total(mask.sum())
    seqs = mask.reshape(-1, seq_len)  # (S, T)
    lengths = seqs.sum(dim=1, keepdim=True)  # (S, 1)
    num_seqs = total((lengths > 0).sum())
    if mode == "seq-mean-token-sum":
        return (seqs / num_seqs).reshape(-1)
    if mode == "seq-mean-token-mean":
        return (seqs / (lengths.clamp(min=1.0) * num_seqs)).reshape(-1)
    raise ValueError(f"unknown loss_agg_func {mode!r}")


class PPOUpdate:
    """Runs `update_epochs` passes of clipped-PPO gradient steps over one rollout batch.

    Each minibatch is split into micro-batches; their losses are weighted with the minibatch's
    aggregation weights, so accumulating their gradients gives the minibatch gradient (Rule 3).
    """

    def __init__(
        self,
        policy: ActorCritic,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
        reference: ActorCritic | None = None,
        compile: bool = False,
    ) -> None:
        self.policy, self.algo, self.optim = policy, algo, optim
        # torch.compile fuses the forward and backward of the policy evaluation (opt-in: the
        # first update pays the compilation).
        self.evaluate = torch.compile(policy.evaluate) if compile else policy.evaluate
        self.optimizer = optimizer
        self.generator = generator  # CPU generator for minibatch shuffling
        self.reference = reference  # frozen policy for the KL loss
        self.params = [p for p in policy.parameters() if p.requires_grad]
        # Sums over ranks in a distributed run (None in a single process).
        self.reduce = distributed.all_reduce_sum if distributed.world_size() > 1 else None
        # On an accelerator, fused Adam skips a step on a device-side flag (found_inf), so a
        # non-finite step is dropped without a host sync and reported after the update. On the
        # CPU a sync is free: the update stops at the first non-finite step.
        device = next(iter(policy.parameters())).device
        self._skips_on_flag = (
            device.type != "cpu"
            and bool(optimizer.defaults.get("fused"))
            and isinstance(optimizer, torch.optim.Adam)
        )

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _minibatches(
        self, size: int, num_steps: int, device: torch.device
    ) -> Iterator[torch.Tensor]:
        a = self.algo
        if a.loss_agg_func == "token-mean":
            return minibatch_indices(size, a.minibatch_size, self.generator, device)
        num_envs = size // num_steps
        return sequence_minibatch_indices(
            num_steps, num_envs, a.minibatch_size // num_steps, self.generator, device
        )

    def update(self, batch: dict[str, torch.Tensor], num_steps: int) -> dict[str, float]:
        """One PPO update on a flattened (T*N) batch (fields of BATCH_FIELDS) from T = `num_steps`."""
        a = self.algo
        size = batch["advantages"].shape[0]
        device = batch["advantages"].device
        micro = a.micro_batch_size or a.minibatch_size
        use_kl = a.use_kl_loss and self.reference is not None
        critic = a.loss_type == "actor_critic"
        # Per-step metrics stay tensors until the end: no host sync inside the loop.
        records: list[dict[str, torch.Tensor | float]] = []
        where: list[tuple[int, int]] = []
        bad_flags: list[torch.Tensor] = []
        stopped = False
        for epoch in range(a.update_epochs):
            for k, idx in enumerate(self._minibatches(size, num_steps, device)):
                weights = aggregation_weights(
                    batch["mask"][idx], a.loss_agg_func, num_steps, self.reduce
                )
                self.optimizer.zero_grad(set_to_none=True)
                mb: dict[str, torch.Tensor | float] = {}
                mb_loss = torch.zeros((), device=device)
                for start in range(0, idx.shape[0], micro):
                    j = idx[start : start + micro]
                    w = weights[start : start + micro]
                    obs, actions = batch["obs"][j], batch["actions"][j]
                    logprob, entropy, value, dist = self.evaluate(obs, actions)
                    kl = None
                    if use_kl:
                        with torch.no_grad():
                            ref_dist, _ = self.reference(obs)
                            ref_logprob = ref_dist.log_prob(actions)
                        kl = kl_estimate(a.kl_loss_type, logprob, ref_logprob, dist, ref_dist)
                    loss, metrics = ppo_loss(
                        logprob,
                        batch["logprobs"][j],
                        batch["advantages"][j],
                        entropy,
                        w,
                        clip_ratio_low=a.clip_ratio_low,
                        clip_ratio_high=a.clip_ratio_high,
                        clip_ratio_c=a.clip_ratio_c,
                        entropy_bonus=a.entropy_bonus,
                        values=value if critic else None,
                        old_values=batch["values"][j] if critic else None,
                        returns=batch["returns"][j] if critic else None,
                        value_clip=a.value_clip,
                        huber_delta=a.huber_delta,
                        value_loss_coef=a.value_loss_coef,
                        kl=kl,
                        kl_loss_coef=a.kl_loss_coef,
                    )
                    loss.backward()
                    mb_loss = mb_loss + loss.detach()
                    if isinstance(dist, DiagGaussian):
                        metrics["std"] = (dist.std.detach().mean(dim=-1) * w).sum()
                    for name, v in metrics.items():
                        mb[name] = mb.get(name, 0.0) + v
                if self.reduce is not None:
                    # Every rank's gradient, weighted with global denominators, sums to the
                    # gradient of the whole batch; the loss too, so all ranks agree on a skip.
                    distributed.all_reduce_grads(self.params, mb_loss)
                    if a.early_stop_kl is not None or self.optim.schedule == "adaptive":
                        self.reduce(mb["approx_kl"])
                if a.early_stop_kl is not None and float(mb["approx_kl"]) > a.early_stop_kl:
                    # The policy already moved too far from the behaviour policy: drop this
                    # minibatch's gradient and end the update.
                    self.optimizer.zero_grad(set_to_none=True)
                    stopped = True
                    break
                grad_norm = self._clip_grads()
                # A non-finite loss can still give finite (e.g. Huber-bounded) gradients: check both.
                bad = ~torch.isfinite(grad_norm + mb_loss)
                if self.optim.schedule == "adaptive":
                    self.set_lr(adapt_learning_rate(self.lr, float(mb["approx_kl"]), self.optim))
                if self._skips_on_flag:
                    # The fused step skips the update (and its moments) where found_inf is set,
                    # so a non-finite step never reaches the weights and nothing waits on the host.
                    self.optimizer.found_inf = bad.to(torch.float32)
                elif bool(bad):
                    raise NonFiniteError(self._culprit(mb), epoch, k)
                self.optimizer.step()
                mb["grad_norm"] = grad_norm
                records.append(mb)
                where.append((epoch, k))
                bad_flags.append(bad)
            if stopped:
                break
        if self._skips_on_flag:
            del self.optimizer.found_inf
        if bad_flags:
            flags = torch.stack(bad_flags)
            if bool(flags.any()):  # one host sync per update
                first = int(flags.nonzero()[0, 0])
                raise NonFiniteError(self._culprit(records[first]), *where[first])
        out: dict[str, float] = {}
        if records:
            for name in records[0]:
                values = torch.stack([torch.as_tensor(r[name]) for r in records])
                # Token metrics are weighted per rank: their sum over ranks is the global value.
                # approx_kl was already summed for the step-size rules; the gradient norm is
                # computed after the gradient all-reduce.
                reduced = name == "grad_norm" or (
                    name == "approx_kl"
                    and (a.early_stop_kl is not None or self.optim.schedule == "adaptive")
                )
                if self.reduce is not None and not reduced:
                    values = self.reduce(values.clone())
                out[name] = float(values.mean())
        out["num_gradient_steps"] = float(len(records))
        out["early_stopped"] = float(stopped)
        return out

    def _clip_grads(self) -> torch.Tensor:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return torch.zeros(())
        if self.optim.max_grad_norm is None:
            return torch.nn.utils.get_total_norm(grads)
        return torch.nn.utils.clip_grad_norm_(self.params, self.optim.max_grad_norm)

    @staticmethod
    def _culprit(metrics: dict[str, torch.Tensor | float]) -> str:
        for name in ("policy_loss", "value_loss", "entropy", "kl_loss"):
            if name in metrics and not torch.isfinite(torch.as_tensor(metrics[name])):
                return name
        return "gradient"
