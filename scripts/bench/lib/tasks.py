"""The benchmarks' tasks and what they are measured against: budgets, targets, published peers.

Shared by the benchmarks that run them (scripts.bench.mujoco, .arm, .recurrent) and by the pages
written from their records (scripts.bench.report), so that a target has one value everywhere.
"""

from __future__ import annotations

EVAL_SEED = 10000  # the test episodes: those of `embodied-ppo eval --seed 10000`

# ------------------------------------------------------------ MuJoCo and classic control
# Published PPO results at 1M steps (the issue tracker's table; versions differ from -v5):
# Tianshou examples/mujoco README (10 seeds, -v3), RL Zoo benchmark.md (-v3), CleanRL
# docs/benchmark/ppo_continuous_action.md (-v4).
PEERS = {
    "HalfCheetah": (5784, 5819, 1443),
    "Hopper": (2609, 2410, 2383),
    "Walker2d": (3589, 3479, 2288),
    "Ant": (3258, 1327, None),
    "Humanoid": (787, None, 716),
}
# What issue-level targets ask for, per step budget (above every published PPO of PEERS at 1M;
# Humanoid at 10M: the best public PPO-family result, Sample Factory's APPO, 5439).
TARGETS = {
    1_000_000: {
        "HalfCheetah": 5800,
        "Hopper": 3300,
        "Walker2d": 4500,
        "Ant": 3300,
        "Humanoid": 1300,
    },
    10_000_000: {"Humanoid": 5500},
    # The classic-control configs at their own budgets: CartPole-v1's reward threshold in
    # Gymnasium (475 of the 500 steps); Pendulum-v1, which has none, the usual -200.
    100_000: {"CartPole": 475},
    150_000: {"CartPole": 475},
    200_000: {"Pendulum": -200},
}
# Returns whose first crossing the report times, besides the targets.
MILESTONES = {
    "HalfCheetah": (1500, 3000),
    "Hopper": (1000, 2000),
    "Walker2d": (1000, 3000),
    "Ant": (1000, 2000),
    "Humanoid": (700,),
}
DEFAULT_STEPS = 1_000_000
DEFAULT_SEEDS = [100, 101, 102, 103, 104]  # evaluation seeds (lib/stats.py: the protocol)
DEFAULT_SB3_SEEDS = [100, 101, 102]


def family(env_id: str) -> str:
    """'Hopper' for 'Hopper-v5': the task whatever its version."""
    return env_id.split("-")[0]


def thresholds(fam: str) -> tuple[float, ...]:
    """The returns whose first crossing is timed: the milestones, then every budget's target."""
    targets = sorted({t[fam] for t in TARGETS.values() if fam in t})
    return (*MILESTONES.get(fam, ()), *targets)


def target_of(fam: str, steps: int) -> float | None:
    """The target return of a task at a budget, None where there is none."""
    return TARGETS.get(steps, {}).get(fam)


# The README's speed table (scripts.bench.whole_process): each config with its budget.
SPEED_HEADLINE = (("configs/halfcheetah.yaml", 200_000), ("configs/humanoid.yaml", 500_000))

# ------------------------------------------------------------------------------ arm tasks
ARM_EPISODES = 100  # deterministic test episodes per seed
# The success rate at which a seed counts as having learned the task.
ARM_TARGETS = {"reach": 0.95, "push": 0.70, "reach_pixels": 0.80}
# What a config must show on evaluation seeds: at least k of n seeds at the target.
ARM_REQUIRED = {"reach": (5, 5), "push": (4, 5), "reach_pixels": (2, 3)}

# ---------------------------------------------------------------------------- memory tasks
# The share of evaluation seeds on which a committed memory config must reach its target.
MEMORY_REQUIRED_SHARE = 0.9
MEMORY_TASKS = {
    "cartpole": {
        "config": "configs/cartpole_pomdp.yaml",
        "env_id": "EmbodiedPPO/CartPoleNoVel-v1",
        "steps": 100_000,
        "target": 475.0,  # the deterministic return that counts a seed as solved
    },
    "pendulum": {
        "config": "configs/pendulum_pomdp.yaml",
        "env_id": "EmbodiedPPO/PendulumNoVel-v1",
        "steps": 100_000,
        "target": -300.0,
    },
}
