"""EmbodiedPPO/ReachPixels-v0: Reach, observed through a camera above the table."""

from __future__ import annotations

import copy
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.reach import ReachEnv
from gymnasium import spaces

IMAGE_SIZE = 64


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
        self._camera: mujoco.Renderer | None = None
        space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (image_size, image_size, 3), np.uint8),
                "proprio": spaces.Box(-np.inf, np.inf, (9,), np.float32),
                "privileged": spaces.Box(-np.inf, np.inf, (4,), np.float32),
            }
        )
        super().__init__(
            success_distance,
            control_cost,
            success_bonus,
            render_mode,
            width,
            height,
            observation_space=space,
            task_kwargs={"image_size": image_size},
            **mujoco_kwargs,
        )

    def _image(self) -> np.ndarray:
        if self._camera is None:  # made on first use: a GL context per env
            # A copy of the model with a framebuffer of the image's size and no shadows,
            # reflections or multisampling: a software renderer draws it in under a
            # millisecond (the full-size settings, for videos, take ~50 ms a frame).
            model = copy.copy(self.model)
            model.vis.global_.offwidth = model.vis.global_.offheight = self.image_size
            model.vis.quality.offsamples = 0
            model.vis.quality.shadowsize = 0
            self._camera = mujoco.Renderer(model, self.image_size, self.image_size)
        self._camera.update_scene(self.data, camera="top")
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            self._camera.scene.flags[flag] = False
        return self._camera.render().copy()

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
