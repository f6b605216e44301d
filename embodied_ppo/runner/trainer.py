"""The training loop: collect -> advantages -> update -> log -> checkpoint -> evaluate.

This is the only place that knows the order of the steps. `Trainer.__init__` builds the run's
parts (each gets what it needs through its constructor, `runner.build`) and restores them from
a checkpoint; `Trainer.train` is the loop; the run's state as a checkpoint is
`runner.run_state`.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TextIO

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from embodied_ppo.algo.batch import prepare_batch, refresh_advantages
from embodied_ppo.algo.compiler import probe_cpu_compiler
from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.algo.schedules import Extension, kl_target, run_learning_rate
from embodied_ppo.algo.update import NonFiniteError
from embodied_ppo.config.intervals import cadence
from embodied_ppo.config.scale import per_process
from embodied_ppo.config.schema import CRITIC_FREE, Config
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.system import default_threads
from embodied_ppo.core.text import Discard
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.io.metrics import MetricsLogger
from embodied_ppo.io.progress import Progress, eval_line, metric_texts
from embodied_ppo.io.rng import seed_everything
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner import distributed
from embodied_ppo.runner.auxiliary import Auxiliary
from embodied_ppo.runner.build import (
    collector_settings,
    compile_note,
    init_from,
    make_buffer,
    make_collector,
    make_in_reward_kl,
    make_reference,
    policy_spec,
    update_threads,
)
from embodied_ppo.runner.distill import make_distiller, make_updates
from embodied_ppo.runner.evaluator import Occasion, PeriodicEvaluator
from embodied_ppo.runner.finetune import apply_log_std
from embodied_ppo.runner.preflight import check_policy, resolve_device
from embodied_ppo.runner.rollout import RolloutStats
from embodied_ppo.runner.run_state import RunState, read_run_checkpoint
from embodied_ppo.runner.scalars import RECENT_RETURN, IterationTiming, iteration_scalars
from embodied_ppo.vecenv import make_env
from embodied_ppo.vecenv.make import progress_formats
from embodied_ppo.vecenv.seeding import env_seeds, group_seeds, noise_seed


class Trainer(RunState):
    """Owns the envs, policy, buffer and update (with its optimizer) of one run, and trains it.

    Args:
        resume: a checkpoint of this run to continue from (see `io.run_dir.open_resume`).
        progress_stream: where the progress line goes (default stdout).
        notes: where one-off notes go (e.g. the update running eagerly; default stderr).
    """

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        resume: CheckpointState | None = None,
        progress_stream: TextIO | None = None,
        notes: TextIO | None = None,
    ) -> None:
        t = cfg.trainer
        # The run sets its own torch threads from the start: what a caller set, or an earlier
        # run in this process left, would change its numbers. The caller's come back at the end.
        self.caller_threads = torch.get_num_threads()
        torch.set_num_threads(t.torch_threads or default_threads())
        try:
            self._build(cfg, run_dir, resume, progress_stream, notes)
        except BaseException:
            torch.set_num_threads(self.caller_threads)
            raise

    def _build(
        self,
        cfg: Config,
        run_dir: Path,
        resume: CheckpointState | None,
        progress_stream: TextIO | None,
        notes: TextIO | None,
    ) -> None:
        """The run's parts: envs, policy, buffer, collector, update, and its state."""
        t = cfg.trainer
        distributed.init(t.device, t.dist_backend, t.dist_timeout)
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.resume_note: str | None = None  # why a resume could not be exact, if it was not
        self.main = self.rank == 0  # the one process that writes logs, checkpoints and videos
        self.run_config = cfg  # the run's, as its checkpoints keep it
        self.cfg = cfg = per_process(cfg, self.world)  # this process's part
        self.run_dir = Path(run_dir)
        self.device = distributed.local_device(resolve_device(t.device))
        self.notes = (notes or sys.stdout) if self.main else Discard()
        seed_everything(t.seed)
        a, e = cfg.algorithm, cfg.env
        saved = None
        if resume is not None:
            saved, self.resume_note = read_run_checkpoint(resume, self.rank, self.world)

        # Built before the training envs: with videos it picks the headless GL backend first.
        self.evaluator = None
        if cadence(t, "eval_interval").on and self.main:
            self.evaluator = PeriodicEvaluator(cfg, self.run_dir)
        # This process steps global envs offset .. offset + N - 1 (env k is the same env whatever
        # the number of processes).
        self.env_offset = self.rank * e.num_envs
        self.envs = make_env(e, t.seed, self.env_offset, self.device)
        if t.compile and self.device.type == "cpu":
            probe_cpu_compiler()  # after the env workers are forked: it runs a thread
        check_policy(cfg, self.envs.info)
        self.policy = ActorCritic(policy_spec(cfg, self.envs.info)).to(self.device)
        if cfg.model.init_from is not None:
            init_from(self.policy, cfg.model.init_from, self.device)
            apply_log_std(cfg, self.policy)
        distributed.broadcast_module(self.policy)  # one set of weights on every process
        self.distiller = make_distiller(cfg, self.envs.info, self.device, saved)  # None: PPO
        self.reduce = distributed.all_reduce_sum if self.world > 1 else None
        # Value normalization, the env's mirror and RND (`runner.auxiliary`): off by default.
        self.auxiliary = Auxiliary(cfg, self.envs.info, self.policy, self.device, self.reduce)
        self.buffer = make_buffer(cfg, self.envs.info, self.policy, self.device)
        self.reward_scaler = RewardScaler(e.num_envs, a.gamma, e.normalize_reward, e.clip_reward)
        self.reward_scaler.to(self.device)
        settings = collector_settings(
            cfg,
            self.envs,
            self.policy,
            self.device,
            env_offset=self.env_offset,
            world=self.world,
            reduce=self.reduce,
            notes=self.notes,
            env_actions=None if self.distiller is None else self.distiller.env_actions,
        )
        self.collector = make_collector(
            self.envs, self.policy, self.buffer, self.reward_scaler, settings
        )
        self.reference = None
        if a.use_kl_loss or a.use_kl_in_reward:
            self.reference = make_reference(cfg, self.policy, self.device, saved)
        self.in_reward_kl = make_in_reward_kl(cfg, self.policy, self.reference, saved, self.reduce)
        # Torch threads: collection runs one on the CPU, leaving the cores to the envs (its
        # inference is a few small products per step); the update runs `update_threads`.
        self.update_threads = t.torch_threads or update_threads(
            self.device,
            self.policy,
            a.micro_batch_size or a.minibatch_size,
            (a.sequence_length or a.rollout_steps) if self.policy.state_size else 1,
        )
        self.collect_threads = 1 if self.device.type == "cpu" else self.update_threads
        # numpy's BLAS (the numpy snapshot's products) also runs one thread while collecting:
        # its idle worker threads spin for a while after each product and would take the core
        # an env worker process (env.processes) or the update's second thread is using.
        self.blas = ThreadpoolController()
        self.shuffle = torch.Generator().manual_seed(t.seed)
        self.updates = make_updates(  # the student's, or PPO's (after a critic warm-up)
            cfg, self.policy, self.shuffle, self.reference, reduce=self.reduce, notes=self.notes
        )
        self.updater = self.updates.at(0 if saved is None else saved.iteration)
        self.global_step, self.iteration = 0, 0
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.extension: Extension | None = None  # a linear schedule's, after a new budget
        self.last_checkpoint: Path | None = None
        self.saved_iteration = -1  # the iteration the last checkpoint holds
        if saved is None:
            self.collector.start(env_seeds(t.seed, e.num_envs, self.env_offset))
        else:
            self.restore(saved)
        self.progress = Progress(t.total_steps, progress_stream if self.main else Discard())
        # The task's own metrics the progress line shows (its info["log"] keys), and their last
        # 100 episodes' values: shown only, never logged from here, so not checkpointed.
        self.shown = progress_formats(e) if self.main else {}
        self.recent_logs: deque[dict[str, float]] = deque(maxlen=100)

    # ----------------------------------------------------------------------------------- loop
    def train(
        self,
        should_stop: Callable[[], bool] | None = None,
        on_iteration: Callable[[dict[str, float]], None] | None = None,
    ) -> dict[str, float | int | bool]:
        """Train to trainer.total_steps; returns a summary of the last iteration.

        `should_stop` (e.g. a signals.GracefulStop) is polled between iterations, the points
        where the whole run state can be saved: once it returns True the run writes a checkpoint
        (unless it just did) and returns early with "stopped": True in the summary.
        `on_iteration` hears every iteration's logged scalars once it is complete (logged,
        checkpointed).
        """
        total = self.cfg.trainer.total_steps
        logger = self._logger()
        clock = _Clock(self.global_step)
        scalars: dict[str, float] = {}
        stopped = False
        checkpoints = cadence(self.cfg.trainer, "checkpoint_interval")
        try:
            while self.global_step < total:
                if should_stop is not None and distributed.agree(should_stop()):
                    stopped = True
                    if self.saved_iteration != self.iteration:
                        self.save()
                    break
                start = self.global_step
                scalars = self._iteration(clock)  # collect, advantages, update
                final = self.global_step >= total
                scalars |= self._evaluate(start, final, logger)
                self._log(logger, scalars, start, final, clock)
                if checkpoints.due(self.iteration, start, self.global_step) or final:
                    self.save()
                self._report(scalars, final, clock)
                if on_iteration is not None:
                    on_iteration(scalars)
        finally:
            self._close(logger)
        # The processes of a distributed run leave training together, so that none tears
        # down its process group (at exit) while another is still communicating.
        distributed.barrier()
        summary = {"global_step": self.global_step, "iteration": self.iteration, "stopped": stopped}
        return summary | scalars

    def _iteration(self, clock: _Clock) -> dict[str, float]:
        """One iteration: collect a rollout, prepare its batch, update; returns its scalars."""
        cfg, a = self.cfg, self.cfg.algorithm
        t = cfg.trainer
        self.updater = self.updates.at(self.iteration)
        if self.distiller is not None:
            self.distiller.begin(self.global_step)
        lr = run_learning_rate(
            cfg.optim, self.global_step, t.total_steps, self.updater.lr, self.extension
        )
        self.updater.set_lr(lr)
        self.updater.set_kl_target(kl_target(cfg.optim, self.global_step, t.total_steps))
        t0 = time.perf_counter()
        torch.set_num_threads(self.collect_threads)
        with self.blas.limit(limits=1, user_api="blas"):
            stats = self._collect()
        torch.set_num_threads(self.update_threads)
        t1 = time.perf_counter()
        buf = self.buffer
        auxiliary = self.auxiliary.after_collect(buf, self.global_step)
        prepare = partial(prepare_batch, buf, self.policy, a, self.in_reward_kl, self.reduce)
        if self.distiller is None:
            batch, extra = prepare()
        else:  # the teachers' labels of the rollout's states (with PPO's fields, objective ppo)
            batch, extra = self.distiller.batch(buf, prepare)
        refresh = None
        if a.recompute_advantages:
            refresh = partial(refresh_advantages, buf, self.policy, a, self.reduce)
        refresh = self.auxiliary.prepare(buf, batch, refresh)
        note = compile_note(self.updater, self.policy)
        if note is not None:
            self.progress.note(note)
        try:
            metrics = self.updater.update(batch, buf.num_steps, refresh)
        except NonFiniteError as exc:
            raise TrainingError(
                f"iteration {self.iteration}: {exc}; the weights were not updated; "
                f"last good checkpoint: {self._last_good()}"
            ) from None
        auxiliary |= self.auxiliary.after_update(buf)
        self.collector.merge_obs_statistics()
        t2 = time.perf_counter()
        if self.world > 1:
            stats = RolloutStats(*distributed.gather_episodes(stats))
        self.global_step += stats.steps
        if note is not None:
            clock.restart_eta(self.global_step)  # the ETA leaves the compilation out
        self.iteration += 1
        self.recent_returns.extend(stats.episode_returns)
        if self.shown:
            logs = stats.episode_logs
            self.recent_logs.extend(
                {k: v for k, v in log.items() if k in self.shown} for log in logs
            )
        timing = IterationTiming(lr, clock.sps(self.global_step), t1 - t0, t2 - t1)
        scaler = self.reward_scaler if cfg.env.normalize_reward else None
        scalars = iteration_scalars(stats, metrics, buf, timing, scaler) | extra | auxiliary
        if self.distiller is not None:
            scalars = self.distiller.scalars(scalars)
        recent = self.mean_recent_return()
        if recent is not None:  # what the progress line shows, for callbacks and curves
            scalars[RECENT_RETURN] = recent
        return scalars

    def _collect(self) -> RolloutStats:
        """One rollout (episodic where the estimator is critic-free), labelled by the teachers
        of a distillation; an env's failure (or a step of no teacher's) is a TrainingError naming
        the iteration and the last good checkpoint."""
        t, a, e = self.cfg.trainer, self.cfg.algorithm, self.cfg.env
        seeds = None
        if a.adv_type in CRITIC_FREE:  # one episode per env, groups sharing their seeds
            seeds = group_seeds(t.seed, e.num_envs, a.group_size, self.iteration, self.env_offset)
        try:
            stats = self.collector.collect(seeds, noise_seed(t.seed, self.iteration))
            if self.distiller is not None:
                self.distiller.label_rollout(self.buffer)
            return stats
        except TrainingError as exc:  # an env failed or returned NaN/Inf
            raise TrainingError(
                f"iteration {self.iteration}: {exc}; last good checkpoint: {self._last_good()}"
            ) from None

    def _evaluate(self, start: int, final: bool, logger: MetricsLogger | None) -> dict[str, float]:
        """Evaluation during training, when it is due after the iteration that began at step
        `start` (also after the last iteration)."""
        when = Occasion(self.iteration, start, self.global_step, final)
        if self.evaluator is None or not self.evaluator.due(when):
            return {}
        return self.evaluator.evaluate(self.policy, when, self.save_best, logger)

    def _logger(self) -> MetricsLogger | None:
        t = self.cfg.trainer
        if not self.main:
            return None
        return MetricsLogger(self.run_dir, self.global_step, t.wandb, self.cfg.to_dict())

    def _log(
        self,
        logger: MetricsLogger | None,
        scalars: dict[str, float],
        start: int,
        final: bool,
        clock: _Clock,
    ) -> None:
        logs = cadence(self.cfg.trainer, "log_interval")
        due = logs.due(self.iteration, start, self.global_step) or final
        if logger is not None and (due or "eval/episodic_return" in scalars):
            logger.log(self.global_step, self.iteration, clock.elapsed(), scalars)

    def _report(self, scalars: dict[str, float], final: bool, clock: _Clock) -> None:
        if "eval/episodic_return" in scalars:
            self.progress.note(eval_line(self.global_step, scalars))
        self.progress.update(
            self.global_step,
            clock.sps(self.global_step),
            self.mean_recent_return(),
            final=final,
            eta_sps=clock.eta_sps(self.global_step),
            shown=metric_texts(self.shown, self.recent_logs),
        )

    def _close(self, logger: MetricsLogger | None) -> None:
        torch.set_num_threads(self.caller_threads)
        self.progress.close()
        if logger is not None:
            logger.close()
        self.envs.close()
        if self.evaluator is not None:
            self.evaluator.close()

    def mean_recent_return(self) -> float | None:
        """The mean return of the last 100 finished episodes (None before the first)."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else None


class _Clock:
    """Wall time and steps since training (re)started, and the rate the ETA uses, measured
    after the iteration that compiled the update."""

    def __init__(self, start_step: int) -> None:
        self.start, self.start_step = time.perf_counter(), start_step
        self.eta_start, self.eta_step = self.start, start_step

    def elapsed(self) -> float:
        """Seconds since training (re)started."""
        return time.perf_counter() - self.start

    def sps(self, step: int) -> float:
        """Environment steps per second since training (re)started."""
        return (step - self.start_step) / max(self.elapsed(), 1e-9)

    def restart_eta(self, step: int) -> None:
        """Measure the ETA's rate from now on (a one-off cost has just ended)."""
        self.eta_start, self.eta_step = time.perf_counter(), step

    def eta_sps(self, step: int) -> float:
        """Steps per second since the ETA's start (0: not measured yet, the ETA shows ?)."""
        return (step - self.eta_step) / max(time.perf_counter() - self.eta_start, 1e-9)
