"""Every random generator a run draws from: seeding, capture and restore."""

from __future__ import annotations

import random

import numpy as np
import torch

from embodied_ppo.core.types import CheckpointState


# ------------------------------------------------------------------------------------ RNG state
def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(shuffle: torch.Generator) -> CheckpointState:
    """Every RNG a run draws from, as tensors and plain values (checkpoint-safe)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: CheckpointState = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
        "shuffle": shuffle.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: CheckpointState, shuffle: torch.Generator) -> str | None:
    """Restore `rng_state`; returns a note where the checkpoint's CUDA generators could not be
    restored (no CUDA here, or another number of devices: torch keeps one generator per
    device and sets them all at once), else None."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached"],
        )
    )
    torch.set_rng_state(state["torch"])
    shuffle.set_state(state["shuffle"])
    if "cuda" not in state:
        return None
    saved = len(state["cuda"])
    here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if saved != here:
        return (
            f"the checkpoint's random generators of {saved} CUDA device(s) were not restored: "
            f"this machine has {here} (CUDA draws continue from other states)"
        )
    torch.cuda.set_rng_state_all(state["cuda"])
    return None
