"""Run a policy trained on an mjlab velocity task in plain MuJoCo: sim-to-sim.

Only mujoco, numpy and onnxruntime: nothing of embodied_ppo or mjlab is imported. What the
loop must reproduce of the task comes with the export (`embodied-ppo export RUN --format onnx
--out policy.onnx` on a run of env.backend mjlab): policy.onnx.json's "mjlab" block and the
task's own MuJoCo model beside it (policy.onnx.mjb: mjlab's scene of the robot from its
install, with its actuators and the task's physics options). The loop builds each
observation term as mjlab does (joint order, default pose, scales, clips, history, the last
action, the command), turns the policy's actions into the actuators' controls as mjlab's action
terms do (scale, offset, clip; the actuators' own PD in the model), and steps the physics at the
task's rates (`decimation` physics steps of `physics_dt` a policy step). Observation noise and
the encoder bias of training are not applied: they stand for a robot's sensors, which the
simulation's exact state replaces here.

It reports how well the robot tracks the command (the error of the trunk's velocity in its own
frame against the command, per step, as mjlab's twist metrics measure it) and its falls (the
trunk tilted past mjlab's fall limit: the robot starts again from its start pose):

    embodied-ppo export runs/go1 --format onnx --out go1.onnx
    python examples/deploy/mjlab_velocity.py go1.onnx --seconds 20 --command 1.0 0 0
    python examples/deploy/mjlab_velocity.py go1.onnx --schedule 0,0.5,0,0 10,0,0,0.5

Bad input (a directory that is not an export, a run directory not exported yet, an export of
another kind of task or one whose policy reads an observation this loop does not compute) is
one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import mujoco
import numpy as np
import onnxruntime as ort

# The observation functions this loop computes, by mjlab's names.
SUPPORTED = (
    "builtin_sensor", "projected_gravity", "joint_pos_rel", "joint_vel_rel", "last_action",
    "generated_commands", "base_lin_vel", "base_ang_vel",
)  # fmt: skip
VELOCITY_COMMANDS = ("UniformVelocityCommand",)


def fail(message: str) -> None:
    """One line on stderr, exit status 2."""
    print(f"mjlab_velocity: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_export(path: Path) -> tuple[dict, Path]:
    """The export's JSON (with its "mjlab" block) and the ONNX file; one line where it is not
    one this loop can run."""
    if path.is_dir():
        if (path / "config.yaml").is_file() and (path / "checkpoints").is_dir():
            fail(
                f"{path} is a run directory: export its policy first (embodied-ppo export {path} "
                "--format onnx --out policy.onnx)"
            )
        fail(f"{path} is neither an exported policy (.onnx) nor a run directory of embodied-ppo")
    meta_path = path.with_name(path.name + ".json")
    if path.suffix != ".onnx" or not path.is_file() or not meta_path.is_file():
        fail(
            f"{path}: expected an ONNX policy written by `embodied-ppo export` with its .json beside it"
        )
    meta = json.loads(meta_path.read_text())
    block = meta.get("mjlab")
    if not isinstance(block, dict):
        fail(
            f"{meta_path} has no mjlab block: the policy was not exported from a run of an mjlab task"
        )
    for group in meta.get("input_names", []):
        if group not in block["observation"]:
            fail(
                f"{meta_path}: the policy reads observation group {group!r}, which the export does not describe"
            )
        for term in block["observation"][group]["terms"]:
            if term["function"] not in SUPPORTED or term.get("delay_max_lag", 0) > 0:
                fail(
                    f"{meta_path}: the policy reads observation term {term['name']!r} "
                    f"({term['function']}), which this loop does not compute "
                    f"(it computes {', '.join(SUPPORTED)}, undelayed)"
                )
            kind = term["params"].get("command_kind")
            if term["function"] == "generated_commands" and kind not in VELOCITY_COMMANDS:
                fail(
                    f"{meta_path}: the policy reads a {kind} command; this loop gives velocity commands"
                )
    model = path.with_name(block["model"])
    if not model.is_file():
        fail(f"{model} not found: the export writes the task's model beside the policy")
    return meta, model


class Observer:
    """The policy's observation from MuJoCo's state, term by term as mjlab computes it."""

    def __init__(self, block: dict, model: mujoco.MjModel) -> None:
        self.block, self.model = block, model
        self.groups = block["observation"]
        robot = block["robot"]
        self.root = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, robot["root_body"])
        self.default = dict(zip(robot["joints"], robot["default_joint_pos"], strict=True))
        self.history: dict[tuple[str, str], list[np.ndarray]] = {}

    def _joint_addresses(self, joints: list[str], velocity: bool) -> np.ndarray:
        ids = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints]
        table = self.model.jnt_dofadr if velocity else self.model.jnt_qposadr
        return np.array([table[i] for i in ids])

    def _root_frame(self, data: mujoco.MjData) -> np.ndarray:
        """The root body's orientation (3, 3): world from body."""
        return data.xmat[self.root].reshape(3, 3)

    def _raw(
        self, term: dict, data: mujoco.MjData, last_action: np.ndarray, command: np.ndarray
    ) -> np.ndarray:
        """One term's value before clip, scale and history."""
        fn, params = term["function"], term["params"]
        if fn == "builtin_sensor":
            sid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, params["sensor_name"])
            adr, dim = self.model.sensor_adr[sid], self.model.sensor_dim[sid]
            return data.sensordata[adr : adr + dim].copy()
        if fn == "projected_gravity":
            return self._root_frame(data).T @ np.array([0.0, 0.0, -1.0])
        if fn in ("joint_pos_rel", "joint_vel_rel"):
            joints = params["joints"]
            velocity = fn == "joint_vel_rel"
            values = (data.qvel if velocity else data.qpos)[self._joint_addresses(joints, velocity)]
            return values - (0.0 if velocity else np.array([self.default[j] for j in joints]))
        if fn == "last_action":
            return np.asarray(last_action, dtype=np.float64)
        if fn == "generated_commands":
            return np.asarray(command, dtype=np.float64)
        velocity = body_velocity(self.model, data, self.root)
        return velocity[:3] if fn == "base_lin_vel" else velocity[3:]

    def terms(self, data: mujoco.MjData, last_action: np.ndarray, command: np.ndarray) -> dict:
        """{group: {term: value}}, each as the policy reads it (history flattened, oldest
        first), and the histories advanced by this frame."""
        out: dict[str, dict[str, np.ndarray]] = {}
        for group, spec in self.groups.items():
            out[group] = {}
            for term in spec["terms"]:
                value = self._raw(term, data, last_action, command)
                if term["clip"] is not None:
                    value = np.clip(value, term["clip"][0], term["clip"][1])
                if term["scale"] is not None:
                    value = value * np.asarray(term["scale"])
                if term["history_length"] > 0:
                    frames = self.history.setdefault((group, term["name"]), [])
                    frames[:] = frames[1:] + [value] if frames else [value] * term["history_length"]
                    value = np.concatenate(frames)
                out[group][term["name"]] = value
        return out

    def observe(self, data: mujoco.MjData, last_action: np.ndarray, command: np.ndarray) -> dict:
        """{group: (size,) float32}, as the policy's inputs."""
        parts = self.terms(data, last_action, command)
        return {g: np.concatenate(list(t.values())).astype(np.float32) for g, t in parts.items()}

    def reset(self) -> None:
        """A new episode: the histories start again from its first frame."""
        self.history.clear()


class Actuation:
    """The actuators' controls from the policy's actions, as mjlab's joint action terms make
    them: target = offset + scale x action (clipped where the term clips), to the actuator of
    each joint; the actuator's own gains in the model close the loop."""

    def __init__(self, block: dict, model: mujoco.MjModel) -> None:
        self.terms = []
        for term in block["action"]:
            if term["kind"] != "JointPositionAction" or None in term["actuators"]:
                fail(
                    f"action term {term['name']!r} ({term['kind']}): this loop drives joint position actuators"
                )
            ids = [
                mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in term["actuators"]
            ]
            clip = None if term["clip"] is None else np.asarray(term["clip"])
            self.terms.append(
                (np.array(ids), np.asarray(term["scale"]), np.asarray(term["offset"]), clip)
            )
        self.size = sum(len(t[0]) for t in self.terms)

    def control(self, action: np.ndarray, ctrl: np.ndarray) -> np.ndarray:
        """Write the controls of `action` (size,) into `ctrl` (nu,); returns it."""
        start = 0
        for ids, scale, offset, clip in self.terms:
            target = np.asarray(action[start : start + len(ids)], dtype=np.float64) * scale + offset
            if clip is not None:
                target = np.clip(target, clip[:, 0], clip[:, 1])
            ctrl[ids] = target
            start += len(ids)
        return ctrl


def body_velocity(model: mujoco.MjModel, data: mujoco.MjData, body: int) -> np.ndarray:
    """The free-floating body's linear and angular velocity (6,) in its own frame, at its
    frame's origin (mjlab's root link velocity): its free joint's velocity, whose linear part
    MuJoCo gives in the world frame and its angular part in the body's."""
    dof = model.jnt_dofadr[model.body_jntadr[body]]
    linear = data.xmat[body].reshape(3, 3).T @ data.qvel[dof : dof + 3]
    return np.concatenate([linear, data.qvel[dof + 3 : dof + 6]])


def tilt(data: mujoco.MjData, body: int) -> float:
    """Angle (rad) between the body's up axis and the world's."""
    return float(np.arccos(np.clip(data.xmat[body].reshape(3, 3)[2, 2], -1.0, 1.0)))


class Commander:
    """The velocity command: a schedule of (time, vx, vy, yaw rate)."""

    def __init__(self, schedule: list[tuple[float, float, float, float]]) -> None:
        self.schedule = sorted(schedule)

    def at(self, t: float) -> np.ndarray:
        current = self.schedule[0][1:]
        for start, *command in self.schedule:
            if t + 1e-9 >= start:
                current = command
        return np.array(current, dtype=np.float64)


class Loop:
    """The robot, its policy and the control loop at the task's rates."""

    def __init__(self, policy: Path) -> None:
        self.meta, model_path = read_export(policy)
        self.block = self.meta["mjlab"]
        self.model = mujoco.MjModel.from_binary_path(str(model_path))
        self.data = mujoco.MjData(self.model)
        self.observer = Observer(self.block, self.model)
        self.actuation = Actuation(self.block, self.model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a control loop does not share its core
        self.session = ort.InferenceSession(
            str(policy), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.dt = self.block["physics_dt"] * self.block["decimation"]
        self.limit = min((f["limit_angle"] for f in self.block["falls"]), default=None)
        self.latency: list[float] = []
        self.start()

    def start(self) -> None:
        """The start pose of an episode, standing still."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = self.block["robot"]["init_qpos"]
        mujoco.mj_forward(self.model, self.data)
        self.last_action = np.zeros(self.actuation.size)
        self.observer.reset()

    def act(self, command: np.ndarray) -> np.ndarray:
        """The policy's action for the current state and `command`."""
        obs = self.observer.observe(self.data, self.last_action, command)
        feed = {k: obs[k][None] for k in self.inputs}
        begin = time.perf_counter()
        (action,) = self.session.run(None, feed)[:1]
        self.latency.append(time.perf_counter() - begin)
        return action[0].astype(np.float64)

    def step(self, action: np.ndarray) -> None:
        """Apply `action` for one policy step: `decimation` physics steps, then MuJoCo's derived
        quantities (sensors, frames) of the new state, as mjlab's step refreshes them."""
        self.actuation.control(action, self.data.ctrl)
        for _ in range(self.block["decimation"]):
            mujoco.mj_step(self.model, self.data)
        mujoco.mj_forward(self.model, self.data)
        self.last_action = action


def run(loop: Loop, commander: Commander, seconds: float) -> dict:
    """Drive the robot for `seconds`; returns its tracking errors, falls and velocities."""
    steps = round(seconds / loop.dt)
    root = loop.observer.root
    errors, falls, measured = [], 0, []
    for step in range(steps):
        command = commander.at(step * loop.dt)
        loop.step(loop.act(command))
        velocity = body_velocity(loop.model, loop.data, root)
        measured.append((command, velocity[[0, 1, 5]]))
        errors.append((np.linalg.norm(command[:2] - velocity[:2]), abs(command[2] - velocity[5])))
        if loop.limit is not None and tilt(loop.data, root) > loop.limit:
            falls += 1
            loop.start()
    err = np.array(errors)
    return {"steps": steps, "falls": falls, "error_xy": float(err[:, 0].mean()),
            "error_yaw": float(err[:, 1].mean()), "measured": measured}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("policy", type=Path, help="the exported .onnx file")
    p.add_argument("--seconds", type=float, default=20.0, help="simulated time (default 20)")
    p.add_argument("--command", type=float, nargs=3, default=None, metavar=("VX", "VY", "YAW"))
    p.add_argument("--schedule", nargs="+", default=None, metavar="T,VX,VY,YAW",
                   help="commands from time T")  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.schedule:
        schedule = [tuple(float(v) for v in item.split(",")) for item in args.schedule]
        if any(len(row) != 4 for row in schedule):
            fail("--schedule: each entry is T,VX,VY,YAW")
    else:
        schedule = [(0.0, *(args.command or (0.5, 0.0, 0.0)))]
    loop = Loop(args.policy)
    begin = time.perf_counter()
    result = run(loop, Commander(schedule), args.seconds)
    latency = np.array(loop.latency) * 1e3
    print(
        f"{loop.block['task']} in MuJoCo {mujoco.__version__}: {result['steps']} policy steps "
        f"({args.seconds:g} s simulated at {1 / loop.dt:g} Hz, physics {1 / loop.block['physics_dt']:g} Hz) "
        f"in {time.perf_counter() - begin:.1f} s"
    )
    print(
        f"tracking error: xy {result['error_xy']:.3f} m/s, yaw {result['error_yaw']:.3f} rad/s "
        f"(mean over steps); falls: {result['falls']}"
    )
    dt = loop.dt
    times = [row[0] for row in schedule] + [args.seconds]
    for (start, *command), end in zip(sorted(schedule), times[1:], strict=False):
        lo, hi = (
            round((start + min(end, args.seconds)) / 2 / dt),
            round(min(end, args.seconds) / dt),
        )
        if hi > lo:  # the second half of the command's span, once the gait has settled
            mean = np.mean([v for _, v in result["measured"][lo:hi]], axis=0)
            print(
                f"  command vx {command[0]:+.2f} vy {command[1]:+.2f} yaw {command[2]:+.2f} from "
                f"{start:g} s: achieved vx {mean[0]:+.2f} vy {mean[1]:+.2f} yaw {mean[2]:+.2f}"
            )
    print(
        f"inference latency: p50 {np.percentile(latency, 50):.3f} ms, p99 {np.percentile(latency, 99):.3f} ms"
    )


if __name__ == "__main__":
    main()
