"""The training loop: collect -> advantages -> update -> log -> checkpoint -> evaluate.

This is the only place that knows the order of the steps. `Trainer.__init__` builds the run's
parts (each gets what it needs through its constructor) and restores them from a checkpoint;
`Trainer.train` is the loop.
"""

from __future__ import annotations

import copy
import os
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from embodied_ppo import __version__, distributed
from embodied_ppo.build import (
    init_from,
    make_buffer,
    make_reference,
    policy_spec,
    update_threads,
)
from embodied_ppo.checkpoint import (
    checkpoints_dir,
    prune_checkpoints,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
    write_checkpoint,
)
from embodied_ppo.collector import Collector, RolloutStats
from embodied_ppo.config import CRITIC_FREE, Config
from embodied_ppo.errors import CheckpointError, TrainingError
from embodied_ppo.gradient_step import probe_cpu_compiler
from embodied_ppo.logging import MetricsLogger, Progress, eval_line, iteration_scalars
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.normalizer import RewardScaler
from embodied_ppo.ppo import (
    InRewardKL,
    NonFiniteError,
    PPOUpdate,
    learning_rate,
    make_optimizer,
    prepare_batch,
    refresh_advantages,
)
from embodied_ppo.validate import check_policy, inference_path, per_process, resolve_device
from embodied_ppo.vecenv import env_seeds, group_seeds, make_env, noise_seed


class Trainer:
    """Owns the envs, policy, buffer, optimizer and update of one run, and trains it.

    Args:
        resume: a checkpoint of this run to continue from (see `checkpoint.open_resume`).
        progress_stream: where the progress line goes (default stdout).
        notes: where one-off notes go (e.g. the update running eagerly).
    """

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        resume: dict[str, Any] | None = None,
        progress_stream: TextIO | None = None,
        notes: TextIO | None = None,
    ) -> None:
        t = cfg.trainer
        distributed.init(t.device, t.dist_backend, t.dist_timeout)
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.resume_note: str | None = None  # why a resume could not be exact, if it was not
        self.main = self.rank == 0  # the one process that writes logs, checkpoints and videos
        self.cfg = cfg = per_process(cfg, self.world)
        self.run_dir = Path(run_dir)
        self.device = distributed.local_device(resolve_device(t.device))
        seed_everything(t.seed)
        a, e = cfg.algorithm, cfg.env
        if resume is not None:
            resume, self.resume_note = distributed.local_view(resume)

        # Built before the training envs: with videos it picks the headless GL backend first.
        self.evaluator = None
        if t.eval_interval is not None and self.main:
            from embodied_ppo.evaluation import PeriodicEvaluator

            self.evaluator = PeriodicEvaluator(cfg, self.run_dir)
        # This process steps global envs offset .. offset + N - 1 (env k is the same env whatever
        # the number of processes).
        self.env_offset = self.rank * e.num_envs
        self.envs = make_env(e, t.seed, self.env_offset)
        if t.compile and self.device.type == "cpu":
            probe_cpu_compiler()  # after the env workers are forked: it runs a thread
        check_policy(cfg, self.envs.info)
        self.policy = ActorCritic(policy_spec(cfg, self.envs.info)).to(self.device)
        if cfg.model.init_from is not None:
            init_from(self.policy, cfg.model.init_from, self.device)
        distributed.broadcast_module(self.policy)  # one set of weights on every process
        self.reduce = distributed.all_reduce_sum if self.world > 1 else None
        self.buffer = make_buffer(cfg, self.envs.info, self.policy, self.device)
        self.reward_scaler = RewardScaler(e.num_envs, a.gamma, e.normalize_reward, e.clip_reward)
        self.reward_scaler.to(self.device)
        self.collector = Collector(
            self.envs,
            self.policy,
            self.buffer,
            self.reward_scaler,
            self.device,
            inference_path(t.inference, self.policy, e.num_envs),
            a.rollout_micro_batch_size,
            self.env_offset,
            e.num_envs * self.world,
            self.reduce,
            a.logprob_forward_micro_batch_size,
            keep_bootstrap_obs=a.recompute_advantages,
        )
        self.reference = None
        if a.use_kl_loss or a.use_kl_in_reward:
            self.reference = make_reference(cfg, self.policy, self.device, resume)
        self.in_reward_kl = None
        if a.use_kl_in_reward:
            assert self.reference is not None
            coef = a.kl_ctrl.kl_coef
            if resume is not None and resume.get("kl_coef") is not None:
                coef = float(resume["kl_coef"])  # where the adaptive controller left it
            self.in_reward_kl = InRewardKL(a, self.policy, self.reference, coef, self.reduce)
        # Torch threads: collection runs one on the CPU, leaving the cores to the envs (its
        # inference is a few small products per step); the update runs `update_threads`.
        self.update_threads = t.torch_threads or update_threads(
            self.device, self.policy, a.micro_batch_size or a.minibatch_size
        )
        self.collect_threads = 1 if self.device.type == "cpu" else self.update_threads
        # numpy's BLAS (the numpy snapshot's products) also runs one thread while collecting:
        # its idle worker threads spin for a while after each product and would take the core
        # an env worker process (env.processes) or the update's second thread is using.
        self.blas = ThreadpoolController()
        self.optimizer = make_optimizer(self.policy, cfg.optim)
        self.shuffle = torch.Generator().manual_seed(t.seed)
        self.updater = PPOUpdate(
            self.policy,
            a,
            cfg.optim,
            self.optimizer,
            self.shuffle,
            self.reference,
            self.reduce,
            t.compile,
            notes if self.main else open(os.devnull, "w"),  # noqa: SIM115
        )
        self.global_step, self.iteration = 0, 0
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.last_checkpoint: Path | None = None
        self.saved_iteration = -1  # the iteration the last checkpoint holds
        if resume is None:
            self.collector.start(env_seeds(t.seed, e.num_envs, self.env_offset))
        else:
            self._restore(resume)
        self.progress = Progress(
            t.total_steps,
            progress_stream if self.main else open(os.devnull, "w"),  # noqa: SIM115
        )

    # ----------------------------------------------------------------------------------- loop
    def train(
        self,
        should_stop: Callable[[], bool] | None = None,
        on_iteration: Callable[[dict[str, float]], None] | None = None,
    ) -> dict[str, Any]:
        """Train to trainer.total_steps; returns a summary of the last iteration.

        `should_stop` (e.g. a signals.GracefulStop) is polled between iterations, the points
        where the whole run state can be saved: once it returns True the run writes a checkpoint
        (unless it just did) and returns early with "stopped": True in the summary.
        `on_iteration` hears every iteration's logged scalars once it is complete (logged,
        checkpointed).
        """
        cfg, a = self.cfg, self.cfg.algorithm
        total = cfg.trainer.total_steps
        logger = None
        if self.main:
            logger = MetricsLogger(self.run_dir, self.global_step, cfg.trainer.wandb, cfg.to_dict())
        start, start_step = time.perf_counter(), self.global_step
        scalars: dict[str, float] = {}
        stopped = False
        try:
            while self.global_step < total:
                if should_stop is not None and distributed.agree(should_stop()):
                    if self.saved_iteration != self.iteration:
                        self.save()
                    stopped = True
                    break
                lr = learning_rate(cfg.optim, self.global_step / total, self.updater.lr)
                self.updater.set_lr(lr)

                t0 = time.perf_counter()
                torch.set_num_threads(self.collect_threads)
                with self.blas.limit(limits=1, user_api="blas"):
                    stats = self._collect()
                torch.set_num_threads(self.update_threads)
                t1 = time.perf_counter()
                buf = self.buffer
                batch, extra = prepare_batch(buf, self.policy, a, self.in_reward_kl, self.reduce)
                refresh = (
                    partial(refresh_advantages, buf, self.policy, a, self.reduce)
                    if a.recompute_advantages
                    else None
                )
                try:
                    metrics = self.updater.update(batch, buf.num_steps, refresh)
                except NonFiniteError as exc:
                    raise TrainingError(
                        f"iteration {self.iteration}: {exc}; the weights were not updated; "
                        f"last good checkpoint: {self._last_good()}"
                    ) from None
                self.collector.merge_obs_statistics()
                t2 = time.perf_counter()

                if self.world > 1:
                    stats = RolloutStats(*distributed.gather_episodes(stats))
                self.global_step += stats.steps
                self.iteration += 1
                self.recent_returns.extend(stats.episode_returns)
                sps = (self.global_step - start_step) / max(time.perf_counter() - start, 1e-9)
                scalars = iteration_scalars(
                    stats.episode_returns, stats.episode_lengths, stats.episode_successes,
                    metrics, self.buffer,
                    lr, sps, t1 - t0, t2 - t1,
                    self.reward_scaler if self.cfg.env.normalize_reward else None,
                    stats.episode_logs,
                ) | extra  # fmt: skip
                final = self.global_step >= total
                # Periodic work also runs after the final iteration ("iteration == last").
                num_iterations = self.iteration if final else -1
                evaluated = self.evaluator is not None and self.evaluator.due(
                    self.iteration, num_iterations
                )
                if evaluated:
                    scalars |= self.evaluator.evaluate(
                        self.policy, self.iteration, num_iterations, self.global_step,
                        self.save_best, logger,
                    )  # fmt: skip
                if logger is not None and (
                    self.iteration % cfg.trainer.log_interval == 0 or final or evaluated
                ):
                    logger.log(
                        self.global_step, self.iteration, time.perf_counter() - start, scalars
                    )
                if self.iteration % cfg.trainer.checkpoint_interval == 0 or final:
                    self.save()
                if evaluated:
                    self.progress.note(eval_line(self.global_step, scalars))
                self.progress.update(self.global_step, sps, self.mean_recent_return(), final=final)
                if on_iteration is not None:
                    on_iteration(scalars)
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

    def _collect(self) -> RolloutStats:
        t, a, e = self.cfg.trainer, self.cfg.algorithm, self.cfg.env
        seeds = None
        if a.adv_type in CRITIC_FREE:  # one episode per env, groups sharing their seeds
            seeds = group_seeds(t.seed, e.num_envs, a.group_size, self.iteration, self.env_offset)
        try:
            return self.collector.collect(seeds, noise_seed(t.seed, self.iteration))
        except TrainingError as exc:  # an env failed or returned NaN/Inf
            raise TrainingError(
                f"iteration {self.iteration}: {exc}; last good checkpoint: {self._last_good()}"
            ) from None

    def mean_recent_return(self) -> float | None:
        return float(np.mean(self.recent_returns)) if self.recent_returns else None

    # ------------------------------------------------------------------------ checkpointing
    def state(self) -> dict[str, Any]:
        """Everything needed to continue this run, as tensors and plain values."""
        collector = self.collector.state()
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
            "kl_coef": None if self.in_reward_kl is None else self.in_reward_kl.coef,
            "reference": None
            if self.reference is None
            else {"spec": self.reference.spec, "model": self.reference.state_dict()},
            # Where the envs stand mid-episode and what the policy acts on next (exact resume).
            "envs": collector["envs"],
            "collector_obs": collector["obs"],
            "collector_recurrent": collector["recurrent"],
        }

    def save(self) -> Path:
        state = self.state()
        if self.world > 1:
            # What differs between processes travels per rank; process 0 writes the file.
            state["ranks"] = distributed.gather_objects({k: state[k] for k in distributed.PER_RANK})
            state["world_size"] = self.world
        path, error = None, None
        if self.main:
            try:
                path = save_checkpoint(self.run_dir, state, self.global_step)
            except OSError as exc:  # disk full, permissions: stop rather than train unprotected
                error = (
                    f"iteration {self.iteration}: cannot write a checkpoint to "
                    f"{checkpoints_dir(self.run_dir)} ({exc.strerror or exc}); "
                    f"last good checkpoint: {self._last_good()}"
                )
        path, error = distributed.broadcast_object((str(path) if path else None, error))
        if error is not None:
            raise TrainingError(error)
        keep = self.cfg.trainer.keep_checkpoints
        if self.main and keep is not None:
            prune_checkpoints(self.run_dir, keep)
        self.last_checkpoint, self.saved_iteration = Path(path), self.iteration
        return self.last_checkpoint

    def save_best(self, evaluation: dict[str, Any]) -> None:
        """Write checkpoints/best.pt: the run state now, with the evaluation that made it best."""
        write_checkpoint(
            checkpoints_dir(self.run_dir) / "best.pt", self.state() | {"eval": evaluation}
        )

    def _last_good(self) -> str:
        return str(self.last_checkpoint) if self.last_checkpoint else "none written yet"

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
        # The envs where they stood mid-episode; or, where that cannot be, fresh episodes
        # seeded from the run seed and the iteration (deterministic, not the uninterrupted run).
        e = self.cfg.env
        saved = None
        if state.get("envs") is not None:
            saved = {
                "envs": state["envs"],
                "obs": state.get("collector_obs"),
                "recurrent": state.get("collector_recurrent"),
            }
        fresh = env_seeds(self.cfg.trainer.seed, e.num_envs, self.env_offset, self.iteration)
        reason = self.collector.restore(saved, fresh, self.global_step // e.num_envs)
        if reason is not None:
            self.resume_note = f"environments start fresh episodes ({self.resume_note or reason})"
