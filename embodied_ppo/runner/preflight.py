"""What a run needs of the environment's spaces and of the machine: the policy head, observation keys and image sizes, the device, and the collection's inference path."""

from __future__ import annotations

import difflib
import re

import torch

from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.model.encoders import CNNSpec, cnn_output_size
from embodied_ppo.model.snapshot import unsupported_part
from embodied_ppo.runner.auxiliary import check_auxiliary_env
from embodied_ppo.runner.teachers import preflight_teachers
from embodied_ppo.vecenv.preflight import check_env, check_episodic
from embodied_ppo.vecenv.spaces import SpaceInfo


def check_policy(cfg: Config, info: SpaceInfo) -> None:
    """What the model and algorithm blocks require of the environment's spaces and limits."""
    m = cfg.model
    if m.head != "auto" and m.head != info.action_kind:
        raise ConfigError(
            f"model.head: got {m.head!r} but {cfg.env.id} needs {info.action_kind!r} for its "
            "action space; use auto"
        )
    _check_obs_keys(cfg, info)
    check_episodic(cfg)


def _check_obs_keys(cfg: Config, info: SpaceInfo) -> None:
    """model.actor_obs_keys / critic_obs_keys name keys of the Dict observation; images fit the
    CNN; an asymmetric critic has a network of its own."""
    m = cfg.model
    if info.obs_keys is None:
        for name in ("actor_obs_keys", "critic_obs_keys", "actor_group_keys"):
            if getattr(m, name) is not None:
                raise ConfigError(
                    f"model.{name}: got {getattr(m, name)}, but {cfg.env.id} has flat Box "
                    "observations; observation keys apply to Dict observations (use null)"
                )
        return
    if cfg.env.backend == "envpool":
        raise ConfigError(
            f"env.backend: {cfg.env.id} has Dict observations, which the envpool backend does "
            "not take; use sync or async"
        )
    keys = list(info.obs_keys)
    for name in ("actor_obs_keys", "critic_obs_keys"):
        given = getattr(m, name)
        if given is None:
            continue
        if not given:
            raise ConfigError(
                f"model.{name}: got [], expected null (all keys) or some of: {', '.join(keys)}"
            )
        for i, key in enumerate(given):
            if key not in info.obs_keys:
                close = difflib.get_close_matches(str(key), keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"model.{name}[{i}]: got {key!r}, the observation keys of {cfg.env.id} are "
                    f"{', '.join(keys)}{hint}"
                )
    actor = m.actor_obs_keys or keys
    critic = m.critic_obs_keys or actor
    for i, key in enumerate(m.actor_group_keys or []):
        if key not in actor or info.obs_keys[key].kind != "vector":
            vector = [k for k in actor if info.obs_keys[k].kind == "vector"]
            raise ConfigError(
                f"model.actor_group_keys[{i}]: got {key!r}, expected one of the vector keys the "
                f"actor reads: {', '.join(vector)}"
            )
    if cfg.env.backend == "mjlab":
        for group in keys:
            if group not in actor and group not in critic:
                raise ConfigError(
                    f"model.critic_obs_keys: {cfg.env.id}'s observation group {group!r} is read "
                    f"by neither the actor (model.actor_obs_keys {list(actor)}) nor the critic "
                    f"(model.critic_obs_keys {m.critic_obs_keys}); add it to one, e.g. "
                    f"model.critic_obs_keys=[{group}]"
                )
    if m.share_backbone and sorted(critic) != sorted(actor):
        raise ConfigError(
            f"model.critic_obs_keys: got {m.critic_obs_keys} with model.share_backbone true; a "
            "critic that sees other keys than the actor needs its own network "
            "(model.share_backbone: false)"
        )
    for key in set(actor) | set(critic):
        spec = info.obs_keys[key]
        if spec.kind == "image":
            cnn = CNNSpec(m.cnn_channels, m.cnn_features, m.cnn_kernels, m.cnn_strides, m.cnn_head)
            if cnn_output_size(spec.shape, cnn) < 1:
                raise ConfigError(
                    f"model.cnn_channels: {len(m.cnn_channels)} layers (kernels "
                    f"{[k for k, _ in cnn.layers]}, strides {[s for _, s in cnn.layers]}) shrink "
                    f"the {key!r} image {spec.shape[0]}x{spec.shape[1]} to nothing; use fewer or "
                    "smaller layers, or larger images"
                )


# ------------------------------------------------------------------ machine and policy
def resolve_device(name: str, key: str = "trainer.device") -> torch.device:
    """The device `name` (auto | cpu | cuda | cuda:N) means on this machine: `auto` is cuda
    when available, else cpu; a malformed name or an unavailable cuda is a one-line error
    naming `key`."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise ConfigError(f"{key}: got {name!r}, allowed: auto | cpu | cuda | cuda:N")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"{key}: got {name!r} but no CUDA device is available; use auto or cpu"
            )
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"{key}: got {name!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    return torch.device(name)


# Above this many envs per forward, torch on the training device beats numpy on the host.
HOST_INFERENCE_MAX_ENVS = 256


def inference_path(mode: str, policy: torch.nn.Module, num_envs: int) -> str:
    """`host` (numpy snapshot) or `device` (torch) for `trainer.inference: auto | host | device`."""
    missing = unsupported_part(policy)
    if mode == "host" and missing is not None:
        raise ConfigError(
            f"trainer.inference: got 'host', but the numpy snapshot has no {missing}; use auto "
            "or device"
        )
    if mode == "auto":
        return "host" if num_envs <= HOST_INFERENCE_MAX_ENVS and missing is None else "device"
    return mode


def check_run(cfg: Config) -> SpaceInfo:
    """Everything a new run checks before anything is written: the environment (one is built),
    what the policy needs of its spaces, a distillation's teachers, and the device."""
    info = check_env(cfg)
    check_policy(cfg, info)
    check_auxiliary_env(cfg, info)  # the env's mirror, RND's keys
    preflight_teachers(cfg, info)
    resolve_device(cfg.trainer.device)
    return info
