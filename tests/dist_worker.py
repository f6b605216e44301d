"""Run by the distributed tests under torchrun (or alone): train, then save this process's
weights. `dist_worker.py CONFIG OUT [OVERRIDE ...]` trains once; with `--variants FILE` (a JSON
list of [name, [OVERRIDE ...]]) it trains one run per variant in this process, one after the
other (each in OUT/<name>/run, with the common overrides first), and saves
OUT/<name>/rank<R>.pt for each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from embodied_ppo.config.loading import load_config
from embodied_ppo.runner import distributed
from embodied_ppo.runner.trainer import Trainer


def train(config: str, out: Path, overrides: list[str]) -> None:
    """One run; its weights to OUT/rank<R>.pt."""
    cfg = load_config(config, overrides)
    trainer = Trainer(cfg, Path(cfg.trainer.run_dir))
    trainer.train()
    torch.save(trainer.policy.state_dict(), out / f"rank{trainer.rank}.pt")


if __name__ == "__main__":
    args = sys.argv[1:]
    variants = None
    if args[0] == "--variants":
        variants, args = json.loads(Path(args[1]).read_text()), args[2:]
    config, out, *overrides = args
    if variants is None:
        train(config, Path(out), overrides)
    else:
        for name, extra in variants:
            folder = Path(out) / name
            folder.mkdir(parents=True, exist_ok=True)
            train(config, folder, [*overrides, f"trainer.run_dir={folder / 'run'}", *extra])
    distributed.shutdown()
