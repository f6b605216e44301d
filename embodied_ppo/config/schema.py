"""The configuration's schema: one typed dataclass per block, every key with its default and its
one-line meaning (docs/configuration.md is generated from them by scripts/config_reference.py).
The `model:` block is in `config.model_schema`, `distill:` and `finetune:` in
`config.distill_schema`, and `algorithm.symmetry` and `algorithm.rnd` in `config.auxiliary`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from embodied_ppo.config.auxiliary import RNDConfig, SymmetryConfig
from embodied_ppo.config.distill_schema import DistillConfig, FinetuneConfig
from embodied_ppo.config.keys import key as _key
from embodied_ppo.config.model_schema import ModelConfig
from embodied_ppo.core.types import ConfigDict


@dataclass(frozen=True)
class WrapperConfig:
    """One entry of `env.wrappers`: a Gymnasium wrapper and its keyword arguments."""

    name: str = _key("", "a class of `gymnasium.wrappers` (`FlattenObservation`) or `module:Class`")
    kwargs: dict = _key(dict, "keyword arguments of the wrapper")


@dataclass(frozen=True)
class EnvConfig:
    """The `env:` block."""

    id: str | None = _key(
        None,
        "Gymnasium id (required), or `module:EnvId` to import its module; backend mjlab: an "
        "mjlab task id",
    )
    entry_point: str | None = _key(
        None,
        "`module:name` of the callable that makes env.id's env (an Env class or a function "
        "returning one; env.kwargs are its arguments), registered under env.id where nothing "
        "else registers it; set from a factory given to the Python API, or recorded from an id "
        "registered with a class at run time",
    )
    num_envs: int = _key(8, "environments stepped together, per process (see `num_envs_scope`)")
    backend: Literal["sync", "async", "envpool", "mjlab"] = _key(
        "sync",
        "sync: stepped in this process; async: one subprocess per env; envpool: its C++ threads; "
        "mjlab: mjlab's MuJoCo Warp tasks, batched on the training device",
    )
    processes: int = _key(1, "sync backend: processes stepping the envs, this one included")
    threads: int | None = _key(
        1,
        "sync backend: threads stepping each process's envs; null: the usable cores, shared "
        "among the env processes (and a torchrun's processes on the host)",
    )
    batched: bool = _key(
        True,
        "sync backend: step the task's own vector env (its Gymnasium vector_entry_point, e.g. "
        "the quadruped's) over each process's envs, where it has one and no env.wrappers are "
        "given; false: one env object per env",
    )
    kwargs: dict = _key(
        dict,
        "keyword arguments of `gymnasium.make` (the task's own options); backend mjlab: fields "
        "of the task's env config",
    )
    imports: list[str] = _key(list, "modules imported before any env is made, in every process")
    wrappers: list[WrapperConfig] = _key(
        list, "Gymnasium wrappers around each env, in order (the first is innermost)"
    )
    max_episode_steps: int | None = _key(None, "time limit in steps; null: the registered one")
    random_episode_start: bool = _key(
        False,
        "backend mjlab: a new run starts each env at a random step of its first episode (uniform "
        "below the time limit), so the envs' time limits do not all fall on the same steps",
    )
    num_envs_scope: Literal["per_process", "global"] = _key(
        "per_process", "under torchrun: num_envs per process, or in all (split evenly)"
    )
    normalize_obs: bool = _key(
        True,
        "normalize observations by a running mean and variance kept inside the policy; a new "
        "run first acts one rollout (not trained on, not counted) for their first statistics",
    )
    clip_obs: float | None = _key(
        10.0, "clip the policy's input (normalized) to +-this; null: no clipping"
    )
    normalize_reward: bool = _key(
        True, "divide rewards by the running std of the discounted return"
    )
    clip_reward: float | None = _key(
        10.0, "clip the learner's reward (scaled) to +-this; null: no clipping"
    )


KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
KLType = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"]
CRITIC_FREE = ("grpo", "rloo", "reinforce_plus_plus")


@dataclass(frozen=True)
class KLCtrlConfig:
    """`algorithm.kl_ctrl:` the in-reward KL coefficient controller."""

    type: Literal["fixed", "adaptive"] = _key("fixed", "fixed coefficient, or adaptive control")
    kl_coef: float = _key(0.001, "(initial) coefficient of the in-reward KL penalty")
    target_kl: float = _key(0.1, "adaptive: target mean KL per step")
    horizon: int = _key(10000, "adaptive: horizon of the controller, in transitions")


@dataclass(frozen=True)
class AlgorithmConfig:
    """The `algorithm:` block; the first keys keep the source documents' names verbatim."""

    normalize_advantages: bool = _key(True, "standardize advantages over the whole rollout")
    group_size: int = _key(
        1, "envs per group of a critic-free estimator (reset with one seed); 1 with gae"
    )
    adv_type: Literal["gae", "grpo", "rloo", "reinforce_plus_plus"] = _key(
        "gae", "advantage estimator; the critic-free ones collect whole episodes"
    )
    loss_type: Literal["actor_critic", "actor"] = _key(
        "actor_critic", "actor_critic: policy and value loss; actor: policy loss only"
    )
    loss_agg_func: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = _key(
        "token-mean", "how per-step losses are averaged (token = one env step)"
    )
    rollout_micro_batch_size: int | None = _key(
        None, "at most this many envs per policy forward in collection; null: all"
    )
    logprob_forward_micro_batch_size: int | None = _key(
        None, "rows per forward when old log-probs are recomputed; null: all"
    )
    entropy_bonus: float = _key(0.0, "coefficient of the entropy term (>= 0)")
    clip_ratio_high: float = _key(0.2, "the ratio is clipped at 1 + clip_ratio_high")
    clip_ratio_low: float = _key(0.2, "the ratio is clipped at 1 - clip_ratio_low, in (0, 1)")
    clip_ratio_c: float | None = _key(None, "dual clip (> 1) for negative advantages; null: off")
    value_clip: float | None = _key(0.2, "value clipping range around the old value; null: off")
    gamma: float = _key(0.99, "discount factor, in [0, 1]")
    gae_lambda: float = _key(0.95, "GAE lambda, in [0, 1]")
    huber_delta: float | None = _key(10.0, "Huber delta of the value loss; null: squared error")
    rollout_steps: int = _key(256, "steps per env per iteration (T)")
    update_epochs: int = _key(10, "passes over the rollout per iteration")
    minibatch_size: int = _key(
        512,
        "transitions per gradient step, of every process together; must divide "
        "rollout_steps x num_envs (all processes' envs)",
    )
    minibatch_scope: Literal["global", "per_process"] = _key(
        "global",
        "under torchrun: minibatch_size is all processes' (global) or each process's "
        "(per_process: the gradient step takes minibatch_size x processes; runs saved by "
        "earlier versions, which meant this, resume with it)",
    )
    micro_batch_size: int | None = _key(
        None, "transitions per forward/backward inside a minibatch; null: all"
    )
    sequence_length: int | None = _key(
        None, "recurrent policies: steps per training chunk; null: whole rollouts"
    )
    value_loss_coef: float = _key(0.5, "weight of the value loss")
    recompute_old_logprobs: bool = _key(
        False, "recompute old log-probs after collection instead of using the stored ones"
    )
    recompute_advantages: bool = _key(
        False, "recompute values and GAE before every epoch after the first"
    )
    early_stop_kl: float | None = _key(
        None, "end the update at the first minibatch whose approx_kl exceeds this; null: off"
    )
    use_kl_loss: bool = _key(False, "add kl_loss_coef x KL(policy, reference) to the loss")
    kl_loss_coef: float = _key(0.001, "weight of the KL loss (>= 0)")
    kl_loss_type: KLType = _key("low_var_kl", "KL estimator of the loss")
    use_kl_in_reward: bool = _key(False, "subtract a KL penalty from every step's reward")
    kl_penalty: KLType = _key("kl", "KL estimator of the in-reward penalty")
    kl_ctrl: KLCtrlConfig = _key(KLCtrlConfig, "the in-reward KL coefficient's controller")
    reference_checkpoint: str | None = _key(
        None, "run or checkpoint of the frozen reference policy; null: the starting policy"
    )
    # Beside PPO's own terms (`config.auxiliary`): the critic on normalized returns, the
    # env's mirror symmetry, and an intrinsic reward for exploration.
    normalize_value: bool = _key(
        False,
        "train the critic on returns normalized by their running mean and std (its outputs "
        "scaled back for bootstrapping and logging)",
    )
    symmetry: SymmetryConfig = _key(SymmetryConfig, "learning from the env's declared mirror")
    rnd: RNDConfig = _key(RNDConfig, "random network distillation's intrinsic reward")


@dataclass(frozen=True)
class OptimConfig:
    """The `optim:` block."""

    lr: float = _key(3e-4, "Adam learning rate")
    schedule: Literal["constant", "linear", "adaptive"] = _key(
        "constant", "constant; linear: decays to 0; adaptive: follows approx_kl"
    )
    schedule_extension: Literal["continue", "rescale", "keep"] = _key(
        "continue",
        "linear schedule, from a resume that changes trainer.total_steps on: continue: from the "
        "last update's rate down to 0 at the new total; rescale: the decay of a run planned for "
        "the new total (a longer run's rate rises at the resume point); keep: the last rate",
    )
    desired_kl: float = _key(0.01, "adaptive schedule: the approx_kl it aims at")
    desired_kl_final: float | None = _key(
        None, "adaptive schedule: the approx_kl aimed at by the run's end, linearly from desired_kl"
    )
    lr_min: float = _key(1e-5, "adaptive schedule: lowest learning rate")
    lr_max: float = _key(1e-2, "adaptive schedule: highest learning rate")
    adam_eps: float = _key(1e-5, "Adam epsilon")
    max_grad_norm: float | None = _key(0.5, "clip the global gradient norm to this; null: off")


@dataclass(frozen=True)
class WandbConfig:
    """`trainer.wandb:` Weights & Biases logging (pip install 'embodied-ppo[wandb]')."""

    project: str | None = _key(None, "log to this Weights & Biases project as well; null: no W&B")
    entity: str | None = _key(None, "W&B team or user; null: your default")
    name: str | None = _key(None, "W&B run name; null: the run directory's name")
    mode: Literal["online", "offline"] = _key(
        "online", "online, or offline (written to `RUN_DIR/wandb/` to sync later)"
    )
    tags: list[str] = _key(list, "W&B tags")


@dataclass(frozen=True)
class TrainerConfig:
    """The `trainer:` block."""

    total_steps: int = _key(
        1_000_000, "environment steps to train (all processes); the last iteration may overshoot"
    )
    seed: int = _key(0, "seeds python, numpy, torch, minibatch shuffling and every env")
    device: str = _key("auto", "auto (cuda if available), cpu, cuda or cuda:N")
    run_dir: str | None = _key(
        None, "run directory; null: `runs/<config>-seed<seed>-<date>-<time>`"
    )
    log_interval: int | None = _key(
        1, "log metrics every this many iterations (and at the end); or log_interval_steps"
    )
    log_interval_steps: int | None = _key(
        None,
        "log metrics after the iteration that reaches each multiple of this many env steps (and "
        "at the end); given alone, it turns log_interval off",
    )
    checkpoint_interval: int | None = _key(
        10, "checkpoint every this many iterations (and at the end); or checkpoint_interval_steps"
    )
    checkpoint_interval_steps: int | None = _key(
        None,
        "checkpoint after the iteration that reaches each multiple of this many env steps (and at "
        "the end); given alone, it turns checkpoint_interval off",
    )
    keep_checkpoints: int | None = _key(
        None, "keep only the newest N `ckpt_<step>.pt` (`latest.pt`, `best.pt` stay); null: all"
    )
    torch_threads: int | None = _key(
        None,
        "torch threads of the update; null: every usable core where a gradient step's products "
        "are large (a recurrent policy's: one time step of the minibatch's sequences), else 1",
    )
    inference: Literal["auto", "host", "device"] = _key(
        "auto", "how collection runs the policy: host (numpy snapshot), device (torch), auto"
    )
    compile: bool = _key(
        True, "compile the update's gradient step with torch.compile; false: eager"
    )
    dist_backend: Literal["auto", "gloo", "nccl"] = _key(
        "auto", "torch.distributed backend; auto: nccl on cuda, gloo on cpu"
    )
    dist_timeout: float = _key(1800.0, "seconds a process waits for the others before it stops")
    eval_interval: int | None = _key(
        None,
        "evaluate every this many iterations and after the last, keeping `best.pt`; null (and "
        "eval_interval_steps null): no evaluation",
    )
    eval_interval_steps: int | None = _key(
        None,
        "evaluate after the iteration that reaches each multiple of this many env steps and "
        "after the last, instead of eval_interval",
    )
    eval_episodes: int = _key(10, "deterministic episodes per evaluation")
    video_interval: int | None = _key(
        None,
        "film the first episode of every this many evaluations (either interval's) and of the "
        "last; null: no videos",
    )
    wandb: WandbConfig = _key(WandbConfig, "Weights & Biases logging")


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # Distillation and what follows it: `config.distill_schema`.
    distill: DistillConfig = field(default_factory=DistillConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)

    def to_dict(self) -> ConfigDict:
        """Plain nested dict (YAML- and checkpoint-safe)."""
        return dataclasses.asdict(self)

    @property
    def batch_size(self) -> int:
        """Transitions per iteration of this process: rollout_steps x num_envs."""
        return self.algorithm.rollout_steps * self.env.num_envs

    def global_envs(self, world: int) -> int:
        """The envs of all `world` processes of a run together."""
        return (
            self.env.num_envs if self.env.num_envs_scope == "global" else self.env.num_envs * world
        )

    def global_minibatch(self, world: int) -> int:
        """Transitions per gradient step of all `world` processes together."""
        a = self.algorithm
        return a.minibatch_size * (world if a.minibatch_scope == "per_process" else 1)


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
