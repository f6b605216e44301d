"""An environment's mirror (its left-right symmetry), as it declares it and as the update applies
it: which entries of each observation key and of the action swap, and which change sign.

A declaration (an env's `metadata["mirror"]`, docs/environments.md) is plain data:

    {"observation": {key: {"source": key2, "perm": [...], "negate": [...]}, ...},
     "action": {"perm": [...], "negate": [...]}}

with, for a flat observation, one `{"perm": ..., "negate": ...}` as its "observation". Entry i
of a mirrored vector is `-x[perm[i]]` where i is in `negate`, else `x[perm[i]]`, with `x` the
observation's key `source` (default: the key itself); `perm` defaults to the identity and
`negate` to nothing, so `{}` declares a key the mirror leaves as it is. A Discrete action has
a `perm` only. A mirror must be an involution (mirroring twice gives back what was mirrored) and
map each key to one of its own shape: `Mirror.from_declaration` refuses anything else with a
`MirrorError` naming the entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

Obs = Tensor | dict[str, Tensor]
# What the observation is: a flat vector's size, or each Dict key's shape.
ObsShapes = int | Mapping[str, tuple[int, ...]]


class MirrorError(ValueError):
    """A declaration that is not a mirror of these spaces; the message names the entry."""


@dataclass(frozen=True)
class SignedPermutation:
    """One vector's mirror: out[..., i] = sign[i] * x[..., index[i]] (x: key `source`'s)."""

    index: Tensor  # (D,) int64
    sign: Tensor  # (D,) float32, +-1
    source: str | None = None  # a Dict key's source key (None: a flat vector's)

    def __call__(self, x: Tensor) -> Tensor:
        """The mirrored vectors (B, D) of `x` (B, D)."""
        return x.index_select(-1, self.index) * self.sign.to(x.dtype)

    def to(self, device: torch.device) -> SignedPermutation:
        """This mirror with its tensors on `device`."""
        return SignedPermutation(self.index.to(device), self.sign.to(device), self.source)


@dataclass(frozen=True)
class Mirror:
    """An environment's mirror of observations and actions (see the module docstring).

    Attributes:
        observation: a flat observation's mirror, or one per Dict key.
        action: the action's mirror (a Discrete action's: its `index`, signs all +1).
        discrete: the action is Discrete (an index), not a vector.
    """

    observation: SignedPermutation | dict[str, SignedPermutation]
    action: SignedPermutation
    discrete: bool = False

    @classmethod
    def from_declaration(
        cls, declaration: object, obs: ObsShapes, action_dim: int, discrete: bool = False
    ) -> Mirror:
        """The mirror a declaration describes for observations of `obs` and actions of
        `action_dim` (a Discrete action space's number of actions where `discrete`); a
        MirrorError names the first entry that is not a mirror of them."""
        if not isinstance(declaration, Mapping):
            raise MirrorError(f"expected a mapping, got {type(declaration).__name__}")
        unknown = sorted(set(declaration) - {"observation", "action"})
        if unknown:
            raise MirrorError(f"{unknown[0]!r}: unknown entry (allowed: observation, action)")
        for part in ("observation", "action"):
            if part not in declaration:
                raise MirrorError(f"{part!r}: missing ({{}} declares one that does not change)")
        if isinstance(obs, int):
            observation: SignedPermutation | dict[str, SignedPermutation] = _vector(
                declaration["observation"], obs, "observation"
            )
        else:
            observation = _dict_mirror(declaration["observation"], obs)
        action = _vector(declaration["action"], action_dim, "action", negatable=not discrete)
        mirror = cls(observation, action, discrete)
        mirror._check_involution(obs, action_dim)
        return mirror

    def to(self, device: torch.device) -> Mirror:
        """This mirror with its tensors on `device`."""
        if isinstance(self.observation, SignedPermutation):
            observation: SignedPermutation | dict[str, SignedPermutation] = self.observation.to(
                device
            )
        else:
            observation = {k: m.to(device) for k, m in self.observation.items()}
        return Mirror(observation, self.action.to(device), self.discrete)

    # ------------------------------------------------------------------ applying it
    def obs(self, x: Obs) -> Obs:
        """The mirrored observations (B, ...) of `x` (a tensor, or one per Dict key)."""
        if isinstance(self.observation, SignedPermutation):
            assert isinstance(x, Tensor)
            return self.observation(x)
        assert isinstance(x, dict)
        return {k: m(x[m.source or k]) for k, m in self.observation.items()}

    def actions(self, a: Tensor) -> Tensor:
        """The mirrored actions: vectors (B, A), or Discrete indices (B,)."""
        if self.discrete:
            return self.action.index[a]
        return self.action(a)

    def means(self, m: Tensor) -> Tensor:
        """The mirror of the action distribution's mean (B, A): a Gaussian's mean, or a
        Discrete distribution's probabilities (the mean of its one-hot actions)."""
        if self.discrete:
            return m.index_select(-1, self.action.index)
        return self.action(m)

    # ------------------------------------------------------------------ checks
    def _check_involution(self, obs: ObsShapes, action_dim: int) -> None:
        """Mirroring twice must give back every entry, with its sign: checked on probes whose
        entries are all different (1, 2, 3, ... across keys)."""
        if isinstance(obs, int):
            probe: Obs = torch.arange(1, obs + 1, dtype=torch.float32)[None]
        else:
            probe, start = {}, 1
            for k, shape in obs.items():
                size = _size(shape)
                probe[k] = torch.arange(start, start + size, dtype=torch.float32)[None]
                start += size
        twice = self.obs(self.obs(probe))
        for key, before, after in _pairs(probe, twice):
            _same(before[0], after[0], "observation" if key is None else f"observation[{key!r}]")
        if self.discrete:
            a = torch.arange(action_dim)
            bad = (self.actions(self.actions(a)) != a).nonzero()
            if bad.numel():
                i = int(bad[0, 0])
                raise MirrorError(
                    f"action: not an involution: mirroring twice turns action {i} into "
                    f"{int(self.actions(self.actions(a))[i])}"
                )
        else:
            a = torch.arange(1, action_dim + 1, dtype=torch.float32)[None]
            _same(a[0], self.actions(self.actions(a))[0], "action")


def _size(shape: tuple[int, ...]) -> int:
    if len(shape) != 1:
        raise MirrorError(f"a key of shape {shape}: only flat vector keys can be mirrored")
    return int(shape[0])


def _pairs(a: Obs, b: Obs) -> list[tuple[str | None, Tensor, Tensor]]:
    if isinstance(a, Tensor):
        assert isinstance(b, Tensor)
        return [(None, a, b)]
    assert isinstance(b, dict)
    return [(k, a[k], b[k]) for k in a]


def _same(before: Tensor, after: Tensor, where: str) -> None:
    """MirrorError unless `after` (a probe mirrored twice) is `before`."""
    bad = (before != after).nonzero()
    if not bad.numel():
        return
    i = int(bad[0, 0])
    value = float(after[i])
    if value == -float(before[i]):
        raise MirrorError(
            f"{where}: not an involution: mirroring twice changes the sign of entry {i} "
            "(an entry and its swapped partner must both be negated, or neither)"
        )
    raise MirrorError(f"{where}: not an involution: mirroring twice moves entry {i} elsewhere")


def _dict_mirror(
    entries: object, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, SignedPermutation]:
    """One mirror per key of a Dict observation; every key declared, each from a key of its
    own shape."""
    if not isinstance(entries, Mapping):
        raise MirrorError(
            f"observation: expected one entry per observation key, got {type(entries).__name__}"
        )
    unknown = sorted(set(entries) - set(shapes))
    if unknown:
        raise MirrorError(
            f"observation[{unknown[0]!r}]: not a key of the observation ({', '.join(shapes)})"
        )
    out = {}
    for key, shape in shapes.items():
        where = f"observation[{key!r}]"
        if key not in entries:
            raise MirrorError(f"{where}: missing ({{}} declares a key the mirror leaves as it is)")
        entry = entries[key]
        source = entry.get("source", key) if isinstance(entry, Mapping) else key
        if source not in shapes:
            raise MirrorError(f"{where}.source: {source!r} is not a key of the observation")
        if tuple(shapes[source]) != tuple(shape):
            raise MirrorError(
                f"{where}.source: {source!r} has shape {tuple(shapes[source])}, the key has "
                f"{tuple(shape)}: a key can only be mirrored from one of its own shape"
            )
        if len(shape) != 1:
            raise MirrorError(f"{where}: an image: only vector keys can be mirrored")
        m = _vector(entry, int(shape[0]), where, allowed=("source", "perm", "negate"))
        out[key] = SignedPermutation(m.index, m.sign, source)
    return out


def _vector(
    entry: object,
    size: int,
    where: str,
    negatable: bool = True,
    allowed: tuple[str, ...] = ("perm", "negate"),
) -> SignedPermutation:
    """The signed permutation of one vector of `size` entries."""
    if not isinstance(entry, Mapping):
        raise MirrorError(f"{where}: expected a mapping of perm and negate, got {entry!r}")
    if not negatable:
        allowed = tuple(a for a in allowed if a != "negate")
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        hint = " (a Discrete action's mirror only permutes actions)" if not negatable else ""
        raise MirrorError(f"{where}.{unknown[0]}: unknown entry{hint}; allowed: {allowed}")
    perm = _integers(entry.get("perm", list(range(size))), f"{where}.perm")
    if len(perm) != size:
        raise MirrorError(
            f"{where}.perm: {len(perm)} entries, expected {size} (one per entry of {where}: the "
            "entry each one is mirrored from)"
        )
    if sorted(perm) != list(range(size)):
        missing = sorted(set(range(size)) - set(perm))
        raise MirrorError(
            f"{where}.perm: not a permutation of 0..{size - 1} (entry {missing[0]} is never used)"
        )
    negate = _integers(entry.get("negate", []), f"{where}.negate")
    for i in negate:
        if not 0 <= i < size:
            raise MirrorError(f"{where}.negate: entry {i} is outside 0..{size - 1}")
    if len(set(negate)) != len(negate):
        raise MirrorError(f"{where}.negate: an entry is named twice")
    sign = torch.ones(size)
    if negate:
        sign[torch.tensor(negate)] = -1.0
    return SignedPermutation(torch.tensor(perm, dtype=torch.int64), sign)


def _integers(value: object, where: str) -> list[int]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise MirrorError(f"{where}: expected a list of integers, got {value!r}")
    return [int(v) for v in value]
