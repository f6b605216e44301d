"""The rollout contract: what a collector is to the trainer and the run state, whichever kind of
vector env it steps, and the parts every collector shares.

A collector fills the rollout buffer, one rollout per `collect`, acting with a policy that is
fixed during the rollout (docs/design.md, rules 1 and 2). Two kinds implement the contract:
`collector.Collector` steps host envs (`vecenv.VecEnv`: numpy in and out, the rollout staged
on the host and copied to the buffer once) and `device_collector.DeviceCollector` steps envs
that live on the training device (`vecenv.DeviceVecEnv`: tensors in and out, written straight
into the buffer). Both draw a rollout's sampling noise at once from a `NoiseSource` over their
slice of the run's envs (`noise`), finish the buffer the same way (V(s_T), the kept bootstrap
observations, the scaled rewards: `RolloutCollector._finish_buffer`), report the finished
episodes as `RolloutStats`, save and restore the envs as an `io.checkpoint_state.EnvsSnapshot`
through one `restore`, and merge observation statistics the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TextIO, TypeVar

import torch

from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.core.types import Reduce
from embodied_ppo.io.checkpoint_state import EnvsSnapshot, TensorObs
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.noise import EnvSlice, NoiseSource
from embodied_ppo.vecenv.protocol import BatchedEnvs

ObsT = TypeVar("ObsT")  # what the envs return: numpy arrays, or device tensors
ActionT = TypeVar("ActionT")  # what they take
EnvsT = TypeVar("EnvsT", bound=BatchedEnvs)  # the kind of vector env


@dataclass
class RolloutStats:
    """Finished episodes (raw returns and lengths) seen during one rollout."""

    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    steps: int = 0  # environment steps taken (N per vector step)
    # info["is_success"] at the end of each finished episode that reported it
    episode_successes: list[float] = field(default_factory=list)
    # info["log"] at the end of each finished episode that reported one (the env's own scalars)
    episode_logs: list[dict[str, float]] = field(default_factory=list)


@dataclass(frozen=True)
class CollectorSettings:
    """How a collector runs.

    Attributes:
        inference: "host" (the numpy snapshot) or "device" (torch on `device`); a device env's
            collector always acts in torch.
        micro_batch: at most this many envs per forward pass (`rollout_micro_batch_size`).
        forward_micro_batch: at most this many rows per forward pass when the run's first
            rollout is evaluated again (`logprob_forward_micro_batch_size`).
        env_offset, total_envs: this process steps envs env_offset .. env_offset + N - 1 of
            total_envs (all processes of a distributed run): the noise of env k is the same
            whatever the split.
        reduce: sums a tensor over processes (reward and observation statistics).
        keep_bootstrap_obs: also keep the observation after the last step and the final
            observations of truncated episodes (`algorithm.recompute_advantages`).
        notes: where one-off notes go.
        env_actions: what the envs receive, from the observation and the policy's actions (a
            distillation's teacher acting, `runner.distill`); None: the policy's actions. The
            buffer keeps the policy's.
    """

    device: torch.device
    inference: Literal["host", "device"] = "device"
    micro_batch: int | None = None
    forward_micro_batch: int | None = None
    env_offset: int = 0
    total_envs: int | None = None
    reduce: Reduce | None = None
    keep_bootstrap_obs: bool = False
    notes: TextIO | None = None
    env_actions: Callable | None = None

    def envs(self, num_envs: int) -> EnvSlice:
        """This process's `num_envs` envs among the run's."""
        return EnvSlice(self.env_offset, num_envs, self.total_envs or num_envs)


@dataclass(frozen=True)
class Bootstrap:
    """What a rollout keeps to value its bootstraps again during the update
    (`algorithm.recompute_advantages`): the observation after its last step (N, ...) and each
    truncation's final observations (step t, env rows, observations (k, ...))."""

    last_obs: TensorObs
    finals: Sequence[tuple[int, torch.Tensor, TensorObs]]


class RolloutCollector(ABC, Generic[EnvsT, ObsT]):
    """The rollout contract, and what every collector does the same way.

    Attributes:
        obs: the observations (N, ...) the policy acts on next (None before `start`).
        merged: the last rollout's observations are in the policy's normalizers.
        noise: where a rollout's sampling noise comes from.
    """

    def __init__(
        self,
        envs: EnvsT,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        settings: CollectorSettings,
    ) -> None:
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.reward_scaler, self.settings = reward_scaler, settings
        self.device = settings.device
        self.obs: ObsT | None = None
        self.merged = False
        self.noise: NoiseSource = self._noise_source(settings.envs(buffer.num_envs))

    # ------------------------------------------------------------------ what each kind does
    @abstractmethod
    def _noise_source(self, envs: EnvSlice) -> NoiseSource:
        """Where this kind's sampling noise comes from (host arrays or device tensors)."""

    @abstractmethod
    def start(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's seeds) and keep the first observation."""

    @abstractmethod
    def collect(
        self, episode_seeds: list[int] | None = None, noise_seed: int | None = None
    ) -> RolloutStats:
        """Run one rollout into the buffer (every field but the advantages).

        `episode_seeds`: one episode per env from these seeds, the steps after its end masked
        out (critic-free estimators; host envs only). `noise_seed`: the sampling noise of
        global env k at step t is a pure function of (noise_seed, t, k).
        """

    @abstractmethod
    def state(self) -> EnvsSnapshot:
        """The envs mid-episode and the observation acted on next (checkpoint-safe)."""

    @abstractmethod
    def _accept(self, snapshot: EnvsSnapshot) -> str | None:
        """After the envs took the snapshot's state: take its observations (and what else the
        policy carries); returns why that cannot be, or None."""

    @abstractmethod
    def _observations(self) -> TensorObs:
        """The last rollout's observations as rows (T * N, ...)."""

    # ------------------------------------------------------------------ shared
    def _env_actions(self, obs: ObsT, actions: ActionT) -> ActionT:
        """The actions the envs take for `obs`: the policy's, unless the settings say whose."""
        hook = self.settings.env_actions
        return actions if hook is None else hook(obs, actions)

    def _start_kept(self, seeds: list[int]) -> None:
        """Start fresh episodes as a restore does (a device env keeps the generators)."""
        self.start(seeds)

    def restore(
        self, snapshot: EnvsSnapshot | None, fresh_seeds: list[int], steps: int
    ) -> str | None:
        """Put the envs back where `state()` left them; returns why that failed, or None.

        On failure the envs start fresh episodes from `fresh_seeds` (deterministic, but not the
        uninterrupted run), the reward scaler forgets the discounted returns of the episodes
        that were cut, and the env step count continues from `steps`.
        """
        self._start_kept(fresh_seeds)
        if snapshot is None or snapshot.empty:
            reason = "the checkpoint holds no environment state"
        else:
            assert snapshot.envs is not None
            reason = self.envs.set_state(snapshot.envs)
            if reason is None:
                reason = self._accept(snapshot)
                if reason is None:
                    return None
            if snapshot.envs.get("members") is not None:
                self._start_kept(fresh_seeds)  # undo a partial restore
        self.envs.set_steps(steps)
        self.reward_scaler.reset_returns()
        return reason

    def _finish_buffer(
        self, last_values: torch.Tensor, bootstrap: Bootstrap | None, episodic: bool
    ) -> None:
        """After a rollout's last step: next values from V(s_T) = `last_values` (N,) and the
        truncations' V(final_obs), the kept bootstrap observations, and the rollout's rewards
        scaled once (`RewardScaler.scale_rollout`; an episodic rollout's steps only)."""
        buf = self.buffer
        buf.finalize_next_values(last_values)
        if bootstrap is not None:
            buf.keep_bootstrap_obs(bootstrap.last_obs, list(bootstrap.finals))
        mask = buf.mask if episodic else None
        buf.rewards.copy_(
            self.reward_scaler.scale_rollout(buf.rewards, buf.ends, mask, self.settings.reduce)
        )

    def merge_obs_statistics(self) -> None:
        """Merge the last rollout's observations into the policy's normalizers (docs/design.md,
        rule 2), once.

        Called after the update, so collection, the stored log-probs and values, and the update of
        one iteration all see the same normalization (the first ratio of an update is exactly 1).
        """
        if self.merged:
            return
        self._merge(self._observations(), self._counted_rows())

    def _counted_rows(self) -> torch.Tensor | None:
        """Which rows (T * N,) of the last rollout count (None: all of them)."""
        return None

    def _merge(self, obs: TensorObs, keep: torch.Tensor | None = None) -> None:
        """Merge observations (B, ...) into the normalizers, the rows where `keep` (B,) holds
        (episodic rollouts: the steps of the episodes only)."""
        if keep is not None and not bool(keep.all()):
            first = next(iter(obs.values())) if isinstance(obs, dict) else obs
            rows = keep.to(first.device)
            obs = {k: v[rows] for k, v in obs.items()} if isinstance(obs, dict) else obs[rows]
        self.policy.update_obs_statistics(obs, self.settings.reduce)
        self.merged = True
