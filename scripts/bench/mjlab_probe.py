"""Commanded against achieved velocity: an exported policy of an mjlab velocity task held to
fixed commands in mjlab, the same way whichever trainer made it.

    python -m scripts.bench.mjlab_probe POLICY.onnx [POLICY.onnx ...] \\
        --task Mjlab-Velocity-Flat-Unitree-Go1 --commands 0.5,0,0 1.0,0,0 1.5,0,0 0,0,0.5 \\
        --envs 64 --seconds 10 [--json OUT.json [OUT.json ...]]

POLICY.onnx is this package's export (`embodied-ppo export RUN --format onnx`) or the ONNX
file mjlab's rsl_rl training writes beside its checkpoints; a run directory (or a .pt checkpoint)
of this package is exported so first, in the probe's own process. The policy reads mjlab's actor
group (one input: that group; several: the groups by name) and returns the actions (an export
whose batch is fixed, as rsl_rl's is at one row, is called that many robots at a time). For each
command (vx, vy in m/s, yaw rate in rad/s, in the robot's frame), `--envs` robots of the task's
play configuration (no observation noise, no pushes, episodes without a time limit) are given
that command and nothing else for `--seconds`; reported are the mean and spread over the robots
of the velocity they achieved over the second half (after the gait settled), as mjlab measures
it (the root link's, in its own frame), and how many fell. `--task` defaults to the one the
export's JSON names. `--device cuda` steps mjlab on the GPU; the policy runs in onnxruntime on
the CPU either way (a probe, not a benchmark). Several policies of one task are probed in
one process (mjlab loaded once), each in fresh envs as if alone; `--json` then takes one file
per policy, in the same order.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from scripts.bench.lib import args as cli_args

MODULE = "scripts.bench.mjlab_probe"


def build_parser() -> cli_args.Parser:
    """The probe's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("policy", type=Path, nargs="+")
    p.add_argument("--task", help="the mjlab task id (default: the export's)")
    p.add_argument("--commands", nargs="+", default=["0.5,0,0", "1.0,0,0", "0,0,0.5"],
                   metavar="VX,VY,YAW")  # fmt: skip
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, nargs="+", help="write the rows here too (one per policy)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the probe with `argv` (the process's arguments when None)."""
    return cli_args.run_main(build_parser(), probe, argv)


def _commands(items: list[str]) -> list[tuple[float, float, float]]:
    out = []
    for item in items:
        parts = item.split(",")
        try:
            values = tuple(float(v) for v in parts)
        except ValueError:
            values = ()
        if len(values) != 3:
            raise cli_args.BadInput(f"--commands: got {item!r}; each is VX,VY,YAW")
        out.append(values)
    return out


def _onnx(policy: Path, out: Path) -> Path:
    """The ONNX file `policy` is, or where it is a run directory (or checkpoint) of this
    package: its export to `out` (`embodied-ppo export RUN --format onnx` in this process, which
    then loads mjlab once for the export and the probe)."""
    if not (policy.is_dir() or policy.suffix == ".pt"):
        return policy
    from embodied_ppo.app.export import export_policy
    from embodied_ppo.core.errors import UserError

    try:
        return Path(export_policy(policy, "onnx", out)[0])
    except UserError as exc:
        raise cli_args.BadInput(str(exc).splitlines()[0]) from None  # it names the path


def _task(args, policy: Path) -> str:
    if args.task:
        return args.task
    meta = policy.with_name(policy.name + ".json")
    if meta.is_file():
        block = json.loads(meta.read_text()).get("mjlab") or {}
        if block.get("task"):
            return str(block["task"])
    raise cli_args.BadInput(f"--task: {policy} has no export JSON naming its task; give --task")


def fixed_command_env(task: str, envs: int, command: tuple[float, float, float], device):
    """The task's play configuration with every robot commanded `command`, for good."""
    from embodied_ppo.config.building import from_dict
    from embodied_ppo.vecenv.mjlab_tasks import build, quietly, task_config

    cfg = from_dict({"env": {"id": task, "backend": "mjlab", "num_envs": envs},
                     "model": {"actor_obs_keys": ["actor"]},
                     "algorithm": {"minibatch_size": envs}}).env  # fmt: skip
    env_cfg = task_config(cfg, envs, 0, play=True)
    twist = env_cfg.commands["twist"]
    twist.heading_command, twist.ranges.heading = False, None
    twist.rel_standing_envs = twist.rel_world_envs = twist.rel_forward_envs = 0.0
    twist.init_velocity_prob = 0.0
    twist.resampling_time_range = (1e9, 1e9)
    vx, vy, yaw = command
    twist.ranges.lin_vel_x, twist.ranges.lin_vel_y, twist.ranges.ang_vel_z = (
        (vx, vx),
        (vy, vy),
        (yaw, yaw),
    )
    env_cfg.auto_reset = True  # a fallen robot starts again, and counts
    env = build(env_cfg, device)
    quietly(env.reset, seed=0)
    return env


def batched(session, rows: int, name: str = "the policy"):
    """The ONNX policy `name` as a function of its feed (input name -> float32 array of `rows`
    rows) returning its actions: one call where its inputs take any number of rows, calls of
    the batch its export fixed otherwise (rsl_rl's ONNX files take one row)."""
    import numpy as np

    fixed = {i.shape[0] for i in session.get_inputs() if isinstance(i.shape[0], int)}
    if not fixed:
        return lambda feed: session.run(None, feed)[0]
    size = fixed.pop()
    if fixed or rows % size:
        raise cli_args.BadInput(
            f"--envs {rows}: {name} takes batches of {size}; give a multiple of it"
        )

    def run(feed: dict) -> np.ndarray:
        parts = [session.run(None, {k: v[r : r + size] for k, v in feed.items()})[0]
                 for r in range(0, rows, size)]  # fmt: skip
        return np.concatenate(parts)

    return run


def run_one(session, policy, env, seconds: float) -> dict:
    """Drive `env` with the ONNX policy for `seconds` (`policy`: `batched(session, ...)`):
    the achieved velocities and falls."""
    import numpy as np
    import torch

    names = [i.name for i in session.get_inputs()]
    steps = max(2, round(seconds / env.step_dt))
    obs = env.observation_manager.compute()
    robot = env.scene["robot"]
    achieved, falls = [], 0
    for step in range(steps):
        feed = {
            n: obs["actor" if len(names) == 1 else n].cpu().numpy().astype(np.float32)
            for n in names
        }
        action = torch.as_tensor(policy(feed), device=env.device)
        obs, _, terminated, _, _ = env.step(action)
        falls += int(terminated.sum())
        if step >= steps // 2:
            velocity = torch.cat(
                [robot.data.root_link_lin_vel_b[:, :2], robot.data.root_link_ang_vel_b[:, 2:]], 1
            )
            achieved.append(velocity.cpu().numpy())
    per_robot = np.mean(achieved, axis=0)  # (envs, 3)
    return {
        "achieved": per_robot.mean(0).tolist(),
        "spread": per_robot.std(0).tolist(),
        "falls": falls,
    }


def probe(args) -> None:
    """Each policy, each command in turn; print the rows (and write them with --json)."""
    import onnxruntime as ort
    import torch

    if args.json is not None and len(args.json) != len(args.policy):
        raise cli_args.BadInput(
            f"--json: got {len(args.json)} files for {len(args.policy)} policies; give one each"
        )
    for policy in args.policy:
        if not policy.exists():
            raise cli_args.BadInput(f"{policy}: no such ONNX file or run directory")
    commands = _commands(args.commands)
    with tempfile.TemporaryDirectory() as work:
        files = [_onnx(p, Path(work) / f"{i}.onnx") for i, p in enumerate(args.policy)]
        tasks = [_task(args, f) for f in files]
        sessions = [ort.InferenceSession(str(f), providers=["CPUExecutionProvider"])
                    for f in files]  # fmt: skip
    runners = [
        batched(s, args.envs, p.name) for s, p in zip(sessions, args.policy, strict=True)
    ]  # refused before any env is built
    for i, policy in enumerate(args.policy):
        session, rows = sessions[i], []
        print(f"{policy.name} on {tasks[i]}, {args.envs} robots x {args.seconds:g} s a command:")
        print("| command vx, vy, yaw | achieved vx | achieved vy | achieved yaw | falls |")
        print("|---|---:|---:|---:|---:|")
        for command in commands:
            env = fixed_command_env(tasks[i], args.envs, command, torch.device(args.device))
            row = {"command": list(command), **run_one(session, runners[i], env, args.seconds)}
            env.close()
            rows.append(row)
            (a, s) = row["achieved"], row["spread"]
            print(f"| {command[0]:+.2f}, {command[1]:+.2f}, {command[2]:+.2f} | {a[0]:+.2f} ± {s[0]:.2f} "
                  f"| {a[1]:+.2f} ± {s[1]:.2f} | {a[2]:+.2f} ± {s[2]:.2f} | {row['falls']} |")  # fmt: skip
        if args.json:
            record = {"policy": str(policy), "task": tasks[i], "envs": args.envs,
                      "seconds": args.seconds, "rows": rows}  # fmt: skip
            args.json[i].write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
