"""embodied-ppo's own tasks: MuJoCo arms that reach and push, from joints and from pixels.

Importing this package registers the Gymnasium ids (embodied-ppo's environment layer imports
it before it makes an env, so the ids work in every command):

    EmbodiedPPO/Reach-v0        a three-joint arm moves its fingertip to a random target
    EmbodiedPPO/Push-v0         the arm pushes a free block to a goal on the table
    EmbodiedPPO/ReachPixels-v0  Reach, observed through a 64 x 64 camera plus the arm's joints

Each reports `info["is_success"]`, renders `rgb_array` frames and is seeded by `reset(seed=)`.

And partially observed classic-control tasks, for recurrent policies:

    EmbodiedPPO/CartPoleNoVel-v1  CartPole-v1 observing the cart position and pole angle only
    EmbodiedPPO/PendulumNoVel-v1  Pendulum-v1 observing cos and sin of the angle only

And a Go1-class quadruped that follows velocity commands (docs/legged.md), with the
sim-to-real toolkit of `embodied_ppo_envs.sim2real`:

    EmbodiedPPO/QuadrupedFlat-v0   flat ground, 20 s episodes
    EmbodiedPPO/QuadrupedRough-v0  slopes, stairs and obstacles with a terrain curriculum

each also a vector env of many robots stepped together (their `vector_entry_point`,
`quadruped_vector.QuadrupedVectorEnv`), which embodied-ppo's sync backend steps.

Bad task arguments raise `TaskConfigError` (a ValueError) whose `key` names the argument.
"""

from __future__ import annotations

import gymnasium as gym
from embodied_ppo_envs.taskconfig import TaskConfigError

__all__ = ["ARM_TASKS", "LEGGED_TASKS", "MEMORY_TASKS", "TASKS", "TaskConfigError"]

# id: (entry point, time limit in steps)
ARM_TASKS = {
    "EmbodiedPPO/Reach-v0": ("embodied_ppo_envs.reach:ReachEnv", 100),
    "EmbodiedPPO/Push-v0": ("embodied_ppo_envs.push:PushEnv", 150),
    "EmbodiedPPO/ReachPixels-v0": ("embodied_ppo_envs.reach_pixels:ReachPixelsEnv", 100),
}
MEMORY_TASKS = {
    "EmbodiedPPO/CartPoleNoVel-v1": ("embodied_ppo_envs.pomdp:cartpole_no_velocity", 500),
    "EmbodiedPPO/PendulumNoVel-v1": ("embodied_ppo_envs.pomdp:pendulum_no_velocity", 200),
}
TASKS = {**ARM_TASKS, **MEMORY_TASKS}
# id: (terrain, time limit in steps: 20 s at 50 Hz)
LEGGED_TASKS = {
    "EmbodiedPPO/QuadrupedFlat-v0": ("flat", 1000),
    "EmbodiedPPO/QuadrupedRough-v0": ("rough", 1000),
}

for _id, (_entry_point, _limit) in TASKS.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry_point, max_episode_steps=_limit)
for _id, (_terrain, _limit) in LEGGED_TASKS.items():
    if _id not in gym.registry:
        gym.register(
            _id,
            entry_point="embodied_ppo_envs.quadruped:QuadrupedEnv",
            vector_entry_point="embodied_ppo_envs.quadruped_vector:QuadrupedVectorEnv",
            max_episode_steps=_limit,
            kwargs={"terrain": _terrain},
        )
