"""The algorithm block's objectives beside PPO's own: mirror symmetry (`algorithm.symmetry`) and
random network distillation (`algorithm.rnd`), each key with its default and its one-line
meaning (docs/configuration.md is generated from them), and the checks of their ranges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from embodied_ppo.config.keys import key as _key
from embodied_ppo.core.errors import require


@dataclass(frozen=True)
class SymmetryConfig:
    """`algorithm.symmetry:` learning from the environment's declared mirror
    (`metadata["mirror"]`, docs/environments.md)."""

    augment: bool = _key(
        False,
        "extend every minibatch with its mirrored samples (mirrored observations and actions, "
        "the same advantages, returns and old log-probabilities: the mirrored behaviour policy "
        "drew them; the behaviour critic's values on the mirrored observations)",
    )
    mirror_loss_coef: float = _key(
        0.0,
        "weight of the mirror loss: the squared difference between the policy's mean on a "
        "mirrored observation and the mirrored mean on the original (>= 0; 0: off)",
    )

    @property
    def enabled(self) -> bool:
        """Whether the run uses the env's mirror (either mode)."""
        return self.augment or self.mirror_loss_coef > 0


@dataclass(frozen=True)
class RNDConfig:
    """`algorithm.rnd:` an intrinsic reward from random network distillation."""

    enabled: bool = _key(
        False,
        "add an intrinsic reward: the error of a trained predictor against a fixed random "
        "network on the normalized observation of each step",
    )
    weight: float = _key(1.0, "weight of the (normalized) intrinsic reward (>= 0)")
    schedule: Literal["constant", "linear", "step"] = _key(
        "constant",
        "the weight over training: constant; linear: from weight to final_weight between "
        "schedule_start and schedule_end; step: final_weight from schedule_end on",
    )
    final_weight: float = _key(0.0, "linear and step schedules: the weight they end at (>= 0)")
    schedule_start: int = _key(0, "linear schedule: env step where the weight starts to change")
    schedule_end: int | None = _key(
        None, "linear and step schedules: env step where final_weight holds; null: total_steps"
    )
    obs_keys: list[str] | None = _key(
        None, "Dict observations: the vector keys the networks read; null: the critic's"
    )
    hidden_sizes: list[int] = _key(lambda: [128, 128], "widths of both networks' hidden layers")
    output_size: int = _key(64, "size of the networks' embedding")
    clip_obs: float = _key(5.0, "clip the networks' normalized input to +-this")
    lr: float = _key(1e-3, "Adam learning rate of the predictor")
    epochs: int = _key(1, "passes of the predictor over each rollout")
    minibatches: int = _key(
        4, "predictor steps per pass, each on a shuffled share of the rollout's steps (all envs)"
    )


def check_auxiliary(symmetry: SymmetryConfig, rnd: RNDConfig, rollout_steps: int) -> None:
    """The ranges of the symmetry and RND blocks (`rollout_steps`: the algorithm block's)."""
    s, r = symmetry, rnd
    require(
        s.mirror_loss_coef >= 0,
        f"algorithm.symmetry.mirror_loss_coef: got {s.mirror_loss_coef}, expected >= 0",
    )
    for name in ("weight", "final_weight"):
        value = getattr(r, name)
        require(value >= 0, f"algorithm.rnd.{name}: got {value}, expected a number >= 0")
    require(r.lr > 0, f"algorithm.rnd.lr: got {r.lr}, expected a number > 0")
    require(r.clip_obs > 0, f"algorithm.rnd.clip_obs: got {r.clip_obs}, expected a number > 0")
    require(r.epochs >= 1, f"algorithm.rnd.epochs: got {r.epochs}, expected an integer >= 1")
    require(r.output_size >= 1, f"algorithm.rnd.output_size: got {r.output_size}, expected >= 1")
    for i, h in enumerate(r.hidden_sizes):
        require(h >= 1, f"algorithm.rnd.hidden_sizes[{i}]: got {h}, expected an integer >= 1")
    require(r.minibatches >= 1, f"algorithm.rnd.minibatches: got {r.minibatches}, expected >= 1")
    # The split of a rollout's steps matters only to a predictor that trains.
    require(
        not r.enabled or rollout_steps % r.minibatches == 0,
        f"algorithm.rnd.minibatches: got {r.minibatches}, expected a divisor of "
        f"algorithm.rollout_steps = {rollout_steps} (each is a share of the rollout's steps)",
    )
    require(
        r.schedule_start >= 0,
        f"algorithm.rnd.schedule_start: got {r.schedule_start}, expected an env step >= 0",
    )
    if r.schedule_end is not None:
        require(
            r.schedule_end > r.schedule_start,
            f"algorithm.rnd.schedule_end: got {r.schedule_end}, expected null or an env step "
            f"after schedule_start = {r.schedule_start}",
        )
    if r.obs_keys is not None:
        require(r.obs_keys != [], "algorithm.rnd.obs_keys: got [], expected null or some keys")


def rnd_weight(r: RNDConfig, step: int, total_steps: int) -> float:
    """The intrinsic reward's weight at env step `step` of a run of `total_steps`."""
    end = total_steps if r.schedule_end is None else r.schedule_end
    if r.schedule == "constant":
        return r.weight
    if r.schedule == "step":
        return r.weight if step < end else r.final_weight
    if step <= r.schedule_start:
        return r.weight
    if step >= end:
        return r.final_weight
    frac = (step - r.schedule_start) / max(1, end - r.schedule_start)
    return r.weight + (r.final_weight - r.weight) * frac
