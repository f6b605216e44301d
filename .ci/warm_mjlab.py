"""Build mjlab's Go1 velocity task once on the CPU and step it, with mjlab alone (the package
need not be importable yet): Warp compiles the task's kernels into its cache (~/.cache/warp,
or WARP_CACHE_PATH; about 30 s on a cold cache), and every mjlab test and training after it
loads them from there. `.ci/run` runs it beside the base suite."""

import mjlab.tasks  # noqa: F401  (importing it registers the tasks)
import torch
from mjlab.envs import ManagerBasedRlEnv
from mjlab.tasks import registry

cfg = registry.load_env_cfg("Mjlab-Velocity-Flat-Unitree-Go1", play=True)
cfg.scene.num_envs = 2
env = ManagerBasedRlEnv(cfg, device="cpu")
env.reset(seed=0)
for _ in range(2):
    env.step(torch.zeros(2, env.action_manager.total_action_dim))
env.close()
print("mjlab's Go1 task built and stepped: Warp's kernels are in its cache")
