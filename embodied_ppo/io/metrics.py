"""What a run logs: metrics.jsonl, TensorBoard event files and Weights & Biases."""

from __future__ import annotations

import json
import math
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from embodied_ppo.config.schema import WandbConfig
from embodied_ppo.core.errors import UserError
from embodied_ppo.core.types import ConfigDict
from embodied_ppo.io.files import atomic_write_bytes
from embodied_ppo.io.video import gif_bytes

if TYPE_CHECKING:
    import wandb


class MetricsLogger:
    """metrics.jsonl (one object per logged iteration), TensorBoard event files, and, with
    `wandb` settings, Weights & Biases (the same scalars at the same steps, and the videos)."""

    def __init__(
        self,
        run_dir: Path,
        start_step: int = 0,
        wandb: WandbConfig | None = None,
        config: ConfigDict | None = None,
    ) -> None:
        # In the function: only a run that logs loads tensorboard (a deployment never does).
        from torch.utils.tensorboard import SummaryWriter

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
        """One iteration's scalars: a line of metrics.jsonl (non-finite values as null), and
        the finite ones to TensorBoard and W&B."""
        record: dict[str, float | None] = {
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
            import wandb  # in the function: an optional dependency

            self.wandb.log({tag: wandb.Video(str(mp4), format="mp4")}, step=step)
        from tensorboard.compat.proto.summary_pb2 import Summary  # as SummaryWriter above

        data, height, width = gif_bytes(frames, fps)
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=data)
        summary = Summary(value=[Summary.Value(tag=tag, image=image)])
        self.writer._get_file_writer().add_summary(summary, step)

    def close(self) -> None:
        """Flush and close the event files, metrics.jsonl and the W&B run."""
        self.writer.close()
        self.file.close()
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


WANDB_ID_FILE = "wandb_id"  # in the run directory: a resumed run continues its W&B run


def _wandb_run(run_dir: Path, settings: WandbConfig, config: ConfigDict) -> wandb.Run:
    """A W&B run for this run directory (the same one again on resume)."""
    try:
        import wandb  # in the function: an optional dependency
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


def trim_metrics(path: Path, max_step: int) -> int:
    """Keep the records of metrics.jsonl up to global step `max_step`; returns how many were dropped.

    A resumed run repeats the iterations after its checkpoint; without this they would be
    logged twice. A line torn by a kill (not valid JSON) is dropped too.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    lines = data.splitlines()
    keep = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("global_step", 0) <= max_step:
            keep.append(line + b"\n")
    dropped = len(lines) - len(keep)
    if dropped or (data and not data.endswith(b"\n")):
        atomic_write_bytes(path, b"".join(keep))
    return dropped
