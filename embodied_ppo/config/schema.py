"""The configuration's schema: one typed dataclass per block, every key with its default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from embodied_ppo.core.types import ConfigDict


@dataclass(frozen=True)
class WrapperConfig:
    """One entry of `env.wrappers`: a Gymnasium wrapper and its keyword arguments."""

    name: str = ""
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EnvConfig:
    """The `env:` block."""

    # A registered Gymnasium id, or Gymnasium's "module:EnvId" (the module registers it).
    id: str | None = None
    num_envs: int = 8
    backend: Literal["sync", "async", "envpool"] = "sync"
    # sync backend: processes stepping the envs (this one included), and threads stepping each
    # process's envs (MuJoCo simulates without holding the GIL).
    processes: int = 1
    threads: int = 1
    kwargs: dict = field(default_factory=dict)
    # Modules imported before an env is made (in every process), e.g. to register ids.
    imports: list[str] = field(default_factory=list)
    # Applied in order around each env, innermost first.
    wrappers: list[WrapperConfig] = field(default_factory=list)
    max_episode_steps: int | None = None
    num_envs_scope: Literal["per_process", "global"] = "per_process"
    normalize_obs: bool = True
    clip_obs: float | None = 10.0
    normalize_reward: bool = True
    clip_reward: float | None = 10.0


@dataclass(frozen=True)
class ModelConfig:
    """The `model:` block."""

    share_backbone: bool = True
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu", "elu", "gelu", "silu", "leaky_relu"] = "tanh"
    head: Literal["auto", "gaussian", "categorical"] = "auto"
    log_std_init: float = 0.0
    state_dependent_std: bool = False
    init: Literal["orthogonal", "torch_default"] = "orthogonal"
    init_from: str | None = None
    # Dict observations: the keys the actor reads (null: all) and those the critic reads (null:
    # the actor's); image keys go through a CNN with these channels, kernels and strides (null:
    # 8/4, 4/2, then 3/1), whose last map is flattened or reduced to keypoints by a spatial
    # softmax, to cnn_features features.
    actor_obs_keys: list[str] | None = None
    critic_obs_keys: list[str] | None = None
    cnn_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    cnn_kernels: list[int] | None = None
    cnn_strides: list[int] | None = None
    cnn_head: Literal["flatten", "spatial_softmax"] = "flatten"
    cnn_features: int = 128
    # A recurrent core between the observation encoders and the MLP (the actor's, and a
    # separate critic's own): null (none), lstm or gru, with its state size and layers.
    recurrent: Literal["lstm", "gru"] | None = None
    recurrent_size: int = 128
    recurrent_layers: int = 1


KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")


KLType = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"]


CRITIC_FREE = ("grpo", "rloo", "reinforce_plus_plus")


@dataclass(frozen=True)
class KLCtrlConfig:
    """`algorithm.kl_ctrl:` the in-reward KL coefficient controller."""

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass(frozen=True)
class AlgorithmConfig:
    """The `algorithm:` block; the first keys keep the source documents' names verbatim."""

    normalize_advantages: bool = True
    group_size: int = 1
    adv_type: Literal["gae", "grpo", "rloo", "reinforce_plus_plus"] = "gae"
    loss_type: Literal["actor_critic", "actor"] = "actor_critic"
    loss_agg_func: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    rollout_micro_batch_size: int | None = None
    logprob_forward_micro_batch_size: int | None = None
    entropy_bonus: float = 0.0
    clip_ratio_high: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_c: float | None = None
    value_clip: float | None = 0.2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    huber_delta: float | None = 10.0
    # Our additions.
    rollout_steps: int = 256
    update_epochs: int = 10
    minibatch_size: int = 512
    micro_batch_size: int | None = None
    # Recurrent policies: the update trains on chunks of this many steps of one env, each
    # starting from the state stored at its first step (null: the whole rollout of each env).
    sequence_length: int | None = None
    value_loss_coef: float = 0.5
    recompute_old_logprobs: bool = False
    # Values, advantages and returns again before every epoch after the first, under the
    # critic as it is then (with the rollout's own rewards and bootstrap observations).
    recompute_advantages: bool = False
    early_stop_kl: float | None = None
    # KL control against a frozen reference policy.
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: KLType = "low_var_kl"
    use_kl_in_reward: bool = False
    kl_penalty: KLType = "kl"
    kl_ctrl: KLCtrlConfig = field(default_factory=KLCtrlConfig)
    reference_checkpoint: str | None = None


@dataclass(frozen=True)
class OptimConfig:
    """The `optim:` block."""

    lr: float = 3e-4
    schedule: Literal["constant", "linear", "adaptive"] = "constant"
    desired_kl: float = 0.01
    lr_min: float = 1e-5
    lr_max: float = 1e-2
    adam_eps: float = 1e-5
    max_grad_norm: float | None = 0.5


@dataclass(frozen=True)
class WandbConfig:
    """`trainer.wandb:` Weights & Biases logging (pip install 'embodied-ppo[wandb]')."""

    project: str | None = None  # null: no W&B logging
    entity: str | None = None
    name: str | None = None  # null: the run directory's name
    mode: Literal["online", "offline"] = "online"
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TrainerConfig:
    """The `trainer:` block."""

    total_steps: int = 1_000_000
    seed: int = 0
    device: str = "auto"
    run_dir: str | None = None
    log_interval: int = 1
    checkpoint_interval: int = 10
    # Keep the newest this many ckpt_<step>.pt (latest.pt and best.pt stay); null: all.
    keep_checkpoints: int | None = None
    torch_threads: int | None = None
    inference: Literal["auto", "host", "device"] = "auto"
    # Compile the update's gradient step (falls back to eager, with a note, where it cannot).
    compile: bool = True
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    dist_timeout: float = 1800.0
    # Evaluation during training: deterministic episodes every eval_interval iterations (and
    # after the last); null turns it off. A video of the first episode every video_interval
    # evaluations (null: no videos).
    eval_interval: int | None = None
    eval_episodes: int = 10
    video_interval: int | None = None
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> ConfigDict:
        """Plain nested dict (YAML- and checkpoint-safe)."""
        return dataclasses.asdict(self)

    @property
    def batch_size(self) -> int:
        """Transitions per iteration: rollout_steps x num_envs."""
        return self.algorithm.rollout_steps * self.env.num_envs


def with_values(cfg: Config, **values: object) -> Config:
    """A copy of `cfg` with keys changed, by dotted path with `__` for the dots (a Config is
    never changed in place): `with_values(cfg, trainer__run_dir="runs/x")`."""
    out = cfg
    for path, value in values.items():
        out = _replace(out, path.split("__"), value)
    return out


def _replace(block: object, parts: list[str], value: object) -> object:
    if len(parts) == 1:
        return dataclasses.replace(block, **{parts[0]: value})
    child = getattr(block, parts[0])
    return dataclasses.replace(block, **{parts[0]: _replace(child, parts[1:], value)})
