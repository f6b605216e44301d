"""Tiny deterministic environments whose observations reveal what happened (for tests)."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CountingEnv(gym.Env):
    """obs = [t, 1]; reward = the applied (clipped) action; terminates when t reaches `terminate_at`."""

    metadata = {"render_modes": []}

    def __init__(self, terminate_at: int | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.terminate_at = terminate_at
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 1.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float(np.asarray(action).reshape(-1)[0])
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return np.array([float(self.t), 1.0], dtype=np.float32), reward, terminated, False, {}


# A lock a test may hold in the main process while env workers start (see LockProbeEnv).
HELD = threading.Lock()


class LockProbeEnv(CountingEnv):
    """A CountingEnv that says whether `HELD` is held in the process that steps it."""

    def lock_held(self) -> bool:
        return HELD.locked()


def register() -> str:
    env_id = "EmbodiedPPOTestCounting-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=CountingEnv)
    return env_id


class DictEnv(gym.Env):
    """Dict observations: a small uint8 image showing a bright square where the goal is,
    the agent's own position (a vector), and the goal itself (privileged state).

    reward = -|position - goal|; actions move the agent (Box, 2-D); 20-step episodes; a step
    within `success_distance` of the goal reports is_success 1.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self, size: int = 32, render_mode: str | None = None, success_distance: float = 0.2
    ) -> None:
        self.size = size
        self.success_distance = success_distance
        self.render_mode = render_mode
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (size, size, 3), np.uint8),
                "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "goal": spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.position = np.zeros(2, np.float32)
        self.goal = np.zeros(2, np.float32)

    def _obs(self) -> dict:
        image = np.zeros((self.size, self.size, 3), np.uint8)
        r, c = ((self.goal + 1.0) / 2.0 * (self.size - 2)).astype(int)
        image[r : r + 2, c : c + 2] = 255
        return {"image": image, "position": self.position.copy(), "goal": self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = np.zeros(2, np.float32)
        self.goal = self.np_random.uniform(-0.9, 0.9, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self.position = np.clip(self.position + 0.2 * np.asarray(action), -1, 1).astype(np.float32)
        distance = float(np.linalg.norm(self.position - self.goal))
        success = float(distance < self.success_distance)
        return self._obs(), -distance, False, False, {"is_success": success}

    def render(self):
        return np.repeat(np.repeat(self._obs()["image"], 4, axis=0), 4, axis=1)


def register_dict() -> str:
    env_id = "EmbodiedPPOTestDict-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=DictEnv, max_episode_steps=20)
    return env_id


class CueEnv(gym.Env):
    """A memory task: the first observation shows a cue (+1 or -1), later ones show nothing.

    obs = [cue or 0, t / length]; two actions; reward 1 at the last step if the action matches
    the cue (0 for -1, 1 for +1), else 0; `length`-step episodes. A memoryless policy cannot
    do better than chance (0.5 per episode); one that remembers the cue gets 1.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 4) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.length = length
        self.t, self.cue = 0, 1.0

    def _obs(self) -> np.ndarray:
        shown = self.cue if self.t == 0 else 0.0
        return np.array([shown, self.t / self.length], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.cue = float(self.np_random.choice([-1.0, 1.0]))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        last = self.t >= self.length
        reward = float(last and int(action) == int(self.cue > 0))
        return self._obs(), reward, last, False, {"is_success": reward}


def register_cue() -> str:
    env_id = "EmbodiedPPOTestCue-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=CueEnv)
    return env_id


class LogEnv(gym.Env):
    """Reports its episode's scalars in info["log"] at every step (so far, this step included).

    obs = [t, 1]; reward = 1 per step; the episode terminates ("falls") at step `fall_at` when
    given, else runs until a time limit cuts it. The log holds `rewards/alive` (the reward so
    far), `metrics/fall_rate` (1 once fallen) and `steps` (an unprefixed key).
    """

    metadata = {"render_modes": []}

    def __init__(self, fall_at: int | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.fall_at = fall_at
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 1.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        fell = self.fall_at is not None and self.t >= self.fall_at
        log = {"rewards/alive": float(self.t), "metrics/fall_rate": float(fell), "steps": self.t}
        obs = np.array([float(self.t), 1.0], dtype=np.float32)
        return obs, 1.0, fell, False, {"log": log}


def register_log() -> str:
    env_id = "EmbodiedPPOTestLog-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=LogEnv, max_episode_steps=5)
    return env_id


class KeyedArgumentError(ValueError):
    """A task's refusal of one of its keyword arguments: `key` is its path in env.kwargs."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class StrictEnv(CountingEnv):
    """CountingEnv whose `gains` argument must be a mapping of known names to numbers >= 0."""

    def __init__(self, gains: dict | None = None) -> None:
        for name, value in (gains or {}).items():
            if name not in ("kp", "kd"):
                raise KeyedArgumentError(f"gains.{name}", f"unknown gain {name!r}; allowed: kp, kd")
            if value < 0:
                raise KeyedArgumentError(f"gains.{name}", f"got {value}, expected a number >= 0")
        super().__init__()


def register_strict() -> str:
    env_id = "EmbodiedPPOTestStrict-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=StrictEnv)
    return env_id


# Every episode return EpisodeReturns saw end, in the order they ended (in this process).
RETURNS: list[float] = []


class EpisodeReturns(gym.Wrapper):
    """Appends each finished episode's return to `RETURNS`: a record kept apart from the
    trainer's, to check what it logs."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.total = 0.0

    def reset(self, **kwargs):
        self.total = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total += float(reward)
        if terminated or truncated:
            RETURNS.append(self.total)
        return obs, reward, terminated, truncated, info


def make_counting(terminate_at: int | None = 8) -> gym.Env:
    """A factory of CountingEnv (as a user's `make_env` function is)."""
    return CountingEnv(terminate_at=terminate_at)


def make_counting_vector(
    num_envs: int = 2, autoreset: str = "SameStep", render_mode: str | None = None
) -> gym.vector.VectorEnv:
    """A factory of a whole vector env of CountingEnvs (as a user's batched env is)."""
    fns = [make_counting] * num_envs
    mode = gym.vector.AutoresetMode(autoreset)
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)


class GoalEnv(gym.Env):
    """A point that walks to a goal only privileged keys show (for distillation).

    Dict observations: `position` (2, what a student reads), `goal` (2, privileged), `teacher`
    (1: which of `teachers` equal strips of x the goal lies in, from the left: the teacher that
    labels the episode's steps, for several teachers). Actions (2, in [-1, 1]) move the point by
    a fifth of themselves; reward -|position - goal|; `length`-step episodes, cut by their time
    limit.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 6, teachers: int = 2) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "goal": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "teacher": spaces.Box(0.0, float(teachers - 1), (1,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.length, self.teachers, self.t = length, teachers, 0
        self.position = np.zeros(2, np.float32)
        self.goal = np.zeros(2, np.float32)

    def _obs(self) -> dict:
        strip = min(int((self.goal[0] + 0.9) / 1.8 * self.teachers), self.teachers - 1)
        teacher = np.array([float(strip)], np.float32)
        return {"position": self.position.copy(), "goal": self.goal.copy(), "teacher": teacher}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.position = np.zeros(2, np.float32)
        self.goal = self.np_random.uniform(-0.9, 0.9, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        move = 0.2 * np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        self.position = np.clip(self.position + move, -1.0, 1.0).astype(np.float32)
        reward = -float(np.linalg.norm(self.position - self.goal))
        return self._obs(), reward, False, self.t >= self.length, {}


def register_goal() -> str:
    env_id = "EmbodiedPPOTestGoal-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=GoalEnv)
    return env_id
