"""Building a run's parts from its config: the policy, its buffer, its reference, the update's
threads."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TextIO

import torch

from embodied_ppo.algo.distill_loss import DistillTerm
from embodied_ppo.algo.kl import InRewardKL
from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import CheckpointError
from embodied_ppo.core.system import usable_cores
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import Reduce
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.io.checkpoint_state import RunCheckpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.encoders import CNNSpec, KeyGroupSpec
from embodied_ppo.model.grow import grow, is_growth, spec_difference
from embodied_ppo.model.spec import DictObsSpec, ObsKeySpec, PolicySpec, RecurrentSpec
from embodied_ppo.runner import distributed
from embodied_ppo.runner.auxiliary import load_mirror
from embodied_ppo.runner.buffer import BufferLayout, RolloutBuffer
from embodied_ppo.runner.collector import Collector
from embodied_ppo.runner.device_collector import DeviceCollector
from embodied_ppo.runner.preflight import inference_path
from embodied_ppo.runner.rollout import CollectorSettings, RolloutCollector
from embodied_ppo.vecenv.device_protocol import DeviceVecEnv
from embodied_ppo.vecenv.protocol import BatchedEnvs, VecEnv
from embodied_ppo.vecenv.spaces import SpaceInfo


def policy_spec(cfg: Config, info: SpaceInfo) -> PolicySpec:
    """The architecture of a run's policy: its config's model block over the env's spaces."""
    m, e = cfg.model, cfg.env
    recurrent = None
    if m.recurrent is not None:
        if m.recurrent == "history":
            recurrent = RecurrentSpec("history", m.history_length, 1)
        else:
            recurrent = RecurrentSpec(m.recurrent, m.recurrent_size, m.recurrent_layers)
    dict_obs = None
    if info.obs_keys is not None:
        actor = m.actor_obs_keys or list(info.obs_keys)
        dict_obs = DictObsSpec(
            keys={k: ObsKeySpec(tuple(v.shape), v.kind) for k, v in info.obs_keys.items()},
            actor_keys=tuple(sorted(actor)),
            critic_keys=tuple(sorted(m.critic_obs_keys or actor)),
            cnn=CNNSpec(
                list(m.cnn_channels),
                m.cnn_features,
                None if m.cnn_kernels is None else list(m.cnn_kernels),
                None if m.cnn_strides is None else list(m.cnn_strides),
                m.cnn_head,
            ),
            actor_group=None
            if m.actor_group_keys is None
            else KeyGroupSpec(
                tuple(sorted(m.actor_group_keys)),
                tuple(m.actor_group_hidden_sizes),
                m.actor_group_features,
                m.actor_group_zero_init,
            ),
        )
    return PolicySpec(
        obs_dim=info.obs_dim,
        action_kind=info.action_kind,
        action_dim=info.action_dim,
        action_low=None if info.action_low is None else tuple(info.action_low),
        action_high=None if info.action_high is None else tuple(info.action_high),
        hidden_sizes=tuple(m.hidden_sizes),
        activation=m.activation,
        share_backbone=m.share_backbone,
        log_std_init=m.log_std_init,
        state_dependent_std=m.state_dependent_std,
        init=m.init,
        normalize_obs=e.normalize_obs,
        clip_obs=e.clip_obs,
        env_id=e.id,
        dict_obs=dict_obs,
        recurrent=recurrent,
    )


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
    layout = BufferLayout(
        cfg.algorithm.rollout_steps,
        cfg.env.num_envs,
        obs,
        action_shape=(info.action_dim,) if gaussian else (),
        action_dtype=torch.float32 if gaussian else torch.int64,
        state_size=policy.state_size,
    )
    return RolloutBuffer(layout, device)


def update_threads(
    device: torch.device, policy: ActorCritic, rows: int, sequence_length: int = 1
) -> int:
    """Torch threads for the update when trainer.torch_threads is null.

    On the CPU: every core this process may use (shared among the processes of a torchrun on
    this host) for steps large enough to gain from threads, else 1. On a GPU: torch's default.
    A recurrent policy's step runs its core one time step at a time over the minibatch's
    sequences (`rows / sequence_length` rows a product), so that is the size that counts: its
    many small products lose to a second thread's synchronization (CartPoleNoVel's step, 8
    sequences of 32 steps, ran 9-40x slower on 2 threads than on 1 when another process
    kept the second core busy).
    """
    if device.type != "cpu":
        return torch.get_num_threads()
    per_product = max(1, rows // max(1, sequence_length))
    flops = 6 * per_product * sum(p.numel() for p in policy.parameters())
    if flops < THREADED_STEP_FLOPS:
        return 1
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, usable_cores() // local)


def load_policy_weights(
    path: str, device: torch.device, what: str
) -> tuple[PolicySpec, dict[str, torch.Tensor]]:
    """(architecture, state dict) of a checkpoint's policy, for init_from and
    reference_checkpoint."""
    state = load_checkpoint(path, map_location=device)
    spec, weights = state.get("model_spec"), state.get("model")
    if not isinstance(spec, dict) or not isinstance(weights, dict):
        raise CheckpointError(f"{what}: {path} holds no policy")
    try:
        return PolicySpec.from_dict(spec), weights
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{what}: {path} holds a policy of an unknown form ({first_line(exc)})"
        ) from None


def init_from(policy: ActorCritic, path: str, device: torch.device) -> None:
    """Load a saved policy's weights and normalizer into `policy` (model.init_from): one of the
    same architecture, or one whose actor lacks `policy`'s key group, grown into it
    (model.grow)."""
    spec, weights = load_policy_weights(path, device, "model.init_from")
    if is_growth(policy.spec, spec):
        try:
            weights = grow(policy.spec, policy.state_dict(), spec, weights)
        except ValueError as exc:
            raise CheckpointError(f"model.init_from: {path} {exc}") from None
    elif diff := spec_difference(policy.spec, spec):
        raise CheckpointError(
            f"model.init_from: {path} has a different {', '.join(diff)} than this config's policy"
        )
    policy.load_state_dict(weights)


def make_reference(
    cfg: Config, policy: ActorCritic, device: torch.device, resume: RunCheckpoint | None
) -> ActorCritic:
    """The frozen reference policy: a resumed run's own; else algorithm.reference_checkpoint,
    or a snapshot of `policy` as training starts (after model.init_from)."""
    saved = None if resume is None else resume.reference
    path = cfg.algorithm.reference_checkpoint
    if saved is not None:
        spec, weights = PolicySpec.from_dict(saved.spec), saved.model
    elif path is not None:
        spec, weights = load_policy_weights(path, device, "algorithm.reference_checkpoint")
        for key in ("obs_dim", "action_kind", "action_dim"):
            theirs, mine = getattr(spec, key), getattr(policy.spec, key)
            if theirs != mine:
                raise CheckpointError(
                    f"algorithm.reference_checkpoint: {path} has {key} {theirs!r}, "
                    f"this task needs {mine!r}"
                )
    else:
        spec, weights = policy.spec, policy.state_dict()
    ref = ActorCritic(spec).to(device)
    ref.load_state_dict(weights)
    ref.requires_grad_(False)
    return ref.eval()


def collector_settings(
    cfg: Config,
    envs: BatchedEnvs,
    policy: ActorCritic,
    device: torch.device,
    *,
    env_offset: int,
    world: int,
    reduce: Reduce | None,
    notes: TextIO | None,
    env_actions: Callable | None = None,
) -> CollectorSettings:
    """How one process's collector runs: where the policy acts (a device env's always in torch,
    a host env's where trainer.inference says), its micro-batches, its slice of the run's envs
    (env_offset of num_envs x world), its reductions and notes, and what the envs receive in
    place of the policy's actions (`env_actions`, a distillation's teacher acting)."""
    a, e = cfg.algorithm, cfg.env
    inference = (
        "device" if envs.on_device else inference_path(cfg.trainer.inference, policy, e.num_envs)
    )
    return CollectorSettings(
        device=device,
        inference=inference,
        micro_batch=a.rollout_micro_batch_size,
        forward_micro_batch=a.logprob_forward_micro_batch_size,
        env_offset=env_offset,
        total_envs=e.num_envs * world,
        reduce=reduce,
        keep_bootstrap_obs=a.recompute_advantages,
        notes=notes,
        env_actions=env_actions,
    )


def make_collector(
    envs: VecEnv | DeviceVecEnv,
    policy: ActorCritic,
    buffer: RolloutBuffer,
    reward_scaler: RewardScaler,
    settings: CollectorSettings,
) -> RolloutCollector:
    """The collector of one process's envs, by the kind the envs say they are: a device env's
    keeps the rollout on the device, a host env's stages it on the host."""
    if envs.on_device:
        return DeviceCollector(envs, policy, buffer, reward_scaler, settings)
    return Collector(envs, policy, buffer, reward_scaler, settings)


def make_in_reward_kl(
    cfg: Config,
    policy: ActorCritic,
    reference: ActorCritic | None,
    resume: RunCheckpoint | None,
    reduce: Reduce | None,
) -> InRewardKL | None:
    """The in-reward KL penalty (algorithm.use_kl_in_reward), with a resumed run's
    coefficient where the adaptive controller left it."""
    a = cfg.algorithm
    if not a.use_kl_in_reward:
        return None
    assert reference is not None
    coef = a.kl_ctrl.kl_coef
    if resume is not None and resume.kl_coef is not None:
        coef = resume.kl_coef
    return InRewardKL(a, policy, reference, coef, reduce)


def make_updater(
    cfg: Config,
    policy: ActorCritic,
    generator: torch.Generator,
    reference: ActorCritic | None,
    *,
    reduce: Reduce | None,
    notes: TextIO | None,
) -> PPOUpdate:
    """The PPO update of a run (compiled where trainer.compile says so), this process's part of
    it in a run of several; it keeps Adam's state. With `algorithm.symmetry` it learns from the
    env's mirror (one env is built to read it); with distill.objective ppo its loss adds the
    teachers' distillation loss."""
    d = cfg.distill
    distill = None
    if d.teachers and d.objective == "ppo":
        distill = DistillTerm(d.loss, d.huber_delta)
    mirror = None
    if cfg.algorithm.symmetry.enabled:
        mirror = load_mirror(cfg).to(policy.action_low.device)
    settings = UpdateSettings(
        cfg.algorithm,
        cfg.optim,
        compile=cfg.trainer.compile,
        reduce=reduce,
        notes=notes,
        world=distributed.world_size(),
        rank=distributed.rank(),
        mirror=mirror,
        distill=distill,
    )
    return PPOUpdate(policy, generator, settings, reference)


def compile_note(updater: PPOUpdate, policy: ActorCritic) -> str | None:
    """What to say before an update that compiles the gradient step (None: it will not)."""
    if not updater.step.will_compile():
        return None
    if policy.state_size:
        return (
            "compiling the recurrent update: 2-6 minutes the first time on a machine, less "
            "once torch's cache holds it (trainer.compile=false trains without compiling)"
        )
    return (
        "compiling the update: tens of seconds the first time on a machine, a few seconds "
        "once torch's cache holds it"
    )
