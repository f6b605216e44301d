"""How often a run logs, checkpoints and evaluates: in iterations (`trainer.X_interval`) or in
environment steps (`trainer.X_interval_steps`), exactly one of the two; and the cadence that
says when either is due.

Budgets are environment steps (trainer.total_steps), as Stable-Baselines3 counts them; rsl_rl
counts iterations. Each interval takes either unit, with the unit in its key's name. Giving the
`_steps` key alone turns its iteration twin (which may have a default) off.
"""

from __future__ import annotations

from dataclasses import dataclass

from embodied_ppo.config.schema import TrainerConfig
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.types import ConfigValue

# The trainer's intervals that take either unit: the key in iterations, its twin in env steps.
INTERVALS = ("log_interval", "checkpoint_interval", "eval_interval")


def steps_key(name: str) -> str:
    """The env-step twin of the iteration interval `name` (`eval_interval_steps`)."""
    return f"{name}_steps"


def fill_interval_units(data: ConfigValue) -> ConfigValue:
    """`data` (a config's nested mapping) with each iteration interval whose `_steps` twin is
    given, and which is not given itself, set to null: the one given is the one in force."""
    trainer = data.get("trainer") if isinstance(data, dict) else None
    if not isinstance(trainer, dict):
        return data
    filled = dict(trainer)
    for name in INTERVALS:
        if filled.get(steps_key(name)) is not None and name not in filled:
            filled[name] = None
    return {**data, "trainer": filled}


def twin_of(key: str) -> str | None:
    """The other unit's key of the interval key `key` ("trainer.eval_interval_steps" ->
    "trainer.eval_interval"), or None for any other key."""
    block, _, name = key.partition(".")
    if block != "trainer":
        return None
    for interval in INTERVALS:
        if name == interval:
            return f"trainer.{steps_key(interval)}"
        if name == steps_key(interval):
            return f"trainer.{interval}"
    return None


def overridden_unit_wins(data: ConfigValue, given: list[str]) -> ConfigValue:
    """`data` after overrides of the key paths `given`: an interval given in one unit turns off
    the other unit's key that the config (a file, a run's config.yaml) had, unless that one is
    given too (the checks then refuse the two)."""
    trainer = data.get("trainer") if isinstance(data, dict) else None
    if not isinstance(trainer, dict):
        return data
    filled = dict(trainer)
    for key in given:
        twin = twin_of(key)
        if twin is not None and twin not in given and filled.get(key.split(".")[1]) is not None:
            filled[twin.split(".")[1]] = None
    return {**data, "trainer": filled}


@dataclass(frozen=True)
class Cadence:
    """Something that recurs during training: after every `iterations`-th iteration, or after
    the iteration that reaches or passes each multiple of `steps` env steps; never when both
    are None. It depends on the iteration and the step only, so a resumed run does it where the
    uninterrupted one would."""

    iterations: int | None = None
    steps: int | None = None

    @property
    def on(self) -> bool:
        """Whether it recurs at all."""
        return self.iterations is not None or self.steps is not None

    def due(self, iteration: int, start_step: int, end_step: int) -> bool:
        """Whether it is due after `iteration`, which took the run from `start_step` to
        `end_step` env steps (all processes)."""
        if self.iterations is not None:
            return iteration % self.iterations == 0
        if self.steps is not None:
            return end_step // self.steps > start_step // self.steps
        return False

    def times(self, n: int) -> Cadence:
        """Every n-th of its occasions (a video every n evaluations)."""
        return Cadence(
            None if self.iterations is None else self.iterations * n,
            None if self.steps is None else self.steps * n,
        )


def cadence(trainer: TrainerConfig, name: str) -> Cadence:
    """The cadence of the trainer block's interval `name` (e.g. "eval_interval")."""
    return Cadence(getattr(trainer, name), getattr(trainer, steps_key(name)))


def check_intervals(trainer: TrainerConfig) -> None:
    """Each interval >= 1 in its unit; exactly one unit for logging and checkpoints, at most
    one for evaluation (none: no evaluation); videos only with an evaluation."""
    for name in INTERVALS:
        its, steps = getattr(trainer, name), getattr(trainer, steps_key(name))
        off = "null (no evaluation)" if name == "eval_interval" else "null"
        for key, value, unit in ((name, its, "iterations"), (steps_key(name), steps, "env steps")):
            if value is not None and value < 1:
                raise ConfigError(
                    f"trainer.{key}: got {value}, expected {off} or an integer >= 1 ({unit})"
                )
        if its is not None and steps is not None:
            raise ConfigError(
                f"trainer.{name}: got {its} (iterations) and trainer.{steps_key(name)} {steps} "
                f"(env steps); give one of them and set the other to null"
            )
        if its is None and steps is None and name != "eval_interval":
            raise ConfigError(
                f"trainer.{name}: null, and trainer.{steps_key(name)} is null too; give one: "
                f"{name} in iterations or {steps_key(name)} in env steps"
            )
    video = trainer.video_interval
    if video is not None and video < 1:
        raise ConfigError(
            f"trainer.video_interval: got {video}, expected null (no videos) or an integer >= 1 "
            "(evaluations)"
        )
    if video is not None and not cadence(trainer, "eval_interval").on:
        raise ConfigError(
            f"trainer.video_interval: got {video} but trainer.eval_interval is null (and "
            "trainer.eval_interval_steps too); videos are recorded during evaluation, so set "
            "one of them too"
        )
