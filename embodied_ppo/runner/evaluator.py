"""Evaluation during training, and the best policy it keeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embodied_ppo.config.intervals import cadence
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import CheckpointError, ConfigError, RenderError
from embodied_ppo.io.checkpoint import checkpoints_dir, read_checkpoint
from embodied_ppo.io.metrics import MetricsLogger
from embodied_ppo.io.video import VideoWriter
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.inference import inference_net
from embodied_ppo.runner.batched_eval import batched_episodes
from embodied_ppo.runner.episodes import EpisodeRunner, deterministic_action, eval_seeds


# ------------------------------------------------------------------------------------ training
def best_checkpoint_path(run_dir: Path) -> Path:
    """RUN_DIR/checkpoints/best.pt: the policy of the best evaluation so far."""
    return checkpoints_dir(run_dir) / "best.pt"


def read_best_return(run_dir: Path) -> float | None:
    """The evaluation return recorded in an existing best.pt (so a resumed run keeps its best)."""
    path = best_checkpoint_path(run_dir)
    if not path.is_file():
        return None
    try:
        value = read_checkpoint(path)[1]["eval"]["episodic_return"]
    except (CheckpointError, KeyError, TypeError):
        return None  # an unreadable best.pt is replaced by the next evaluation
    return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Occasion:
    """The end of a training iteration: its number, the steps it began and ended at (all
    processes), and whether it was the run's last."""

    iteration: int
    start_step: int
    end_step: int
    final: bool


class PeriodicEvaluator:
    """Evaluation during training (trainer.eval_interval or eval_interval_steps, eval_episodes,
    video_interval).

    Runs deterministic episodes on its own env every `eval_interval` iterations (or after the
    iteration that reaches each multiple of `eval_interval_steps` env steps) and after the last
    one, keeps the best policy as checkpoints/best.pt, and every `video_interval` evaluations
    records the first episode to videos/ and TensorBoard. The schedule depends on the iteration
    and step only, so a resumed run evaluates (and films) exactly where the uninterrupted one
    would.
    """

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        t = cfg.trainer
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.cadence = cadence(t, "eval_interval")
        assert self.cadence.on
        self.video_interval = t.video_interval
        self.seeds = eval_seeds(t.seed, t.eval_episodes)
        self.best = read_best_return(self.run_dir)
        self.runner = EpisodeRunner(cfg.env, render=self.video_interval is not None)
        if self.video_interval is not None:
            try:
                self.runner.check_render()  # a run that cannot film stops before it starts
            except RenderError as exc:
                self.runner.close()
                raise ConfigError(
                    f"trainer.video_interval: {exc}; or set trainer.video_interval=null"
                ) from None

    def due(self, when: Occasion) -> bool:
        """Whether an evaluation follows the iteration `when` (its cadence's, and the last)."""
        return when.final or self.cadence.due(when.iteration, when.start_step, when.end_step)

    def _films(self, when: Occasion) -> bool:
        if self.video_interval is None:
            return False
        if when.final:
            return True
        # Every video_interval-th evaluation: the cadence video_interval times as long.
        films = self.cadence.times(self.video_interval)
        return films.due(when.iteration, when.start_step, when.end_step)

    def evaluate(
        self,
        policy: ActorCritic,
        when: Occasion,
        save_best: Callable[[dict[str, float]], None],
        logger: MetricsLogger | None = None,
    ) -> dict[str, float]:
        """Evaluate `policy` now; returns the eval/ scalars to log.

        A new best evaluation calls `save_best(evaluation)` (the trainer writes best.pt with
        it); a filmed evaluation also goes to `logger`'s TensorBoard.
        """
        start = time.perf_counter()
        net = inference_net(policy).to("cpu")  # a frozen copy: one observation is fastest on CPU
        frames: list[np.ndarray] = []
        film = self._films(when)
        global_step = when.end_step
        act = deterministic_action(net)
        # The episodes at once where the task steps many envs itself (the same episodes, bit
        # for bit); one by one where it does not, or where one is filmed.
        result = None if film else batched_episodes(self.cfg.env, act, self.seeds)
        if result is None:
            result = self.runner.run(
                act,
                self.seeds,
                on_frame=(lambda _ep, f: frames.append(f)) if film else None,
                record_episodes=1,
            )
        scalars = {
            "eval/episodic_return": result.mean_return,
            "eval/episodic_return_std": result.std_return,
            "eval/episodic_length": result.mean_length,
        }
        if result.success_rate is not None:
            scalars["eval/success_rate"] = result.success_rate
        for key, value in result.log_means().items():  # the env's own metrics and reward terms
            scalars[f"eval/{key}"] = value
        if self.best is None or result.mean_return > self.best:
            self.best = result.mean_return
            save_best(
                {
                    "episodic_return": result.mean_return,
                    "episodic_return_std": result.std_return,
                    "episodic_length": result.mean_length,
                    "episodes": len(result.returns),
                    "global_step": global_step,
                }
            )
        scalars["eval/best_return"] = self.best
        if frames:
            mp4 = self.run_dir / "videos" / f"eval-step{global_step}.mp4"
            video = VideoWriter(mp4, self.runner.fps)
            try:
                for f in frames:
                    video.append(f)
                video.close()
            except BaseException:
                video.abort()
                raise
            if logger is not None:
                logger.add_video("eval/video", frames, self.runner.fps, global_step, mp4)
        scalars["eval/time"] = time.perf_counter() - start
        return scalars

    def close(self) -> None:
        """Close the evaluation env."""
        self.runner.close()
