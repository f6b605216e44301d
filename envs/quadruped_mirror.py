"""The quadruped's left-right mirror, as the task declares it (`metadata["mirror"]`): the
robot reflected through its own sagittal plane, and the world with it.

Reflecting the world through a vertical plane M = diag(1, -1, 1) (y -> -y) turns the robot into
its mirror image: its left legs become its right ones (FR <-> FL, RR <-> RL) and, in the body
frame, a vector v becomes M v (its lateral component changes sign: linear velocity, gravity,
the commanded vx, vy) and an angular velocity w, a pseudovector, becomes -M w (roll and yaw
rates change sign, the pitch rate does not: so does the commanded yaw rate). A hip abduction
joint turns about the leg's x axis, which the reflection reverses: its angle, velocity and
target change sign; thigh and knee joints turn about the y axis and keep theirs. The standing
pose is itself symmetric (abduction -0.1 right, +0.1 left), so angles relative to it mirror as
the angles do. Each foot's height scan (9 points on a 3 x 3 grid in the world's x and y around
the foot, x major) becomes its partner foot's, the grid's y reversed. Friction and payload are
the same on both sides; the motor strengths go with their legs.

The policy's observation keys, the privileged ones and the action are all declared; a run with
`algorithm.symmetry` checks the declaration against the spaces (sizes, involution).
"""

from __future__ import annotations

from typing import Any

LEG_SWAP = (1, 0, 3, 2)  # FR, FL, RR, RL -> the leg each one's mirror is
JOINTS_PER_LEG = 3  # hip abduction, thigh, knee
GRID = 3  # height-scan points per side of each foot's grid
JOINT_PERM = [
    LEG_SWAP[j // JOINTS_PER_LEG] * JOINTS_PER_LEG + j % JOINTS_PER_LEG for j in range(12)
]
ABDUCTION = [leg * JOINTS_PER_LEG for leg in range(4)]  # the joints whose angle changes sign


def _scan_perm() -> list[int]:
    """Point (foot f, x i, y j) of the mirrored scan is point (partner of f, i, GRID-1-j)."""
    per_foot = GRID * GRID
    return [
        LEG_SWAP[f] * per_foot + i * GRID + (GRID - 1 - j)
        for f in range(4)
        for i in range(GRID)
        for j in range(GRID)
    ]


JOINTS = {"perm": JOINT_PERM, "negate": ABDUCTION}
MIRROR: dict[str, Any] = {
    "observation": {
        "base_ang_vel": {"negate": [0, 2]},  # roll and yaw rates
        "projected_gravity": {"negate": [1]},
        "command": {"negate": [1, 2]},  # lateral velocity, yaw rate
        "joint_pos": JOINTS,
        "joint_vel": JOINTS,
        "last_action": JOINTS,
        "base_lin_vel": {"negate": [1]},
        "contacts": {"perm": list(LEG_SWAP)},
        "friction": {},
        "added_mass": {},
        "motor_strength": {"perm": JOINT_PERM},
        "height_scan": {"perm": _scan_perm()},
    },
    "action": JOINTS,
}
