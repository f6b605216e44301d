"""A camera that renders offscreen, for environments that observe images.

Its OpenGL context is made on the first frame, with the backend chosen for a headless machine
when there is no display (EGL, then OSMesa; an explicit MUJOCO_GL is always respected), so a
pixel task trains on a server however MuJoCo was imported first. Frames are those of
`mujoco.Renderer` (the same scene update, render and read-back).
"""

from __future__ import annotations

import importlib
import os

import mujoco
import numpy as np

from embodied_ppo.io.render import configure_headless_gl, gl_failure_hint

# MUJOCO_GL -> the module of MuJoCo's bindings whose GLContext it names.
_CONTEXTS = {"egl": "mujoco.egl", "osmesa": "mujoco.osmesa", "glfw": "mujoco.glfw"}


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
    """Frames (size, size, 3) uint8 of one camera of `model`, rendered offscreen.

    Args:
        model: the model to draw (its offscreen framebuffer must be at least `size`).
        camera: the name of one of its cameras.
        flags_off: scene render flags to turn off (e.g. shadows and reflections).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        size: int,
        camera: str,
        flags_off: tuple[int, ...] = (),
    ) -> None:
        self.model, self.size, self.flags_off = model, size, flags_off
        camera_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if camera_id < 0:
            raise ValueError(f"the model has no camera {camera!r}")
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self.camera.fixedcamid = camera_id
        self.scene = mujoco.MjvScene(model=model, maxgeom=10000)
        self.option = mujoco.MjvOption()
        self.rect = mujoco.MjrRect(0, 0, size, size)
        self.pixels = np.empty((size, size, 3), dtype=np.uint8)
        self._context: object | None = None
        self._mjr: mujoco.MjrContext | None = None

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """The camera's frame of `data` now, (size, size, 3) uint8, top row first."""
        if self._context is None:
            self._context = gl_context(self.size, self.size)
            self._mjr = mujoco.MjrContext(self.model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self._mjr)
        self._context.make_current()
        mujoco.mjv_updateScene(
            self.model, data, self.option, None, self.camera, mujoco.mjtCatBit.mjCAT_ALL.value,
            self.scene,
        )  # fmt: skip
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
