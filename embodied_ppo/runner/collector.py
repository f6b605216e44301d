"""Rollout collection: env <-> policy, with truncation bootstrap values (docs/design.md, rule 1).

The policy, normalizer included, is fixed during a rollout: the stored log-probs and values are
exactly those of the policy the update starts from. The rollout is staged on the host
(`runner.staging`) and copied to the buffer once; the policy acts through `runner.acting`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TextIO

import numpy as np
import torch

from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.core.obs import map_obs, set_obs
from embodied_ppo.core.types import CheckpointState, Reduce
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.acting import VALUE_BATCH_ROWS, Acting, rollout_noise
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.staging import Staging
from embodied_ppo.vecenv.protocol import StepResult, VecEnv
from embodied_ppo.vecenv.seeding import warm_up_seed
from embodied_ppo.vecenv.spaces import Obs


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
        inference: "host" (the numpy snapshot) or "device" (torch on `device`).
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


@dataclass
class _Rollout:
    """What one rollout tracks while it runs."""

    stats: RolloutStats
    noise: np.ndarray  # (T, N, ...)
    terms: tuple[np.ndarray, np.ndarray] | None  # a state-independent Gaussian's noise terms
    episodic: bool
    done: np.ndarray  # (N,) episodic: which envs have finished their episode
    steps: int  # its length: T, or fewer where all episodes of an episodic rollout ended
    finals: list[tuple[int, np.ndarray, Obs]] = field(default_factory=list)  # truncations
    new_state: torch.Tensor | None = None  # a recurrent policy's state after this step


class Collector:
    """Fills a RolloutBuffer by stepping `envs` with `policy`.

    A recurrent policy acts in torch, one step at a time, carrying each env's state: the state
    is zeroed where an episode starts (after a termination or a truncation), stored in the
    buffer before every step, and a truncated episode is bootstrapped with the value of its
    final observation under the state that reached it.
    """

    def __init__(
        self,
        envs: VecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        settings: CollectorSettings,
    ) -> None:
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.reward_scaler, self.settings = reward_scaler, settings
        self.device = settings.device
        N = envs.num_envs
        self.acting = Acting(
            policy, self.device, settings.inference == "host", settings.micro_batch or N,
            settings.notes,
        )  # fmt: skip
        self.obs: Obs | None = None  # (N, ...): what the policy acts on next
        self.merged = False  # the last rollout's observations are in the normalizers
        # Recurrent policies: each env's state after its last step, and whether its next step
        # starts an episode (the state is zeroed before it).
        self.state_size = policy.state_size
        self.rnn_state = torch.zeros(N, self.state_size, device=self.device)
        self.episode_starts = np.ones(N, dtype=bool)
        self.stage = Staging(
            envs.info, buffer.num_steps, N, tuple(buffer.actions.shape[2:]), policy.is_gaussian,
            self.state_size,
        )  # fmt: skip

    # ------------------------------------------------------------------ env state
    def start(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's per-env seeds) and keep the first observation."""
        self.obs = map_obs(np.copy, self.envs.reset(seeds))
        self.rnn_state.zero_()
        self.episode_starts.fill(True)

    def state(self) -> CheckpointState:
        """The envs mid-episode, the observation acted on next and a recurrent policy's states
        (checkpoint-safe)."""
        obs = None if self.obs is None else map_obs(lambda x: torch.from_numpy(x.copy()), self.obs)
        recurrent = None
        if self.state_size:
            recurrent = {
                "state": self.rnn_state.cpu().clone(),
                "starts": torch.from_numpy(self.episode_starts.copy()),
            }
        return {"envs": self.envs.get_state(), "obs": obs, "recurrent": recurrent}

    def restore(
        self, state: CheckpointState | None, fresh_seeds: list[int], steps: int
    ) -> str | None:
        """Put the envs back where `state()` left them; returns why that failed, or None.

        On failure the envs start fresh episodes from `fresh_seeds` (deterministic, but not the
        uninterrupted run), the reward scaler forgets the discounted returns of the episodes
        that were cut, and the env step count continues from `steps`.
        """
        self.start(fresh_seeds)
        saved = None if state is None else state.get("envs")
        obs = None if state is None else state.get("obs")
        if saved is None or obs is None:
            reason = "the checkpoint holds no environment state"
        else:
            reason = self.envs.set_state(saved)
            recurrent = state.get("recurrent") if self.state_size else None
            if reason is None and self.state_size and recurrent is None:
                reason = "the checkpoint holds no recurrent states"
            if reason is None:
                self.obs = map_obs(lambda x: x.numpy().copy(), obs)
                if recurrent is not None:
                    self.rnn_state.copy_(recurrent["state"])
                    self.episode_starts[:] = recurrent["starts"].numpy()
                return None
            if saved["members"] is not None:
                self.start(fresh_seeds)  # undo a partial restore
        self.envs.set_steps(steps)
        self.reward_scaler.reset_returns()
        return reason

    # ------------------------------------------------------------------ the rollout
    @torch.inference_mode()
    def collect(
        self, episode_seeds: list[int] | None = None, noise_seed: int | None = None
    ) -> RolloutStats:
        """Run up to `buffer.num_steps` vector steps and fill every buffer field but advantages.

        Continuing mode (default): envs carry on across rollouts and every step counts. Episodic
        mode (`episode_seeds` given): every env is reset with its seed, runs one episode, and the
        steps after its end are masked out (`buf.mask`); collection stops once all have ended.
        Rewards are scaled once per rollout (RewardScaler.scale_rollout).

        With `noise_seed`, the sampling noise of global env k at step t is a pure function of
        (noise_seed, t, k). Without it, the noise comes from torch's global generator.
        """
        episodic = episode_seeds is not None
        if self.policy.needs_obs_statistics():
            if self.obs is None:
                self.start(episode_seeds)
            self._warm_up(None if noise_seed is None else warm_up_seed(noise_seed))
        if episodic:
            self.start(episode_seeds)
        assert self.obs is not None, "call start() first"
        T, N, s = self.buffer.num_steps, self.envs.num_envs, self.settings
        self.stage.clear()
        noise = rollout_noise(self.policy, T, N, noise_seed, s.env_offset, s.total_envs)
        self.acting.begin()
        run = _Rollout(
            RolloutStats(), noise, self.acting.noise_terms(noise), episodic,
            done=np.zeros(N, dtype=bool), steps=T,
        )  # fmt: skip
        self.merged = False
        obs = self.obs
        for t in range(T):
            obs = self._step(t, obs, run)
            if episodic and self._episodes_over(t, run):
                break
        run.stats.steps = run.steps * N
        self._finish(obs, run)
        return run.stats

    def _step(self, t: int, obs: Obs, run: _Rollout) -> Obs:
        """Act on `obs` at step t, step the envs, stage everything; returns the next obs."""
        st, acting = self.stage, self.acting
        if isinstance(st.obs, dict):
            set_obs(st.obs, t, obs)
        else:
            st.obs[t] = obs
        if self.state_size:
            state = self._reset_states()
            st.states[t] = state.cpu().numpy()
            st.starts[t] = self.episode_starts
            action, logprob, value, run.new_state = acting.act_recurrent(obs, run.noise[t], state)
        else:
            terms = None if run.terms is None else (run.terms[0][t], run.terms[1][t])
            action, logprob, value = acting.act(obs, run.noise[t], not acting.late_values, terms)
        st.actions[t] = action
        st.logprobs[t] = logprob
        if value is not None:
            st.values[t] = value
        res = self.envs.step(action)
        st.rewards[t] = res.reward
        st.terminated[t] = res.terminated
        if res.episode_envs:  # some episode ended at this step (else `ends` stays False)
            self._episodes_ended(t, res, run)
        if self.state_size:
            self.rnn_state = run.new_state
            np.logical_or(res.terminated, res.truncated, out=self.episode_starts)
        return res.obs

    def _episodes_ended(self, t: int, res: StepResult, run: _Rollout) -> None:
        """Stage the ends of step t, the bootstrap values of its truncations (V(final_obs),
        never V(reset obs)), and the finished episodes' statistics."""
        st = self.stage
        np.logical_or(res.terminated, res.truncated, out=st.ends[t])
        cut = np.flatnonzero(res.truncated & ~res.terminated)
        if cut.size:
            final = map_obs(lambda a, rows=cut: a[rows], res.final_obs)
            if self.state_size:  # under the state that reached the final observation
                index = torch.from_numpy(cut).to(self.device)
                values = self.acting.recurrent_values(final, run.new_state[index])
            else:
                values = self.acting.values(final)
            st.final_values[t, cut] = values
            if self.settings.keep_bootstrap_obs:  # valued again later
                run.finals.append((t, cut, map_obs(np.copy, final)))
            st.truncated[t, cut] = True
        n = len(res.episode_envs)
        for env, ret, length, success, log in zip(
            res.episode_envs, res.episode_returns, res.episode_lengths,
            res.episode_successes or [None] * n, res.episode_logs or [None] * n, strict=True,
        ):  # fmt: skip
            if run.done[env]:  # episodic: a later episode of an env that already finished
                continue
            run.stats.episode_returns.append(ret)
            run.stats.episode_lengths.append(length)
            if success is not None:
                run.stats.episode_successes.append(success)
            if log is not None:
                run.stats.episode_logs.append(log)

    def _episodes_over(self, t: int, run: _Rollout) -> bool:
        """Episodic mode: mask the steps of envs whose episode ended; True once all have."""
        st = self.stage
        st.mask[t] = ~run.done
        run.done |= st.ends[t]
        if not run.done.all():
            return False
        st.mask[t + 1 :] = False
        st.ends[t + 1 :] = True
        run.steps = t + 1
        return True

    def _finish(self, obs: Obs, run: _Rollout) -> None:
        """After the last step: late values, the bootstrap V(s_T), the copy to the buffer,
        the kept bootstrap observations and the scaled rewards."""
        st, acting, steps = self.stage, self.acting, run.steps
        if acting.late_values:
            flat = st.flat(st.obs, steps)
            st.values[:steps] = acting.values(flat, VALUE_BATCH_ROWS).reshape(steps, -1)
        if steps < st.steps:
            st.make_tail_inert(steps)
        if self.state_size:
            last = acting.recurrent_values(obs, self._reset_states())
        else:
            last = acting.values(obs)
        self.obs = map_obs(np.copy, obs)  # the env may reuse its observation arrays
        st.copy_to(self.buffer, torch.from_numpy(last))
        buf = self.buffer
        if self.settings.keep_bootstrap_obs:
            buf.keep_bootstrap_obs(
                acting.tensors(self.obs),
                [
                    (t, torch.from_numpy(cut).to(self.device), acting.tensors(final))
                    for t, cut, final in run.finals
                    if t < steps
                ],
            )
        mask = buf.mask if run.episodic else None
        buf.rewards.copy_(
            self.reward_scaler.scale_rollout(buf.rewards, buf.ends, mask, self.settings.reduce)
        )

    # ------------------------------------------------------------------ observation statistics
    def merge_obs_statistics(self) -> None:
        """Merge the last rollout's observations into the policy's normalizers (docs/design.md,
        rule 2), once.

        Called after the update, so collection, the stored log-probs and values, and the update of
        one iteration all see the same normalization (the first ratio of an update is exactly 1).
        """
        if self.merged:
            return
        buf = self.buffer
        self._merge(buf.flat("obs")["obs"], buf.mask.reshape(-1).bool())

    @torch.inference_mode()
    def _warm_up(self, noise_seed: int | None) -> None:
        """Before a run's first rollout, its normalizers empty: the policy acts for one
        rollout's length on the observations as they come (its normalizers are the identity
        until they have statistics), nothing of it is trained on, and its observations (of
        every process) become the statistics. So the first rollout is drawn, and its update
        trains, under the statistics of the states the policy visits, and every stored
        log-probability is that of the policy that drew the action. (The start states alone
        would give the spread of the start noise, ~0.005 in MuJoCo, and most of the first
        rollout's inputs would sit at the clip.) Its episodes go on into the first rollout;
        its rewards are not scaled, trained on or logged, and its steps are not counted."""
        assert self.obs is not None
        T, N, s = self.buffer.num_steps, self.envs.num_envs, self.settings
        noise = rollout_noise(self.policy, T, N, noise_seed, s.env_offset, s.total_envs)
        self.acting.begin()
        seen = []
        obs = self.obs
        for t in range(T):
            seen.append(map_obs(np.copy, obs))  # the env may reuse its observation arrays
            if self.state_size:
                state = self._reset_states()
                action, _, _, self.rnn_state = self.acting.act_recurrent(obs, noise[t], state)
            else:
                action, _, _ = self.acting.act(obs, noise[t], False)
            res = self.envs.step(action)
            if self.state_size:
                np.logical_or(res.terminated, res.truncated, out=self.episode_starts)
            obs = res.obs
        self.obs = map_obs(np.copy, obs)
        self.envs.set_steps(0)  # error messages number the steps trained on, as global_step
        if isinstance(obs, dict):
            stacked: Obs = {k: np.concatenate([o[k] for o in seen]) for k in obs}
        else:
            stacked = np.concatenate(seen)
        self._merge(self.acting.tensors(stacked), torch.ones(T * N, dtype=torch.bool))

    def _merge(self, obs: torch.Tensor | dict[str, torch.Tensor], keep: torch.Tensor) -> None:
        """Merge observations (B, ...) into the normalizers, the rows where `keep` (B,) holds
        (episodic rollouts: the steps of the episodes only)."""
        if not bool(keep.all()):
            first = next(iter(obs.values())) if isinstance(obs, dict) else obs
            keep = keep.to(first.device)
            obs = map_obs(lambda x: x[keep], obs)
        self.policy.update_obs_statistics(obs, self.settings.reduce)
        self.merged = True

    def _reset_states(self) -> torch.Tensor:
        """The recurrent states before the next step: zeros where an episode starts."""
        keep = torch.from_numpy(~self.episode_starts).to(self.device, torch.float32)
        return self.rnn_state * keep.unsqueeze(1)
