"""Rollout collection from host envs (`vecenv.VecEnv`): env <-> policy, with truncation
bootstrap values (docs/design.md, rule 1), behind the rollout contract (`runner.rollout`).

The policy, normalizer included, is fixed during a rollout: the stored log-probs and values are
exactly those of the policy the update starts from. The rollout is staged on the host
(`runner.staging`) and copied to the buffer once; the policy acts through `runner.acting`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.core.obs import map_obs, set_obs
from embodied_ppo.io.checkpoint_state import EnvsSnapshot, TensorObs
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.acting import VALUE_BATCH_ROWS, Acting
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.noise import EnvSlice, HostNoise
from embodied_ppo.runner.rollout import Bootstrap, CollectorSettings, RolloutCollector, RolloutStats
from embodied_ppo.runner.staging import Staging
from embodied_ppo.vecenv.protocol import StepResult, VecEnv
from embodied_ppo.vecenv.seeding import warm_up_seed
from embodied_ppo.vecenv.spaces import Obs


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


class Collector(RolloutCollector[VecEnv, Obs]):
    """Fills a RolloutBuffer by stepping host `envs` with `policy`.

    A recurrent policy acts in torch, one step at a time, carrying each env's state: the state
    is zeroed where an episode starts (after a termination or a truncation), stored in the
    buffer before every step, and a truncated episode is bootstrapped with the value of its
    final observation under the state that reached it.
    """

    noise: HostNoise

    def __init__(
        self,
        envs: VecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        settings: CollectorSettings,
    ) -> None:
        super().__init__(envs, policy, buffer, reward_scaler, settings)
        N = envs.num_envs
        self.acting = Acting(
            policy,
            self.device,
            host=settings.inference == "host",
            micro_batch=settings.micro_batch or N,
            notes=settings.notes,
        )
        # Recurrent policies: each env's state after its last step, and whether its next step
        # starts an episode (the state is zeroed before it).
        self.state_size = policy.state_size
        self.rnn_state = torch.zeros(N, self.state_size, device=self.device)
        self.episode_starts = np.ones(N, dtype=bool)
        self.stage = Staging(
            envs.info,
            (buffer.num_steps, N),
            tuple(buffer.actions.shape[2:]),
            gaussian=policy.is_gaussian,
            state_size=self.state_size,
        )

    def _noise_source(self, envs: EnvSlice) -> HostNoise:
        return HostNoise(self.policy, envs)

    # ------------------------------------------------------------------ env state
    def start(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's per-env seeds) and keep the first observation."""
        self.obs = map_obs(np.copy, self.envs.reset(seeds))
        self.rnn_state.zero_()
        self.episode_starts.fill(True)

    def state(self) -> EnvsSnapshot:
        """The envs mid-episode, the observation acted on next and a recurrent policy's states
        (checkpoint-safe)."""
        obs = None if self.obs is None else map_obs(lambda x: torch.from_numpy(x.copy()), self.obs)
        recurrent = None
        if self.state_size:
            recurrent = {
                "state": self.rnn_state.cpu().clone(),
                "starts": torch.from_numpy(self.episode_starts.copy()),
            }
        return EnvsSnapshot(self.envs.get_state(), obs, recurrent)

    def _accept(self, snapshot: EnvsSnapshot) -> str | None:
        """The observation acted on next, and a recurrent policy's states."""
        if self.state_size and snapshot.recurrent is None:
            return "the checkpoint holds no recurrent states"
        assert snapshot.obs is not None
        self.obs = map_obs(lambda x: x.numpy().copy(), snapshot.obs)
        if self.state_size and snapshot.recurrent is not None:
            self.rnn_state.copy_(snapshot.recurrent["state"])
            self.episode_starts[:] = snapshot.recurrent["starts"].numpy()
        return None

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
        T, N = self.buffer.num_steps, self.envs.num_envs
        self.stage.clear()
        noise = self.noise.draw(T, noise_seed)
        self.acting.begin()
        run = _Rollout(
            RolloutStats(),
            noise,
            self.acting.noise_terms(noise),
            episodic=episodic,
            done=np.zeros(N, dtype=bool),
            steps=T,
        )
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
        res = self.envs.step(self._env_actions(obs, action))
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
        successes = res.episode_successes or [None] * n
        logs = res.episode_logs or [None] * n
        ended = (res.episode_envs, res.episode_returns, res.episode_lengths, successes, logs)
        for env, ret, length, success, log in zip(*ended, strict=True):
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
        st.copy_to(self.buffer)
        bootstrap = None
        if self.settings.keep_bootstrap_obs:
            finals = [
                (t, torch.from_numpy(cut).to(self.device), acting.tensors(final))
                for t, cut, final in run.finals
                if t < steps
            ]
            bootstrap = Bootstrap(acting.tensors(self.obs), finals)
        self._finish_buffer(torch.from_numpy(last).to(self.device), bootstrap, run.episodic)

    # ------------------------------------------------------------------ observation statistics
    def _observations(self) -> TensorObs:
        return self.buffer.flat("obs")["obs"]

    def _counted_rows(self) -> torch.Tensor:
        return self.buffer.mask.reshape(-1).bool()

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
        T = self.buffer.num_steps
        noise = self.noise.draw(T, noise_seed)
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
            res = self.envs.step(self._env_actions(obs, action))
            if self.state_size:
                np.logical_or(res.terminated, res.truncated, out=self.episode_starts)
            obs = res.obs
        self.obs = map_obs(np.copy, obs)
        self.envs.set_steps(0)  # error messages number the steps trained on, as global_step
        if isinstance(obs, dict):
            stacked: Obs = {k: np.concatenate([o[k] for o in seen]) for k in obs}
        else:
            stacked = np.concatenate(seen)
        self._merge(self.acting.tensors(stacked))

    def _reset_states(self) -> torch.Tensor:
        """The recurrent states before the next step: zeros where an episode starts."""
        keep = torch.from_numpy(~self.episode_starts).to(self.device, torch.float32)
        return self.rnn_state * keep.unsqueeze(1)
