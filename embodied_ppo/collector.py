"""Rollout collection: env <-> policy, with truncation bootstrap values (DESIGN Rule 1)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from embodied_ppo import blas
from embodied_ppo.buffer import RolloutBuffer
from embodied_ppo.envs import VecEnv
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.host_policy import HostPolicy, host_supported
from embodied_ppo.modules.normalizer import RewardScaler

# Above this many envs per forward, torch on the training device beats numpy on the host.
HOST_INFERENCE_MAX_ENVS = 256
# Rows per forward when the values of a whole rollout are computed after it.
VALUE_BATCH_ROWS = 4096


@dataclass
class RolloutStats:
    """Finished episodes (raw returns and lengths) seen during one rollout."""

    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    steps: int = 0  # environment steps taken (N per vector step)


def pick_inference(mode: str, policy: ActorCritic, num_envs: int) -> str:
    """`host` (numpy snapshot) or `device` (torch) for `inference: auto | host | device`."""
    if mode == "auto":
        return (
            "host" if num_envs <= HOST_INFERENCE_MAX_ENVS and host_supported(policy) else "device"
        )
    if mode == "host" and not host_supported(policy):
        raise ValueError("host inference does not support this policy's activation")
    return mode


class Collector:
    """Fills a RolloutBuffer by stepping `envs` with `policy`.

    The policy, normalizer included, is fixed during collection: the stored log-probs and values
    are exactly those of the policy the update starts from. Inference runs either on a numpy
    snapshot of the policy on the host (`host`: far less overhead for the small batches of a
    rollout) or with torch on the training device (`device`). Everything the rollout produces is
    staged on the host and copied to the buffer once per rollout. `micro_batch` bounds how many
    envs go through one forward; all sampling noise of a rollout is drawn at once, so neither the
    chunking nor the inference path changes a sample (Rule 3).
    """

    def __init__(
        self,
        envs: VecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        device: torch.device,
        micro_batch: int | None = None,
        inference: str = "auto",
        env_offset: int = 0,
        total_envs: int | None = None,
    ) -> None:
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.reward_scaler, self.device = reward_scaler, device
        self.micro_batch = micro_batch or envs.num_envs
        self.inference = pick_inference(inference, policy, envs.num_envs)
        # This process steps envs env_offset .. env_offset + N - 1 of total_envs (all ranks).
        self.env_offset = env_offset
        self.total_envs = total_envs or envs.num_envs
        self.reduce = None  # sums over ranks for the reward statistics (set by the trainer)
        self.obs: torch.Tensor | None = None  # (N, obs_dim): on the host for host inference
        T, N, D = buffer.num_steps, envs.num_envs, buffer.obs.shape[-1]
        action_shape = tuple(buffer.actions.shape[2:])
        self._noise_shape = (int(policy.spec["action_dim"]),) if policy.is_gaussian else ()
        # Host staging (T, N, ...): one copy to the buffer per rollout.
        self._stage = {
            "obs": np.zeros((T, N, D), dtype=np.float32),
            "actions": np.zeros(
                (T, N, *action_shape), dtype=np.float32 if policy.is_gaussian else np.int64
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

    @property
    def _obs_device(self) -> torch.device:
        return torch.device("cpu") if self.inference == "host" else self.device

    def reset(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's per-env seeds) and remember the first observation."""
        self.obs = self._tensor(self.envs.reset(seeds))

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)  # zero-copy view of the env's array
        device = self._obs_device
        if device.type == "cpu":
            return tensor
        return tensor.pin_memory().to(device, non_blocking=True)

    def _chunks(self, n: int) -> list[slice]:
        return [slice(i, i + self.micro_batch) for i in range(0, n, self.micro_batch)]

    # ------------------------------------------------------------------ the two inference paths
    def _act_device(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[np.ndarray, ...]:
        parts = [self.policy.act(obs[c], noise[c]) for c in self._chunks(obs.shape[0])]
        return tuple(torch.cat(p).cpu().numpy() for p in zip(*parts))

    def _value_device(self, obs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(obs).to(self.device)
        return torch.cat([self.policy.value(x[c]) for c in self._chunks(x.shape[0])]).cpu().numpy()

    def _act_host(
        self, host: HostPolicy, obs: np.ndarray, noise: np.ndarray, terms: tuple | None
    ) -> tuple[np.ndarray, ...]:
        if terms is not None:  # noise terms precomputed for the rollout
            if obs.shape[0] <= self.micro_batch:
                return host.act_with(obs, *terms)
            parts = [
                host.act_with(obs[c], *(x[c] for x in terms)) for c in self._chunks(obs.shape[0])
            ]
        elif obs.shape[0] <= self.micro_batch:
            return host.act(obs, noise)
        else:
            parts = [host.act(obs[c], noise[c]) for c in self._chunks(obs.shape[0])]
        return tuple(np.concatenate(p) for p in zip(*parts))

    def _value_host(self, host: HostPolicy, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([host.value(obs[c]) for c in self._chunks(obs.shape[0])])

    # ----------------------------------------------------------------------------- the rollout
    def collect(
        self, episode_seeds: list[int] | None = None, noise_seed: int | None = None
    ) -> RolloutStats:
        with blas.limit(1), torch.inference_mode():
            return self._collect(episode_seeds, noise_seed)

    def _collect(
        self, episode_seeds: list[int] | None = None, noise_seed: int | None = None
    ) -> RolloutStats:
        """Run up to `buffer.num_steps` vector steps and fill every buffer field but advantages.

        Continuing mode (default): envs carry on across rollouts and every step counts. Episodic
        mode (`episode_seeds` given): every env is reset with its seed, runs one episode, and the
        steps after its end are masked out (`buf.mask`); collection stops once all have ended.
        Rewards are scaled once per rollout (RewardScaler.scale_rollout).

        With `noise_seed`, the sampling noise of global env k at step t is a pure function of
        (noise_seed, t, k): the same whatever the number of processes the envs are split over.
        Without it, the noise comes from torch's global generator.
        """
        episodic = episode_seeds is not None
        if episodic:
            self.reset(episode_seeds)
        assert self.obs is not None, "call reset() first"
        buf, stats, st = self.buffer, RolloutStats(), self._stage
        T, N = buf.num_steps, self.envs.num_envs
        st["ends"].fill(False)
        st["mask"].fill(True)
        st["truncated"].fill(False)
        st["final_values"].fill(0.0)
        # All sampling noise of the rollout in one draw (torch RNG, on the host).
        cpu = torch.device("cpu")
        if noise_seed is None:
            noise_t = self.policy.sample_noise(T * N, cpu).reshape(T, N, *self._noise_shape)
        else:
            # numpy's PCG64 behind a SeedSequence: a fresh, high-quality stream per rollout.
            rng = np.random.Generator(np.random.PCG64(noise_seed))
            shape = (T, self.total_envs, *self._noise_shape)
            every = (
                rng.standard_normal(shape, dtype=np.float32)
                if self.policy.is_gaussian
                else rng.random(shape, dtype=np.float32)
            )
            noise_t = torch.from_numpy(
                np.ascontiguousarray(every[:, self.env_offset : self.env_offset + N])
            )
        host = HostPolicy(self.policy) if self.inference == "host" else None
        obs_np = self.obs.cpu().numpy()
        terms = None
        if host is not None:
            noise = noise_t.numpy()
            terms = host.noise_terms(noise)
        # Straight into the staging arrays: state-independent noise terms, one forward per step.
        direct = host is not None and terms is not None and self.micro_batch >= N
        if direct:
            st["logprobs"][:] = terms[1]
        else:
            noise_dev = noise_t.to(self.device)
            obs_t = self.obs.to(self.device)
        done = np.zeros(N, dtype=bool)  # episodic: env finished its episode
        steps = T
        # Per-step work is a few microseconds: bind what the loop touches to locals.
        st_obs, st_actions, st_values = st["obs"], st["actions"], st["values"]
        st_rewards, st_terminated, step = st["rewards"], st["terminated"], self.envs.step
        # A separate critic does not act: its values come in batched passes after the rollout.
        late_values = direct and host.separate_critic
        act_into = host.act_into_fn(N, values=not late_values) if direct else None
        offsets = terms[0] if direct else None
        for t in range(T):
            st_obs[t] = obs_np
            if direct:
                action = st_actions[t]
                act_into(obs_np, offsets[t], action, st_values[t])
            else:
                if host is not None:
                    action, logprob, value = self._act_host(
                        host,
                        obs_np,
                        noise[t],
                        None if terms is None else (terms[0][t], terms[1][t]),
                    )
                else:
                    action, logprob, value = self._act_device(obs_t, noise_dev[t])
                st_actions[t] = action
                st["logprobs"][t] = logprob
                st_values[t] = value

            res = step(action)
            st_rewards[t] = res.reward
            st_terminated[t] = res.terminated
            if res.episode_envs:  # some episode ended at this step (else `ends` stays False)
                np.logical_or(res.terminated, res.truncated, out=st["ends"][t])
                trunc_only = np.flatnonzero(res.truncated & ~res.terminated)
                if trunc_only.size:
                    # Bootstrap a time-limit cut with V(final_obs), never V(reset obs).
                    final = res.final_obs[trunc_only]
                    st["final_values"][t, trunc_only] = (
                        self._value_host(host, final)
                        if host is not None
                        else self._value_device(final)
                    )
                    st["truncated"][t, trunc_only] = True
                for env, ret, length in zip(
                    res.episode_envs, res.episode_returns, res.episode_lengths
                ):
                    if not done[env]:
                        stats.episode_returns.append(ret)
                        stats.episode_lengths.append(length)
            obs_np = res.obs
            if host is None:
                obs_t = torch.from_numpy(obs_np).to(self.device, non_blocking=True)
            if episodic:
                st["mask"][t] = ~done
                done |= st["ends"][t]
                if done.all():
                    st["mask"][t + 1 :] = False
                    st["ends"][t + 1 :] = True
                    steps = t + 1
                    break
        stats.steps = steps * N
        if late_values:
            flat = st_obs[:steps].reshape(steps * N, -1)
            parts = [
                host.value(flat[i : i + VALUE_BATCH_ROWS])
                for i in range(0, steps * N, VALUE_BATCH_ROWS)
            ]
            st_values[:steps] = np.concatenate(parts).reshape(steps, N)
        if steps < T:  # unused tail of an episodic rollout: keep it finite and inert
            for name in ("obs", "actions", "logprobs", "values", "rewards"):
                st[name][steps:] = 0
            st["terminated"][steps:] = True
        last = self._value_host(host, obs_np) if host is not None else self._value_device(obs_np)
        self.obs = self._tensor(obs_np.copy())  # the env may reuse its observation array
        self._to_buffer(torch.from_numpy(last))
        buf.rewards.copy_(
            self.reward_scaler.scale_rollout(
                buf.rewards, buf.ends, buf.mask if episodic else None, self.reduce
            )
        )
        return stats

    def _to_buffer(self, last_values: torch.Tensor) -> None:
        """One host -> device copy per field per rollout."""
        buf, st = self.buffer, self._stage
        for name, array in st.items():
            target = getattr(buf, name)
            source = torch.from_numpy(array)
            if self.device.type != "cpu":
                source = source.pin_memory()
            target.copy_(source, non_blocking=True)
        buf.finalize_next_values(last_values.to(self.device))
