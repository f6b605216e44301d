"""The section "Running the benchmarks" of docs/benchmarks.md: one canonical command per
benchmark, the file it writes and how long it takes on the 2-core machine of the records.

Each entry names its module; tests/scripts/bench/test_entries.py checks that every entry point
of scripts/bench has a row here and that every command parses with its module's parser.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    """One benchmark's row: its module, the canonical command, what it writes, how long."""

    module: str
    command: str
    writes: str
    takes: str


CATALOG: tuple[Entry, ...] = (
    Entry(
        "scripts.bench.mujoco",
        "python -m scripts.bench.mujoco --configs configs/hopper.yaml "
        "--seeds 100 101 102 103 104 --sb3-seeds 100 101 102",
        "docs/bench/mujoco.json, docs/benchmarks.md, docs/images/benchmark_*.png",
        "per seed of 1M steps: ours 2-9 min alone (humanoid.yaml at 10M: 82-141 min), "
        "Stable-Baselines3 16-43 min on one core (the records' wall times)",
    ),
    Entry(
        "scripts.bench.arm",
        "python -m scripts.bench.arm --tasks reach push --seeds 100 101 102 103 104",
        "docs/bench/arm.json",
        "per seed, one core: reach 4 min, push 24-39 min, reach_pixels 41-47 min (the records)",
    ),
    Entry(
        "scripts.bench.recurrent",
        "python -m scripts.bench.recurrent --task cartpole --out docs/bench/recurrent_cartpole.json",
        "docs/bench/recurrent_cartpole.json",
        "per seed of 100k steps: ours 0.5-4 min, memoryless 20 s, RecurrentPPO 2-13 min "
        "(the records, beside other work)",
    ),
    Entry(
        "scripts.bench.variants",
        "python -m scripts.bench.variants configs/mountaincar_rnd.yaml --variant rnd= "
        "--variant ppo=algorithm.rnd.enabled=false --seeds 100-109 --target 90 --jobs 2 "
        "--out docs/bench/variants_mountaincar_rnd.json",
        "the results file of --out (`--report` prints its table)",
        "per run, one core: the config's training and its evaluations (mountaincar_rnd.yaml: "
        "17-35 s beside other trainings, the record's wall times)",
    ),
    Entry(
        "scripts.bench.whole_process",
        "python -m scripts.bench.whole_process --rounds 5",
        "docs/bench/whole_process.json (then `python -m scripts.bench.headlines`)",
        "about 50 min: a round is ~1.5 min of halfcheetah.yaml and ~8.5 min of humanoid.yaml "
        "(estimated from the records' 22 + 66 s and 177 + 331 s)",
    ),
    Entry(
        "scripts.bench.throughput",
        "python -m scripts.bench.throughput --config configs/halfcheetah.yaml "
        "--json docs/bench/throughput_halfcheetah.json",
        "docs/bench/throughput_halfcheetah.json",
        "about 3 min (estimated: 3 rounds of 3 processes of a few iterations each)",
    ),
    Entry(
        "scripts.bench.update",
        "python -m scripts.bench.update --shape halfcheetah humanoid --rounds 5 "
        "--json docs/bench/update.json",
        "docs/bench/update.json",
        "about 5 min (estimated: 20 processes, each compiling its step first)",
    ),
    Entry(
        "scripts.bench.scaling",
        "python -m scripts.bench.scaling --config configs/halfcheetah.yaml "
        "--json docs/bench/scaling_halfcheetah.json",
        "docs/bench/scaling_halfcheetah.json",
        "about 3 min (estimated: 3 rounds of a 1-process and a 2-process run)",
    ),
    Entry(
        "scripts.bench.envpool",
        "python -m scripts.bench.envpool --env HalfCheetah-v5 --num-envs 64 --steps 300 "
        "--rounds 3 --contenders sync sync_threads sync_processes envpool "
        "--json docs/bench/envpool_halfcheetah.json",
        "docs/bench/envpool_halfcheetah.json",
        "about 1 min (estimated: 12 processes of 19,200 steps)",
    ),
    Entry(
        "scripts.bench.profile_collection",
        "python -m scripts.bench.profile_collection configs/humanoid.yaml",
        "nothing (prints the split of a vector step)",
        "about 30 s (estimated: 4 rollouts of 512 vector steps after one)",
    ),
    Entry(
        "scripts.bench.quadruped",
        "python -m scripts.bench.quadruped targets --config configs/quadruped_flat.yaml "
        "--seeds 100 101 102 103 104 --runs runs/targets_flat",
        "docs/bench/quadruped_flat_targets.json and its block of docs/legged.md (`record` and "
        "`curve` collect and draw finished runs)",
        "per seed: its training (the config's total_steps) and 160 evaluation episodes of 20 s "
        "(the final policy and its sweep)",
    ),
    Entry(
        "scripts.bench.distillation",
        "python -m scripts.bench.distillation --seeds 104 --runs runs/distillation",
        "docs/bench/quadruped_rough_distillation_SEED.json and the blocks of "
        "docs/distillation.md from every seed's record",
        "per seed: 97 min of trainings two at a time (60 + 25 + 12) and ~5 min of evaluations "
        "(the records)",
    ),
    Entry(
        "scripts.bench.quadruped_speed",
        "python -m scripts.bench.quadruped_speed --version before=/tmp/before --version after=. "
        "--steps 300000",
        "docs/bench/quadruped_speed.json",
        "about 5 min a version (estimated: the physics worker, one 300k-step training alone and "
        "two side by side)",
    ),
    Entry(
        "scripts.bench.headlines",
        "python -m scripts.bench.headlines",
        "the generated blocks of README.md, docs/performance.md and docs/distillation.md, from "
        "docs/bench",
        "seconds",
    ),
    Entry(
        "scripts.bench.profile_mjlab",
        "python -m scripts.bench.profile_mjlab configs/mjlab_go1_flat.yaml env.num_envs=4096 "
        "--iterations 5",
        "nothing (prints the split of an iteration)",
        "a GPU and the mjlab extra: 55-135 s on an H200 (docs/performance.md)",
    ),
    Entry(
        "scripts.bench.mjlab_resets",
        "python -m scripts.bench.mjlab_resets configs/mjlab_go1_flat.yaml env.num_envs=64 "
        "algorithm.minibatch_size=96 trainer.torch_threads=1 --steps 96 --action-scale 3",
        "nothing (prints the table; the record docs/bench/cpu_mjlab_resets/ keeps one run)",
        "the mjlab extra: a few minutes on the 2 shared cores (warp's kernels compiled once)",
    ),
    Entry(
        "scripts.bench.mjlab_probe",
        "python -m scripts.bench.mjlab_probe policy.onnx --task Mjlab-Velocity-Flat-Unitree-Go1 "
        "--commands 0.5,0,0 1.0,0,0 0,0,0.5 --envs 64 --seconds 10 --json probe.json",
        "the --json file (commanded against achieved velocity, falls); several policies are "
        "probed in one process, one --json file each",
        "the mjlab extra and an exported policy: a minute on a GPU, minutes on the CPU "
        "(estimated: 3 commands of 500 control steps of 64 robots)",
    ),
    Entry(
        "scripts.bench.mjlab_learning",
        "python -m scripts.bench.mjlab_learning OUT --plot docs/images/mjlab_go1_learning.png",
        "the comparison of the runs `ITERATIONS=200 bash scripts/bench/mjlab_learning.sh OUT` "
        "wrote to OUT",
        "the runs: a GPU and the mjlab extra, 202 s and 275 s on an H200; the comparison: seconds",
    ),
)


def section() -> list[str]:
    """The section's lines."""
    rows = [f"| `{e.module.rsplit('.', 1)[1]}` | `{e.command}` | {e.writes} | {e.takes} |"
            for e in CATALOG]  # fmt: skip
    return [
        "## Running the benchmarks",
        "",
        "From the repository's root, each benchmark is one module of `scripts/bench/`; "
        "`python -m scripts.bench.<name> --help` says what it measures. Every record a "
        "benchmark writes names its command, commit, date and machine (`provenance`). The "
        "times are for the 2-core machine of the records, said where they are estimated.",
        "",
        "| benchmark | command | writes | takes |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ]
