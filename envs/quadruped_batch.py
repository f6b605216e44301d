"""N quadruped episodes stepped together: the task's one implementation, behind both the single
env (`quadruped.QuadrupedEnv`, a batch of one) and the vector env (`quadruped_vector`).

Each row is one env with everything of its own: a MuJoCo model and data (its randomized
values live in its model), a domain randomizer, and one generator per component drawn from its
own reset seed (commands, noise, delay, terrain, the spawn pose, each randomization term). The
work of a step runs on arrays over the rows (the robots' state, observations, rewards, delays,
commands), and a row's numbers never depend on the other rows: a batch of N steps each row
exactly as a batch of one would (tests/envs/test_quadruped_batch.py), so a run's trajectories
are the same however its envs are grouped into vector envs, processes or threads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from embodied_ppo_envs.commands import VelocityCommands
from embodied_ppo_envs.quadruped_observations import SIZES, Episodes, read
from embodied_ppo_envs.quadruped_rewards import QuadrupedRewards
from embodied_ppo_envs.quadruped_robot import QuadrupedRobots, robot_spec
from embodied_ppo_envs.quadruped_settings import TaskSettings
from embodied_ppo_envs.randomization import rng_state, set_rng_state, stream
from embodied_ppo_envs.randomizer import DomainRandomizer
from gymnasium.utils import seeding

ACTION_BOUND = 5.0  # the action space is [-5, 5]^12
STREAMS = ("commands", "noise", "delay", "terrain")  # one generator each, per row


class ActionDelays:
    """Per row, the action applied is the one given `k` policy steps before (zeros before the
    episode's first); each row's `k` is drawn per episode from [low, high]."""

    def __init__(self, low: int, high: int, count: int) -> None:
        self.low, self.high = low, high
        self.buffer = np.zeros((count, high + 1, 12))  # ring buffers of the last high+1 actions
        self.head = np.zeros(count, dtype=np.int64)  # where each row's newest action goes
        self.k = np.full(count, low, dtype=np.int64)
        self._rows = np.arange(count)

    def reset(self, row: int, rng: np.random.Generator) -> None:
        """Row `row`'s new episode: its delay drawn, its buffer cleared."""
        self.k[row] = (
            int(rng.integers(self.low, self.high + 1)) if self.high > self.low else self.low
        )
        self.buffer[row] = 0.0
        self.head[row] = 0

    def push(self, action: np.ndarray) -> np.ndarray:
        """Store `action` (N, 12); the actions of k steps before, per row (N, 12)."""
        if self.high == 0:
            return action
        size = self.high + 1
        self.buffer[self._rows, self.head] = action
        out = self.buffer[self._rows, (self.head - self.k) % size]
        self.head = (self.head + 1) % size
        return out

    def state_dict(self, row: int) -> dict[str, Any]:
        """Row `row`'s buffer, head and delay."""
        return {
            "buffer": self.buffer[row].copy(),
            "head": int(self.head[row]),
            "k": int(self.k[row]),
        }

    def load_state_dict(self, row: int, state: dict[str, Any]) -> None:
        """Restore `state_dict(row)`."""
        self.buffer[row] = state["buffer"]
        self.head[row] = int(state["head"])
        self.k[row] = int(state["k"])


class QuadrupedBatch:
    """N episodes of the quadruped task (see the module docstring).

    Args:
        settings: the task's checked arguments (`quadruped_settings.parse_settings`).
        count: N.
        threads: threads stepping the physics (`QuadrupedRobots`).
    """

    def __init__(self, settings: TaskSettings, count: int, threads: int = 1) -> None:
        s = self.settings = settings
        spec, terrain = robot_spec(s.terrain, s.terrain_options, s.kp, s.kd, physics=s.physics)
        self.robots = r = QuadrupedRobots(spec, terrain, s.fall_contacts, count, threads)
        self.count, self.dt, self.terrain = count, r.dt, terrain
        # Position actuators: the randomizers scale their gains, bias and force range.
        self.randomizers = [
            DomainRandomizer(s.randomization, m, d, r.trunk, r.dt)
            for m, d in zip(r.models, r.datas, strict=True)
        ]
        self.rewards = QuadrupedRewards(s.rewards, r.dt, count)
        self.commands = VelocityCommands(s.commands, r.dt, count)
        self.delay = ActionDelays(*s.delay, count)
        self.episodes = Episodes(count)
        self.episodes.command = self.commands.command  # the same array
        self.action = self.episodes.action  # the policy's last actions (clipped), (N, 12)
        self.np_random = [seeding.np_random()[0] for _ in range(count)]  # spawn poses
        self.rngs = [{name: stream(None, name) for name in STREAMS} for _ in range(count)]
        self.level = np.full(count, terrain.initial_level, dtype=np.int64)  # terrain levels
        self.started = np.zeros(count, dtype=bool)  # an episode began since a seeded reset
        self._pushes = any(z.pushes is not None for z in self.randomizers)
        # Observation noise: one draw per row and step covers every noisy key, in the order
        # the scales were given (as randomization.ObservationNoise draws it).
        layout, start = [], 0
        for key in s.noise:
            layout.append((key, slice(start, start + SIZES[key])))
            start += SIZES[key]
        self._noise_layout = layout
        self._noise_scale = np.concatenate(
            [np.full(SIZES[k], v) for k, v in s.noise.items()] or [np.zeros(0)]
        )

    # ================================================================= episodes
    def reset_rows(self, rows: list[int], seeds: list[int | None]) -> dict[str, np.ndarray]:
        """New episodes in `rows` (row i reseeded from seeds[i] where not None: every
        generator, the curricula from their start); returns their observations (n, ...)."""
        for row, seed in zip(rows, seeds, strict=True):
            if seed is not None:
                self.np_random[row] = seeding.np_random(seed)[0]
                self.rngs[row] = {name: stream(seed, name) for name in STREAMS}
                self.randomizers[row].seed(seed)
                self.commands.restart(row)
                self.started[row] = False
            elif self.started[row]:
                self._end_episode(row)
            rngs = self.rngs[row]
            if not self.started[row]:  # the first episode (since a seeded reset)
                self.level[row] = self.terrain.first_level(rngs["terrain"])
            self.started[row] = True
            self.randomizers[row].reset()
            self._episode_draws(row)
            x, y, z = self.terrain.spawn(int(self.level[row]), rngs["terrain"])
            yaw = self.np_random[row].uniform(-math.pi, math.pi)
            self.robots.place(row, (x, y, z), yaw, self.np_random[row])
            self.commands.reset(row, rngs["commands"])
            self.delay.reset(row, rngs["delay"])
            self.action[row] = 0.0
            self.rewards.reset(row, x, y)
        index = np.asarray(rows)
        self.robots.sense(index)
        return self.observe(index)

    def _episode_draws(self, row: int) -> None:
        """What the observation reads of row `row`'s randomization (its episode's draws)."""
        z = self.randomizers[row]
        friction, mass = z.value("friction"), z.value("added_mass")
        self.episodes.friction[row] = 1.0 if friction is None else friction[0]
        self.episodes.added_mass[row] = 0.0 if mass is None else mass[0]
        self.episodes.strength[row] = z.actuation.scales[0]

    def _end_episode(self, row: int) -> None:
        """The curricula learn from row `row`'s episode that just ended."""
        ep = self.rewards.summary(row)
        steps = max(1.0, ep["steps"])
        fell = ep["fell"] > 0.0
        self.commands.end_episode(row, ep["err_lin"] / steps, fell)
        qpos = self.robots.datas[row].qpos
        walked = math.hypot(qpos[0] - ep["start_x"], qpos[1] - ep["start_y"])
        self.level[row] = self.terrain.next_level(
            int(self.level[row]), walked, ep["path"], ep["commanded"], fell
        )

    # ================================================================= stepping
    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Step every row with its action (N, 12); returns the observations (N, ...), the
        rewards (N,) and which rows fell (their episodes end; resetting is the caller's)."""
        # Clipped to the action space (minimum/maximum: np.clip's float32 -> float64 path is slow).
        np.maximum(
            np.minimum(actions, ACTION_BOUND, out=self.action), -ACTION_BOUND, out=self.action
        )
        applied = self.delay.push(self.action)
        if self._pushes:
            for randomizer in self.randomizers:
                randomizer.step()  # a push, when one is due
        r = self.robots
        r.drive(applied, self.settings.action_scale)
        reward, fell = self.rewards.step(r, self.action, self.commands.command)
        self.commands.step([rngs["commands"] for rngs in self.rngs])
        r.last_qd[:] = r.qd
        return self.observe(slice(None)), reward, fell

    def observe(self, rows: np.ndarray | slice) -> dict[str, np.ndarray]:
        """The observations of `rows` now, with their sensor noise (one draw per row)."""
        obs = read(self.robots, self.episodes, rows)
        if not self._noise_layout:
            return obs
        ids = range(self.count)[rows] if isinstance(rows, slice) else rows.tolist()
        scale = self._noise_scale
        noise = np.empty((len(ids), scale.size))
        for n, row in enumerate(ids):
            rng = self.rngs[row]["noise"]
            noise[n] = rng.standard_normal(scale.size) if self.settings.noise_gaussian else (
                rng.uniform(-1.0, 1.0, scale.size)
            )  # fmt: skip
        noise *= scale
        for key, part in self._noise_layout:
            obs[key] += noise[:, part].astype(np.float32)
        return obs

    def log(self, row: int) -> dict[str, float]:
        """Row `row`'s episode so far (its info["log"])."""
        return self.rewards.log(row, int(self.level[row]) if self.terrain.levels > 1 else None)

    # ================================================================= exact resume
    def _arrays(self, row: int) -> dict[str, np.ndarray]:
        """Row `row`'s episode arrays (views, restored in place) by the names saved."""
        r, w = self.robots, self.rewards
        return {
            "action": self.action[row],
            "prev_action": w.prev_action[row],
            "last_qd": r.last_qd[row],
            "air_time": w.air_time[row],
            "last_contacts": r.last_contacts[row],
            "contacts": r.contacts[row],
            "episode_terms": w.episode_terms[row],
            "episode": w.episode[row],
        }

    def state_dict(self, row: int) -> dict[str, Any]:
        """Everything row `row`'s episode depends on: MuJoCo's integration state, the
        episode's sums and buffers, the curricula, every generator, and the randomized model
        values (which MuJoCo's state does not hold)."""
        return {
            "physics": self.robots.physics_state(row),
            "arrays": {name: a.copy() for name, a in self._arrays(row).items()},
            "level": int(self.level[row]),
            "started": bool(self.started[row]),
            "np_random": rng_state(self.np_random[row]),
            "rngs": {name: rng_state(g) for name, g in self.rngs[row].items()},
            "randomizer": self.randomizers[row].state_dict(),
            "commands": self.commands.state_dict(row),
            "delay": self.delay.state_dict(row),
        }

    def load_state_dict(self, row: int, state: dict[str, Any]) -> None:
        """Restore `state_dict(row)` exactly into row `row`."""
        self.robots.set_physics_state(row, state["physics"])
        arrays = self._arrays(row)
        for name, value in state["arrays"].items():
            arrays[name][...] = value
        self.level[row] = int(state["level"])
        self.started[row] = bool(state["started"])
        self.np_random[row] = set_rng_state(self.np_random[row], state["np_random"])
        for name, saved in state["rngs"].items():
            self.rngs[row][name] = set_rng_state(self.rngs[row][name], saved)
        self.randomizers[row].load_state_dict(state["randomizer"])
        self._episode_draws(row)
        self.commands.load_state_dict(row, state["commands"])
        self.delay.load_state_dict(row, state["delay"])

    def close(self) -> None:
        """Stop the physics threads."""
        self.robots.close()
