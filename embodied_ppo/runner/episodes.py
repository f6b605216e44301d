"""Evaluation episodes: one environment built like a training env, each episode reset with its own seed, the policy acting deterministically (or sampled with its own generator)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import ConfigError, RenderError
from embodied_ppo.core.obs import map_obs
from embodied_ppo.core.text import first_line
from embodied_ppo.io.render import GLChoice, configure_headless_gl, has_display
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import DiagGaussian, Distribution
from embodied_ppo.model.inference import InferenceNet, initial_state, is_recurrent
from embodied_ppo.vecenv.make import make_one
from embodied_ppo.vecenv.preflight import check_id
from embodied_ppo.vecenv.protocol import episode_log
from embodied_ppo.vecenv.seeding import env_seeds
from embodied_ppo.vecenv.spaces import Obs, describe_spaces, obs_cast

# Evaluation envs draw their seeds from global env indices no training env uses (training envs
# take indices 0..num_envs-1, times ranks), so evaluation episodes never repeat training ones.
EVAL_ENV_OFFSET = 1 << 32


# An action as an env takes it: a Box action (A,) float32, or a Discrete action's index.
EnvAction = np.ndarray | int

# One observation (an array, or a dict of arrays) -> one action. An Action with memory (a
# recurrent policy) also has `reset()`, called before every episode.
Action = Callable[[Obs], EnvAction]

# An observation batch on the policy's device.
Tensors = torch.Tensor | dict[str, torch.Tensor]


def eval_seeds(seed: int, episodes: int) -> list[int]:
    """The reset seed of each evaluation episode, derived from `seed`."""
    return env_seeds(seed, episodes, offset=EVAL_ENV_OFFSET)


@dataclass
class EvalResult:
    """Raw (unscaled) returns and lengths of finished evaluation episodes."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    # info["is_success"] at the end of each episode, where the env reports it
    successes: list[float] = field(default_factory=list)
    # info["log"] at the end of each episode, where the env reports it (the episode's scalars)
    logs: list[dict[str, float]] = field(default_factory=list)

    @property
    def success_rate(self) -> float | None:
        return float(np.mean(self.successes)) if self.successes else None

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std_return(self) -> float:
        return float(np.std(self.returns))  # population std over episodes, as SB3 reports it

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))

    def log_means(self) -> dict[str, float]:
        """The mean over episodes of each key of the episodes' `info["log"]`."""
        keys = dict.fromkeys(k for log in self.logs for k in log)
        return {k: float(np.mean([log[k] for log in self.logs if k in log])) for k in keys}

    def summary(self) -> dict[str, float | dict[str, float] | None]:
        """Mean and std of the returns, mean length, success rate and the env's own metrics
        (`metrics/<name>` of info["log"] under `<name>`; every log key under `log`)."""
        means = self.log_means()
        out: dict[str, float | dict[str, float] | None] = {
            "mean_return": self.mean_return,
            "std_return": self.std_return,
            "mean_length": self.mean_length,
            "success_rate": self.success_rate,
        }
        out.update(
            {k.removeprefix("metrics/"): v for k, v in means.items() if k.startswith("metrics/")}
        )
        if means:
            out["log"] = means
        return out


# ------------------------------------------------------------------------------------ episodes
def _dependency_hint(exc: BaseException) -> str | None:
    text = str(exc)
    if "pygame" in text:
        return "rendering this environment needs pygame (a dependency of embodied-ppo): pip install pygame"
    return None


class EpisodeRunner:
    """One evaluation environment, optionally rendering rgb_array frames."""

    def __init__(self, env_cfg: EnvConfig, render: bool = False) -> None:
        self.env_cfg = env_cfg
        self.render = render
        self.gl: GLChoice | None = configure_headless_gl() if render else None
        check_id(env_cfg)
        try:
            self.env = make_one(env_cfg, render_mode="rgb_array" if render else None)
        except Exception as exc:
            first = first_line(exc, 160)
            if render:
                # With rendering on, a failing import of the GL platform surfaces right here.
                hint = _dependency_hint(exc) or (self.gl.hint() if self.gl else "")
                raise RenderError(
                    f"cannot create {env_cfg.id} for rendering ({type(exc).__name__}: {first}); {hint}"
                ) from None
            raise ConfigError(
                f"env.id: cannot create {env_cfg.id} ({type(exc).__name__}: {first})"
            ) from None
        if render and "rgb_array" not in (self.env.metadata.get("render_modes") or []):
            self.close()
            raise RenderError(
                f"{env_cfg.id} cannot render frames (its render modes: {self.env.metadata.get('render_modes')})"
            )
        self.fps = float(self.env.metadata.get("render_fps") or 30)
        self.info = describe_spaces(self.env.observation_space, self.env.action_space)
        act_space = self.env.action_space
        self.low = getattr(act_space, "low", None)
        self.high = getattr(act_space, "high", None)

    def frame(self) -> np.ndarray:
        """The current rgb frame (H, W, 3) uint8; any rendering failure is a one-line RenderError."""
        try:
            frame = self.env.render()
        except Exception as exc:
            hint = _dependency_hint(exc) or (self.gl.hint() if self.gl else "")
            raise RenderError(
                f"cannot render {self.env_cfg.id} offscreen ({type(exc).__name__}: "
                f"{first_line(exc, 160)}); {hint}"
            ) from None
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise RenderError(
                f"{self.env_cfg.id} rendered {type(frame).__name__}, not an rgb image"
            )
        return frame

    def _check_gl(self) -> None:
        """Create and free a tiny MuJoCo GL context before Gymnasium builds its viewer.

        A viewer whose context fails half-way complains again from its destructor at exit; a
        failed probe here leaves nothing behind.
        """
        if not hasattr(self.env.unwrapped, "mujoco_renderer") or self.gl is None:
            return
        backend = os.environ.get("MUJOCO_GL", "").strip().lower()
        if not backend and not has_display():
            raise RenderError(f"cannot render {self.env_cfg.id} offscreen: {self.gl.hint()}")
        if backend not in ("egl", "osmesa"):
            return
        try:
            context = importlib.import_module(f"mujoco.{backend}").GLContext(8, 8)
            context.make_current()
            context.free()
        except Exception as exc:
            raise RenderError(
                f"cannot render {self.env_cfg.id} offscreen ({type(exc).__name__}: "
                f"{first_line(exc, 160)}); {self.gl.hint()}"
            ) from None

    def check_render(self) -> tuple[int, int]:
        """Render one frame now (before any result is written); returns its (width, height)."""
        self._check_gl()
        self.env.reset(seed=0)
        frame = self.frame()
        return frame.shape[1], frame.shape[0]

    def run(
        self,
        act: Action,
        seeds: list[int],
        on_frame: Callable[[int, np.ndarray], None] | None = None,
        record_episodes: int | None = None,
        on_episode: Callable[[int, float, int, float | None], None] | None = None,
    ) -> EvalResult:
        """One episode per seed; frames of the first `record_episodes` (default all) go to
        `on_frame`; `on_episode(index, return, length, success or None)` hears of each episode
        as it ends."""
        result = EvalResult()
        for ep, seed in enumerate(seeds):
            record = on_frame is not None and (record_episodes is None or ep < record_episodes)
            obs, _ = self.env.reset(seed=int(seed))
            if hasattr(act, "reset"):
                act.reset()  # a recurrent policy starts every episode from its initial state
            if record:
                on_frame(ep, self.frame())
            total, length, done, info = 0.0, 0, False, {}
            while not done:
                action = act(obs_cast(obs, self.info))
                obs, reward, terminated, truncated, info = self.env.step(action)
                total += float(reward)
                length += 1
                done = bool(terminated or truncated)
                if record:
                    on_frame(ep, self.frame())
            result.returns.append(total)
            result.lengths.append(length)
            result.seeds.append(int(seed))
            success = float(info["is_success"]) if "is_success" in info else None
            if success is not None:
                result.successes.append(success)
            log = episode_log(info.get("log"))
            if log is not None:
                result.logs.append(log)
            if on_episode is not None:
                on_episode(ep, total, length, success)
        return result

    def close(self) -> None:
        """Close the env."""
        # Frees the GL context now, while the GL library is still loaded (no errors at exit).
        self.env.close()


class _Recurrent:
    """An Action that carries a recurrent policy's state from step to step."""

    def __init__(
        self, step: Callable[[Obs, torch.Tensor | None], tuple[EnvAction, torch.Tensor]]
    ) -> None:
        self.step = step
        self.state: torch.Tensor | None = None

    def reset(self) -> None:
        """Start the next episode from the initial state."""
        self.state = None

    def __call__(self, obs: Obs) -> EnvAction:
        action, self.state = self.step(obs, self.state)
        return action


def deterministic_action(net: InferenceNet) -> Action:
    """The deployed policy's action for one observation, as the env expects it."""
    device = next(iter(net.buffers())).device

    def as_env_action(action: torch.Tensor) -> EnvAction:
        """The network's action as the env takes it (a discrete one as an int)."""
        action = action.cpu().numpy()
        return int(action) if not net.is_gaussian else action

    def tensors(obs: Obs) -> Tensors:
        """The observation on the network's device."""
        return map_obs(lambda x: torch.from_numpy(x).to(device), obs)

    if is_recurrent(net):

        def step(obs: Obs, state: torch.Tensor | None) -> tuple[EnvAction, torch.Tensor]:
            """The action and the new state (the initial state where `state` is None)."""
            if state is None:
                state = initial_state(net)[0]
            with torch.no_grad():
                action, state = net(tensors(obs), state)
            return as_env_action(action), state

        return _Recurrent(step)

    def act(obs: Obs) -> EnvAction:
        """The deterministic action of one observation."""
        with torch.no_grad():
            return as_env_action(net(tensors(obs)))

    return act


def stochastic_action(policy: ActorCritic, seed: int) -> Action:
    """Sample from the policy's distribution with its own generator (reproducible per seed)."""
    gen = torch.Generator().manual_seed(seed)
    device = next(policy.parameters()).device
    low = policy.action_low.cpu().numpy()
    high = policy.action_high.cpu().numpy()

    def sample(dist: Distribution) -> EnvAction:
        """One action drawn from `dist` (a batch of one); a Gaussian one clipped as envs clip."""
        action = dist.sample(policy.sample_noise(1, torch.device("cpu"), gen).to(device))[0]
        if isinstance(dist, DiagGaussian):
            return np.clip(action.cpu().numpy(), low, high)  # as training envs clip
        return int(action)

    def batch(obs: Obs) -> Tensors:
        """One observation as a batch of one on the policy's device."""
        return map_obs(lambda x: torch.from_numpy(x).to(device).unsqueeze(0), obs)

    if policy.state_size:

        def step(obs: Obs, state: torch.Tensor | None) -> tuple[EnvAction, torch.Tensor]:
            """A sampled action and the new state (the initial state where `state` is None)."""
            if state is None:
                state = policy.initial_state(1, device)
            with torch.no_grad():
                dist, _, state = policy.step(batch(obs), state)
                return sample(dist), state

        return _Recurrent(step)

    def act(obs: Obs) -> EnvAction:
        """A sampled action of one observation."""
        with torch.no_grad():
            return sample(policy(batch(obs))[0])

    return act
