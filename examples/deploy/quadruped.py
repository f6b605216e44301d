"""Drive the quadruped with an exported ONNX policy, the way a robot's control stack runs it.

Only mujoco, numpy and onnxruntime (and pyyaml, to read a run's config with `--config`): the
observation, the PD loop and the command logic are
written here for the robot, as firmware would be (nothing of embodied_ppo or its tasks is
imported; the robot's constants are repeated below on purpose, with where they come from).
The policy runs at 50 Hz on what the sensors give (IMU angular velocity and gravity direction,
joint encoders, the command), optionally with sensor noise and an action delay; a PD loop at
200 Hz turns its joint targets into motor torques. Each inference is timed and the latency
percentiles are printed at the end.

    embodied-ppo export runs/quadruped_flat --format onnx --out policy.onnx
    python examples/deploy/quadruped.py policy.onnx --seconds 10 --command 1.0 0 0
    python examples/deploy/quadruped.py policy.onnx --schedule 0,1,0,0 5,0,0,1 10,0,0,0 \\
        --noise joint_vel=1.5 --noise base_ang_vel=0.2 --delay 1 --record run.npz

The ONNX file's JSON (written beside it by `export`) names the policy's inputs; `--config`
takes the gains, action scale, sensor noise and delay of a run's config.yaml (its env.kwargs)
instead of the defaults below; `--record` saves every observation the policy was given and
every action it returned.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mujoco
import numpy as np
import onnxruntime as ort

MJCF = Path(__file__).resolve().parents[2] / "envs" / "assets" / "quadruped.xml"
# The robot, as its control stack knows it (the same numbers as the training task):
# standing pose per leg FR, FL, RR, RL (hip, thigh, knee; rad), legged_gym's A1 pose;
STAND = np.array([-0.1, 0.8, -1.5, 0.1, 0.8, -1.5, -0.1, 1.0, -1.5, 0.1, 1.0, -1.5])
# motor torque limits (N m), MuJoCo Menagerie's Go1; PD gains and action scale, MuJoCo
# Playground's Go1.
TORQUE_LIMIT = np.tile([23.7, 23.7, 35.55], 4)
KP, KD, ACTION_SCALE = 35.0, 0.5, 0.5
PHYSICS_DT, DECIMATION = 0.005, 4  # 200 Hz PD loop, 50 Hz policy
ACTION_CLIP = 5.0  # the action space's bounds
SENSOR_KEYS = (
    "base_ang_vel",
    "projected_gravity",
    "command",
    "joint_pos",
    "joint_vel",
    "last_action",
)


class Robot:
    """The simulated hardware: motors take torques, sensors give IMU and joint readings."""

    def __init__(self, mjcf: Path) -> None:
        self.model = mujoco.MjModel.from_xml_path(str(mjcf))
        self.model.opt.timestep = PHYSICS_DT
        self.data = mujoco.MjData(self.model)
        self._qinv = np.zeros(4)
        self._gravity = np.zeros(3)

    def stand(self, height: float = 0.34) -> None:
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[2] = height
        self.data.qpos[7:] = STAND
        mujoco.mj_forward(self.model, self.data)

    def imu(self) -> tuple[np.ndarray, np.ndarray]:
        """Angular velocity (rad/s) and the gravity direction, both in the trunk's frame."""
        mujoco.mju_negQuat(self._qinv, self.data.qpos[3:7])
        mujoco.mju_rotVecQuat(self._gravity, np.array([0.0, 0.0, -1.0]), self._qinv)
        return self.data.qvel[3:6].copy(), self._gravity.copy()

    def encoders(self) -> tuple[np.ndarray, np.ndarray]:
        """Joint angles (rad) and velocities (rad/s)."""
        return self.data.qpos[7:].copy(), self.data.qvel[6:].copy()

    def apply(self, torque: np.ndarray) -> None:
        self.data.ctrl[:] = torque
        mujoco.mj_step(self.model, self.data)

    def velocity(self) -> np.ndarray:
        """The trunk's true velocity (vx, vy in m/s in its frame, yaw rate in rad/s): the
        simulator's, for the report (a robot would estimate it)."""
        mujoco.mju_negQuat(self._qinv, self.data.qpos[3:7])
        linear = np.zeros(3)
        mujoco.mju_rotVecQuat(linear, self.data.qvel[:3], self._qinv)
        return np.array([linear[0], linear[1], self.data.qvel[5]])

    def tilt(self) -> float:
        """Angle (rad) between the trunk's vertical and the world's."""
        _, gravity = self.imu()
        return float(np.arccos(np.clip(-gravity[2], -1.0, 1.0)))


class PDController:
    """Joint torques from targets: clip(kp (target - q) - kd qd, limits)."""

    def __init__(self, kp: float, kd: float) -> None:
        self.kp, self.kd = kp, kd

    def torque(self, target: np.ndarray, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        return np.clip(self.kp * (target - q) - self.kd * qd, -TORQUE_LIMIT, TORQUE_LIMIT)


class OnnxPolicy:
    """The exported policy under onnxruntime, one observation at a time, timed."""

    def __init__(self, path: Path) -> None:
        meta_path = path.with_name(path.name + ".json")
        self.meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a control loop does not share its core
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        expected = self.meta.get("input_names", self.inputs)
        if sorted(self.inputs) != sorted(expected):
            raise SystemExit(f"{path}: inputs {self.inputs} differ from its JSON's {expected}")
        unknown = set(self.inputs) - set(SENSOR_KEYS)
        if unknown:
            raise SystemExit(f"{path}: the policy needs {sorted(unknown)}, which no sensor gives")
        self.latency: list[float] = []

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        feed = {k: obs[k][None].astype(np.float32) for k in self.inputs}
        start = time.perf_counter()
        (action,) = self.session.run(["action"], feed)
        self.latency.append(time.perf_counter() - start)
        return action[0]


class Commander:
    """The velocity command: a constant one, or a schedule of (time, vx, vy, yaw rate)."""

    def __init__(self, schedule: list[tuple[float, float, float, float]]) -> None:
        self.schedule = sorted(schedule)

    def at(self, t: float) -> np.ndarray:
        current = self.schedule[0][1:]
        for start, *command in self.schedule:
            if t + 1e-9 >= start:
                current = command
        return np.array(current, dtype=np.float64)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("policy", type=Path, help="the exported .onnx file")
    p.add_argument("--seconds", type=float, default=10.0, help="simulated time to run")
    p.add_argument("--command", type=float, nargs=3, default=None, metavar=("VX", "VY", "YAW"))
    p.add_argument(
        "--schedule", nargs="+", default=None, metavar="T,VX,VY,YAW", help="commands from time T"
    )
    p.add_argument(
        "--noise",
        action="append",
        default=[],
        metavar="KEY=SCALE",
        help="uniform sensor noise of half-width SCALE on an observation key",
    )
    p.add_argument("--delay", type=int, default=0, help="policy steps between inference and motors")
    p.add_argument("--kp", type=float, default=KP)
    p.add_argument("--kd", type=float, default=KD)
    p.add_argument("--action-scale", type=float, default=ACTION_SCALE)
    p.add_argument("--seed", type=int, default=0, help="seed of the sensor noise")
    p.add_argument("--realtime", action="store_true", help="pace the loop to the wall clock")
    p.add_argument("--record", type=Path, default=None, help="save observations and actions (.npz)")
    p.add_argument("--mjcf", type=Path, default=MJCF)
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a run's config.yaml: its env.kwargs' kp, kd, "
        "action_scale, noise and action_delay (flags given explicitly still win)",
    )
    args = p.parse_args()
    if args.config is not None:
        try:
            import yaml  # only for reading a run's config
        except ImportError:
            p.error("--config reads a run's config.yaml with pyyaml: pip install pyyaml")

        kwargs = (yaml.safe_load(args.config.read_text()).get("env") or {}).get("kwargs") or {}
        given = {a.split("=")[0] for a in __import__("sys").argv[1:] if a.startswith("--")}
        for name, flag in (("kp", "--kp"), ("kd", "--kd"), ("action_scale", "--action-scale")):
            if name in kwargs and flag not in given:
                setattr(args, name, float(kwargs[name]))
        if "--noise" not in given:
            noise = (kwargs.get("noise") or {}).items()
            args.noise = [f"{k}={v}" for k, v in noise if k in SENSOR_KEYS]
        delay = kwargs.get("action_delay", 0)
        if "--delay" not in given:
            # A range of delays in training: deploy with the largest.
            args.delay = int(max(delay) if isinstance(delay, list) else delay)
    return args


def main() -> None:
    args = parse_args()
    if args.schedule:
        schedule = [tuple(float(v) for v in item.split(",")) for item in args.schedule]
        if any(len(row) != 4 for row in schedule):
            raise SystemExit("--schedule: each entry is T,VX,VY,YAW")
    else:
        schedule = [(0.0, *(args.command or (0.5, 0.0, 0.0)))]
    noise = {}
    for item in args.noise:
        key, _, scale = item.partition("=")
        if key not in SENSOR_KEYS:
            raise SystemExit(f"--noise: {key!r} is not a sensor key ({', '.join(SENSOR_KEYS)})")
        noise[key] = float(scale)
    if args.delay < 0:
        raise SystemExit("--delay: must be >= 0 policy steps")

    robot = Robot(args.mjcf)
    pd = PDController(args.kp, args.kd)
    policy = OnnxPolicy(args.policy)
    commander = Commander(schedule)
    rng = np.random.default_rng(args.seed)
    robot.stand()
    last_action = np.zeros(12)
    pending = [np.zeros(12)] * args.delay  # actions on their way to the motors
    record: dict[str, list[np.ndarray]] = {k: [] for k in (*SENSOR_KEYS, "action")}
    measured = []  # the true velocity after each policy step
    commanded = []  # the command of each policy step
    steps = round(args.seconds / (PHYSICS_DT * DECIMATION))
    wall = time.perf_counter()
    fell_at = None
    for step in range(steps):
        t = step * PHYSICS_DT * DECIMATION
        gyro, gravity = robot.imu()
        q, qd = robot.encoders()
        obs = {
            "base_ang_vel": gyro,
            "projected_gravity": gravity,
            "command": commander.at(t),
            "joint_pos": q - STAND,
            "joint_vel": qd,
            "last_action": last_action.copy(),
        }
        for key, scale in noise.items():
            obs[key] = obs[key] + rng.uniform(-scale, scale, obs[key].shape)
        obs = {k: v.astype(np.float32) for k, v in obs.items()}
        action = np.clip(policy(obs).astype(np.float64), -ACTION_CLIP, ACTION_CLIP)
        for key in SENSOR_KEYS:
            record[key].append(obs[key])
        record["action"].append(action.astype(np.float32))
        last_action = action
        pending.append(action)
        applied = pending.pop(0)
        target = STAND + args.action_scale * applied
        for _ in range(DECIMATION):
            q, qd = robot.encoders()
            robot.apply(pd.torque(target, q, qd))
        measured.append(robot.velocity())
        commanded.append(obs["command"].astype(np.float64))
        if fell_at is None and robot.tilt() > 1.0:
            fell_at = t
        if args.realtime:
            time.sleep(max(0.0, wall + (step + 1) * PHYSICS_DT * DECIMATION - time.perf_counter()))

    latency = np.array(policy.latency) * 1e3
    base = robot.data.qpos
    print(
        f"ran {steps} policy steps ({args.seconds:g} s simulated) in "
        f"{time.perf_counter() - wall:.2f} s; trunk at x {base[0]:.2f} m, y {base[1]:.2f} m"
        + (f"; fell at {fell_at:.2f} s" if fell_at is not None else "")
    )
    print(
        f"inference latency: p50 {np.percentile(latency, 50):.3f} ms, "
        f"p99 {np.percentile(latency, 99):.3f} ms, max {latency.max():.3f} ms"
    )
    # Tracking over the whole run, as training measures it: the mean over policy steps of the
    # linear velocity's error (vx, vy) and of the yaw rate's.
    error = np.asarray(commanded) - np.asarray(measured)
    print(
        f"tracking error over the run: {np.mean(np.hypot(error[:, 0], error[:, 1])):.3f} m/s, "
        f"{np.mean(np.abs(error[:, 2])):.3f} rad/s"
    )
    # Tracking per command of the schedule, over the second half of its span (after the gait
    # has settled); commands the run ended before are left out.
    dt = PHYSICS_DT * DECIMATION
    times = [row[0] for row in commander.schedule] + [steps * dt]
    for (start, *command), end in zip(commander.schedule, times[1:]):
        end = min(end, steps * dt)
        lo, hi = round((start + end) / 2 / dt), round(end / dt)
        if hi > lo:
            mean = np.mean(measured[lo:hi], axis=0)
            print(
                f"  command vx {command[0]:+.2f} vy {command[1]:+.2f} yaw {command[2]:+.2f} "
                f"from {start:g} s: measured vx {mean[0]:+.2f} vy {mean[1]:+.2f} "
                f"yaw {mean[2]:+.2f} (mean over {(hi - lo) * dt:.1f} s)"
            )
    if args.record is not None:
        np.savez(args.record, **{k: np.stack(v) for k, v in record.items()})
        print(f"recorded {steps} observations and actions to {args.record}")


if __name__ == "__main__":
    main()
