"""The state of a graph of objects (vecenv/object_state.py), as the mjlab backend saves a task's
managers and a user's task objects: tensors, plain values, numpy arrays and every kind of
random generator go through a checkpoint and back, in place; what cannot be is named."""

from __future__ import annotations

import io
import random
from collections import deque

import numpy as np
import pytest
import torch

from embodied_ppo.vecenv import object_state
from embodied_ppo.vecenv.object_state import Uncapturable, Walk, find


class Term:
    """A user's term class, of a module that is no library (this test's)."""

    def __init__(self) -> None:
        self.counts = torch.zeros(3)
        self.heights = np.zeros((2, 2), dtype=np.float32)
        self.ids = np.arange(4, dtype=np.uint32)
        self.torch_gen = torch.Generator().manual_seed(1)
        self.numpy_gen = np.random.default_rng(2)
        self.legacy = np.random.RandomState(3)
        self.python = random.Random(4)
        self.timer = 0.5
        self.window = deque([torch.zeros(2), torch.zeros(2)])
        self.net = torch.nn.Linear(2, 1)


class Slotted:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = torch.ones(2)


class Manager:
    def __init__(self) -> None:
        self.terms = {"air": Term(), "slotted": Slotted()}
        self.steps = 0


def draws(term: Term) -> tuple:
    """The next number of each of the term's generators (advances them)."""
    return (
        torch.rand(1, generator=term.torch_gen).item(),
        term.numpy_gen.random(),
        term.legacy.rand(),
        term.python.random(),
    )


def advance(manager: Manager) -> None:
    term = manager.terms["air"]
    term.counts += 1
    term.heights += 2
    term.ids *= 3
    draws(term)
    term.timer += 1
    term.window[0] += 5
    with torch.no_grad():
        term.net.weight += 1
    manager.terms["slotted"].value += 1
    manager.steps += 1


def through_a_checkpoint(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_every_kind_of_state_goes_through_a_checkpoint_and_back_in_place():
    manager = Manager()
    advance(manager)
    slots = find(manager, Walk())
    kinds = {path: slot[3] for path, slot in slots.items()}
    assert kinds == {
        "terms.air.counts": "tensor",
        "terms.air.heights": "ndarray",
        "terms.air.ids": "ndarray",
        "terms.air.torch_gen": "torch_gen",
        "terms.air.numpy_gen": "numpy_gen",
        "terms.air.legacy": "random_state",
        "terms.air.python": "py_random",
        "terms.air.timer": "plain",
        "terms.air.window.0": "tensor",
        "terms.air.window.1": "tensor",
        "terms.air.net._parameters.weight": "tensor",
        "terms.air.net._parameters.bias": "tensor",
        "terms.air.net.in_features": "plain",
        "terms.air.net.out_features": "plain",
        "terms.air.net.training": "plain",
        "terms.slotted.value": "tensor",
        "steps": "plain",
    }
    saved = through_a_checkpoint(object_state.capture(slots))
    term = manager.terms["air"]
    arrays = (term.counts, term.heights, term.ids, term.window[0], term.net.weight)
    expected = [a.copy() if isinstance(a, np.ndarray) else a.clone() for a in arrays]
    expected_draws = draws(term)  # what the generators give next from the saved state
    advance(manager)
    assert object_state.mismatch(slots, saved) is None
    object_state.restore(slots, saved)
    term = manager.terms["air"]
    for now, was in zip(arrays, expected, strict=True):
        assert (now == was).all()  # the same objects (in place), the saved values
    assert term.counts is arrays[0] and term.heights is arrays[1]
    assert term.ids.dtype == np.uint32 and term.timer == 1.5 and manager.steps == 1
    assert draws(term) == expected_draws
    assert torch.equal(manager.terms["slotted"].value, torch.full((2,), 2.0))


def test_what_cannot_be_captured_is_named():
    manager = Manager()
    manager.terms["air"].labels = np.array(["a", None], dtype=object)
    with pytest.raises(
        Uncapturable, match=r"^terms\.air\.labels is a numpy array of Python objects"
    ):
        object_state.capture(find(manager, Walk()))
    manager = Manager()
    manager.pending = {torch.zeros(1)}
    with pytest.raises(Uncapturable, match=r"^pending is a set holding arrays"):
        find(manager, Walk())


def test_a_state_of_other_parts_or_shapes_does_not_fit():
    saved = through_a_checkpoint(object_state.capture(find(Manager(), Walk())))
    other = Manager()
    other.terms["air"].heights = np.zeros((3, 2), dtype=np.float32)
    assert object_state.mismatch(find(other, Walk()), saved) == "a different terms.air.heights"
    other = Manager()
    other.extra = torch.zeros(1)
    assert object_state.mismatch(find(other, Walk()), saved) == "other parts"


def test_libraries_and_skipped_modules_are_not_walked():
    manager = Manager()
    manager.terms["air"].sim = np.random  # a module: not state
    slots = find(manager, Walk(skip_root=frozenset({"steps"}), skip_modules=(__name__,)))
    assert slots == {}  # the root itself is of a skipped module
    slots = find({"m": manager}, Walk(skip_modules=("numpy",)))
    assert "m.terms.air.counts" in slots and not any("sim" in p for p in slots)


class CallableTerm:
    """A class-based term: called each step, and holding state."""

    def __init__(self) -> None:
        self.last = torch.zeros(2)

    def __call__(self) -> torch.Tensor:
        return self.last


def test_a_class_based_term_is_walked_and_code_is_not():
    manager = Manager()
    manager.term = CallableTerm()
    manager.func, manager.method, manager.module = draws, manager.__init__, np
    paths = set(find(manager, Walk()))
    assert "term.last" in paths
    assert not any(p.startswith(("func", "method", "module")) for p in paths)
