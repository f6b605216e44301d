"""Random network distillation (`algorithm.rnd`): an intrinsic reward for visiting states the
agent has seen little of.

A target network with fixed random weights and a predictor network both embed the step's
observation (its `obs_keys`, standardized by running statistics of their own and clipped). The
predictor is trained to output the target's embedding on the states the agent visits, so its
error, the mean over the embedding of (predictor - target)^2, stays high only where it has
seen few states like them. That error, divided by the running standard deviation of the errors
(its own normalization; dividing by the std of the discounted intrinsic return, as the RND paper
does, would need a per-env state), times the weight of the schedule (`config.auxiliary.
rnd_weight`), is added to each step's (scaled) task reward after collection. The predictor
trains after the update, with Adam, on the rollout it has just rewarded: `epochs` passes, each
of `minibatches` steps on a shuffled share of the rollout's time steps over all envs, so a run
of several processes takes the steps of one process holding every env (its gradients and
statistics are summed over the processes: docs/design.md, rule 7).

Both networks, their statistics, the predictor's optimizer and the shuffling generator are the
state a checkpoint keeps. Nothing of it is part of the policy: a deployed policy carries none.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embodied_ppo.config.auxiliary import RNDConfig
from embodied_ppo.core.types import CheckpointState, Reduce
from embodied_ppo.model.networks import mlp
from embodied_ppo.model.normalizer import RunningMeanStd

Obs = Tensor | dict[str, Tensor]

# Rows per forward pass of the networks when a rollout is rewarded.
REWARD_ROWS = 8192


class RNDNetworks(nn.Module):
    """The target (fixed) and predictor networks, and the running statistics of their inputs
    and of the errors."""

    def __init__(self, cfg: RNDConfig, in_dim: int) -> None:
        super().__init__()
        sizes = list(cfg.hidden_sizes)
        self.target = nn.Sequential(
            mlp(in_dim, sizes, "elu"), nn.Linear(sizes[-1] if sizes else in_dim, cfg.output_size)
        )
        self.predictor = nn.Sequential(
            mlp(in_dim, sizes, "elu"), nn.Linear(sizes[-1] if sizes else in_dim, cfg.output_size)
        )
        self.target.requires_grad_(False)
        self.obs_stats = RunningMeanStd((in_dim,))
        self.error_stats = RunningMeanStd(())


class RandomNetworkDistillation:
    """The intrinsic reward of a run (see the module docstring).

    Args:
        cfg: the `algorithm.rnd` block.
        keys: the Dict observation's keys the networks read (None: a flat observation).
        in_dim: the size of their input (the keys' sizes together).
        seed: draws both networks' initial weights (torch's global generator is left as it was)
            and seeds the shuffling generator.
        reduce: sums a tensor over the processes of a distributed run (None: one process).
        micro_batch: at most this many rows per forward and backward pass of the predictor.
    """

    def __init__(
        self,
        cfg: RNDConfig,
        keys: list[str] | None,
        in_dim: int,
        device: torch.device,
        *,
        seed: int,
        reduce: Reduce | None = None,
        micro_batch: int | None = None,
    ) -> None:
        self.cfg, self.keys, self.reduce, self.micro_batch = cfg, keys, reduce, micro_batch
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.nets = RNDNetworks(cfg, in_dim).to(device)
        self.optimizer = torch.optim.Adam(self.nets.predictor.parameters(), lr=cfg.lr)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.device = device

    # ------------------------------------------------------------------ inputs
    def inputs(self, obs: Obs) -> Tensor:
        """The networks' raw input (B, in_dim): the flat observation, or its keys side by side."""
        if self.keys is None:
            assert isinstance(obs, Tensor)
            return obs.float()
        assert isinstance(obs, dict)
        return torch.cat([obs[k].float().reshape(obs[k].shape[0], -1) for k in self.keys], dim=-1)

    def _normalized(self, x: Tensor) -> Tensor:
        s = self.nets.obs_stats
        mean, std = s.mean.to(x), torch.sqrt(s.var + 1e-8).to(x)
        return ((x - mean) / std).clamp(-self.cfg.clip_obs, self.cfg.clip_obs)

    def _errors(self, x: Tensor) -> Tensor:
        """Each row's prediction error (B,) of normalized inputs `x` (B, in_dim)."""
        return (self.nets.predictor(x) - self.nets.target(x)).square().mean(dim=-1)

    def _sum(self, x: Tensor) -> Tensor:
        return x if self.reduce is None else self.reduce(x)

    # ------------------------------------------------------------------ the reward
    @torch.no_grad()
    def novelty(self, obs: Obs) -> Tensor:
        """The unweighted intrinsic reward (B,) of observations, the statistics as they are
        (nothing is merged): each row's error divided by the errors' std."""
        errors = self._errors(self._normalized(self.inputs(obs)))
        return errors / torch.sqrt(self.nets.error_stats.var + 1e-8).to(errors)

    @torch.no_grad()
    def reward(self, obs: Obs, mask: Tensor, weight: float) -> tuple[Tensor, dict[str, float]]:
        """The intrinsic reward (B,) of a rollout's observations (B = T*N rows, `mask` 1 on the
        steps that count): the inputs' and errors' statistics first merge these steps, then
        each error is divided by the errors' std and weighted. Returns it with its scalars."""
        x = self.inputs(obs)
        keep = mask.bool()
        self.nets.obs_stats.update(x[keep], self.reduce)
        errors = torch.cat(
            [
                self._errors(self._normalized(x[i : i + REWARD_ROWS]))
                for i in range(0, x.shape[0], REWARD_ROWS)
            ]
        )
        self.nets.error_stats.update(errors[keep], self.reduce)
        std = torch.sqrt(self.nets.error_stats.var + 1e-8).to(errors)
        intrinsic = weight * errors / std * mask
        sums = self._sum(torch.stack([mask.sum(), (errors * mask).sum(), intrinsic.sum()]))
        n = float(sums[0].clamp(min=1.0))
        scalars = {
            "rewards/intrinsic": float(sums[2]) / n,
            "rnd/prediction_error": float(sums[1]) / n,
            "rnd/weight": float(weight),
        }
        return intrinsic, scalars

    # ------------------------------------------------------------------ training
    def train(self, obs: Obs, mask: Tensor, num_steps: int) -> dict[str, float]:
        """Train the predictor on a rollout's observations (T*N rows of T = `num_steps`) and
        return the mean loss of its last pass."""
        cfg, T = self.cfg, num_steps
        with torch.no_grad():
            x = self._normalized(self.inputs(obs))
        x, mask = x.reshape(T, -1, x.shape[-1]), mask.reshape(T, -1)
        share = T // cfg.minibatches
        last = torch.zeros((), device=self.device)
        for _ in range(cfg.epochs):
            order = torch.randperm(T, generator=self.generator).to(self.device)
            last = torch.zeros((), device=self.device)
            for k in range(cfg.minibatches):
                steps = order[k * share : (k + 1) * share]
                last = last + self._step(x[steps].reshape(-1, x.shape[-1]), mask[steps].reshape(-1))
        return {"rnd/predictor_loss": float(last) / cfg.minibatches}

    def _step(self, x: Tensor, mask: Tensor) -> Tensor:
        """One Adam step of the predictor on rows `x` (the steps where `mask` is 1), its loss the
        mean error over the rows of every process; returns that loss."""
        total = self._sum(mask.sum().reshape(1))[0].clamp(min=1.0)
        self.optimizer.zero_grad(set_to_none=False)
        rows = self.micro_batch or x.shape[0]
        loss = torch.zeros((), device=self.device)
        for i in range(0, x.shape[0], rows):
            part = (self._errors(x[i : i + rows]) * mask[i : i + rows]).sum() / total
            part.backward()
            loss = loss + part.detach()
        params = list(self.nets.predictor.parameters())
        if self.reduce is not None:
            flat = self.reduce(torch.cat([p.grad.reshape(-1) for p in params] + [loss.reshape(1)]))
            offset = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[offset : offset + n].reshape(p.shape))
                offset += n
            loss = flat[-1]
        self.optimizer.step()
        return loss

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> CheckpointState:
        """Both networks and their statistics, the predictor's Adam state and the shuffling
        generator (tensors and plain values)."""
        return {
            "networks": self.nets.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": self.generator.get_state(),
        }

    def load_state_dict(self, state: CheckpointState) -> None:
        """Continue from `state_dict()`."""
        self.nets.load_state_dict(state["networks"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["rng"])
