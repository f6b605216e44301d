"""Where the mjlab backend resets the episodes that end: a fall inside mjlab's step, a time-out
after it, once its final observation is read (docs/design.md, rule 1).

mjlab's step with its auto-reset resets every env whose episode ended before the one forward
pass and the one observation compute of the step, so the observation it hands back for such an
env is the reset one; the final observation of a time-out, which its value bootstraps from, is
lost. Resetting every ended env after the step instead (`reset(env_ids)`) keeps the final
observations but runs MuJoCo Warp's forward pass, the sensors and the observation terms of every
env a second time, on every step where any episode ended. Only truncations need their final
observation (a termination bootstraps 0), so `EpisodeEnds` lets mjlab's auto-reset take the
terminations in the step (one forward pass, as mjlab's own rsl_rl loop pays) and holds back the
truncations, which the backend resets after reading their final observations: the second pass
is paid only on a step where an episode was truncated. A task with `is_finite_horizon` reports
its time limit as a termination (mjlab's rsl_rl wrapper does the same), so nothing is held back.

Two hooks on mjlab's env object do it, installed by `EpisodeEnds` and nowhere else: the
termination manager's `compute` returns the terminations alone as the step's reset mask (the
truncations stay in `termination_manager.time_outs`, and `env.reset_buf` is set back to every
end after the step), and `_reset_idx` counts the envs each reset takes, as the host already
knows them (mjlab reads their number to decide whether to reset at all).
"""

from __future__ import annotations

from typing import Any

import torch

# mjlab's episode log counts the ended envs each termination term ended (`.item()` of a count)
# where its other entries are means over them.
TERMINATION_PREFIX = "Episode_Termination/"

Log = dict[str, float | torch.Tensor]


class EpisodeEnds:
    """The hooks on mjlab's `env` that keep truncations out of its step's auto-reset, and the
    count of the envs each reset took.

    Attributes:
        finite_horizon: the task's `is_finite_horizon`: its time limits are terminations.
        reset_envs: envs reset since `begin()` (host int).
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.finite_horizon = bool(getattr(env.cfg, "is_finite_horizon", False))
        self.reset_envs = 0
        env.cfg.auto_reset = True
        manager = env.termination_manager
        self._compute = manager.compute
        self._reset_idx = env._reset_idx
        if not self.finite_horizon:
            manager.compute = self._terminations_only
        env._reset_idx = self._counted_reset

    def _terminations_only(self) -> torch.Tensor:
        """The termination manager's compute, returning the envs to reset in the step: the
        terminated ones (N,) bool."""
        self._compute()
        return self.env.termination_manager.terminated.clone()

    def _counted_reset(self, env_ids: torch.Tensor | None = None) -> None:
        """mjlab's `_reset_idx`, counting the envs it resets."""
        self.reset_envs += self.env.num_envs if env_ids is None else len(env_ids)
        self._reset_idx(env_ids)

    def begin(self) -> None:
        """Start counting the envs a step resets."""
        self.reset_envs = 0

    def after_step(self) -> None:
        """Put every end of the step back in `env.reset_buf` (what mjlab code reading it after a
        step expects)."""
        self.env.reset_buf = self.env.termination_manager.dones


def per_episode(log: dict[str, Any], envs: int) -> Log:
    """mjlab's episode log of a reset of `envs` envs, each entry a mean over them: its
    termination counts become the share of those envs the term ended (the others are means
    already). Host numbers stay on the host; tensors stay where they are."""
    out: Log = {}
    for key, value in log.items():
        if str(key).startswith(TERMINATION_PREFIX):
            value = value / max(1, envs)
        out[str(key)] = value if isinstance(value, torch.Tensor) else float(value)
    return out


def merge_logs(parts: list[tuple[Log, int]]) -> Log:
    """The means over all the envs of several resets' per-episode logs ((log, envs) each)."""
    parts = [(log, n) for log, n in parts if n > 0]
    if len(parts) == 1:
        return parts[0][0]
    merged: dict[str, Any] = {}
    weights: dict[str, int] = {}
    for log, n in parts:
        for key, value in log.items():
            merged[key] = merged.get(key, 0.0) + value * n
            weights[key] = weights.get(key, 0) + n
    return {k: v / weights[k] for k, v in merged.items()}
