"""Render a frame of each of the project's tasks (for the README): after `--steps` steps of a
trained policy when a run directory is given, else of the reset state. `--env` renders other
tasks instead; `--strip K` puts K frames side by side, `--gap` steps apart (a gait, not a pose);
`--set KEY=YAML` passes a task argument (the quadruped's command schedule, say).

    python scripts/task_frames.py --out docs/images
    python scripts/task_frames.py --run EmbodiedPPO/Reach-v0=runs/reach --out docs/images
    python scripts/task_frames.py --env Humanoid-v5 --run Humanoid-v5=runs/humanoid \\
        --steps 300 --strip 4 --gap 8 --camera track --out docs/images
    python scripts/task_frames.py --env EmbodiedPPO/QuadrupedFlat-v0 \\
        --run EmbodiedPPO/QuadrupedFlat-v0=runs/quadruped_flat --steps 100 --strip 5 --gap 3 \\
        --set "command_schedule=[[0, 1.0, 0, 0]]" --out docs/images
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
    import yaml

    import embodied_ppo

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="docs/images")
    p.add_argument("--run", action="append", default=[], metavar="ENV_ID=RUN_DIR")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--env", nargs="+", default=None, help="env ids (default: the arm tasks)")
    p.add_argument("--strip", type=int, default=1, help="frames side by side")
    p.add_argument("--gap", type=int, default=10, help="steps between the strip's frames")
    p.add_argument(
        "--camera",
        default=None,
        help="a named camera of the model (Humanoid's 'track' follows the body; the default "
        "camera stays where the episode began)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=YAML", help="task argument")
    args = p.parse_args()
    kwargs = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    runs = dict(item.split("=", 1) for item in args.run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for env_id in args.env or embodied_ppo_envs.ARM_TASKS:
        camera = {"camera_name": args.camera} if args.camera else {}
        env = gym.make(env_id, render_mode="rgb_array", width=320, height=240, **camera, **kwargs)
        obs, _ = env.reset(seed=args.seed)
        policy = embodied_ppo.load_policy(runs[env_id]) if env_id in runs else None
        first = args.steps if policy is not None else 0  # untrained: the reset state
        frames, k, ended = [], 0, False
        while len(frames) < args.strip and not ended:
            if k >= first and (k - first) % args.gap == 0:
                frames.append(env.render())
                if len(frames) == args.strip:
                    break
            action = policy(obs) if policy is not None else np.zeros(env.action_space.shape)
            obs, _, terminated, truncated, _ = env.step(action)
            ended, k = terminated or truncated, k + 1
        if not frames:  # the episode ended before --steps: its last state
            frames.append(env.render())
        frame = np.concatenate(frames, axis=1)
        name = env_id.split("/")[-1].split("-")[0].lower()
        iio.imwrite(out / f"{name}.png", np.ascontiguousarray(frame))
        if isinstance(obs, dict) and "image" in obs:  # what the policy sees, enlarged
            big = np.kron(obs["image"], np.ones((4, 4, 1), dtype=np.uint8))
            iio.imwrite(out / f"{name}_camera.png", big)
        env.close()
        print(f"wrote {out / name}.png")


if __name__ == "__main__":
    main()
