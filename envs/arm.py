"""The arm the tasks share: a planar three-joint arm on a table, torque-controlled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.camera import close_at_exit
from gymnasium import spaces, utils
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

from embodied_ppo.io.render import configure_headless_gl

ASSETS = Path(__file__).resolve().parent / "assets"
FRAME_SKIP = 4  # 4 x 5 ms: the policy acts at 50 Hz
VIEW_CAMERA = {"distance": 0.9, "elevation": -50.0, "azimuth": 90.0, "lookat": np.zeros(3)}


class ArmEnv(MujocoEnv, utils.EzPickle):
    """A MuJoCo task around the arm of assets/arm_common.xml.

    Actions are the three joint torques, scaled to [-1, 1]. Subclasses set the observation
    space, the initial state (`reset_model`) and the reward (`step`).

    `task_kwargs` are the subclass's own arguments, recorded so that a pickled env is rebuilt
    with them. Every other keyword goes to Gymnasium's `MujocoEnv`, as in Gymnasium's own
    MuJoCo tasks: `camera_name` or `camera_id` (the camera of `rgb_array` frames, e.g. "top"),
    `default_camera_config` (replaces the overhead view), `max_geom`, `visual_options`; an
    unknown keyword is refused there with a TypeError.
    """

    metadata = {
        "render_modes": ["human", "rgb_array", "depth_array", "rgbd_tuple"],
        "render_fps": 50,
    }

    def __init__(
        self,
        xml: str,
        observation_space: spaces.Space,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 480,
        task_kwargs: dict[str, Any] | None = None,
        **mujoco_kwargs: Any,
    ) -> None:
        utils.EzPickle.__init__(
            self,
            render_mode=render_mode,
            width=width,
            height=height,
            **(task_kwargs or {}),
            **mujoco_kwargs,
        )
        MujocoEnv.__init__(
            self,
            str(ASSETS / xml),
            FRAME_SKIP,
            observation_space=observation_space,
            render_mode=render_mode,
            width=width,
            height=height,
            **{"default_camera_config": VIEW_CAMERA, **mujoco_kwargs},
        )
        self.tip_site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "fingertip")
        self.arm_joints = 3  # qpos[:3] / qvel[:3]: shoulder, elbow, wrist

    def render(self) -> np.ndarray | None:
        """A frame of the render mode (`rgb_array`: (height, width, 3) uint8), from any state.

        On a machine without a display the viewer renders through EGL or OSMesa (chosen as the
        commands choose). A task that observes pixels makes its camera's GL context current
        for each observation, so the viewer's is made current again before it draws (else it
        would draw into the camera's context and read back black frames).
        """
        configure_headless_gl()
        viewer = self.mujoco_renderer.viewer
        if viewer is not None:
            viewer.make_context_current()
        frame = super().render()
        if viewer is None:  # the viewer was made just now: free its context before EGL's exit
            close_at_exit(self)
        return frame

    def arm_state(self) -> np.ndarray:
        """cos and sin of the joint angles, and the joint velocities (scaled): (9,)."""
        q = self.data.qpos[: self.arm_joints]
        qd = self.data.qvel[: self.arm_joints]
        return np.concatenate([np.cos(q), np.sin(q), 0.1 * qd])

    def fingertip(self) -> np.ndarray:
        """The fingertip's position on the table (x, y)."""
        return self.data.site_xpos[self.tip_site, :2].copy()

    def set_target(self, xy: np.ndarray, z: float | None = None) -> None:
        """Move the target (Reach) or goal (Push) marker; it has no physical effect, but what
        is drawn (and what a camera sees) follows at once."""
        self.data.mocap_pos[0, :2] = xy
        if z is not None:
            self.data.mocap_pos[0, 2] = z
        mujoco.mj_forward(self.model, self.data)

    def target(self) -> np.ndarray:
        return self.data.mocap_pos[0, :2].copy()

    def sample_point(self, radius: tuple[float, float], angle: tuple[float, float]) -> np.ndarray:
        """A point of the annulus sector radius x angle (uniform over its area)."""
        r = np.sqrt(self.np_random.uniform(radius[0] ** 2, radius[1] ** 2))
        a = self.np_random.uniform(*angle)
        return np.array([r * np.cos(a), r * np.sin(a)])

    def set_arm(self, qpos: np.ndarray, noise: float) -> None:
        """Joint angles `qpos` plus uniform noise, at rest; the rest of the state as in the model."""
        q = self.init_qpos.copy()
        v = self.init_qvel.copy()
        q[: self.arm_joints] = qpos + self.np_random.uniform(-noise, noise, self.arm_joints)
        self.set_state(q, v)
