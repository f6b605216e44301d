"""The training loop: collect -> advantages -> update -> log -> checkpoint.

This is the only place that knows the order of the steps.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_ppo import __version__, distributed
from embodied_ppo.advantages import (
    discounted_returns,
    episode_returns,
    gae,
    grpo,
    masked_normalize,
    reinforce_plus_plus,
    rloo,
)
from embodied_ppo.buffer import RolloutBuffer
from embodied_ppo.checkpoint import checkpoints_dir, load_checkpoint, save_checkpoint, trim_metrics
from embodied_ppo.collector import Collector
from embodied_ppo.config import CRITIC_FREE, Config, validate
from embodied_ppo.envs import (
    SpaceInfo,
    check_episodic,
    env_seeds,
    group_seeds,
    make_env,
    noise_seed,
)
from embodied_ppo.errors import CheckpointError, ConfigError, TrainingError
from embodied_ppo.host_update import make_updater
from embodied_ppo.losses import adaptive_kl_coef, explained_variance, kl_estimate
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.normalizer import RewardScaler
from embodied_ppo.ppo import BATCH_FIELDS, NonFiniteError, learning_rate, make_optimizer


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu; an unavailable cuda is a config error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.device: got {name!r} but no CUDA device is available; use auto or cpu"
            )
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"trainer.device: got {name!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    return torch.device(name)


def model_spec(cfg: Config, info: SpaceInfo) -> dict[str, Any]:
    """The plain-dict architecture description that rebuilds the policy module."""
    m, e = cfg.model, cfg.env
    if m.head != "auto" and m.head != info.action_kind:
        raise ConfigError(
            f"model.head: got {m.head!r} but {e.id} needs {info.action_kind!r} for its action space; use auto"
        )
    return {
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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(shuffle: torch.Generator) -> dict[str, Any]:
    """Every RNG the loop draws from, as tensors and plain values (checkpoint-safe)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
        "shuffle": shuffle.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], shuffle: torch.Generator) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached"],
        )
    )
    torch.set_rng_state(state["torch"])
    shuffle.set_state(state["shuffle"])
    if (
        "cuda" in state
        and torch.cuda.is_available()
        and len(state["cuda"]) == torch.cuda.device_count()
    ):
        torch.cuda.set_rng_state_all(state["cuda"])


class MetricsLogger:
    """metrics.jsonl (one object per logged iteration) plus TensorBoard event files."""

    def __init__(self, run_dir: Path, start_step: int = 0) -> None:
        from torch.utils.tensorboard import (
            SummaryWriter,  # imported here: deployments never need it
        )

        # A resumed run repeats the iterations after its checkpoint (at `start_step`): drop
        # what they logged before the interruption, in metrics.jsonl and in TensorBoard.
        trim_metrics(run_dir / "metrics.jsonl", start_step)
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=start_step + 1)
        self.file = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (lives with the logger)

    def log(
        self, global_step: int, iteration: int, wall_time: float, scalars: dict[str, float]
    ) -> None:
        record: dict[str, Any] = {
            "global_step": global_step,
            "iteration": iteration,
            "time": round(wall_time, 3),
        }
        for tag, value in scalars.items():
            finite = value is not None and math.isfinite(value)
            record[tag] = value if finite else None
            if finite:
                self.writer.add_scalar(tag, value, global_step)
        self.file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self.writer.close()
        self.file.close()


class Progress:
    """A live one-line progress display on a terminal; plain periodic lines otherwise."""

    def __init__(self, total_steps: int, stream: Any = None, period: float = 10.0) -> None:
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.period = total_steps, period
        self.last_print = -math.inf

    def update(self, step: int, sps: float, mean_return: float | None, final: bool = False) -> None:
        now = time.monotonic()
        if not self.tty and not final and now - self.last_print < self.period:
            return
        self.last_print = now
        eta = (self.total - step) / sps if sps > 0 else math.inf
        ret = "n/a" if mean_return is None else f"{mean_return:.1f}"
        line = (
            f"step {step:,}/{self.total:,} ({100.0 * min(step, self.total) / self.total:5.1f}%) | "
            f"{sps:,.0f} steps/s | return {ret} | ETA {_duration(eta)}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class Trainer:
    """Owns the envs, policy, buffer and optimizer of one run and trains it."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        resume: dict[str, Any] | None = None,
        progress_stream: Any = None,
    ) -> None:
        distributed.init(cfg.trainer.device, cfg.trainer.dist_backend, cfg.trainer.dist_timeout)
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.main = self.rank == 0  # the one process that writes logs, checkpoints and videos
        cfg = self._per_process(cfg)
        self.cfg, self.run_dir = cfg, Path(run_dir)
        # name -> object with state_dict() / load_state_dict(): saved with every checkpoint and
        # restored on resume. Register in __init__ before the resume block (register_state).
        self.stateful: dict[str, Any] = {}
        self.device = distributed.local_device(resolve_device(cfg.trainer.device))
        if cfg.trainer.torch_threads is not None:
            torch.set_num_threads(cfg.trainer.torch_threads)
        elif self.device.type == "cpu":
            # The learner's small matrices gain nothing from intra-op threads, and threads that
            # spin while env stepping (or other processes) hold the cores cost many times that.
            torch.set_num_threads(1)
        seed_everything(cfg.trainer.seed)
        a, e = cfg.algorithm, cfg.env

        # Built before the training envs: with videos it picks the headless GL backend first.
        self.evaluator = None
        if cfg.trainer.eval_interval is not None and self.main:
            from embodied_ppo.evaluate import PeriodicEvaluator

            self.evaluator = PeriodicEvaluator(cfg, self.run_dir)
        # This process steps global envs offset .. offset + N - 1 (env k is the same env whatever
        # the number of processes).
        self.env_offset = self.rank * e.num_envs
        self.envs = make_env(e, cfg.trainer.seed, self.env_offset)
        self.info = self.envs.info
        self.policy = ActorCritic(model_spec(cfg, self.info)).to(self.device)
        gaussian = self.info.action_kind == "gaussian"
        self.buffer = RolloutBuffer(
            a.rollout_steps,
            e.num_envs,
            self.info.obs_dim,
            (self.info.action_dim,) if gaussian else (),
            torch.float32 if gaussian else torch.int64,
            self.device,
        )
        self.reward_scaler = RewardScaler(
            e.num_envs, a.gamma, e.normalize_reward, e.clip_reward
        ).to(self.device)
        self.collector = Collector(
            self.envs,
            self.policy,
            self.buffer,
            self.reward_scaler,
            self.device,
            a.rollout_micro_batch_size,
            cfg.trainer.inference,
            env_offset=self.env_offset,
            total_envs=e.num_envs * self.world,
        )
        self.reduce = distributed.all_reduce_sum if self.world > 1 else None
        self.collector.reduce = self.reduce
        check_episodic(cfg)
        if cfg.model.init_from is not None:
            self._init_from(cfg.model.init_from)
        distributed.broadcast_module(self.policy)  # one set of weights on every process
        self.reference = self._make_reference() if (a.use_kl_loss or a.use_kl_in_reward) else None
        self.kl_coef = (
            a.kl_ctrl.kl_coef
        )  # in-reward KL coefficient (adapted when kl_ctrl.type is adaptive)
        self.optimizer = make_optimizer(self.policy, cfg.optim)
        self.shuffle = torch.Generator().manual_seed(cfg.trainer.seed)
        self.updater = make_updater(
            self.policy,
            a,
            cfg.optim,
            self.optimizer,
            self.shuffle,
            self.reference,
            cfg.trainer.update,
            cfg.trainer.compile,
        )
        self.global_step, self.iteration = 0, 0
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.last_checkpoint: Path | None = None
        self.saved_iteration = -1  # the iteration the last checkpoint holds
        self.resume_note: str | None = None  # why a resume could not be exact, if it was not
        if resume is not None:
            resume = self._local_view(resume)
            self._restore(resume)
        self._start_envs(resume)
        self.progress = Progress(
            cfg.trainer.total_steps,
            progress_stream if self.main else open(os.devnull, "w"),  # noqa: SIM115
        )

    # ----------------------------------------------------------------------------------- loop
    def train(self, should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Train to trainer.total_steps; returns a summary of the last iteration.

        `should_stop` (e.g. a signals.GracefulStop) is polled between iterations, the points
        where the whole run state can be saved: once it returns True the run writes a checkpoint
        (unless it just did) and returns early with "stopped": True in the summary.
        """
        cfg, a = self.cfg, self.cfg.algorithm
        total = cfg.trainer.total_steps
        episodic = a.adv_type in CRITIC_FREE
        logger = MetricsLogger(self.run_dir, self.global_step) if self.main else None
        start, start_step = time.perf_counter(), self.global_step
        scalars: dict[str, float] = {}
        stopped = False
        try:
            while self.global_step < total:
                if should_stop is not None and self._agree(should_stop()):
                    if self.saved_iteration != self.iteration:
                        self.save()
                    stopped = True
                    break
                lr = learning_rate(cfg.optim, self.global_step / total, self.updater.lr)
                self.updater.set_lr(lr)

                t0 = time.perf_counter()
                seeds = (
                    group_seeds(
                        cfg.trainer.seed,
                        cfg.env.num_envs,
                        a.group_size,
                        self.iteration,
                        self.env_offset,
                    )
                    if episodic
                    else None
                )
                try:
                    stats = self.collector.collect(
                        seeds, noise_seed(cfg.trainer.seed, self.iteration)
                    )
                except TrainingError as exc:  # an env failed or returned NaN/Inf
                    raise TrainingError(
                        f"iteration {self.iteration}: {exc}; last good checkpoint: {self._last_good()}"
                    ) from None
                t1 = time.perf_counter()

                buf = self.buffer
                batch = buf.flat(*BATCH_FIELDS)
                kl_scalars = self._kl_in_reward(batch) if a.use_kl_in_reward else {}
                self._advantages()
                if a.recompute_old_logprobs:
                    batch["logprobs"] = self._recompute_logprobs(batch["obs"], batch["actions"])
                try:
                    metrics = self.updater.update(batch, buf.num_steps)
                except NonFiniteError as exc:
                    last = str(self.last_checkpoint) if self.last_checkpoint else "none written yet"
                    raise TrainingError(
                        f"iteration {self.iteration}: {exc}; the weights were not updated; last good checkpoint: {last}"
                    ) from None
                self._merge_obs_statistics()
                t2 = time.perf_counter()

                if self.world > 1:
                    stats = self._gather_stats(stats)
                self.global_step += stats.steps
                self.iteration += 1
                self.recent_returns.extend(stats.episode_returns)
                sps = (self.global_step - start_step) / max(time.perf_counter() - start, 1e-9)
                scalars = self._scalars(stats, metrics, lr, sps, t1 - t0, t2 - t1)
                scalars.update(kl_scalars)
                final = self.global_step >= total
                # Periodic work also runs after the final iteration ("iteration == last").
                num_iterations = self.iteration if final else -1
                evaluated = self.evaluator is not None and self.evaluator.due(
                    self.iteration, num_iterations
                )
                if evaluated:
                    scalars.update(self.evaluator.evaluate(self, num_iterations, logger.writer))
                if logger is not None and (
                    self.iteration % cfg.trainer.log_interval == 0 or final or evaluated
                ):
                    logger.log(
                        self.global_step, self.iteration, time.perf_counter() - start, scalars
                    )
                if self.iteration % cfg.trainer.checkpoint_interval == 0 or final:
                    self.save()
                self.progress.update(self.global_step, sps, self.mean_recent_return(), final=final)
        finally:
            if logger is not None:
                logger.close()
            self.envs.close()
            if self.evaluator is not None:
                self.evaluator.close()
        # The processes of a distributed run leave training together, so that none tears
        # down its process group (at exit) while another is still communicating.
        distributed.barrier()
        return {
            "global_step": self.global_step,
            "iteration": self.iteration,
            "stopped": stopped,
            **scalars,
        }

    def _per_process(self, cfg: Config) -> Config:
        """The config one process runs: env.num_envs_scope global splits num_envs over ranks."""
        if cfg.env.num_envs_scope != "global" or self.world == 1:
            return cfg
        e = cfg.env
        if e.num_envs % self.world:
            raise ConfigError(
                f"env.num_envs: got {e.num_envs} with num_envs_scope global, expected a multiple "
                f"of the {self.world} processes"
            )
        local = copy.deepcopy(cfg)
        local.env.num_envs = e.num_envs // self.world
        return validate(local)

    def _agree(self, flag: bool) -> bool:
        """True on every process as soon as one process says so (graceful stop in lockstep)."""
        if self.world == 1:
            return flag
        return bool(distributed.sum_scalars(float(flag))[0] > 0)

    def _gather_stats(self, stats: Any) -> Any:
        """Every process's finished episodes and steps, on every process."""
        parts = distributed.gather_objects(
            (stats.episode_returns, stats.episode_lengths, stats.steps)
        )
        stats.episode_returns = [r for p in parts for r in p[0]]
        stats.episode_lengths = [n for p in parts for n in p[1]]
        stats.steps = sum(p[2] for p in parts)
        return stats

    def _merge_obs_statistics(self) -> None:
        """Merge this rollout's observations into the policy's normalizer (Rule 2).

        Done after the update, so collection, the stored log-probs and values, and the update of
        one iteration all see the same normalization (the first ratio of an update is exactly 1).
        """
        norm = self.policy.obs_normalizer
        if norm.enabled:
            buf = self.buffer
            obs = buf.obs.reshape(buf.size, -1)
            norm.update(
                obs if bool(buf.mask.all()) else obs[buf.mask.reshape(-1).bool()], self.reduce
            )

    def _advantages(self) -> None:
        """Fill buffer.advantages and buffer.returns with the configured estimator."""
        a, buf = self.cfg.algorithm, self.buffer
        if a.adv_type == "gae":
            adv, ret = gae(
                buf.rewards,
                buf.values,
                buf.next_values,
                buf.terminated,
                buf.ends,
                a.gamma,
                a.gae_lambda,
            )
        else:
            # Critic-free estimators on episodic rollouts; returns-to-go are the value targets
            # when loss_type is actor_critic.
            ret = discounted_returns(buf.rewards, buf.mask, a.gamma)
            if a.adv_type == "reinforce_plus_plus":
                adv = reinforce_plus_plus(buf.rewards, buf.mask, a.gamma, self.reduce)
            else:
                scores = episode_returns(buf.rewards, buf.mask)  # (N,)
                per_env = (
                    grpo(scores, a.group_size)
                    if a.adv_type == "grpo"
                    else rloo(scores, a.group_size)
                )
                adv = per_env.unsqueeze(0) * buf.mask  # broadcast over each episode's steps
        buf.returns.copy_(ret)
        # Over the whole batch: every process's transitions together (Rule 7).
        buf.advantages.copy_(
            masked_normalize(adv, buf.mask, reduce=self.reduce) if a.normalize_advantages else adv
        )

    def _chunks(self, size: int) -> list[slice]:
        chunk = self.cfg.algorithm.logprob_forward_micro_batch_size or size
        return [slice(i, i + chunk) for i in range(0, size, chunk)]

    @torch.no_grad()
    def _kl_in_reward(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Subtract kl_coef * KL(behaviour || reference) from each step's reward; adapt the coefficient."""
        a, buf = self.cfg.algorithm, self.buffer
        assert self.reference is not None
        obs, actions = batch["obs"], batch["actions"]
        parts = []
        for sl in self._chunks(obs.shape[0]):
            ref_dist, _ = self.reference(obs[sl])
            dist = self.policy(obs[sl])[0] if a.kl_penalty == "full" else None
            parts.append(
                kl_estimate(
                    a.kl_penalty,
                    batch["logprobs"][sl],
                    ref_dist.log_prob(actions[sl]),
                    dist,
                    ref_dist,
                )
            )
        kl = torch.cat(parts).reshape(buf.rewards.shape)  # (T, N)
        coef = self.kl_coef
        buf.rewards.sub_(coef * kl)
        n, kl_sum = buf.mask.sum(), (kl * buf.mask).sum()
        if self.reduce is not None:  # the mean over every process's transitions
            n, kl_sum = distributed.sum_scalars(n, kl_sum, device=kl.device)
        mean_kl = float(kl_sum / n)
        if a.kl_ctrl.type == "adaptive":
            self.kl_coef = adaptive_kl_coef(
                coef, mean_kl, a.kl_ctrl.target_kl, int(n), a.kl_ctrl.horizon
            )
        return {"charts/kl_in_reward": mean_kl, "charts/kl_coef": coef}

    def _init_from(self, path: str) -> None:
        """Start from a saved policy's weights and normalizer (fine-tuning)."""
        state = load_checkpoint(path, map_location=self.device)
        spec = state.get("model_spec", {})
        diff = sorted(
            k
            for k in set(spec) | set(self.policy.spec)
            if k != "env_id" and spec.get(k) != self.policy.spec.get(k)
        )
        if diff:
            raise CheckpointError(
                f"model.init_from: {path} has a different {', '.join(diff)} than this config's policy"
            )
        self.policy.load_state_dict(state["model"])

    def _make_reference(self) -> ActorCritic:
        """The frozen reference: algorithm.reference_checkpoint, or a snapshot of the policy now."""
        path = self.cfg.algorithm.reference_checkpoint
        if path is None:
            ref = copy.deepcopy(self.policy)
        else:
            state = load_checkpoint(path, map_location=self.device)
            spec = state.get("model_spec", {})
            for key in ("obs_dim", "action_kind", "action_dim"):
                if spec.get(key) != self.policy.spec[key]:
                    raise CheckpointError(
                        f"algorithm.reference_checkpoint: {path} has {key} {spec.get(key)!r}, this task needs {self.policy.spec[key]!r}"
                    )
            ref = ActorCritic(spec).to(self.device)
            ref.load_state_dict(state["model"])
        ref.requires_grad_(False)
        return ref.eval()

    def _recompute_logprobs(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Old log-probs under the current (pre-update) policy, in chunks of logprob_forward_micro_batch_size."""
        chunk = self.cfg.algorithm.logprob_forward_micro_batch_size or obs.shape[0]
        with torch.no_grad():
            return torch.cat(
                [
                    self.policy.evaluate(obs[i : i + chunk], actions[i : i + chunk])[0]
                    for i in range(0, obs.shape[0], chunk)
                ]
            )

    def _scalars(
        self,
        stats: Any,
        metrics: dict[str, float],
        lr: float,
        sps: float,
        t_collect: float,
        t_update: float,
    ) -> dict[str, float]:
        buf = self.buffer
        out: dict[str, float] = {}
        if stats.episode_returns:
            out["charts/episodic_return"] = float(np.mean(stats.episode_returns))
            out["charts/episodic_length"] = float(np.mean(stats.episode_lengths))
        out["charts/episodes"] = float(len(stats.episode_returns))
        out["charts/SPS"] = sps
        out["charts/learning_rate"] = lr
        out["charts/collect_time"] = t_collect
        out["charts/update_time"] = t_update
        if self.cfg.env.normalize_reward:
            out["charts/reward_scale_std"] = float(torch.sqrt(self.reward_scaler.stats.var))
        for name, value in metrics.items():
            out[f"losses/{name}"] = value
        out["losses/explained_variance"] = float(
            explained_variance(buf.values.flatten(), buf.returns.flatten(), buf.mask.flatten())
        )
        return out

    def mean_recent_return(self) -> float | None:
        return float(np.mean(self.recent_returns)) if self.recent_returns else None

    # ------------------------------------------------------------------------ checkpointing
    def state(self) -> dict[str, Any]:
        """Everything needed to continue this run, as tensors and plain values."""
        return {
            "package_version": __version__,
            "config": self.cfg.to_dict(),
            "model_spec": self.policy.spec,
            "model": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict(),
            "global_step": self.global_step,
            "iteration": self.iteration,
            "recent_returns": list(self.recent_returns),
            "rng": rng_state(self.shuffle),
            "kl_coef": self.kl_coef,
            "reference": None
            if self.reference is None
            else {"spec": self.reference.spec, "model": self.reference.state_dict()},
            "stateful": {name: obj.state_dict() for name, obj in self.stateful.items()},
            # Where the envs stand mid-episode and what the policy acts on next (exact resume).
            "envs": self.envs.get_state(),
            "collector_obs": None if self.collector.obs is None else self.collector.obs.cpu(),
        }

    def register_state(self, name: str, obj: Any) -> None:
        """Save `obj.state_dict()` with every checkpoint and load it back on resume."""
        self.stateful[name] = obj

    def save(self) -> Path:
        state = self.state()
        if self.world > 1:
            # What differs between processes travels per rank; process 0 writes the file.
            local = {key: state[key] for key in self._PER_RANK}
            state["ranks"] = distributed.gather_objects(local)
            state["world_size"] = self.world
        error = None
        if self.main:
            try:
                path = save_checkpoint(self.run_dir, state, self.global_step)
            except OSError as exc:  # disk full, permissions: stop rather than train unprotected
                error = (
                    f"iteration {self.iteration}: cannot write a checkpoint to "
                    f"{checkpoints_dir(self.run_dir)} ({exc.strerror or exc}); "
                    f"last good checkpoint: {self._last_good()}"
                )
                path = None
        else:
            path = None
        path, error = distributed.broadcast_object((str(path) if path else None, error))
        if error is not None:
            raise TrainingError(error)
        self.last_checkpoint, self.saved_iteration = Path(path), self.iteration
        return self.last_checkpoint

    # Entries of a checkpoint that belong to one process of a distributed run.
    _PER_RANK = ("envs", "collector_obs", "rng", "reward_scaler")

    def _local_view(self, state: dict[str, Any]) -> dict[str, Any]:
        """The checkpoint as this process should read it (its own envs, RNG and reward returns)."""
        ranks = state.get("ranks")
        saved_world = int(state.get("world_size", 1))
        if ranks is None and saved_world == self.world:
            return state
        view = dict(state)
        if ranks is not None and saved_world == self.world:
            view.update(ranks[self.rank])
            return view
        # Another number of processes: weights, optimizer and statistics carry over; the envs
        # start fresh, deterministic episodes (their states belong to another split).
        view["envs"] = view["collector_obs"] = None
        self.resume_note = (
            f"the checkpoint was written by {saved_world} process(es), this run has {self.world}"
        )
        return view

    def _last_good(self) -> str:
        return str(self.last_checkpoint) if self.last_checkpoint else "none written yet"

    def _start_envs(self, resume: dict[str, Any] | None) -> None:
        """Reset the envs; on resume, put them back mid-episode where the checkpoint left them.

        Envs whose state cannot be captured (see env_state) start fresh episodes instead, seeded
        from the run seed and the iteration: deterministic, but not the uninterrupted run.
        """
        if resume is None:
            self.collector.reset()
            return
        e = self.cfg.env
        fresh_seeds = env_seeds(self.cfg.trainer.seed, e.num_envs, generation=self.iteration)
        self.collector.reset(fresh_seeds)
        saved = resume.get("envs")
        obs = resume.get("collector_obs")
        if saved is None or obs is None:
            reason = self.resume_note or "the checkpoint holds no environment state"
        else:
            reason = self.envs.set_state(saved)
            if reason is None:
                # Where the collector keeps it (host or device): where reset() just put it.
                self.collector.obs = obs.to(self.collector.obs.device)
                return
            if saved["members"] is not None:
                self.collector.reset(fresh_seeds)  # undo a partial restore
        self.envs.steps = self.global_step // e.num_envs
        self.reward_scaler.returns.zero_()  # the episodes it was discounting are gone
        self.resume_note = f"environments start fresh episodes ({reason})"

    def _restore(self, state: dict[str, Any]) -> None:
        if state.get("model_spec") != self.policy.spec:
            raise CheckpointError(
                "checkpoint was written for a different environment or architecture than this config"
            )
        try:
            self.policy.load_state_dict(state["model"])
            # A copy: Optimizer.load_state_dict keeps the given tensors, and training would
            # then change the caller's checkpoint dict in place.
            self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
            self.reward_scaler.load_state_dict(state["reward_scaler"])
            set_rng_state(state["rng"], self.shuffle)
            for name, obj in self.stateful.items():
                if name in state.get("stateful", {}):
                    obj.load_state_dict(state["stateful"][name])
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"checkpoint does not match this run: {str(exc).splitlines()[0]}"
            ) from None
        self.global_step = int(state["global_step"])
        self.iteration = int(state["iteration"])
        self.saved_iteration = self.iteration
        latest = checkpoints_dir(self.run_dir) / f"ckpt_{self.global_step}.pt"
        self.last_checkpoint = latest if latest.is_file() else None
        self.recent_returns.extend(state.get("recent_returns", []))
        self.kl_coef = float(state.get("kl_coef", self.kl_coef))
        ref = state.get("reference")
        if self.reference is not None and ref is not None:
            # The reference snapshot of the original start, not of the resumed weights.
            self.reference = ActorCritic(ref["spec"]).to(self.device)
            self.reference.load_state_dict(ref["model"])
            self.reference.requires_grad_(False).eval()
            self.updater.reference = self.reference
