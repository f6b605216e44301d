"""EmbodiedPPO/ReachPixels-v0: Reach, observed through a camera above the table."""

from __future__ import annotations

import copy
import os
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.camera import OffscreenCamera
from embodied_ppo_envs.reach import ReachEnv
from gymnasium import spaces

IMAGE_SIZE = 64
# Drawing detail of the camera's model: slices and stacks of the spheres and capsules (the
# target ball is ~4 pixels wide), and the table drawn as one quad per 0.4 m rather than a grid
# of 2 cm squares; its lighting comes from a directional light, so the grid added nothing.
CAMERA_SLICES, CAMERA_STACKS = 12, 6
TABLE_GRID = 0.4


def camera_model(model: mujoco.MjModel, image_size: int) -> mujoco.MjModel:
    """A copy of `model` for the policy's camera: the same scene, drawn at `image_size`.

    In a software renderer (llvmpipe, what headless machines without a GPU have) a 64x64
    frame of the full-detail scene takes ~0.6 ms, most of it the table's 1,600 textured quads
    and the fine spheres; drawn this way it takes ~0.13 ms and differs from it by ~7 grey
    levels (of 255) on average, in the table's shading and the outline of the balls.
    """
    model = copy.copy(model)  # MjModel's copy is a deep copy
    model.vis.global_.offwidth = model.vis.global_.offheight = image_size
    model.vis.quality.offsamples = 0
    model.vis.quality.shadowsize = 0
    model.vis.quality.numslices = CAMERA_SLICES
    model.vis.quality.numstacks = CAMERA_STACKS
    planes = model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE
    model.geom_size[planes, 2] = np.maximum(model.geom_size[planes, 2], TABLE_GRID)
    return model


class ReachPixelsEnv(ReachEnv):
    """Reach, where the target is seen, not given.

    Observation, a Dict:
      - "image": (64, 64, 3) uint8, channels last: the table from the camera straight above it
        (the target is the red ball);
      - "proprio": (9,) float32, what the arm senses of itself: cos and sin of its joint angles
        and its joint velocities / 10;
      - "privileged": (4,) float32, the fingertip and target positions: state a simulator knows
        and a real robot's camera does not, for a critic that may see more than the actor
        (model.critic_obs_keys).
    Reward, success (`success_distance`, 3 cm by default), episodes: as Reach.
    """

    def __init__(
        self,
        *,
        success_distance: float = 0.03,
        control_cost: float = 0.01,
        success_bonus: float = 1.0,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 480,
        image_size: int = IMAGE_SIZE,
        **mujoco_kwargs: Any,
    ) -> None:
        self.image_size = image_size
        self._camera: OffscreenCamera | None = None
        space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (image_size, image_size, 3), np.uint8),
                "proprio": spaces.Box(-np.inf, np.inf, (9,), np.float32),
                "privileged": spaces.Box(-np.inf, np.inf, (4,), np.float32),
            }
        )
        super().__init__(
            success_distance=success_distance,
            control_cost=control_cost,
            success_bonus=success_bonus,
            render_mode=render_mode,
            width=width,
            height=height,
            observation_space=space,
            task_kwargs={"image_size": image_size},
            **mujoco_kwargs,
        )

    def _image(self) -> np.ndarray:
        if self._camera is None:  # made on first use: a GL context per env
            # Mesa's software renderer splits each frame over worker threads, which for a
            # 64x64 frame cost more than they save (~0.33 ms a frame against ~0.14 ms without
            # them, measured on 2 cores); it reads this when its first context is made. A
            # value the user set is kept; a GPU driver ignores it.
            os.environ.setdefault("LP_NUM_THREADS", "0")
            # A copy of the model drawn for a small image: a framebuffer of the image's size,
            # no shadows, reflections or multisampling, and coarse meshes (the full-size
            # settings, for videos, take ~50 ms a frame in a software renderer). See
            # camera_model for what the meshes cost.
            self._camera = OffscreenCamera(
                camera_model(self.model, self.image_size),
                self.image_size,
                "top",
                flags_off=(mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION),
            )
        return self._camera.render(self.data)

    def _get_obs(self) -> dict[str, np.ndarray]:
        return {
            "image": self._image(),
            "proprio": self.arm_state().astype(np.float32),
            "privileged": np.concatenate([self.fingertip(), self.target()]).astype(np.float32),
        }

    def close(self) -> None:
        if self._camera is not None:
            self._camera.close()
            self._camera = None
        super().close()
