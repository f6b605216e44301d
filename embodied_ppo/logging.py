"""What a run reports: metrics.jsonl and TensorBoard (MetricsLogger), and the progress line."""

from __future__ import annotations

import json
import math
import secrets
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from embodied_ppo.buffer import RolloutBuffer
from embodied_ppo.checkpoint import trim_metrics
from embodied_ppo.config import WandbConfig
from embodied_ppo.errors import UserError
from embodied_ppo.losses import explained_variance
from embodied_ppo.modules.normalizer import RewardScaler


class MetricsLogger:
    """metrics.jsonl (one object per logged iteration), TensorBoard event files, and, with
    `wandb` settings, Weights & Biases (the same scalars at the same steps, and the videos)."""

    def __init__(
        self,
        run_dir: Path,
        start_step: int = 0,
        wandb: WandbConfig | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        from torch.utils.tensorboard import (
            SummaryWriter,  # imported here: deployments never need it
        )

        # A resumed run repeats the iterations after its checkpoint (at `start_step`): drop
        # what they logged before the interruption, in metrics.jsonl and in TensorBoard.
        trim_metrics(run_dir / "metrics.jsonl", start_step)
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=start_step + 1)
        self.file = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (lives with the logger)
        self.wandb = None
        if wandb is not None and wandb.project is not None:
            self.wandb = _wandb_run(run_dir, wandb, config or {})

    def log(
        self, global_step: int, iteration: int, wall_time: float, scalars: dict[str, float]
    ) -> None:
        record: dict[str, Any] = {
            "global_step": global_step,
            "iteration": iteration,
            "time": round(wall_time, 3),
        }
        finite: dict[str, float] = {}
        for tag, value in scalars.items():
            ok = value is not None and math.isfinite(value)
            record[tag] = value if ok else None
            if ok:
                finite[tag] = value
                self.writer.add_scalar(tag, value, global_step)
        self.file.write(json.dumps(record) + "\n")
        if self.wandb is not None:
            self.wandb.log(finite, step=global_step)

    def add_video(
        self, tag: str, frames: list[np.ndarray], fps: float, step: int, mp4: Path | None = None
    ) -> None:
        """Log frames to TensorBoard as an animated GIF image (shown under Images), and the mp4
        written from them to W&B.

        SummaryWriter.add_video needs moviepy; an encoded GIF in an image summary is exactly
        what TensorBoard displays for a video, without that dependency.
        """
        if self.wandb is not None and mp4 is not None:
            import wandb

            self.wandb.log({tag: wandb.Video(str(mp4), format="mp4")}, step=step)
        from tensorboard.compat.proto.summary_pb2 import Summary

        data, height, width = gif_bytes(frames, fps)
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=data)
        summary = Summary(value=[Summary.Value(tag=tag, image=image)])
        self.writer._get_file_writer().add_summary(summary, step)

    def close(self) -> None:
        self.writer.close()
        self.file.close()
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


WANDB_ID_FILE = "wandb_id"  # in the run directory: a resumed run continues its W&B run


def _wandb_run(run_dir: Path, settings: WandbConfig, config: dict[str, Any]) -> Any:
    """A W&B run for this run directory (the same one again on resume)."""
    try:
        import wandb
    except ImportError:
        raise UserError(
            "trainer.wandb.project is set, but wandb is not installed: "
            "pip install 'embodied-ppo[wandb]' (or set trainer.wandb.project=null)"
        ) from None
    id_file = run_dir / WANDB_ID_FILE
    run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(6)
    id_file.write_text(run_id + "\n")
    return wandb.init(
        project=settings.project,
        entity=settings.entity,
        name=settings.name or run_dir.name,
        mode=settings.mode,
        tags=settings.tags or None,
        config=config,
        dir=str(run_dir),
        id=run_id,
        resume="allow",
    )


def iteration_scalars(
    episode_returns: list[float],
    episode_lengths: list[int],
    episode_successes: list[float],
    metrics: dict[str, float],
    buffer: RolloutBuffer,
    lr: float,
    sps: float,
    t_collect: float,
    t_update: float,
    reward_scaler: RewardScaler | None,
    episode_logs: list[dict[str, float]] | None = None,
) -> dict[str, float]:
    """Every scalar one iteration logs, under its TensorBoard tag."""
    out: dict[str, float] = {}
    out.update(episode_log_means(episode_logs or []))
    if episode_returns:
        out["charts/episodic_return"] = float(np.mean(episode_returns))
        out["charts/episodic_length"] = float(np.mean(episode_lengths))
    if episode_successes:  # the episodes whose env reported info["is_success"] at their end
        out["charts/success_rate"] = float(np.mean(episode_successes))
    out["charts/episodes"] = float(len(episode_returns))
    out["charts/SPS"] = sps
    out["charts/learning_rate"] = lr
    out["charts/collect_time"] = t_collect
    out["charts/update_time"] = t_update
    if reward_scaler is not None:
        out["charts/reward_scale_std"] = float(reward_scaler.stats.var.sqrt())
    for name, value in metrics.items():
        out[f"losses/{name}"] = value
    b = buffer
    out["losses/explained_variance"] = float(
        explained_variance(b.values.flatten(), b.returns.flatten(), b.mask.flatten())
    )
    return out


def episode_log_means(logs: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each key of the finished episodes' `info["log"]` dicts, over the episodes
    that reported it, under the key itself when it names its TensorBoard section
    (`rewards/tracking_lin_vel`), else under `episode/<key>`."""
    sums: dict[str, list[float]] = {}
    for log in logs:
        for key, value in log.items():
            sums.setdefault(key, []).append(value)
    return {
        (key if "/" in key else f"episode/{key}"): float(np.mean(values))
        for key, values in sums.items()
    }


def eval_line(global_step: int, scalars: dict[str, float]) -> str:
    """The line an evaluation during training prints."""
    line = (
        f"eval at step {global_step:,}: return {scalars['eval/episodic_return']:.1f} "
        f"+- {scalars['eval/episodic_return_std']:.1f}"
    )
    if "eval/success_rate" in scalars:
        line += f", success {scalars['eval/success_rate']:.0%}"
    return line + f" (best {scalars['eval/best_return']:.1f})"


def gif_bytes(
    frames: list[np.ndarray], fps: float, max_side: int = 240, max_frames: int = 200
) -> tuple[bytes, int, int]:
    """A small looping GIF of `frames` (subsampled in time and space) and its (height, width)."""
    import imageio.v3 as iio

    step_t = max(1, math.ceil(len(frames) / max_frames))
    h, w = frames[0].shape[:2]
    step_s = max(1, math.ceil(max(h, w) / max_side))
    small = np.stack([f[::step_s, ::step_s, :3] for f in frames[::step_t]])
    duration_ms = 1000.0 * step_t / fps
    data = iio.imwrite("<bytes>", small, extension=".gif", duration=duration_ms, loop=0)
    return data, small.shape[1], small.shape[2]


class Progress:
    """A live one-line progress display on a terminal; plain periodic lines otherwise."""

    def __init__(
        self, total_steps: int, stream: TextIO | None = None, period: float = 10.0
    ) -> None:
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

    def note(self, text: str) -> None:
        """A line of its own (on a terminal, in place of the progress line, which follows)."""
        self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
        self.stream.flush()


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
