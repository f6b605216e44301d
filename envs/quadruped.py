"""EmbodiedPPO/QuadrupedFlat-v0 and QuadrupedRough-v0: a Go1-class quadruped follows velocity
commands, trained with the tools that carry a policy to hardware.

The task is put together from its parts, one job each: the robots in MuJoCo and their joint
controllers (`quadruped_robot`), the observation (`quadruped_observations`), the reward and
the episode log (`quadruped_rewards`), the commands (`commands`), the terrain (`terrain`) and
the sim-to-real tools (`randomizer`, `randomization`), stepped together by
`quadruped_batch.QuadrupedBatch` over any number of envs. `QuadrupedEnv` here is one env (a
batch of one); `quadruped_vector.QuadrupedVectorEnv` steps many at once, each exactly as this
env steps it. The policy acts at 50 Hz on joint controllers of 200 Hz (see `quadruped_robot`).

Episodes end on a fall (trunk or hip on the ground, or a tilt beyond `fall_tilt`) and
are truncated by the registered time limit (1000 steps, 20 s). `info["log"]` holds, at every
step, the episode's values so far (see `quadruped_rewards`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from embodied_ppo_envs.camera import OffscreenCamera
from embodied_ppo_envs.quadruped_batch import ACTION_BOUND, QuadrupedBatch
from embodied_ppo_envs.quadruped_mirror import MIRROR
from embodied_ppo_envs.quadruped_observations import observation_space
from embodied_ppo_envs.quadruped_settings import parse_settings
from gymnasium import spaces

# What a training's progress line shows beside the return (mean of the last 100 episodes of
# each info["log"] key): how well the robot tracks its commands, and falls.
PROGRESS_METRICS = {
    "metrics/tracking_error_lin": "velocity error {:.3f} m/s",
    "metrics/tracking_error_yaw": "yaw rate error {:.3f} rad/s",
    "metrics/fall_rate": "falls {:.0%}",
    "metrics/terrain_level": "terrain level {:.1f}",
}


def action_space() -> spaces.Box:
    """12 joint-target offsets; policies rarely leave +-5 (+-2.5 rad at scale 0.5)."""
    return spaces.Box(-ACTION_BOUND, ACTION_BOUND, (12,), np.float32)


class QuadrupedEnv(gym.Env):
    """A Go1-class quadruped that follows velocity commands (see the module docstring).

    Keyword arguments (checked by `quadruped_settings.parse_settings`; an error names its key):
        terrain: "flat" or "rough"; `terrain_options` configure the rough terrain (terrain.py).
        commands: command ranges ([low, high] for lin_vel_x, lin_vel_y, yaw_rate), resample_s,
            stand_prob, zero_prob (per component) and curriculum (true, or {initial, step,
            max_error}).
        command_schedule: [[time_s, vx, vy, yaw_rate], ...] replaces random commands.
        rewards: weights by term (merged over `REWARD_TERMS`; an unknown term is refused).
        tracking_sigma: width of the tracking kernels ((m/s)^2 and (rad/s)^2).
        only_positive_rewards: clip a negative step reward to 0 (before the termination term).
        randomization: friction, added_mass, com_offset, motor_strength, kp_scale, kd_scale,
            push_interval_s, push_velocity (see randomizer.parse_randomization).
        noise: observation key -> noise scale (units of the key); noise_distribution: uniform
            (half-width) or gaussian (std).
        action_delay: k (a delay of 0..k policy steps drawn per episode) or [low, high].
        action_scale, kp, kd: the joint targets' scale and the controllers' gains.
        fall_tilt: tilt (rad) beyond which the episode ends as a fall.
        fall_contacts: the links whose touching the ground ends the episode as a fall (trunk,
            hip, thigh, calf); the other leg links' contacts are collisions. legged_gym's A1
            ends episodes on trunk contact only: a knee on the ground is not yet a fall.
        base_height_target: trunk height above the feet (m) the base_height term asks for
            (0.27 m on the standing pose's targets, the knees sagging under the trunk's weight).
        air_time_target: the air time (s) a step must last for the feet_air_time term to be
            positive (legged_gym: 0.5 s; MuJoCo Playground's Go1: 0.1 s).
        physics: "accurate" (every link touches the ground, the solver converges) or "fast"
            (MuJoCo Playground's Go1 setup: see `quadruped_robot.PHYSICS`).

    Args:
        render_mode, width, height, camera_name: `rgb_array` frames (camera "track" follows
            the robot).
    """

    metadata = {
        "render_modes": ["rgb_array"],
        "render_fps": 50,
        "progress_metrics": PROGRESS_METRICS,
        "mirror": MIRROR,  # its left-right symmetry (quadruped_mirror.py)
    }

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 360,
        camera_name: str = "track",
        **task: Any,
    ) -> None:
        self.settings = parse_settings(**task)
        self.batch = QuadrupedBatch(self.settings, 1)
        b = self.batch
        self.model, self.data = b.robots.models[0], b.robots.datas[0]
        self.dt, self.terrain, self.trunk = b.dt, b.terrain, b.robots.trunk
        self.randomizer, self.commands, self.delay = b.randomizers[0], b.commands, b.delay
        self.observation_space = observation_space()
        self.action_space = action_space()
        self._np_random = b.np_random[0]
        self.render_mode = render_mode
        self.width, self.height, self.camera_name = width, height, camera_name
        self._renderer: OffscreenCamera | None = None

    @property
    def action(self) -> np.ndarray:
        """The policy's last action (clipped to the action space), (12,)."""
        return self.batch.action[0]

    @property
    def level(self) -> int:
        """The terrain curriculum's level (rough)."""
        return int(self.batch.level[0])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """A new episode (reseeded with `seed`: every generator, the curricula from the start)."""
        super().reset(seed=seed)
        obs = self.batch.reset_rows([0], [seed])
        self._np_random = self.batch.np_random[0]  # env.np_random: the spawn poses' generator
        return {k: v[0] for k, v in obs.items()}, {"log": self.batch.log(0)}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        """One policy step (the registered time limit truncates: gymnasium's TimeLimit)."""
        obs, reward, fell = self.batch.step(np.asarray(action)[None])
        out = {k: v[0] for k, v in obs.items()}
        return out, float(reward[0]), bool(fell[0]), False, {"log": self.batch.log(0)}

    # ================================================================= exact resume
    def state_dict(self) -> dict[str, Any]:
        """Everything the episode depends on (`QuadrupedBatch.state_dict`)."""
        return self.batch.state_dict(0)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` exactly (the model's randomized values included)."""
        self.batch.load_state_dict(0, state)
        self._np_random = self.batch.np_random[0]

    # ================================================================= frames
    def render(self) -> np.ndarray | None:
        """The `rgb_array` frame of the state now (None in any other render mode)."""
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            # Its GL context is made with the backend chosen when it renders first (EGL or
            # OSMesa without a display), not the one MuJoCo fixed when it was imported.
            self._renderer = OffscreenCamera(
                self.model, (self.width, self.height), self.camera_name
            )
        return self._renderer.render(self.data)

    def close(self) -> None:
        """Free the renderer's GL context."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.batch.close()
