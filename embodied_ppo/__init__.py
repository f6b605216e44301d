"""embodied-ppo: PPO for embodied and continuous-control reinforcement learning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_policy"]

if TYPE_CHECKING:
    from embodied_ppo.export import load_policy


def __getattr__(name: str) -> Any:
    # Lazy: `import embodied_ppo` stays free of torch, and load_policy pulls in torch only
    # (never gymnasium, mujoco or tensorboard), so a robot stack can deploy with torch alone.
    if name == "load_policy":
        from embodied_ppo.export import load_policy

        return load_policy
    raise AttributeError(f"module 'embodied_ppo' has no attribute {name!r}")
