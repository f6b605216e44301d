"""embodied-ppo: PPO for embodied and continuous-control reinforcement learning.

embodied_ppo.train(config, overrides, run_dir, callbacks)  -> TrainResult
embodied_ppo.evaluate(run_dir_or_checkpoint, episodes, ...) -> summary dict
embodied_ppo.load_policy(run_dir_or_checkpoint)             -> a torch module for deployment
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embodied_ppo.core.version import __version__

__all__ = ["__version__", "evaluate", "load_policy", "train"]

if TYPE_CHECKING:
    from embodied_ppo.app.api import evaluate, train
    from embodied_ppo.app.deploy import load_policy


def __getattr__(name: str) -> Any:
    # Lazy: `import embodied_ppo` stays free of torch, and load_policy pulls in torch only
    # (never gymnasium, mujoco or tensorboard), so a robot stack can deploy with torch alone.
    if name == "load_policy":
        from embodied_ppo.app.deploy import load_policy

        return load_policy
    if name in ("train", "evaluate"):
        from embodied_ppo.app import api

        return getattr(api, name)
    raise AttributeError(f"module 'embodied_ppo' has no attribute {name!r}")
