"""embodied-ppo: PPO for robots and other embodied agents, on Gymnasium and MuJoCo.

    import embodied_ppo

    result = embodied_ppo.train("configs/cartpole.yaml", ["trainer.total_steps=20000"])
    summary = embodied_ppo.evaluate(result.run_dir, episodes=10)
    embodied_ppo.export(result.run_dir, "onnx")
    policy = embodied_ppo.load_policy(result.run_dir)   # torch only: for a robot stack

The functions and types are imported when first used: `import embodied_ppo` does not import
torch, and `load_policy` needs torch alone (no gymnasium, MuJoCo or TensorBoard). Importing the
package registers the project's own Gymnasium ids (`EmbodiedPPO/Reach-v0`, ...) where
Gymnasium is installed, so `gymnasium.make` finds them in your own code too.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import TYPE_CHECKING

from embodied_ppo.core.version import __version__

if TYPE_CHECKING:
    from embodied_ppo.app.api import evaluate, export, plot, train
    from embodied_ppo.app.deploy import Policy, load_policy
    from embodied_ppo.app.export import ExportResult
    from embodied_ppo.app.results import Run, TrainResult
    from embodied_ppo.config.loading import load_config
    from embodied_ppo.config.schema import Config
    from embodied_ppo.core.errors import (
        CheckpointError,
        ConfigError,
        ExportError,
        ObservationError,
        TrainingError,
        UserError,
    )

# Public name -> the module that defines it (imported on first use).
_API = {
    "train": "embodied_ppo.app.api",
    "evaluate": "embodied_ppo.app.api",
    "export": "embodied_ppo.app.api",
    "plot": "embodied_ppo.app.api",
    "load_policy": "embodied_ppo.app.deploy",
    "Policy": "embodied_ppo.app.deploy",
    "ExportResult": "embodied_ppo.app.export",
    "TrainResult": "embodied_ppo.app.results",
    "Run": "embodied_ppo.app.results",
    "load_config": "embodied_ppo.config.loading",
    "Config": "embodied_ppo.config.schema",
    "UserError": "embodied_ppo.core.errors",
    "ConfigError": "embodied_ppo.core.errors",
    "CheckpointError": "embodied_ppo.core.errors",
    "TrainingError": "embodied_ppo.core.errors",
    "ObservationError": "embodied_ppo.core.errors",
    "ExportError": "embodied_ppo.core.errors",
}

__all__ = [
    "CheckpointError",
    "Config",
    "ConfigError",
    "ExportError",
    "ExportResult",
    "ObservationError",
    "Policy",
    "Run",
    "TrainResult",
    "TrainingError",
    "UserError",
    "__version__",
    "evaluate",
    "export",
    "load_config",
    "load_policy",
    "plot",
    "train",
]


def __getattr__(name: str) -> object:
    """A public name of the API, imported from its module on first use."""
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'embodied_ppo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return list(__all__)


def _register_tasks() -> None:
    """Register the project's own Gymnasium ids, where Gymnasium is installed (a robot stack
    that only deploys a policy needs torch alone)."""
    with contextlib.suppress(ImportError):
        # In the function: Gymnasium may be missing (load_policy needs torch alone).
        import embodied_ppo_envs  # noqa: F401  (registers its ids on import)


_register_tasks()
