"""Type aliases that several layers share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from torch import Tensor


# Sums a tensor over the processes of a distributed run (None where there is one process).
Reduce = Callable[["Tensor"], "Tensor"]

# JSON-like data, what YAML and JSON files hold: a config in its plain form, a policy spec in a
# checkpoint, eval.json, an exported policy's metadata. (Recursive through its own name, as type
# checkers read it; typing.get_type_hints resolves that name in this module only.)
JSONValue: TypeAlias = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
JSONDict: TypeAlias = dict[str, JSONValue]

# A config in its plain form (YAML files, overrides, Config.to_dict) and the values inside it.
ConfigValue: TypeAlias = JSONValue
ConfigDict: TypeAlias = dict[str, ConfigValue]

# A checkpoint, or one part of it: tensors, numbers, strings, None, and lists, tuples and dicts
# of them (what torch.load(..., weights_only=True) gives back). The values stay Any: readers take
# a checkpoint apart key by key (state["model"], state["rng"]["numpy"]), each key holding a type
# of its own, which no single value type of a dict can say.
CheckpointState: TypeAlias = dict[str, Any]
