"""Run by the distributed tests under torchrun (or alone): train, then save this process's weights."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from embodied_ppo.config.loading import load_config
from embodied_ppo.runner import distributed
from embodied_ppo.runner.trainer import Trainer

if __name__ == "__main__":
    config, out, *overrides = sys.argv[1:]
    cfg = load_config(config, overrides)
    trainer = Trainer(cfg, Path(cfg.trainer.run_dir))
    trainer.train()
    torch.save(trainer.policy.state_dict(), Path(out) / f"rank{trainer.rank}.pt")
    distributed.shutdown()
