"""Videos: mp4 files through imageio's ffmpeg plugin, and GIFs for TensorBoard."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import numpy as np

from embodied_ppo.core.errors import RenderError


# ------------------------------------------------------------------------------------ video
def _even(frame: np.ndarray) -> np.ndarray:
    """Pad odd heights/widths by one edge pixel: H.264 in yuv420p needs even sizes."""
    h, w = frame.shape[:2]
    if h % 2 or w % 2:
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    return frame


class VideoWriter:
    """An mp4 (H.264) written through imageio's ffmpeg plugin.

    Frames go to a hidden temporary file beside `path`, moved into place by :meth:`close`, so a
    failed or interrupted evaluation leaves no half-written video.
    """

    def __init__(self, path: Path, fps: float) -> None:
        try:  # in the function: imageio is loaded only where a video is written
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary the plugin needs)
        except ImportError:
            raise RenderError(
                "--video needs imageio and imageio-ffmpeg (dependencies of embodied-ppo): pip install imageio imageio-ffmpeg"
            ) from None
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.stem}.{os.getpid()}.partial.mp4")
        self.fps = fps
        self.frames = 0
        self.size: tuple[int, int] | None = None  # (width, height)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = imageio.get_writer(
                self.tmp,
                format="FFMPEG",
                mode="I",
                fps=fps,
                codec="libx264",
                pixelformat="yuv420p",
                macro_block_size=1,  # we keep sizes even ourselves; never rescale frames
                ffmpeg_log_level="error",
            )
        except OSError as exc:
            raise RenderError(f"cannot write video {self.path}: {exc}") from None

    def append(self, frame: np.ndarray) -> None:
        """Add an (H, W, 3 or 4) frame (alpha dropped, odd sizes padded); every frame must have
        the first one's size."""
        frame = _even(np.ascontiguousarray(frame[..., :3], dtype=np.uint8))
        size = (frame.shape[1], frame.shape[0])
        if self.size is None:
            self.size = size
        elif size != self.size:
            raise RenderError(f"rendered frames changed size from {self.size} to {size}")
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> Path:
        """Finish the file and move it to `path`."""
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file."""
        with contextlib.suppress(Exception):  # already failing; the partial file goes anyway
            self._writer.close()
        if self.tmp.exists():
            self.tmp.unlink()


def gif_bytes(
    frames: list[np.ndarray], fps: float, max_side: int = 240, max_frames: int = 200
) -> tuple[bytes, int, int]:
    """A small looping GIF of `frames` (subsampled in time and space) and its (height, width)."""
    import imageio.v3 as iio  # in the function: as in VideoWriter

    step_t = max(1, math.ceil(len(frames) / max_frames))
    h, w = frames[0].shape[:2]
    step_s = max(1, math.ceil(max(h, w) / max_side))
    small = np.stack([f[::step_s, ::step_s, :3] for f in frames[::step_t]])
    duration_ms = 1000.0 * step_t / fps
    data = iio.imwrite("<bytes>", small, extension=".gif", duration=duration_ms, loop=0)
    return data, small.shape[1], small.shape[2]
