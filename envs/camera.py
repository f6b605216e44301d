"""A camera that renders offscreen, for environments that observe images.

Its OpenGL context is made on the first frame, with the backend chosen for a headless machine
when there is no display (EGL, then OSMesa; an explicit MUJOCO_GL is always respected), so a
pixel task trains on a server however MuJoCo was imported first. Frames are those of
`mujoco.Renderer` (the same scene update, render and read-back).

GL contexts outlive their owners' `close()` when a script forgets it; `close_at_exit` frees
them while the GL library can still free them (see there).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import weakref
from typing import Protocol

import mujoco
import numpy as np

from embodied_ppo.io.render import configure_headless_gl, gl_failure_hint

# MUJOCO_GL -> the module of MuJoCo's bindings whose GLContext it names.
_CONTEXTS = {"egl": "mujoco.egl", "osmesa": "mujoco.osmesa", "glfw": "mujoco.glfw"}


class Closable(Protocol):
    """Something that owns GL contexts and frees them in `close()`."""

    def close(self) -> None: ...


_OPEN: weakref.WeakSet[Closable] = weakref.WeakSet()


def _close_open() -> None:
    for owner in list(_OPEN):
        with contextlib.suppress(Exception):  # at exit, nothing is left to report to
            owner.close()


def close_at_exit(owner: Closable) -> None:
    """Close `owner` at interpreter exit, unless it is gone or closed by then.

    MuJoCo's EGL module terminates its display in an exit handler that it registers with its
    first context; a context freed after that (by a destructor, at the end of a script that
    never closed its env) raises EGLError while Python shuts down. Exit handlers run last
    registered first, so registering this one again after each new context puts it ahead.
    """
    _OPEN.add(owner)
    atexit.unregister(_close_open)
    atexit.register(_close_open)


class CameraError(RuntimeError):
    """No OpenGL context could be made for the camera; the message says what to set."""


def gl_context(width: int, height: int) -> object:
    """An OpenGL context of the backend MUJOCO_GL names (chosen here when it is unset and there
    is no display), made current."""
    configure_headless_gl()
    backend = os.environ.get("MUJOCO_GL", "").strip().lower() or "glfw"
    try:
        context = importlib.import_module(_CONTEXTS.get(backend, "mujoco.glfw")).GLContext(
            width, height
        )
        context.make_current()
    except Exception as exc:
        hint = gl_failure_hint(exc) or f"MUJOCO_GL={backend}"
        text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        raise CameraError(
            f"cannot render offscreen ({type(exc).__name__}: {text}); {hint}"
        ) from None
    return context


class OffscreenCamera:
    """Frames (height, width, 3) uint8 of one camera of `model`, rendered offscreen.

    Args:
        model: the model to draw (its offscreen framebuffer must be at least the frame's size).
        size: the frame's width and height, or one number for a square frame.
        camera: the name of one of its cameras.
        flags_off: scene render flags to turn off (e.g. shadows and reflections).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        size: int | tuple[int, int],
        camera: str,
        flags_off: tuple[int, ...] = (),
    ) -> None:
        width, height = (size, size) if isinstance(size, int) else size
        self.model, self.width, self.height, self.flags_off = model, width, height, flags_off
        camera_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if camera_id < 0:
            raise ValueError(f"the model has no camera {camera!r}")
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self.camera.fixedcamid = camera_id
        self.scene = mujoco.MjvScene(model=model, maxgeom=10000)
        self.option = mujoco.MjvOption()
        self.rect = mujoco.MjrRect(0, 0, width, height)
        self.pixels = np.empty((height, width, 3), dtype=np.uint8)
        self._context: object | None = None
        self._mjr: mujoco.MjrContext | None = None

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """The camera's frame of `data` now, (height, width, 3) uint8, top row first."""
        if self._context is None:
            self._context = gl_context(self.width, self.height)
            self._mjr = mujoco.MjrContext(self.model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self._mjr)
            close_at_exit(self)
        # Every frame: another context (a viewer's) may have been made current since the last.
        self._context.make_current()
        everything = mujoco.mjtCatBit.mjCAT_ALL.value
        mujoco.mjv_updateScene(
            self.model, data, self.option, None, self.camera, everything, self.scene
        )
        for flag in self.flags_off:
            self.scene.flags[flag] = False
        mujoco.mjr_render(self.rect, self.scene, self._mjr)
        mujoco.mjr_readPixels(self.pixels, None, self.rect, self._mjr)
        return np.flipud(self.pixels).copy()

    def close(self) -> None:
        """Free the OpenGL resources (now, while the GL library is loaded)."""
        if self._mjr is not None:
            self._mjr.free()
            self._mjr = None
        if self._context is not None:
            self._context.free()
            self._context = None
