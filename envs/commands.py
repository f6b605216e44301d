"""Velocity commands for legged robots: random ranges (with a curriculum) or a fixed schedule.

A command is (forward velocity m/s, lateral velocity m/s, yaw rate rad/s) in the robot's
heading frame. Random commands are drawn at every episode start and again every `resample_s`
seconds; with probability `stand_prob` a draw is zero (stand still), and each component is
zeroed on its own with probability `zero_prob` (so pure forward walks, side steps and turns in
place come up often, as a joystick gives them: MuJoCo Playground's Go1 does the same). A
curriculum starts the
ranges at a fraction of their configured width and widens them after every episode whose mean
linear tracking error stayed below a threshold. A schedule (`[[t, vx, vy, yaw], ...]`) replaces
the draws by fixed commands, each from its time (seconds into the episode) to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from embodied_ppo_envs import taskconfig as tc

COMMAND_NAMES = ("lin_vel_x", "lin_vel_y", "yaw_rate")


@dataclass(frozen=True)
class Curriculum:
    """Command ranges start at `initial` x the configured ones and grow by `step` (a fraction
    of the full ranges) after an episode with mean tracking error below `max_error` (m/s)."""

    initial: float = 0.3
    step: float = 0.1
    max_error: float = 0.25


@dataclass(frozen=True)
class CommandSpec:
    """Validated command settings (see `parse_commands`)."""

    ranges: tuple[tuple[float, float], ...]  # one (low, high) per command
    resample_s: float
    stand_prob: float
    zero_prob: tuple[float, float, float]
    curriculum: Curriculum | None
    schedule: tuple[tuple[float, float, float, float], ...] | None


def parse_commands(
    value: Any, schedule: Any, limits: tuple[float, float, float], defaults: dict[str, Any]
) -> CommandSpec:
    """Check `commands` and `command_schedule` kwargs against the robot's `limits` (the largest
    |command| of each kind it is meant for); raises TaskConfigError naming the key."""
    given = tc.mapping(value, "commands")
    allowed = [*COMMAND_NAMES, "resample_s", "stand_prob", "zero_prob", "curriculum"]
    tc.unknown_names(given, allowed, "commands")
    merged = {**defaults, **given}
    ranges = []
    for name, limit in zip(COMMAND_NAMES, limits):
        ranges.append(tc.value_range(merged[name], f"commands.{name}", -limit, limit))
    resample_s = tc.number(merged["resample_s"], "commands.resample_s", low=0.02)
    stand_prob = tc.number(merged["stand_prob"], "commands.stand_prob", 0.0, 1.0)
    zero = merged.get("zero_prob", [0.0, 0.0, 0.0])
    zero_prob = tuple(
        tc.number(p, f"commands.zero_prob[{i}]", 0.0, 1.0)
        for i, p in enumerate(tc.vector(zero, "commands.zero_prob", 3))
    )
    curriculum = None
    raw = merged.get("curriculum")
    if raw is True:
        curriculum = Curriculum()
    elif raw not in (None, False):
        options = tc.mapping(raw, "commands.curriculum")
        tc.unknown_names(options, ["initial", "step", "max_error"], "commands.curriculum")
        base = Curriculum()
        curriculum = Curriculum(
            tc.number(options.get("initial", base.initial), "commands.curriculum.initial", 0, 1),
            tc.number(options.get("step", base.step), "commands.curriculum.step", 0, 1),
            tc.number(options.get("max_error", base.max_error), "commands.curriculum.max_error", 0),
        )
    return CommandSpec(
        tuple(ranges),
        resample_s,
        stand_prob,
        zero_prob,  # type: ignore[arg-type]
        curriculum,
        _parse_schedule(schedule, limits),
    )


def _parse_schedule(value: Any, limits: tuple[float, float, float]) -> tuple | None:
    if value is None:
        return None
    key = "command_schedule"
    if not isinstance(value, (list, tuple)) or not value:
        raise tc.TaskConfigError(key, f"got {value!r}, expected a list of [time_s, vx, vy, yaw]")
    rows = []
    for i, row in enumerate(value):
        t, *command = tc.vector(row, f"{key}[{i}]", 4)
        if rows and t <= rows[-1][0]:
            raise tc.TaskConfigError(f"{key}[{i}]", f"time {t:g} s is not after the one before")
        if not rows and t != 0.0:
            raise tc.TaskConfigError(f"{key}[0]", f"the first entry starts at {t:g} s, not 0")
        for name, c, limit in zip(COMMAND_NAMES, command, limits):
            if abs(c) > limit:
                raise tc.TaskConfigError(
                    f"{key}[{i}]", f"{name} {c:g} is outside the robot's range [-{limit}, {limit}]"
                )
        rows.append((t, *command))
    return tuple(rows)


class VelocityCommands:
    """The commands of `count` envs (one row each), advanced once per policy step of `dt`
    seconds; each env draws from its own generator (`rngs[row]` where a method takes them)."""

    def __init__(self, spec: CommandSpec, dt: float, count: int) -> None:
        self.spec = spec
        self.dt = dt
        self.resample_steps = max(1, round(spec.resample_s / dt))
        self.command = np.zeros((count, 3))
        self.steps = np.zeros(count, dtype=np.int64)  # policy steps into the episode
        initial = spec.curriculum.initial if spec.curriculum else 1.0
        self.level = np.full(count, initial)
        self.row = np.zeros(count, dtype=np.int64)  # the schedule entry in force
        if spec.schedule is not None:
            table = np.asarray(spec.schedule)
            self._times, self._commands = table[:, 0] - 1e-9, table[:, 1:]

    def ranges(self, row: int) -> np.ndarray:
        """The ranges env `row`'s commands are drawn from now: (3, 2)."""
        return np.asarray(self.spec.ranges) * self.level[row]

    def _draw(self, row: int, rng: np.random.Generator) -> None:
        ranges = self.ranges(row)
        # Every draw always happens, so the stream does not depend on the outcomes.
        stand = rng.random() < self.spec.stand_prob
        draw = rng.uniform(ranges[:, 0], ranges[:, 1])
        if any(self.spec.zero_prob):
            draw[rng.random(3) < self.spec.zero_prob] = 0.0
        self.command[row] = 0.0 if stand else draw

    def reset(self, row: int, rng: np.random.Generator) -> None:
        """A new episode of env `row`: its first command."""
        self.steps[row] = 0
        self.row[row] = 0
        if self.spec.schedule is not None:
            self.command[row] = self._commands[0]
        else:
            self._draw(row, rng)

    def restart(self, row: int) -> None:
        """Env `row` back to the curriculum's first level (a seeded reset starts from scratch)."""
        self.level[row] = self.spec.curriculum.initial if self.spec.curriculum else 1.0

    def step(self, rngs: list[np.random.Generator]) -> None:
        """Advance every env one policy step; draw new commands where they are due."""
        self.steps += 1
        if self.spec.schedule is not None:
            # The last entry whose time has come (entries start in increasing time).
            t = self.steps * self.dt
            self.row[:] = np.searchsorted(self._times, t, side="right") - 1
            self.command[:] = self._commands[self.row]
            return
        for row in np.flatnonzero(self.steps % self.resample_steps == 0).tolist():
            self._draw(row, rngs[row])

    def end_episode(self, row: int, mean_error: float, fell: bool) -> None:
        """Widen env `row`'s ranges after a well-tracked episode (curriculum only)."""
        curriculum = self.spec.curriculum
        if curriculum is not None and not fell and mean_error < curriculum.max_error:
            self.level[row] = min(1.0, self.level[row] + curriculum.step)

    def state_dict(self, row: int) -> dict[str, Any]:
        """Env `row`'s command state, plain data."""
        return {
            "command": self.command[row].copy(),
            "steps": int(self.steps[row]),
            "level": float(self.level[row]),
            "row": int(self.row[row]),
        }

    def load_state_dict(self, row: int, state: dict[str, Any]) -> None:
        """Restore `state_dict(row)`."""
        self.command[row] = state["command"]
        self.steps[row] = int(state["steps"])
        self.level[row] = float(state["level"])
        self.row[row] = int(state["row"])
