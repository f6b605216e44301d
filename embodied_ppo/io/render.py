"""Headless rendering: choose an OpenGL backend for MuJoCo before it is needed.

MuJoCo picks its OpenGL platform from ``MUJOCO_GL`` (and PyOpenGL from ``PYOPENGL_PLATFORM``) when
``mujoco`` / ``OpenGL`` are first imported, and Gymnasium reads ``MUJOCO_GL`` when it creates its
first offscreen viewer. Without a display and without ``MUJOCO_GL`` Gymnasium tries GLFW first,
which fails on a headless machine, so :func:`configure_headless_gl` must run before any of that:
it respects an explicit ``MUJOCO_GL``, leaves machines with a display alone, and otherwise probes
EGL, then OSMesa, in a short subprocess (probing in-process would pin PyOpenGL to the first choice).

This module imports only the standard library, so callers can use it before anything else.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass

# Creates and frees a tiny context the way Gymnasium's offscreen viewer does.
_PROBE = "from mujoco.{backend} import GLContext\nc = GLContext(8, 8)\nc.make_current()\nc.free()\n"


INSTALL_HINT = (
    "install EGL (Debian/Ubuntu: apt-get install libegl1) or OSMesa (apt-get install libosmesa6) "
    "and set MUJOCO_GL=egl or MUJOCO_GL=osmesa, or run with a display"
)


@dataclass
class GLChoice:
    """What :func:`configure_headless_gl` decided, for messages."""

    backend: str | None  # the MUJOCO_GL value in effect, None = MuJoCo's default (GLFW)
    reason: str  # one short phrase: why this backend

    def hint(self) -> str:
        """Advice for a failed MuJoCo render, given this choice."""
        where = f"MUJOCO_GL={self.backend} ({self.reason})" if self.backend else self.reason
        return f"{where}; {INSTALL_HINT}"


_choice: GLChoice | None = None


def has_display() -> bool:
    """True on macOS/Windows and where an X11 or Wayland display is set."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def probe_backend(backend: str, timeout: float = 60.0) -> bool:
    """Whether MuJoCo can create an offscreen context with `backend` ("egl" or "osmesa")."""
    env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE.format(backend=backend)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


EGL_PLATFORM_DEVICE_EXT = 0x313F


def egl_device_initializes() -> bool:
    """Whether an EGL device of this machine initializes, as MuJoCo's EGL backend needs (the
    device platform, no display), checked through the EGL library directly: no PyOpenGL import,
    so no OpenGL platform is pinned in this process."""
    name = ctypes.util.find_library("EGL")
    if name is None:
        return False
    try:
        egl = ctypes.CDLL(name)
        egl.eglGetProcAddress.restype = ctypes.c_void_p
        egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        query_address = egl.eglGetProcAddress(b"eglQueryDevicesEXT")
        display_address = egl.eglGetProcAddress(b"eglGetPlatformDisplayEXT")
        if not query_address or not display_address:
            return False
        query = ctypes.CFUNCTYPE(
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
        )(query_address)
        platform_display = ctypes.CFUNCTYPE(
            ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)
        )(display_address)
        egl.eglInitialize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        egl.eglTerminate.argtypes = [ctypes.c_void_p]
        devices, count = (ctypes.c_void_p * 8)(), ctypes.c_int()
        if not query(8, devices, ctypes.byref(count)):
            return False
        for device in devices[: count.value]:
            display = platform_display(EGL_PLATFORM_DEVICE_EXT, device, None)
            if display and egl.eglInitialize(display, None, None):
                egl.eglTerminate(display)
                return True
    except (OSError, AttributeError):
        return False
    return False


def configure_headless_gl() -> GLChoice:
    """Set MUJOCO_GL (and PYOPENGL_PLATFORM, SDL_VIDEODRIVER) for offscreen rendering.

    Call before MuJoCo renders anything (ideally before ``mujoco`` is imported). Idempotent: the
    probe runs at most once per process.

    Returns:
        The choice made; its :meth:`GLChoice.hint` tells a user what to do when rendering fails.
    """
    global _choice
    if _choice is not None:
        return _choice
    if not has_display():
        # pygame (Gymnasium's classic-control renderer) otherwise probes X11/Wayland and prints
        # errors; its dummy driver renders rgb_array frames fine.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    current = os.environ.get("MUJOCO_GL", "").strip().lower()
    if current:
        _choice = GLChoice(current, "set in the environment")
    elif has_display():
        _choice = GLChoice(None, "a display is available")
    elif "OpenGL" in sys.modules:
        # PyOpenGL already chose its platform in this process; switching now would not take.
        _choice = GLChoice(None, "OpenGL was imported before a headless backend could be chosen")
    else:
        _choice = GLChoice(None, "no working EGL or OSMesa found")
        # An EGL device that initializes is what MuJoCo's EGL context starts from (checked in
        # this process in milliseconds); else a short subprocess tries each backend for real.
        fast = "egl" if egl_device_initializes() else None
        for backend in (fast,) if fast else ("egl", "osmesa"):
            if backend == fast or probe_backend(backend):
                os.environ["MUJOCO_GL"] = backend
                _choice = GLChoice(backend, "chosen automatically: no display")
                break
    if _choice.backend in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", _choice.backend)
    return _choice


# Words of the errors MuJoCo, GLFW and PyOpenGL raise when no OpenGL context can be made.
_GL_FAILURE = re.compile(r"\b(opengl|mjr_makecontext|glfw|egl\w*|osmesa|gl context)\b", re.I)


def gl_failure_hint(exc: BaseException) -> str | None:
    """What to set or install when `exc` is a failure to make an OpenGL context (None when it
    is something else): the MUJOCO_GL that works here, or the libraries to install."""
    if not _GL_FAILURE.search(f"{type(exc).__name__}: {exc}"):
        return None
    choice = configure_headless_gl()
    if choice.backend in ("egl", "osmesa"):
        return (
            f"rendering needs MUJOCO_GL={choice.backend} ({choice.reason}) set before MuJoCo "
            f"is imported: export MUJOCO_GL={choice.backend} before starting Python"
        )
    return f"rendering offscreen needs an OpenGL backend: {INSTALL_HINT}"
