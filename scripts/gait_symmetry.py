"""Left-right symmetry of a trained quadruped's gait: each foot's air time and duty factor over
deterministic episodes, and the differences between mirrored legs.

    python -m scripts.gait_symmetry RUN_DIR [RUN_DIR ...] [--episodes 10] [--seed 100] [--out JSON]

For each run directory of an EmbodiedPPO/Quadruped task, plays `--episodes` episodes of its
final deployed policy (`load_policy`: the deterministic action) in the
run's own env (its env.kwargs: randomization, noise and commands as it trained), seeded from
`--seed` on, and reads the feet's contacts (the privileged `contacts` key) at every step. Per
foot (FR, FL, RR, RL): the mean duration of its swings (a swing: the steps between lifting off
and touching down, in seconds; swings cut by the episode's end are left out) and its duty
factor (the share of steps on the ground). The asymmetry of the gait: the mean over the two
mirrored pairs (FR-FL, RR-RL) of the absolute differences of these, in seconds and in duty
factor. A symmetric gait has 0 for both; a robot that limps or gallops on one side does not.
`--out` also writes every run's numbers into a record with its provenance (for docs/bench).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embodied_ppo import load_policy
from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.config.loading import load_yaml
from embodied_ppo.vecenv.make import make_one
from scripts.bench.lib import args as cli_args
from scripts.bench.lib import records
from scripts.bench.lib.args import BadInput

MODULE = "scripts.gait_symmetry"
FEET = ("FR", "FL", "RR", "RL")
PAIRS = ((0, 1), (2, 3))  # the mirrored legs


def swings(contacts: np.ndarray, dt: float) -> list[list[float]]:
    """Each foot's swing durations (s) in an episode's contacts (T, 4) (1: on the ground): the
    runs of 0s that start after a 1 and end with a 1 (the episode's first and last, cut, are
    left out)."""
    out: list[list[float]] = [[] for _ in range(contacts.shape[1])]
    for foot in range(contacts.shape[1]):
        on = contacts[:, foot] > 0.5
        lifted = None
        for t in range(1, len(on)):
            if on[t - 1] and not on[t]:
                lifted = t
            elif not on[t - 1] and on[t] and lifted is not None:
                out[foot].append((t - lifted) * dt)
                lifted = None
    return out


def gait(run: Path, episodes: int, seed: int) -> dict:
    """The gait of `run`'s deployed policy over `episodes` episodes (see the module docstring)."""
    if not (run / "config.yaml").is_file():
        raise BadInput(f"{run}: not a run directory (no config.yaml)")
    env_cfg = from_dict(upgrade(load_yaml(run / "config.yaml")), world=1).env
    if not str(env_cfg.id).startswith("EmbodiedPPO/Quadruped"):
        raise BadInput(f"{run}: trained on {env_cfg.id}, not an EmbodiedPPO/Quadruped task")
    policy = load_policy(run)
    env = make_one(env_cfg)
    dt = float(env.unwrapped.dt)
    keys = list(policy.net.keys)
    air: list[list[float]] = [[] for _ in FEET]
    duty = np.zeros(len(FEET))
    steps = 0
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            state = policy.initial_state() if policy.recurrent else None
            seen = []
            done = False
            while not done:
                seen.append(obs["contacts"])
                inputs = {k: obs[k] for k in keys}
                if state is None:
                    action = policy(inputs)
                else:
                    action, state = policy(inputs, state)
                obs, _, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
            contacts = np.asarray(seen)
            duty += contacts.sum(axis=0)
            steps += len(contacts)
            for foot, durations in enumerate(swings(contacts, dt)):
                air[foot] += durations
    finally:
        env.close()
    mean_air = [float(np.mean(a)) if a else float("nan") for a in air]
    duty_factor = (duty / max(1, steps)).tolist()
    return {
        "air_time_s": dict(zip(FEET, mean_air, strict=True)),
        "duty_factor": dict(zip(FEET, duty_factor, strict=True)),
        "air_time_asymmetry_s": float(np.mean([abs(mean_air[a] - mean_air[b]) for a, b in PAIRS])),
        "duty_asymmetry": float(np.mean([abs(duty_factor[a] - duty_factor[b]) for a, b in PAIRS])),
        "episodes": episodes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print each run's gait and its asymmetry."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    p.add_argument("--episodes", type=int, default=10, help="episodes per run (default 10)")
    p.add_argument("--seed", type=int, default=100, help="the first episode's seed (default 100)")
    p.add_argument("--out", type=Path, default=None, help="also write the numbers to this JSON")

    def body(args: argparse.Namespace) -> None:
        if args.episodes < 1:
            raise BadInput(f"--episodes: got {args.episodes}, expected an integer >= 1")
        for run in args.runs:
            if not (run / "config.yaml").is_file():
                raise BadInput(f"{run}: not a run directory (no config.yaml)")
        gaits = {}
        for run in args.runs:
            g = gaits[str(run)] = gait(run, args.episodes, args.seed)
            feet = "  ".join(
                f"{f} air {g['air_time_s'][f]:.3f} s duty {g['duty_factor'][f]:.2f}" for f in FEET
            )
            print(f"{run}: {feet}")
            print(
                f"{run}: asymmetry: air time {g['air_time_asymmetry_s']:.3f} s, "
                f"duty factor {g['duty_asymmetry']:.3f} (mean |FR-FL|, |RR-RL| over "
                f"{g['episodes']} episodes)"
            )
        if args.out is not None:
            prov = records.provenance(MODULE, list(argv if argv is not None else sys.argv[1:]))
            records.write_results(args.out, {"runs": gaits, "provenance": prov})
            print(f"wrote {args.out}")

    return cli_args.run_main(p, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
