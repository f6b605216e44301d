"""Building a run's parts from its config: the policy, its buffer, its reference, the update's
threads."""

from __future__ import annotations

import os
from typing import Any

import torch

from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import CheckpointError
from embodied_ppo.env.spaces import SpaceInfo
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.buffer import RolloutBuffer


def policy_spec(cfg: Config, info: SpaceInfo) -> dict[str, Any]:
    """The plain-dict architecture description that rebuilds the policy module."""
    m, e = cfg.model, cfg.env
    spec: dict[str, Any] = {
        "obs_dim": info.obs_dim,
        "action_kind": info.action_kind,
        "action_dim": info.action_dim,
        "action_low": info.action_low,
        "action_high": info.action_high,
        "hidden_sizes": list(m.hidden_sizes),
        "activation": m.activation,
        "share_backbone": m.share_backbone,
        "log_std_init": m.log_std_init,
        "state_dependent_std": m.state_dependent_std,
        "init": m.init,
        "normalize_obs": e.normalize_obs,
        "clip_obs": e.clip_obs,
        "env_id": e.id,
    }
    if m.recurrent is not None:
        spec.update(
            recurrent=m.recurrent,
            recurrent_size=m.recurrent_size,
            recurrent_layers=m.recurrent_layers,
        )
    if info.obs_keys is not None:
        actor = m.actor_obs_keys or list(info.obs_keys)
        spec.update(
            obs_keys={
                k: {"shape": list(v.shape), "kind": v.kind} for k, v in info.obs_keys.items()
            },
            actor_keys=sorted(actor),
            critic_keys=sorted(m.critic_obs_keys or actor),
            cnn_channels=list(m.cnn_channels),
            cnn_features=m.cnn_features,
            cnn_kernels=None if m.cnn_kernels is None else list(m.cnn_kernels),
            cnn_strides=None if m.cnn_strides is None else list(m.cnn_strides),
            cnn_head=m.cnn_head,
        )
    return spec


# Below this many floating-point operations per gradient step (forward and backward, about
# 6 x parameters x rows), a second update thread costs more in synchronization than it gains:
# measured on 2 cores, a HalfCheetah-sized step (4e6) got slower, a Humanoid-sized one (1e9)
# 1.8x faster.
THREADED_STEP_FLOPS = 5e7


def make_buffer(
    cfg: Config, info: SpaceInfo, policy: ActorCritic, device: torch.device
) -> RolloutBuffer:
    """The rollout buffer of one process's envs (image keys stored as uint8)."""
    obs = info.obs_dim
    if info.obs_keys is not None:
        obs = {
            k: (v.shape, torch.uint8 if v.kind == "image" else torch.float32)
            for k, v in info.obs_keys.items()
        }
    gaussian = policy.is_gaussian
    return RolloutBuffer(
        cfg.algorithm.rollout_steps,
        cfg.env.num_envs,
        obs,
        (info.action_dim,) if gaussian else (),
        torch.float32 if gaussian else torch.int64,
        device,
        policy.state_size,
    )


def update_threads(device: torch.device, policy: ActorCritic, rows: int) -> int:
    """Torch threads for the update when trainer.torch_threads is null.

    On the CPU: every core this process may use (shared among the processes of a torchrun on
    this host) for steps large enough to gain from threads, else 1. On a GPU: torch's default.
    """
    if device.type != "cpu":
        return torch.get_num_threads()
    flops = 6 * rows * sum(p.numel() for p in policy.parameters())
    if flops < THREADED_STEP_FLOPS:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, (cores or 1) // local)


def load_policy_weights(path: str, device: torch.device, what: str) -> tuple[dict, dict]:
    """(model_spec, model state dict) of a checkpoint, for init_from and reference_checkpoint."""
    state = load_checkpoint(path, map_location=device)
    spec, weights = state.get("model_spec"), state.get("model")
    if not isinstance(spec, dict) or not isinstance(weights, dict):
        raise CheckpointError(f"{what}: {path} holds no policy")
    return spec, weights


def init_from(policy: ActorCritic, path: str, device: torch.device) -> None:
    """Load a saved policy's weights and normalizer into `policy` (model.init_from)."""
    spec, weights = load_policy_weights(path, device, "model.init_from")
    diff = sorted(
        k
        for k in set(spec) | set(policy.spec)
        if k != "env_id" and spec.get(k) != policy.spec.get(k)
    )
    if diff:
        raise CheckpointError(
            f"model.init_from: {path} has a different {', '.join(diff)} than this config's policy"
        )
    policy.load_state_dict(weights)


def make_reference(
    cfg: Config, policy: ActorCritic, device: torch.device, resume: dict[str, Any] | None
) -> ActorCritic:
    """The frozen reference policy: a resumed run's own; else algorithm.reference_checkpoint,
    or a snapshot of `policy` as training starts (after model.init_from)."""
    saved = None if resume is None else resume.get("reference")
    path = cfg.algorithm.reference_checkpoint
    if saved is not None:
        spec, weights = saved["spec"], saved["model"]
    elif path is not None:
        spec, weights = load_policy_weights(path, device, "algorithm.reference_checkpoint")
        for key in ("obs_dim", "action_kind", "action_dim"):
            if spec.get(key) != policy.spec[key]:
                raise CheckpointError(
                    f"algorithm.reference_checkpoint: {path} has {key} {spec.get(key)!r}, "
                    f"this task needs {policy.spec[key]!r}"
                )
    else:
        spec, weights = policy.spec, policy.state_dict()
    ref = ActorCritic(spec).to(device)
    ref.load_state_dict(weights)
    ref.requires_grad_(False)
    return ref.eval()
