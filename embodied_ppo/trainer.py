"""The training loop: collect -> advantages -> update -> log -> checkpoint.

This is the only place that knows the order of the steps.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_ppo import __version__
from embodied_ppo.advantages import gae, normalize
from embodied_ppo.buffer import RolloutBuffer
from embodied_ppo.checkpoint import save_checkpoint
from embodied_ppo.collector import Collector
from embodied_ppo.config import Config
from embodied_ppo.envs import SpaceInfo, VecEnv, env_seeds
from embodied_ppo.errors import CheckpointError, ConfigError, TrainingError
from embodied_ppo.losses import explained_variance
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.normalizer import RewardScaler
from embodied_ppo.ppo import BATCH_FIELDS, NonFiniteError, PPOUpdate, learning_rate, make_optimizer


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

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import (
            SummaryWriter,  # imported here: deployments never need it
        )

        self.writer = SummaryWriter(log_dir=str(run_dir))
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
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.device = resolve_device(cfg.trainer.device)
        if cfg.trainer.torch_threads is not None:
            torch.set_num_threads(cfg.trainer.torch_threads)
        seed_everything(cfg.trainer.seed)
        a, e = cfg.algorithm, cfg.env

        # Built before the training envs: with videos it picks the headless GL backend first.
        self.evaluator = None
        if cfg.trainer.eval_interval is not None:
            from embodied_ppo.evaluate import PeriodicEvaluator

            self.evaluator = PeriodicEvaluator(cfg, self.run_dir)
        self.envs = VecEnv(e, cfg.trainer.seed)
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
        )
        self.optimizer = make_optimizer(self.policy, cfg.optim)
        self.shuffle = torch.Generator().manual_seed(cfg.trainer.seed)
        self.updater = PPOUpdate(self.policy, a, cfg.optim, self.optimizer, self.shuffle)
        self.global_step, self.iteration = 0, 0
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.last_checkpoint: Path | None = None
        if resume is not None:
            self._restore(resume)
        # A fresh run resets with the run's seeds; a resumed one with seeds of its iteration.
        self.collector.reset(
            None
            if self.iteration == 0
            else env_seeds(cfg.trainer.seed, e.num_envs, generation=self.iteration)
        )
        self.progress = Progress(cfg.trainer.total_steps, progress_stream)

    # ----------------------------------------------------------------------------------- loop
    def train(self) -> dict[str, Any]:
        """Train to trainer.total_steps; returns a summary of the last iteration."""
        cfg, a = self.cfg, self.cfg.algorithm
        num_iterations = cfg.num_iterations
        logger = MetricsLogger(self.run_dir)
        start, start_step = time.perf_counter(), self.global_step
        scalars: dict[str, float] = {}
        try:
            while self.iteration < num_iterations:
                lr = learning_rate(cfg.optim, self.iteration, num_iterations)
                self.updater.set_lr(lr)

                t0 = time.perf_counter()
                stats = self.collector.collect()
                t1 = time.perf_counter()

                buf = self.buffer
                adv, ret = gae(
                    buf.rewards,
                    buf.values,
                    buf.next_values,
                    buf.terminated,
                    buf.ends,
                    a.gamma,
                    a.gae_lambda,
                )
                buf.returns.copy_(ret)
                buf.advantages.copy_(normalize(adv) if a.normalize_advantages else adv)
                batch = buf.flat(*BATCH_FIELDS)
                if a.recompute_old_logprobs:
                    batch["logprobs"] = self._recompute_logprobs(batch["obs"], batch["actions"])
                try:
                    metrics = self.updater.update(batch)
                except NonFiniteError as exc:
                    last = str(self.last_checkpoint) if self.last_checkpoint else "none written yet"
                    raise TrainingError(
                        f"iteration {self.iteration}: {exc}; the weights were not updated; last good checkpoint: {last}"
                    ) from None
                t2 = time.perf_counter()

                self.global_step += cfg.batch_size
                self.iteration += 1
                self.recent_returns.extend(stats.episode_returns)
                sps = (self.global_step - start_step) / max(time.perf_counter() - start, 1e-9)
                scalars = self._scalars(stats, metrics, lr, sps, t1 - t0, t2 - t1)
                evaluated = self.evaluator is not None and self.evaluator.due(self.iteration, num_iterations)
                if evaluated:
                    scalars.update(self.evaluator.evaluate(self, num_iterations, logger.writer))
                if (
                    self.iteration % cfg.trainer.log_interval == 0
                    or self.iteration == num_iterations
                    or evaluated
                ):
                    logger.log(
                        self.global_step, self.iteration, time.perf_counter() - start, scalars
                    )
                if (
                    self.iteration % cfg.trainer.checkpoint_interval == 0
                    or self.iteration == num_iterations
                ):
                    self.save()
                self.progress.update(
                    self.global_step,
                    sps,
                    self.mean_recent_return(),
                    final=self.iteration == num_iterations,
                )
        finally:
            logger.close()
            self.envs.close()
            if self.evaluator is not None:
                self.evaluator.close()
        return {"global_step": self.global_step, "iteration": self.iteration, **scalars}

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
            explained_variance(buf.values.flatten(), buf.returns.flatten())
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
        }

    def save(self) -> Path:
        self.last_checkpoint = save_checkpoint(self.run_dir, self.state(), self.global_step)
        return self.last_checkpoint

    def _restore(self, state: dict[str, Any]) -> None:
        if state.get("model_spec") != self.policy.spec:
            raise CheckpointError(
                "checkpoint was written for a different environment or architecture than this config"
            )
        try:
            self.policy.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.reward_scaler.load_state_dict(state["reward_scaler"])
            set_rng_state(state["rng"], self.shuffle)
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"checkpoint does not match this run: {str(exc).splitlines()[0]}"
            ) from None
        self.global_step = int(state["global_step"])
        self.iteration = int(state["iteration"])
        self.recent_returns.extend(state.get("recent_returns", []))
