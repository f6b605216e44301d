"""The run's random generators through a checkpoint (io/rng.py): restored exactly, and a note,
not silence, where the CUDA generators of the checkpoint cannot be (no CUDA here, or another
number of devices)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import embodied_ppo
from embodied_ppo.io.checkpoint import load_checkpoint, write_checkpoint
from embodied_ppo.io.rng import rng_state, seed_everything, set_rng_state


def draws(shuffle: torch.Generator) -> tuple:
    return (
        random.random(),
        np.random.rand(),
        torch.rand(1).item(),
        torch.rand(1, generator=shuffle).item(),
    )


def test_every_generator_continues_where_it_was_saved():
    seed_everything(3)
    shuffle = torch.Generator().manual_seed(4)
    state = rng_state(shuffle)
    expected = draws(shuffle)
    seed_everything(9)
    assert set_rng_state(state, shuffle) is None
    assert draws(shuffle) == expected


@pytest.mark.parametrize("saved", [1, 2])
def test_cuda_generators_of_another_device_count_are_a_note(saved):
    shuffle = torch.Generator()
    state = rng_state(shuffle)
    here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if saved == here:
        pytest.skip("this machine has as many CUDA devices as the checkpoint")
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)] * saved
    note = set_rng_state(state, shuffle)
    assert note == (
        f"the checkpoint's random generators of {saved} CUDA device(s) were not restored: "
        f"this machine has {here} (CUDA draws continue from other states)"
    )


def test_a_resume_says_so(tmp_path, capsys):
    from conftest import tiny_config

    run = tmp_path / "run"
    embodied_ppo.train(tiny_config(trainer={"total_steps": 32}), run_dir=run)
    path = run / "checkpoints" / "latest.pt"
    state = load_checkpoint(path)
    here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    state["rng"]["cuda"] = [torch.zeros(16, dtype=torch.uint8)] * (here + 1)
    for name in ("latest.pt", "ckpt_32.pt"):
        write_checkpoint(run / "checkpoints" / name, state)
    capsys.readouterr()
    embodied_ppo.train(resume=run, overrides=["trainer.total_steps=64"])
    assert f"note: the checkpoint's random generators of {here + 1} CUDA device(s)" in (
        capsys.readouterr().out
    )
