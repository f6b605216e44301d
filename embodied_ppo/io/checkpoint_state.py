"""A run's checkpoint as typed state: what each entry holds, to and from the plain data that
`io.checkpoint` writes and reads (tensors and plain values, loaded with weights_only=True:
docs/design.md, rule 5).

The plain form is the one checkpoints have always had, key for key, so files written before
this state was typed load, and files written now load in the versions before. Entries that
earlier versions did not write take their defaults (`from_dict`); entries this version does not
know travel along unchanged (`extra`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from torch import Tensor

from embodied_ppo.core.types import CheckpointState, ConfigDict, JSONDict
from embodied_ppo.core.version import __version__

# An observation batch as a checkpoint holds it: one tensor, or one per key of a Dict space.
TensorObs = Tensor | dict[str, Tensor]

# Written and checked by io.checkpoint, not part of the state.
_ENVELOPE = ("format", "format_version")


@dataclass(frozen=True)
class EnvsSnapshot:
    """Where one process's envs stand mid-episode, for an exact resume.

    Attributes:
        envs: the vector env's captured state (`vecenv.state`), or None.
        obs: the observation the policy acts on next (N, ...).
        recurrent: a recurrent policy's states {"state": (N, S), "starts": (N,)}.
    """

    envs: CheckpointState | None = None
    obs: TensorObs | None = None
    recurrent: dict[str, Tensor] | None = None

    @property
    def empty(self) -> bool:
        """Whether nothing of the envs was saved (the run starts fresh episodes)."""
        return self.envs is None or self.obs is None


@dataclass(frozen=True)
class RankPart:
    """What differs between the processes of a distributed run: their envs, their minibatch
    generator and their reward scaler's returns."""

    envs: EnvsSnapshot
    rng: CheckpointState
    reward_scaler: dict[str, Tensor]

    def to_dict(self) -> CheckpointState:
        """The plain form (the entries of a checkpoint's `ranks`)."""
        return {
            "envs": self.envs.envs,
            "collector_obs": self.envs.obs,
            "collector_recurrent": self.envs.recurrent,
            "rng": self.rng,
            "reward_scaler": self.reward_scaler,
        }

    @classmethod
    def from_dict(cls, data: CheckpointState) -> RankPart:
        """From `to_dict()`."""
        envs = EnvsSnapshot(
            data.get("envs"), data.get("collector_obs"), data.get("collector_recurrent")
        )
        return cls(envs, _mapping(data, "rng"), _mapping(data, "reward_scaler"))


@dataclass(frozen=True)
class PolicyWeights:
    """A policy as a checkpoint holds it: its architecture (`model.spec.PolicySpec` as plain
    data) and its state dict."""

    spec: JSONDict
    model: dict[str, Tensor]

    def to_dict(self) -> CheckpointState:
        """The plain form."""
        return {"spec": self.spec, "model": self.model}


@dataclass(frozen=True)
class RunCheckpoint:
    """Everything needed to continue a run exactly (docs/design.md, rule 6).

    Attributes:
        config: the run's config as given (the envs of all its processes), plain.
        model_spec, model: the policy's architecture and state dict (its normalizer included).
        optimizer: Adam's state and learning rate, in torch.optim.Adam's form.
        reward_scaler, rng, envs: this process's reward scaler, minibatch generator and envs
            (of a distributed run: process 0's; `ranks` holds every process's).
        global_step, iteration: where the run stands.
        recent_returns: the last finished episodes' returns (the progress line's mean).
        lr_extension: a linear schedule's extension past a changed budget (`algo.schedules`).
        kl_coef: the in-reward KL's coefficient where the adaptive controller left it.
        reference: the frozen reference policy of the KL terms.
        teachers: a distillation run's frozen teachers, in the order of distill.teachers.
        ranks, world_size: every process's own part, and how many there were.
        evaluation: the evaluation that made it the best checkpoint (best.pt; `eval`).
        value_normalizer: the value targets' statistics (`algorithm.normalize_value`).
        rnd: random network distillation's networks, statistics, optimizer and generator
            (`algorithm.rnd`).
        package_version: the version that wrote it.
        extra: entries this version does not know, kept as they are.
    """

    config: ConfigDict
    model_spec: JSONDict
    model: dict[str, Tensor]
    optimizer: CheckpointState
    reward_scaler: dict[str, Tensor]
    rng: CheckpointState
    global_step: int
    iteration: int
    envs: EnvsSnapshot = field(default_factory=EnvsSnapshot)
    recent_returns: list[float] = field(default_factory=list)
    lr_extension: dict[str, Any] | None = None
    kl_coef: float | None = None
    reference: PolicyWeights | None = None
    teachers: list[PolicyWeights] | None = None
    ranks: list[RankPart] | None = None
    world_size: int = 1
    evaluation: dict[str, float] | None = None
    value_normalizer: dict[str, Tensor] | None = None
    rnd: CheckpointState | None = None
    package_version: str = __version__
    extra: CheckpointState = field(default_factory=dict)

    def to_dict(self) -> CheckpointState:
        """The plain form `io.checkpoint.save_checkpoint` writes."""
        out: CheckpointState = {
            "package_version": self.package_version,
            "config": self.config,
            "model_spec": self.model_spec,
            "model": self.model,
            "optimizer": self.optimizer,
            "reward_scaler": self.reward_scaler,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "recent_returns": list(self.recent_returns),
            "lr_extension": self.lr_extension,
            "rng": self.rng,
            "kl_coef": self.kl_coef,
            "reference": None if self.reference is None else self.reference.to_dict(),
            "envs": self.envs.envs,
            "collector_obs": self.envs.obs,
            "collector_recurrent": self.envs.recurrent,
        }
        if self.teachers is not None:
            out["teachers"] = [teacher.to_dict() for teacher in self.teachers]
        if self.ranks is not None:
            out["ranks"] = [part.to_dict() for part in self.ranks]
            out["world_size"] = self.world_size
        if self.evaluation is not None:
            out["eval"] = self.evaluation
        # Written only by the runs that use them: other checkpoints keep their form.
        if self.value_normalizer is not None:
            out["value_normalizer"] = self.value_normalizer
        if self.rnd is not None:
            out["rnd"] = self.rnd
        return out | self.extra

    @classmethod
    def from_dict(cls, data: CheckpointState) -> RunCheckpoint:
        """From the plain form of any version that wrote a run's checkpoints. Raises
        ValueError naming the entry that is missing or of the wrong kind."""
        known = {f.name for f in fields(cls)} | {"eval", "collector_obs", "collector_recurrent"}
        reference = data.get("reference")
        teachers = data.get("teachers")
        ranks = data.get("ranks")
        kl_coef = data.get("kl_coef")
        return cls(
            config=_mapping(data, "config"),
            model_spec=_mapping(data, "model_spec"),
            model=_mapping(data, "model"),
            optimizer=_mapping(data, "optimizer"),
            reward_scaler=_mapping(data, "reward_scaler"),
            rng=_mapping(data, "rng"),
            global_step=_integer(data, "global_step"),
            iteration=_integer(data, "iteration"),
            envs=EnvsSnapshot(
                data.get("envs"), data.get("collector_obs"), data.get("collector_recurrent")
            ),
            recent_returns=[float(x) for x in data.get("recent_returns") or []],
            lr_extension=data.get("lr_extension"),
            kl_coef=None if kl_coef is None else float(kl_coef),
            reference=None
            if reference is None
            else PolicyWeights(_mapping(reference, "spec"), _mapping(reference, "model")),
            teachers=None
            if teachers is None
            else [PolicyWeights(_mapping(t, "spec"), _mapping(t, "model")) for t in teachers],
            ranks=None if ranks is None else [RankPart.from_dict(part) for part in ranks],
            world_size=int(data.get("world_size", 1)),
            evaluation=data.get("eval"),
            value_normalizer=data.get("value_normalizer"),
            rnd=data.get("rnd"),
            package_version=str(data.get("package_version", "unknown")),
            extra={k: v for k, v in data.items() if k not in known and k not in _ENVELOPE},
        )

    def rank_part(self) -> RankPart:
        """This process's own part (what `ranks` holds for it)."""
        return RankPart(self.envs, self.rng, self.reward_scaler)

    def local_view(self, rank: int, world: int) -> tuple[RunCheckpoint, str | None]:
        """The checkpoint as process `rank` of `world` reads it (its own envs, generator and
        reward returns), and why its envs cannot continue where they stood (None: they can).

        Written by another number of processes, the weights, the optimizer and the statistics
        carry over, and the envs start fresh, deterministic episodes (their states belong to
        another split)."""
        if self.world_size == world:
            if self.ranks is None:
                return self, None
            own = self.ranks[rank]
            return replace(self, envs=own.envs, rng=own.rng, reward_scaler=own.reward_scaler), None
        return (
            replace(self, envs=EnvsSnapshot()),
            f"the checkpoint was written by {self.world_size} process(es), this run has {world}",
        )


def _mapping(data: CheckpointState, key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        what = "no" if value is None else f"a {type(value).__name__} as its"
        raise ValueError(f"it holds {what} {key!r}")
    return value


def _integer(data: CheckpointState, key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        what = "no" if value is None else f"a {type(value).__name__} as its"
        raise ValueError(f"it holds {what} {key!r}")
    return int(value)
