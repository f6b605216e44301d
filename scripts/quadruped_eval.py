"""Measure a trained quadruped policy: velocity tracking errors, falls and reward terms over
deterministic episodes, optionally under other task arguments or a sweep of one of them.

    python scripts/quadruped_eval.py RUN_DIR --episodes 20
    python scripts/quadruped_eval.py RUN_DIR --set randomization='{}' --set noise='{}'
    python scripts/quadruped_eval.py RUN_DIR --sweep randomization.friction='[[0.4,0.4],[1.25,1.25]]'

Episodes use the run's `env.kwargs` (from its config.yaml), changed by `--set KEY=YAML` (a
dotted path inside env.kwargs); each episode is seeded (seed, seed + 1, ...), and its values
are those of `info["log"]` at its last step. Prints one line per setting and, with --json,
writes every setting's means and per-episode values.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml


def _set(kwargs: dict[str, Any], dotted: str, value: Any) -> None:
    node = kwargs
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def run_episodes(
    policy: Any, env_id: str, kwargs: dict[str, Any], episodes: int, seed: int
) -> dict[str, Any]:
    """Deterministic episodes (all at once, one env each, the policy batched over them); the
    means of their final logs and the per-episode values."""
    import embodied_ppo_envs  # noqa: F401  (registers the ids)
    import gymnasium as gym

    envs = [gym.make(env_id, **kwargs) for _ in range(episodes)]
    obs = [env.reset(seed=seed + k)[0] for k, env in enumerate(envs)]
    logs: list[dict[str, float] | None] = [None] * episodes
    while any(log is None for log in logs):
        live = [k for k in range(episodes) if logs[k] is None]
        batch = {key: np.stack([obs[k][key] for k in live]) for key in obs[live[0]]}
        actions = policy(batch)
        for k, action in zip(live, actions):
            obs[k], _, terminated, truncated, info = envs[k].step(action)
            if terminated or truncated:
                logs[k] = info["log"]
    for env in envs:
        env.close()
    keys = sorted(logs[0])
    return {
        "means": {k: float(np.mean([log[k] for log in logs])) for k in keys},
        "episodes": {k: [float(log[k]) for log in logs] for k in keys},
    }


def main() -> None:
    import embodied_ppo

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run", help="run directory or checkpoint")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    p.add_argument("--sweep", default=None, metavar="KEY=[v1, v2, ...]")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    run = Path(args.run)
    run_dir = run if run.is_dir() else run.parent.parent
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    env_id = config["env"]["id"]
    base = copy.deepcopy(config["env"].get("kwargs") or {})
    for item in args.set:
        key, _, raw = item.partition("=")
        _set(base, key, yaml.safe_load(raw))
    settings: list[tuple[str, dict[str, Any]]] = [("", base)]
    if args.sweep:
        key, _, raw = args.sweep.partition("=")
        settings = []
        for value in yaml.safe_load(raw):
            kwargs = copy.deepcopy(base)
            _set(kwargs, key, value)
            settings.append((f"{key}={json.dumps(value)}", kwargs))
    policy = embodied_ppo.load_policy(args.run)
    results = []
    for name, kwargs in settings:
        start = time.perf_counter()
        out = run_episodes(policy, env_id, kwargs, args.episodes, args.seed)
        m = out["means"]
        print(
            f"{name or 'as trained'}: tracking_error_lin {m['metrics/tracking_error_lin']:.3f} m/s"
            f" | tracking_error_yaw {m['metrics/tracking_error_yaw']:.3f} rad/s"
            f" | fall_rate {m['metrics/fall_rate']:.3f}"
            + (
                f" | terrain_level {m['metrics/terrain_level']:.2f}"
                if "metrics/terrain_level" in m
                else ""
            )
            + f" ({args.episodes} episodes, {time.perf_counter() - start:.0f} s)"
        )
        results.append({"setting": name or "as trained", "env_kwargs": kwargs, **out})
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "run": str(args.run),
                    "env_id": env_id,
                    "episodes": args.episodes,
                    "seed": args.seed,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
