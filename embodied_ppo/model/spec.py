"""The typed description of a policy's architecture: everything that rebuilds the module.

A checkpoint holds it as a plain dict (`PolicySpec.to_dict`, the layout checkpoints have always
had), so it loads with `torch.load(..., weights_only=True)`; `PolicySpec.from_dict` reads that
dict back, refusing unknown keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

from embodied_ppo.core.types import JSONDict, JSONValue
from embodied_ppo.model.encoders import CNNSpec, KeyGroupSpec

ActionKind = Literal["gaussian", "categorical"]
ObsKind = Literal["image", "vector"]


@dataclass(frozen=True)
class ObsKeySpec:
    """One key of a Dict observation: a flat vector (D,) or a channels-last uint8 image."""

    shape: tuple[int, ...]
    kind: ObsKind


@dataclass(frozen=True)
class RecurrentSpec:
    """A recurrent core between the observation encoders and the MLP: an LSTM or GRU of
    `layers` layers of `size` units, or a history of the last `size` steps' inputs (`layers`
    1)."""

    kind: Literal["lstm", "gru", "history"]
    size: int
    layers: int


@dataclass(frozen=True)
class DictObsSpec:
    """Dict observations: every key, the keys the actor and the critic read, the CNN of
    image keys, and the actor's vector keys read through their own MLP (None: none)."""

    keys: dict[str, ObsKeySpec]
    actor_keys: tuple[str, ...]  # sorted
    critic_keys: tuple[str, ...]  # sorted
    cnn: CNNSpec
    actor_group: KeyGroupSpec | None = None


@dataclass(frozen=True)
class PolicySpec:
    """The architecture of an ActorCritic.

    Attributes:
        obs_dim: size of a flat observation (0 for Dict observations).
        action_kind: "gaussian" (Box actions) or "categorical" (Discrete actions).
        action_dim: action dimensions, or the number of discrete actions.
        action_low, action_high: the Box bounds (Gaussian), which the deployed policy clips to.
        dict_obs: the Dict observation's keys (None for flat observations).
        recurrent: the recurrent core (None: a feed-forward policy).
    """

    obs_dim: int
    action_kind: ActionKind
    action_dim: int
    action_low: tuple[float, ...] | None
    action_high: tuple[float, ...] | None
    hidden_sizes: tuple[int, ...]
    activation: str = "tanh"
    share_backbone: bool = True
    log_std_init: float = 0.0
    state_dependent_std: bool = False
    init: str = "orthogonal"
    normalize_obs: bool = True
    clip_obs: float | None = 10.0
    env_id: str | None = None
    dict_obs: DictObsSpec | None = None
    recurrent: RecurrentSpec | None = None

    @property
    def is_gaussian(self) -> bool:
        """Whether actions are continuous (a Gaussian head)."""
        return self.action_kind == "gaussian"

    # ------------------------------------------------------------------ checkpoint form
    def to_dict(self) -> JSONDict:
        """The plain dict a checkpoint holds (lists, numbers, strings, None)."""
        out: JSONDict = {
            "obs_dim": self.obs_dim,
            "action_kind": self.action_kind,
            "action_dim": self.action_dim,
            "action_low": None if self.action_low is None else list(self.action_low),
            "action_high": None if self.action_high is None else list(self.action_high),
            "hidden_sizes": list(self.hidden_sizes),
            "activation": self.activation,
            "share_backbone": self.share_backbone,
            "log_std_init": self.log_std_init,
            "state_dependent_std": self.state_dependent_std,
            "init": self.init,
            "normalize_obs": self.normalize_obs,
            "clip_obs": self.clip_obs,
            "env_id": self.env_id,
        }
        if self.recurrent is not None:
            r = self.recurrent
            out.update(recurrent=r.kind, recurrent_size=r.size, recurrent_layers=r.layers)
        if self.dict_obs is not None:
            d, cnn = self.dict_obs, self.dict_obs.cnn
            out.update(
                obs_keys={k: {"shape": list(v.shape), "kind": v.kind} for k, v in d.keys.items()},
                actor_keys=list(d.actor_keys),
                critic_keys=list(d.critic_keys),
                cnn_channels=list(cnn.channels),
                cnn_features=cnn.features,
                cnn_kernels=None if cnn.kernels is None else list(cnn.kernels),
                cnn_strides=None if cnn.strides is None else list(cnn.strides),
                cnn_head=cnn.head,
            )
            if d.actor_group is not None:
                g = d.actor_group
                out.update(
                    actor_group_keys=list(g.keys),
                    actor_group_hidden_sizes=list(g.hidden_sizes),
                    actor_group_features=g.features,
                    actor_group_zero_init=g.zero_init,
                )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, JSONValue]) -> PolicySpec:
        """Read `to_dict`'s form (and that of checkpoints written before the CNN's kernels,
        strides and head, or the actor's key group, existed). Raises KeyError or ValueError for
        anything else."""
        known = {f.name for f in fields(cls)} - {"dict_obs", "recurrent"}
        extra = set(data) - known - _RECURRENT_KEYS - _DICT_KEYS
        if extra:
            raise ValueError(f"unknown policy spec key(s): {', '.join(sorted(extra))}")
        recurrent = None
        if data.get("recurrent") is not None:
            recurrent = RecurrentSpec(
                data["recurrent"], int(data["recurrent_size"]), int(data["recurrent_layers"])
            )
        dict_obs = None
        if data.get("obs_keys") is not None:
            dict_obs = DictObsSpec(
                keys={
                    str(k): ObsKeySpec(tuple(int(n) for n in v["shape"]), v["kind"])
                    for k, v in data["obs_keys"].items()
                },
                actor_keys=tuple(sorted(data["actor_keys"])),
                critic_keys=tuple(sorted(data["critic_keys"])),
                cnn=CNNSpec(
                    list(data["cnn_channels"]),
                    int(data["cnn_features"]),
                    data.get("cnn_kernels"),
                    data.get("cnn_strides"),
                    data.get("cnn_head", "flatten"),
                ),
                actor_group=_key_group(data),
            )
        low, high = data.get("action_low"), data.get("action_high")
        return cls(
            obs_dim=int(data["obs_dim"]),
            action_kind=data["action_kind"],
            action_dim=int(data["action_dim"]),
            action_low=None if low is None else tuple(float(v) for v in low),
            action_high=None if high is None else tuple(float(v) for v in high),
            hidden_sizes=tuple(int(h) for h in data["hidden_sizes"]),
            activation=data["activation"],
            share_backbone=bool(data["share_backbone"]),
            log_std_init=float(data["log_std_init"]),
            state_dependent_std=bool(data["state_dependent_std"]),
            init=data["init"],
            normalize_obs=bool(data["normalize_obs"]),
            clip_obs=None if data["clip_obs"] is None else float(data["clip_obs"]),
            env_id=data.get("env_id"),
            dict_obs=dict_obs,
            recurrent=recurrent,
        )

    @classmethod
    def coerce(cls, spec: PolicySpec | Mapping[str, JSONValue]) -> PolicySpec:
        """`spec` itself, or read from its checkpoint form."""
        return spec if isinstance(spec, PolicySpec) else cls.from_dict(spec)


def _key_group(data: Mapping[str, JSONValue]) -> KeyGroupSpec | None:
    """The actor's key group of a checkpoint's spec dict (None where it has none)."""
    if data.get("actor_group_keys") is None:
        return None
    return KeyGroupSpec(
        keys=tuple(sorted(str(k) for k in data["actor_group_keys"])),
        hidden_sizes=tuple(int(h) for h in data["actor_group_hidden_sizes"]),
        features=int(data["actor_group_features"]),
        zero_init=bool(data.get("actor_group_zero_init", False)),
    )


_RECURRENT_KEYS = {"recurrent", "recurrent_size", "recurrent_layers"}
_DICT_KEYS = {
    "obs_keys",
    "actor_keys",
    "critic_keys",
    "cnn_channels",
    "cnn_features",
    "cnn_kernels",
    "cnn_strides",
    "cnn_head",
    "actor_group_keys",
    "actor_group_hidden_sizes",
    "actor_group_features",
    "actor_group_zero_init",
}
