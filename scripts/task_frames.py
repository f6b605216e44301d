"""Render a frame of each of the project's tasks (for the README): after `--steps` steps of a
trained policy when a run directory is given, else of the reset state.

    python scripts/task_frames.py --out docs/images
    python scripts/task_frames.py --run EmbodiedPPO/Reach-v0=runs/reach --out docs/images
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")


def main() -> None:
    import embodied_ppo_envs
    import gymnasium as gym
    import imageio.v3 as iio
    import numpy as np

    import embodied_ppo

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="docs/images")
    p.add_argument("--run", action="append", default=[], metavar="ENV_ID=RUN_DIR")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    runs = dict(item.split("=", 1) for item in args.run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for env_id in embodied_ppo_envs.ARM_TASKS:
        env = gym.make(env_id, render_mode="rgb_array", width=320, height=240)
        obs, _ = env.reset(seed=args.seed)
        if env_id in runs:
            policy = embodied_ppo.load_policy(runs[env_id])
            for _ in range(args.steps):
                obs, *_ = env.step(policy(obs))
        frame = env.render()
        name = env_id.split("/")[1].split("-")[0].lower()
        iio.imwrite(out / f"{name}.png", np.ascontiguousarray(frame))
        if isinstance(obs, dict) and "image" in obs:  # what the policy sees, enlarged
            big = np.kron(obs["image"], np.ones((4, 4, 1), dtype=np.uint8))
            iio.imwrite(out / f"{name}_camera.png", big)
        env.close()
        print(f"wrote {out / name}.png")


if __name__ == "__main__":
    main()
