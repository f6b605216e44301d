"""The state a graph of Python objects holds (an mjlab env's managers, entities and sensors, and
the objects of a user's task package among them), captured as checkpoint-safe values and
written back in place.

`find` walks the graph from a root through the objects of every package that is not a library
(mjlab's, a user's task package: anything but the standard library, torch, numpy, Warp, MuJoCo
and the like; torch modules are walked too, for their parameters and buffers), dicts, lists,
tuples and deques, and finds what a run's state is made of:

    tensor        torch tensors (written back in place: their owners keep pointers to them)
    plain         bools, ints and floats
    ndarray       numpy arrays of numbers (written back in place)
    torch_gen     torch.Generator (its state)
    numpy_gen     numpy.random.Generator (its bit generator's state)
    random_state  numpy.random.RandomState
    py_random     random.Random
    warp          Warp arrays (through a torch view of their memory)

What it cannot capture it refuses by name (`Uncapturable`: an array of Python objects, a set
holding tensors), rather than leaving it out: the caller then says why the state was not saved.
"""

from __future__ import annotations

import functools
import random
import sys
import types
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# Packages whose objects hold no state of a task (or whose state is captured another way).
LIBRARIES = frozenset(
    {
        "torch", "numpy", "warp", "mujoco", "mujoco_warp", "gymnasium", "prettytable",
        "tensordict", "rsl_rl", "embodied_ppo", "mediapy", "trimesh", "scipy", "wandb", "tyro",
        "typing_extensions", "pydantic", "jax", "jaxlib",
    }
)  # fmt: skip
PLAIN = (bool, int, float)
# Code, not state.
_CODE = (
    type, types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType,
    functools.partial,
)  # fmt: skip

# Where a captured value lives: its owner (object, dict, list or deque), its key there, the
# value, and its kind (module docstring).
Slot = tuple[Any, Any, Any, str]


class Uncapturable(Exception):
    """A part of the state that cannot be captured; the message names where it is."""


@dataclass(frozen=True)
class Walk:
    """Where a walk does not go: attributes of the root, and module prefixes of objects whose
    state is captured another way (e.g. "mjlab.sim", through Warp's arrays)."""

    skip_root: frozenset[str] = frozenset()
    skip_modules: tuple[str, ...] = ()


def _kind(value: object) -> str | None:
    """The kind of a leaf of the state, or None for anything else."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, PLAIN):
        return "plain"
    if isinstance(value, np.ndarray):
        return "ndarray"
    if isinstance(value, torch.Generator):
        return "torch_gen"
    if isinstance(value, np.random.Generator):
        return "numpy_gen"
    if isinstance(value, np.random.RandomState):
        return "random_state"
    if isinstance(value, random.Random):
        return "py_random"
    cls = type(value)
    if cls.__module__.split(".")[0] == "warp" and cls.__name__ == "array":
        return "warp"
    return None


def _walked(obj: object, walk: Walk) -> bool:
    """Whether an object's attributes are walked into (see the module docstring)."""
    if isinstance(obj, _CODE):  # a class-based term is walked: it is called, but holds state
        return False
    module = type(obj).__module__ or ""
    if module.startswith(walk.skip_modules):
        return False
    if isinstance(obj, torch.nn.Module):
        return True
    top = module.split(".")[0]
    return top not in LIBRARIES and top not in sys.stdlib_module_names


def _attributes(obj: object) -> list[tuple[str, Any]]:
    """An object's attributes: its __dict__ and its slots."""
    items = list(vars(obj).items()) if hasattr(obj, "__dict__") else []
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                items.append((name, getattr(obj, name)))
    return items


def find(root: object, walk: Walk, seen: set[int] | None = None) -> dict[str, Slot]:
    """Every leaf of state reachable from `root`, by attribute path (each object once, under
    its first path); `seen`: ids of objects not to walk into."""
    out: dict[str, Slot] = {}
    _find(root, "", out, seen if seen is not None else set(), walk)
    return out


def _find(obj: object, path: str, out: dict[str, Slot], seen: set[int], walk: Walk) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, list | tuple | deque):
        items = list(enumerate(obj))
    elif isinstance(obj, set | frozenset):
        if any(_kind(v) not in (None, "plain") for v in obj):
            raise Uncapturable(
                f"{path} is a set holding arrays or generators (no place to put them back)"
            )
        return
    elif _walked(obj, walk):
        items = [(k, v) for k, v in _attributes(obj) if not (path == "" and k in walk.skip_root)]
    else:
        return
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        kind = _kind(value)
        if kind == "plain":
            if not isinstance(obj, tuple):  # a tuple's numbers cannot be put back
                out[where] = (obj, key, value, kind)
        elif kind is not None:
            if id(value) not in seen:
                seen.add(id(value))
                out[where] = (obj, key, value, kind)
        elif key != "cfg":
            _find(value, where, out, seen, walk)


# ------------------------------------------------------------------------------ capture
def _encode(value: Any) -> Any:
    """Numpy arrays in a generator's state as tensors of their bytes (dtype and shape kept)."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        raw = torch.from_numpy(data.reshape(-1).view(np.uint8).copy())
        return {"bytes": raw, "dtype": str(data.dtype), "shape": list(data.shape)}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"bytes", "dtype", "shape"}:
        data = value["bytes"].numpy().view(np.dtype(value["dtype"]))
        return data.reshape(value["shape"]).copy()
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


def _capture_one(path: str, value: Any, kind: str) -> Any:
    if kind == "tensor":
        return value.detach().cpu().clone()
    if kind == "plain":
        return value
    if kind == "ndarray":
        if value.dtype.hasobject:
            raise Uncapturable(f"{path} is a numpy array of Python objects")
        state = _encode(value)
    elif kind == "torch_gen":
        state = value.get_state()
    elif kind == "numpy_gen":
        state = _encode(value.bit_generator.state)
    elif kind == "random_state":
        state = _encode(value.get_state(legacy=False))
    elif kind == "py_random":
        state = value.getstate()
    else:  # warp
        import warp  # the mjlab extra's

        state = warp.to_torch(value).detach().cpu().clone()
    return {"kind": kind, "state": state}


def capture(slots: dict[str, Slot]) -> dict[str, Any]:
    """Checkpoint-safe values (tensors, plain values and dicts of them) of `find`'s slots."""
    return {path: _capture_one(path, value, kind) for path, (_, _, value, kind) in slots.items()}


def mismatch(slots: dict[str, Slot], saved: dict[str, Any]) -> str | None:
    """Where `capture`'s `saved` does not fit `slots` (the state of a like object), or None."""
    if set(saved) != set(slots):
        return "other parts"
    for path, (_, _, target, kind) in slots.items():
        value = saved[path]
        if kind == "tensor":
            fits = isinstance(value, torch.Tensor) and value.shape == target.shape
        elif kind == "plain":
            fits = isinstance(value, PLAIN)
        else:
            fits = isinstance(value, dict) and value.get("kind") == kind
            if fits and kind == "ndarray":
                fits = list(target.shape) == value["state"]["shape"]
        if not fits:
            return f"a different {path}"
    return None


def restore(slots: dict[str, Slot], saved: dict[str, Any]) -> None:
    """Write `saved` (checked by `mismatch`) back: arrays in place, generators' states set,
    plain values assigned."""
    for path, (owner, key, target, kind) in slots.items():
        value = saved[path]
        if kind == "tensor":
            with torch.no_grad():
                target.copy_(value)
        elif kind == "plain":
            if isinstance(owner, dict | list | deque):
                owner[key] = value
            else:
                setattr(owner, key, value)
        elif kind == "ndarray":
            np.copyto(target, _decode(value["state"]))
        elif kind == "torch_gen":
            target.set_state(value["state"])
        elif kind == "numpy_gen":
            target.bit_generator.state = _decode(value["state"])
        elif kind == "random_state":
            target.set_state(_decode(value["state"]))
        elif kind == "py_random":
            target.setstate(_tuples(value["state"]))
        else:  # warp
            import warp

            warp.to_torch(target).copy_(value["state"])


def _tuples(value: Any) -> Any:
    """random.Random's state with its tuples back (a checkpoint may hand lists back)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list | tuple) else value
