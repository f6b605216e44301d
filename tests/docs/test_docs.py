"""The README's configuration reference lists every key the config accepts."""

from __future__ import annotations

import dataclasses

import pytest
from support import ROOT

from embodied_ppo import config as C

README = (ROOT / "README.md").read_text()
BLOCKS = {
    "env": C.EnvConfig,
    "model": C.ModelConfig,
    "algorithm": C.AlgorithmConfig,
    "optim": C.OptimConfig,
    "trainer": C.TrainerConfig,
}


def _section(block: str) -> str:
    start = README.index(f"### `{block}:`")
    end = README.find("\n### ", start + 1)
    return README[start : end if end != -1 else len(README)]


@pytest.mark.parametrize("block", list(BLOCKS))
def test_every_config_key_has_a_row_in_its_readme_section(block):
    section = _section(block)
    missing = []
    for f in dataclasses.fields(BLOCKS[block]):
        nested = {"kl_ctrl": C.KLCtrlConfig, "wandb": C.WandbConfig}.get(f.name)
        if nested is not None:  # a block of its own: one row per key
            names = [f"{f.name}.{g.name}" for g in dataclasses.fields(nested)]
        else:
            names = [f.name]
        missing += [n for n in names if f"| `{n}` |" not in section]
    assert not missing, f"README's `{block}:` table lacks {missing}"
