"""The PPO update: mini-epochs over shuffled minibatches, micro-batch gradient accumulation."""

from __future__ import annotations

import torch

from embodied_ppo.buffer import minibatch_indices
from embodied_ppo.config import AlgorithmConfig, OptimConfig
from embodied_ppo.losses import actor_critic_loss
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.distributions import DiagGaussian

BATCH_FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns")


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


def learning_rate(optim: OptimConfig, iteration: int, num_iterations: int) -> float:
    """The learning rate for 0-based `iteration`: constant, or linear decay to 0 at the end."""
    if optim.schedule == "linear":
        return optim.lr * (1.0 - iteration / num_iterations)
    return optim.lr


class PPOUpdate:
    """Runs `update_epochs` passes of clipped-PPO gradient steps over one rollout batch.

    Each minibatch is split into micro-batches whose losses are divided by the minibatch size,
    so accumulating their gradients gives the minibatch gradient exactly (Rule 3).
    """

    def __init__(
        self,
        policy: ActorCritic,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
    ) -> None:
        self.policy, self.algo, self.optim = policy, algo, optim
        self.optimizer = optimizer
        self.generator = generator  # CPU generator for minibatch shuffling
        self.params = [p for p in policy.parameters() if p.requires_grad]

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One PPO update on a flattened batch (fields of BATCH_FIELDS, leading size B)."""
        a = self.algo
        size = batch["advantages"].shape[0]
        device = batch["advantages"].device
        micro = a.micro_batch_size or a.minibatch_size
        sums: dict[str, torch.Tensor] = {}
        num_steps = 0
        for epoch in range(a.update_epochs):
            for k, idx in enumerate(
                minibatch_indices(size, a.minibatch_size, self.generator, device)
            ):
                self.optimizer.zero_grad(set_to_none=True)
                mb_metrics: dict[str, torch.Tensor] = {}
                mb_loss = torch.zeros((), device=device)
                for start in range(0, idx.shape[0], micro):
                    j = idx[start : start + micro]
                    logprob, entropy, value, dist = self.policy.evaluate(
                        batch["obs"][j], batch["actions"][j]
                    )
                    loss, metrics = actor_critic_loss(
                        logprob,
                        batch["logprobs"][j],
                        batch["advantages"][j],
                        value,
                        batch["values"][j],
                        batch["returns"][j],
                        entropy,
                        clip_ratio_low=a.clip_ratio_low,
                        clip_ratio_high=a.clip_ratio_high,
                        clip_ratio_c=a.clip_ratio_c,
                        value_clip=a.value_clip,
                        huber_delta=a.huber_delta,
                        entropy_bonus=a.entropy_bonus,
                        value_loss_coef=a.value_loss_coef,
                        denom=float(idx.shape[0]),
                    )
                    loss.backward()
                    mb_loss += loss.detach()
                    if isinstance(dist, DiagGaussian):
                        metrics["std"] = dist.std.detach().mean(dim=-1).sum() / idx.shape[0]
                    for name, v in metrics.items():
                        mb_metrics[name] = mb_metrics.get(name, 0.0) + v
                grad_norm = self._clip_grads()
                # A non-finite loss can still give finite (e.g. Huber-bounded) gradients: check both.
                if not torch.isfinite(grad_norm + mb_loss):
                    raise NonFiniteError(self._culprit(mb_metrics), epoch, k)
                self.optimizer.step()
                mb_metrics["grad_norm"] = grad_norm
                for name, v in mb_metrics.items():
                    sums[name] = sums.get(name, 0.0) + v
                num_steps += 1
        out = {name: float(v) / num_steps for name, v in sums.items()}
        out["num_gradient_steps"] = float(num_steps)
        return out

    def _clip_grads(self) -> torch.Tensor:
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.optim.max_grad_norm is None:
            return torch.nn.utils.get_total_norm(grads)
        return torch.nn.utils.clip_grad_norm_(self.params, self.optim.max_grad_norm)

    @staticmethod
    def _culprit(metrics: dict[str, torch.Tensor]) -> str:
        for name in ("policy_loss", "value_loss", "entropy"):
            if name in metrics and not torch.isfinite(torch.as_tensor(metrics[name])):
                return name
        return "gradient"
