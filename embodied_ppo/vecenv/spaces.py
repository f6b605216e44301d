"""What the policy needs to know of an environment's spaces, and observation batches."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import numpy.typing as npt

# An observation batch: one array, or one array per key of a Dict observation space.
Obs = np.ndarray | dict[str, np.ndarray]


@dataclass
class ObsKey:
    """One key of a Dict observation: its shape and whether it is an image or a vector."""

    shape: tuple[int, ...]
    kind: str  # "image": (H, W, C) uint8, channels last | "vector": (D,) float32

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.kind == "image" else np.float32)


@dataclass
class SpaceInfo:
    """What the policy needs to know about an environment's spaces."""

    obs_dim: int  # flat Box observations: their size; Dict observations: 0
    action_kind: str  # "gaussian" | "categorical"
    action_dim: int  # dimensions (Box) or number of actions (Discrete)
    action_low: list[float] | None
    action_high: list[float] | None
    obs_keys: dict[str, ObsKey] | None = None  # Dict observations, by key (sorted)


class UnsupportedSpace(ValueError):
    """An observation or action space the policy cannot handle (`validate` words the refusal)."""

    def __init__(self, which: str, space: gym.Space, why: str = "") -> None:
        super().__init__(f"{which} space {space}")
        self.which, self.space, self.why = which, space, why


def _channels_first(shape: tuple[int, ...]) -> bool:
    return len(shape) == 3 and shape[0] in (1, 3, 4) and min(shape[1:]) > 4


def describe_key(key: str, space: gym.Space) -> ObsKey:
    """An image (H, W, C) uint8 Box, channels last, or a flat Box of numbers."""
    which = f"observation key {key!r}:"
    if not isinstance(space, gym.spaces.Box):
        raise UnsupportedSpace(which, space, "not a Box")
    shape = tuple(int(n) for n in space.shape)
    if len(shape) == 1:
        return ObsKey(shape, "vector")
    if len(shape) == 3 and space.dtype == np.uint8:
        if shape[-1] in (1, 3, 4):
            return ObsKey(shape, "image")
        if _channels_first(shape):
            raise UnsupportedSpace(which, space, "channels first")
    raise UnsupportedSpace(which, space, "not an image nor a vector")


def describe_spaces(obs_space: gym.Space, act_space: gym.Space) -> SpaceInfo:
    """SpaceInfo of a flat Box or Dict observation space and a flat Box or 0-based Discrete
    action space; anything else raises UnsupportedSpace."""
    obs_dim, obs_keys = 0, None
    if isinstance(obs_space, gym.spaces.Dict):
        obs_keys = {k: describe_key(k, obs_space[k]) for k in sorted(obs_space.spaces)}
        if not obs_keys:
            raise UnsupportedSpace("observation", obs_space, "an empty Dict")
    elif isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1:
        obs_dim = int(obs_space.shape[0])
    elif isinstance(obs_space, gym.spaces.Box) and obs_space.dtype == np.uint8:
        why = "channels first" if _channels_first(obs_space.shape) else "an image"
        raise UnsupportedSpace("observation", obs_space, why)
    else:
        raise UnsupportedSpace("observation", obs_space)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
        return SpaceInfo(
            obs_dim, "gaussian", act_space.shape[0], low.tolist(), high.tolist(), obs_keys
        )
    if isinstance(act_space, gym.spaces.Discrete) and int(act_space.start) == 0:
        return SpaceInfo(obs_dim, "categorical", int(act_space.n), None, None, obs_keys)
    raise UnsupportedSpace("action", act_space)


# ------------------------------------------------------------------ observation batches
def obs_zeros(info: SpaceInfo, *lead: int) -> Obs:
    """Zero observations of leading shape `lead` (float32 vectors, uint8 images)."""
    if info.obs_keys is None:
        return np.zeros((*lead, info.obs_dim), dtype=np.float32)
    return {k: np.zeros((*lead, *v.shape), dtype=v.dtype) for k, v in info.obs_keys.items()}


def obs_cast(obs: npt.ArrayLike | Mapping[str, npt.ArrayLike], info: SpaceInfo) -> Obs:
    """A copy of an env's observation batch with the dtypes the policy takes."""
    if info.obs_keys is None:
        return np.array(obs, dtype=np.float32)
    return {k: np.array(obs[k], dtype=v.dtype) for k, v in info.obs_keys.items()}


def finite_rows(obs: Obs) -> np.ndarray | None:
    """The rows whose numbers are not all finite (None when all are; images are always finite)."""
    arrays = [v for v in obs.values() if v.dtype.kind == "f"] if isinstance(obs, dict) else [obs]
    bad = None
    for a in arrays:
        # One float64 sum first: NaN and Inf propagate, float32 values cannot overflow it.
        if not math.isfinite(a.sum(dtype=np.float64)):
            rows = ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)
            bad = rows if bad is None else bad | rows
    return None if bad is None else np.flatnonzero(bad)
