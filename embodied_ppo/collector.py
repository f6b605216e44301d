"""Rollout collection: env <-> policy, with truncation bootstrap values (DESIGN Rule 1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from embodied_ppo.buffer import RolloutBuffer
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.normalizer import RewardScaler
from embodied_ppo.modules.snapshot import NumpyPolicy
from embodied_ppo.obs import map_obs, obs_rows, set_obs
from embodied_ppo.vecenv import VecEnv
from embodied_ppo.vecenv.base import Obs, obs_zeros

# Rows per forward pass when a separate critic values a whole rollout after it.
VALUE_BATCH_ROWS = 4096
Reduce = Callable[[torch.Tensor], torch.Tensor]


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


class Collector:
    """Fills a RolloutBuffer by stepping `envs` with `policy`.

    The policy, normalizer included, is fixed during a rollout: the stored log-probs and values
    are exactly those of the policy the update starts from. Inference runs on a numpy snapshot of
    the policy (`inference="host"`: far less overhead for the small batches of a rollout) or on
    the torch module on the training device (`"device"`). With a separate critic network, acting
    does not run the critic: the rollout's values are computed after it in large batches. The
    rollout is staged on the host and copied to the buffer once.

    `micro_batch` bounds how many envs go through one forward pass; all sampling noise of a
    rollout is drawn at once, so neither the chunking nor the inference path changes a sample
    (Rule 3).

    A recurrent policy acts in torch, one step at a time, carrying each env's state: the state
    is zeroed where an episode starts (after a termination or a truncation), stored in the
    buffer before every step, and a truncated episode is bootstrapped with the value of its
    final observation under the state that reached it.

    Args:
        env_offset, total_envs: this process steps envs env_offset .. env_offset + N - 1 of
            total_envs (all processes of a distributed run): the noise of env k is the same
            whatever the split.
        reduce: sums a tensor over processes (reward statistics of a distributed run).
        forward_micro_batch: at most this many rows per forward pass when the run's first
            rollout is evaluated again (`algorithm.logprob_forward_micro_batch_size`).
        keep_bootstrap_obs: also store the observation after the last step and the final
            observations of truncated episodes in the buffer (`algorithm.recompute_advantages`
            values them again during the update).
    """

    def __init__(
        self,
        envs: VecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        device: torch.device,
        inference: str,
        micro_batch: int | None = None,
        env_offset: int = 0,
        total_envs: int | None = None,
        reduce: Reduce | None = None,
        forward_micro_batch: int | None = None,
        keep_bootstrap_obs: bool = False,
    ) -> None:
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.keep_bootstrap_obs = keep_bootstrap_obs
        self.reward_scaler, self.device, self.reduce = reward_scaler, device, reduce
        self.host = inference == "host"
        self.micro_batch = micro_batch or envs.num_envs
        # Rows per forward pass when the first rollout is evaluated again (see `_reevaluate`).
        self.forward_rows = min(forward_micro_batch or VALUE_BATCH_ROWS, VALUE_BATCH_ROWS)
        self.env_offset = env_offset
        self.total_envs = total_envs or envs.num_envs
        self.obs: Obs | None = None  # (N, ...): what the policy acts on next
        self.merged = False  # the last rollout's observations are in the normalizers
        T, N = buffer.num_steps, envs.num_envs
        # Recurrent policies: each env's state after its last step, and whether its next step
        # starts an episode (the state is zeroed before it).
        self.state_size = policy.state_size
        self.rnn_state = torch.zeros(N, self.state_size, device=device)
        self.episode_starts = np.ones(N, dtype=bool)
        self._noise_shape = (int(policy.spec["action_dim"]),) if policy.is_gaussian else ()
        # Host staging (T, N, ...): one copy to the buffer per rollout.
        self._stage = {
            "obs": obs_zeros(envs.info, T, N),
            "actions": np.zeros(
                (T, N, *buffer.actions.shape[2:]),
                dtype=np.float32 if policy.is_gaussian else np.int64,
            ),
            "logprobs": np.zeros((T, N), dtype=np.float32),
            "values": np.zeros((T, N), dtype=np.float32),
            "final_values": np.zeros((T, N), dtype=np.float32),
            "truncated": np.zeros((T, N), dtype=bool),
            "rewards": np.zeros((T, N), dtype=np.float32),
            "terminated": np.zeros((T, N), dtype=bool),
            "ends": np.zeros((T, N), dtype=bool),
            "mask": np.ones((T, N), dtype=bool),
        }
        if self.state_size:
            self._stage["states"] = np.zeros((T, N, self.state_size), dtype=np.float32)
            self._stage["starts"] = np.zeros((T, N), dtype=np.float32)

    # ------------------------------------------------------------------ env state
    def start(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's per-env seeds) and keep the first observation."""
        self.obs = map_obs(np.copy, self.envs.reset(seeds))
        self.rnn_state.zero_()
        self.episode_starts.fill(True)

    def state(self) -> dict[str, Any]:
        """The envs mid-episode, the observation acted on next and a recurrent policy's states
        (checkpoint-safe)."""
        return {
            "envs": self.envs.get_state(),
            "obs": None
            if self.obs is None
            else map_obs(lambda x: torch.from_numpy(x.copy()), self.obs),
            "recurrent": None
            if not self.state_size
            else {
                "state": self.rnn_state.cpu().clone(),
                "starts": torch.from_numpy(self.episode_starts.copy()),
            },
        }

    def restore(
        self, state: dict[str, Any] | None, fresh_seeds: list[int], steps: int
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

    # ------------------------------------------------------------------ inference
    def _chunks(self, n: int) -> list[slice]:
        return [slice(i, i + self.micro_batch) for i in range(0, n, self.micro_batch)]

    def _torch(self, obs: Obs) -> torch.Tensor | dict[str, torch.Tensor]:
        return map_obs(lambda x: torch.from_numpy(x).to(self.device), obs)

    def _act(
        self,
        snapshot: NumpyPolicy | None,
        obs: Obs,
        noise: np.ndarray,
        with_value: bool,
        terms: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(action, log-prob, value or None) for every env, in micro-batches of envs."""
        if snapshot is not None and self.micro_batch >= len(noise):  # one forward pass
            return snapshot.act(obs, noise, with_value, terms)
        parts = []
        for c in self._chunks(obs_rows(obs)):
            if snapshot is not None:
                part = None if terms is None else (terms[0][c], terms[1][c])
                parts.append(snapshot.act(obs[c], noise[c], with_value, part))
            else:
                x = self._torch(map_obs(lambda a, c=c: a[c], obs))
                noise_c = torch.from_numpy(noise[c]).to(self.device)
                action, logprob, value = self.policy.act(x, noise_c)
                parts.append((action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy()))
        if len(parts) == 1:
            return parts[0]
        action, logprob, value = zip(*parts, strict=True)
        return (
            np.concatenate(action),
            np.concatenate(logprob),
            None if value[0] is None else np.concatenate(value),
        )

    def _act_recurrent(
        self, obs: Obs, noise: np.ndarray, state: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, torch.Tensor]:
        """(action, log-prob, value, new state) of a recurrent policy for every env."""
        parts = []
        for c in self._chunks(obs_rows(obs)):
            x = self._torch(map_obs(lambda a, c=c: a[c], obs))
            dist, value, new_state = self.policy.step(x, state[c])
            action = dist.sample(torch.from_numpy(noise[c]).to(self.device))
            parts.append((action, dist.log_prob(action), value, new_state))
        action, logprob, value, new_state = (torch.cat(p) for p in zip(*parts, strict=True))
        return action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy(), new_state

    def _recurrent_values(self, obs: Obs, state: torch.Tensor) -> np.ndarray:
        """Values of observations (B, ...) under the states (B, S) that reached them."""
        parts = []
        for c in self._chunks(obs_rows(obs)):
            x = self._torch(map_obs(lambda a, c=c: a[c], obs))
            parts.append(self.policy.step(x, state[c])[1].cpu().numpy())
        return np.concatenate(parts)

    def _values(self, snapshot: NumpyPolicy | None, obs: Obs, rows: int) -> np.ndarray:
        """Values of observations (B, ...), at most `rows` per forward pass."""
        parts = []
        for i in range(0, obs_rows(obs), rows):
            part = map_obs(lambda a, i=i: a[i : i + rows], obs)
            if snapshot is not None:
                parts.append(snapshot.value(part))
            else:
                parts.append(self.policy.value(self._torch(part)).cpu().numpy())
        return np.concatenate(parts)

    def _draw_noise(self, noise_seed: int | None) -> np.ndarray:
        """The sampling noise of the whole rollout (T, N, ...)."""
        T, N = self.buffer.num_steps, self.envs.num_envs
        if noise_seed is None:
            noise = self.policy.sample_noise(T * N, torch.device("cpu"))
            return noise.reshape(T, N, *self._noise_shape).numpy()
        # numpy's PCG64 behind a SeedSequence: a fresh, high-quality stream per rollout; global
        # env k draws the same numbers whatever the number of processes.
        rng = np.random.Generator(np.random.PCG64(noise_seed))
        shape = (T, self.total_envs, *self._noise_shape)
        every = (
            rng.standard_normal(shape, dtype=np.float32)
            if self.policy.is_gaussian
            else rng.random(shape, dtype=np.float32)
        )
        return np.ascontiguousarray(every[:, self.env_offset : self.env_offset + N])

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
        if episodic:
            self.start(episode_seeds)
        assert self.obs is not None, "call start() first"
        st, stats = self._stage, RolloutStats()
        T, N = self.buffer.num_steps, self.envs.num_envs
        for name in ("ends", "truncated"):
            st[name].fill(False)
        st["mask"].fill(True)
        st["final_values"].fill(0.0)
        noise = self._draw_noise(noise_seed)
        snapshot = NumpyPolicy(self.policy) if self.host else None
        # A separate critic does not act: its values come in large batches after the rollout.
        late_values = snapshot is not None and snapshot.separate_critic
        # A state-independent Gaussian's noise terms, for the whole rollout at once.
        terms = snapshot.noise_terms(noise) if snapshot is not None else None
        # The first rollout of a run meets empty observation statistics: they are merged right
        # after it and the rollout re-evaluated, so even the first update sees normalized inputs.
        first = self.policy.needs_obs_statistics()
        finals: list[tuple[int, np.ndarray, Obs]] = []
        before = (self._reset_states(), self.episode_starts.copy()) if first else None
        self.merged = False
        obs = self.obs
        done = np.zeros(N, dtype=bool)  # episodic: env finished its episode
        steps = T
        # A step is a few tens of microseconds of Python: look things up once.
        st_obs, st_actions, st_logprobs = st["obs"], st["actions"], st["logprobs"]
        st_values, st_rewards, st_terminated = st["values"], st["rewards"], st["terminated"]
        act, env_step, flat = self._act, self.envs.step, not isinstance(st_obs, dict)
        recurrent = self.state_size > 0
        new_state = None
        for t in range(T):
            if flat:
                st_obs[t] = obs
            else:
                set_obs(st_obs, t, obs)
            if recurrent:
                state = self._reset_states()
                st["states"][t] = state.cpu().numpy()
                st["starts"][t] = self.episode_starts
                action, logprob, value, new_state = self._act_recurrent(obs, noise[t], state)
            else:
                step_terms = None if terms is None else (terms[0][t], terms[1][t])
                action, logprob, value = act(snapshot, obs, noise[t], not late_values, step_terms)
            st_actions[t] = action
            st_logprobs[t] = logprob
            if value is not None:
                st_values[t] = value
            res = env_step(action)
            st_rewards[t] = res.reward
            st_terminated[t] = res.terminated
            if res.episode_envs:  # some episode ended at this step (else `ends` stays False)
                np.logical_or(res.terminated, res.truncated, out=st["ends"][t])
                cut = np.flatnonzero(res.truncated & ~res.terminated)
                if cut.size:
                    # Bootstrap a time-limit cut with V(final_obs), never V(reset obs).
                    final = map_obs(lambda a, rows=cut: a[rows], res.final_obs)
                    if recurrent:  # under the state that reached the final observation
                        index = torch.from_numpy(cut).to(self.device)
                        values = self._recurrent_values(final, new_state[index])
                    else:
                        values = self._values(snapshot, final, self.micro_batch)
                    st["final_values"][t, cut] = values
                    if first or self.keep_bootstrap_obs:  # valued again later
                        finals.append((t, cut, map_obs(np.copy, final)))
                    st["truncated"][t, cut] = True
                successes = res.episode_successes or [None] * len(res.episode_envs)
                logs = res.episode_logs or [None] * len(res.episode_envs)
                for env, ret, length, success, log in zip(
                    res.episode_envs,
                    res.episode_returns,
                    res.episode_lengths,
                    successes,
                    logs,
                    strict=True,
                ):
                    if not done[env]:
                        stats.episode_returns.append(ret)
                        stats.episode_lengths.append(length)
                        if success is not None:
                            stats.episode_successes.append(success)
                        if log is not None:
                            stats.episode_logs.append(log)
            obs = res.obs
            if recurrent:
                self.rnn_state = new_state
                np.logical_or(res.terminated, res.truncated, out=self.episode_starts)
            if episodic:
                st["mask"][t] = ~done
                done |= st["ends"][t]
                if done.all():
                    st["mask"][t + 1 :] = False
                    st["ends"][t + 1 :] = True
                    steps = t + 1
                    break
        stats.steps = steps * N
        if first:
            self._merge_staged(steps)
            snapshot = NumpyPolicy(self.policy) if self.host else None
            late_values = snapshot is not None and snapshot.separate_critic
            assert before is not None
            self._reevaluate(steps, before, finals, snapshot, late_values)
        if late_values:
            flat = map_obs(lambda a: a[:steps].reshape(steps * N, *a.shape[2:]), st["obs"])
            st["values"][:steps] = self._values(snapshot, flat, VALUE_BATCH_ROWS).reshape(steps, N)
        if steps < T:  # unused tail of an episodic rollout: keep it finite and inert
            for name in ("obs", "actions", "logprobs", "values", "rewards"):
                map_obs(lambda a: a[steps:].fill(0), st[name])
            st["terminated"][steps:] = True
        if recurrent:
            last = self._recurrent_values(obs, self._reset_states())
        else:
            last = self._values(snapshot, obs, self.micro_batch)
        self.obs = map_obs(np.copy, obs)  # the env may reuse its observation arrays
        self._to_buffer(torch.from_numpy(last))
        buf = self.buffer
        if self.keep_bootstrap_obs:
            buf.last_obs = self._torch(self.obs)
            buf.final_obs = [
                (t, torch.from_numpy(cut).to(self.device), self._torch(final))
                for t, cut, final in finals
                if t < steps
            ]
        buf.rewards.copy_(
            self.reward_scaler.scale_rollout(
                buf.rewards, buf.ends, buf.mask if episodic else None, self.reduce
            )
        )
        return stats

    # ------------------------------------------------------------------ observation statistics
    def merge_obs_statistics(self) -> None:
        """Merge the last rollout's observations into the policy's normalizers (Rule 2), unless
        `collect` already did (the first rollout of a run).

        Called after the update, so collection, the stored log-probs and values, and the update of
        one iteration all see the same normalization (the first ratio of an update is exactly 1).
        """
        if self.merged:
            return
        buf = self.buffer
        self._merge(buf.flat("obs")["obs"], buf.mask.reshape(-1).bool())

    def _merge_staged(self, steps: int) -> None:
        """Merge the staged rollout's observations (its first `steps` steps, episodes only)."""
        st, N = self._stage, self.envs.num_envs
        obs = map_obs(lambda a: a[:steps].reshape(steps * N, *a.shape[2:]), st["obs"])
        self._merge(self._torch(obs), torch.from_numpy(st["mask"][:steps].reshape(-1)))

    def _merge(self, obs: torch.Tensor | dict[str, torch.Tensor], keep: torch.Tensor) -> None:
        """Merge observations (B, ...) into the normalizers, the rows where `keep` (B,) holds
        (episodic rollouts: the steps of the episodes only)."""
        if not bool(keep.all()):
            keep = keep.to(self._device_of(obs))
            obs = map_obs(lambda x: x[keep], obs)
        self.policy.update_obs_statistics(obs, self.reduce)
        self.merged = True

    @staticmethod
    def _device_of(obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.device:
        return next(iter(obs.values())).device if isinstance(obs, dict) else obs.device

    def _reevaluate(
        self,
        steps: int,
        before: tuple[torch.Tensor, np.ndarray],
        finals: list[tuple[int, np.ndarray, Obs]],
        snapshot: NumpyPolicy | None,
        late_values: bool,
    ) -> None:
        """Recompute the staged log-probs, values (and recurrent states) of the rollout's steps
        and the values of its truncated episodes' final observations under the policy as it is
        now (after its normalizers first saw data): the update's old log-probs are then those
        of the normalized policy, whose first ratio is exactly 1 (the recomputation OpenAI
        Baselines' PPO1 makes after each normalizer update)."""
        st, N = self._stage, self.envs.num_envs
        with torch.no_grad():
            if self.state_size:
                cuts: dict[int, list[tuple[np.ndarray, Obs]]] = {}
                for t, cut, final in finals:
                    cuts.setdefault(t, []).append((cut, final))
                state, starts = before[0].clone(), before[1]
                for t in range(steps):
                    keep = torch.from_numpy(~starts).to(self.device, torch.float32)
                    state = state * keep[:, None]
                    st["states"][t] = state.cpu().numpy()
                    x = self._torch(map_obs(lambda a, t=t: a[t], st["obs"]))
                    dist, value, state = self.policy.step(x, state)
                    action = torch.from_numpy(st["actions"][t]).to(self.device)
                    st["logprobs"][t] = dist.log_prob(action).cpu().numpy()
                    st["values"][t] = value.cpu().numpy()
                    for cut, final in cuts.get(t, []):
                        reached = state[torch.from_numpy(cut).to(self.device)]
                        st["final_values"][t, cut] = self._recurrent_values(final, reached)
                    starts = st["ends"][t]
                self.rnn_state = state
                return
            rows = steps * N
            obs = map_obs(lambda a: a[:steps].reshape(rows, *a.shape[2:]), st["obs"])
            actions = st["actions"][:steps].reshape(rows, *st["actions"].shape[2:])
            logprobs, values = st["logprobs"].reshape(-1), st["values"].reshape(-1)
            for i in range(0, rows, self.forward_rows):
                rows_i = slice(i, i + self.forward_rows)
                part = self._torch(map_obs(lambda a, r=rows_i: a[r], obs))
                act = torch.from_numpy(actions[rows_i]).to(self.device)
                logprob, _, value, _ = self.policy.evaluate(part, act)
                logprobs[rows_i] = logprob.cpu().numpy()
                if not late_values:  # else computed below, with the other late values
                    values[rows_i] = value.cpu().numpy()
            for t, cut, final in finals:
                st["final_values"][t, cut] = self._values(snapshot, final, self.micro_batch)

    def _reset_states(self) -> torch.Tensor:
        """The recurrent states before the next step: zeros where an episode starts."""
        keep = torch.from_numpy(~self.episode_starts).to(self.device, torch.float32)
        return self.rnn_state * keep.unsqueeze(1)

    def _to_buffer(self, last_values: torch.Tensor) -> None:
        """One host -> device copy per field per rollout."""
        buf = self.buffer
        for name, array in self._stage.items():
            target = getattr(buf, name)
            for key, part in array.items() if isinstance(array, dict) else [(None, array)]:
                source = torch.from_numpy(part)
                if self.device.type != "cpu":
                    source = source.pin_memory()
                (target if key is None else target[key]).copy_(source, non_blocking=True)
        buf.finalize_next_values(last_values.to(self.device))
