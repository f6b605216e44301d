"""A distillation run's teachers: read from their runs, checked against the environment, and
made into frozen actors.

A teacher is a policy of this package (a run directory, its `checkpoints/latest.pt`, or a
checkpoint file): its actor, with its own observation keys and normalizer, labels the states
the student visits. Before anything of a run is written, each teacher must be a readable
policy of continuous actions that fit the environment's, reading keys the environment has in
the shapes it has, and without a recurrent core (a teacher labels each state by itself); where
several teachers label by an observation key, that key is one number per env. Every refusal
is one line naming `distill.teachers[i]` or `distill.teacher_key`.
"""

from __future__ import annotations

import difflib

import numpy as np
import torch

from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import CheckpointError, ConfigError
from embodied_ppo.core.text import first_line
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.io.checkpoint_state import PolicyWeights
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.spec import PolicySpec
from embodied_ppo.vecenv.spaces import SpaceInfo


def read_teachers(cfg: Config, device: torch.device) -> list[PolicyWeights]:
    """Each of distill.teachers' policy (architecture and weights), in order; a path that is
    not a run or a checkpoint of a policy is a one-line error naming its entry."""
    out = []
    for i, path in enumerate(cfg.distill.teachers):
        what = f"distill.teachers[{i}]"
        try:
            state = load_checkpoint(path, map_location=device)
        except CheckpointError as exc:
            raise CheckpointError(f"{what}: {exc}") from None
        spec, weights = state.get("model_spec"), state.get("model")
        if not isinstance(spec, dict) or not isinstance(weights, dict):
            raise CheckpointError(f"{what}: {path} holds no policy")
        try:
            PolicySpec.from_dict(spec)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{what}: {path} holds a policy of an unknown form ({first_line(exc)})"
            ) from None
        out.append(PolicyWeights(spec, weights))
    return out


def check_teachers(cfg: Config, info: SpaceInfo, teachers: list[PolicyWeights]) -> None:
    """Each teacher fits the environment, and so the student (whose actions are the env's);
    the teacher key is one number per env."""
    env = cfg.env.id
    if info.action_kind != "gaussian":
        raise ConfigError(
            f"distill.teachers: {env} has discrete actions; distillation learns the mean of "
            "continuous (Box) actions"
        )
    for i, weights in enumerate(teachers):
        _check_teacher(i, cfg, info, PolicySpec.from_dict(weights.spec))
    key = cfg.distill.teacher_key
    if key is not None:
        keys = info.obs_keys or {}
        if key not in keys:
            raise ConfigError(f"distill.teacher_key: got {key!r}, {_missing(env, key, info)}")
        if keys[key].kind != "vector" or tuple(keys[key].shape) != (1,):
            raise ConfigError(
                f"distill.teacher_key: {env}'s key {key!r} has shape {tuple(keys[key].shape)}; "
                "the teacher's index is one number per env, shape (1,)"
            )


def _check_teacher(index: int, cfg: Config, info: SpaceInfo, spec: PolicySpec) -> None:
    """Teacher `index` (its architecture `spec`) against the env: continuous actions of the
    same size and bounds, no recurrent core, observations the env gives."""
    env, path = cfg.env.id, cfg.distill.teachers[index]
    what = f"distill.teachers[{index}]"
    if not spec.is_gaussian:
        raise ConfigError(f"{what}: {path} is a policy of discrete actions; {env}'s are continuous")
    if spec.action_dim != info.action_dim:
        raise ConfigError(
            f"{what}: {path} outputs {spec.action_dim} action dimensions, {env} takes "
            f"{info.action_dim}"
        )
    low, high = info.action_low or [], info.action_high or []
    if not (_same(spec.action_low, low) and _same(spec.action_high, high)):
        raise ConfigError(
            f"{what}: {path} acts within {list(spec.action_low or [])} to "
            f"{list(spec.action_high or [])}, {env} within {list(low)} to {list(high)}"
        )
    if spec.recurrent is not None:
        raise ConfigError(
            f"{what}: {path} is a recurrent policy ({spec.recurrent.kind}); a teacher labels "
            "each state by itself: use a feed-forward one"
        )
    d = spec.dict_obs
    if d is None or info.obs_keys is None:
        if d is not None or info.obs_keys is not None or spec.obs_dim != info.obs_dim:
            theirs = "Dict observations" if d is not None else f"{spec.obs_dim} numbers"
            mine = "Dict observations" if info.obs_keys is not None else f"{info.obs_dim} numbers"
            raise ConfigError(f"{what}: {path} reads {theirs}, {env} observes {mine}")
        return
    for key in d.actor_keys:
        if key not in info.obs_keys:
            raise ConfigError(
                f"{what}: {path} reads observation key {key!r}; {_missing(env, key, info)}"
            )
        theirs, mine = tuple(d.keys[key].shape), tuple(info.obs_keys[key].shape)
        if theirs != mine or d.keys[key].kind != info.obs_keys[key].kind:
            raise ConfigError(
                f"{what}: {path} reads {key!r} of shape {theirs}, {env} gives it as {mine}"
            )


def _same(a: tuple[float, ...] | list[float] | None, b: list[float]) -> bool:
    """Whether two action bounds are the same (inf equals inf)."""
    a = list(a or [])
    return len(a) == len(b) and bool(np.array_equal(np.array(a), np.array(b, dtype=float)))


def _missing(env: str | None, key: str, info: SpaceInfo) -> str:
    """`env` lacks `key`: what it has, and the closest of them."""
    keys = list(info.obs_keys or {})
    if not keys:
        return f"{env} has flat Box observations, without keys"
    close = difflib.get_close_matches(key, keys, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"which {env} does not have (its keys: {', '.join(keys)}){hint}"


def frozen_actor(weights: PolicyWeights, device: torch.device) -> ActorCritic:
    """A teacher's actor (normalizers, encoder, MLP, head), frozen, on `device`."""
    full = ActorCritic(PolicySpec.from_dict(weights.spec))
    try:
        full.load_state_dict(weights.model)
    except RuntimeError as exc:
        raise CheckpointError(
            f"distill.teachers: a teacher's weights do not fit its architecture ({first_line(exc)})"
        ) from None
    return full.actor_copy().to(device)


def preflight_teachers(cfg: Config, info: SpaceInfo) -> None:
    """Before a new run writes anything: its teachers read and checked (nothing without
    distill.teachers)."""
    if cfg.distill.teachers:
        check_teachers(cfg, info, read_teachers(cfg, torch.device("cpu")))
