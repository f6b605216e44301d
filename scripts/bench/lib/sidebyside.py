"""What the side-by-side timings share: the ratios of contenders measured in the same rounds, and
the thread setting Stable-Baselines3 runs fastest with on this machine."""

from __future__ import annotations

import json
import os
import statistics

from scripts.bench.lib import proc


def sb3_steady(s: dict, iterations: int, threads: int | None) -> dict:
    """Stable-Baselines3's steady-state steps and seconds on the shared settings `s`
    (scripts.bench.workers.sb3_ppo, in a fresh process)."""
    cmd = proc.worker_command("sb3_ppo", "--mode", "steady", "--settings", json.dumps(s),
                              "--iterations", str(iterations))  # fmt: skip
    cmd += [] if threads is None else ["--threads", str(threads)]
    return proc.run_worker("sb3_train", cmd)


def best_sb3_threads(s: dict) -> tuple[int, dict[int, float]]:
    """The faster of 1 thread and every core for Stable-Baselines3 (one measured iteration
    each), and the rate of each."""
    rates = {}
    for n in sorted({1, os.cpu_count() or 1}):
        m = sb3_steady(s, 1, n)
        rates[n] = m["steps"] / m["seconds"]
    return max(rates, key=rates.__getitem__), rates


def threads_line(ours: int | None, sb3: int | None, tried: dict[int, float]) -> str:
    """What each contender's threads are, as printed before the rounds."""
    tried_text = ", ".join(f"{n}: {r:,.0f} steps/s" for n, r in tried.items())
    own = ours or "its own default (trainer.torch_threads: null)"
    return f"threads: ours {own}; sb3 {sb3}" + (f" (tried {tried_text})" if tried else "")


def ratios(results: dict[str, list[float]], pairs: dict[str, tuple[str, str]]) -> dict:
    """The medians over rounds, and for each pair (a, b) both of whose contenders ran: the
    ratio of their medians a / b and the ratio of each round (contenders measured minutes
    apart at most)."""
    med = {c: statistics.median(v) for c, v in results.items()}
    per_round = {
        k: [x / y for x, y in zip(results[a], results[b], strict=True)]
        for k, (a, b) in pairs.items()
        if a in results and b in results
    }
    return {
        "median": med,
        "ratios": {k: med[a] / med[b] for k, (a, b) in pairs.items() if k in per_round},
        "per_round_ratios": per_round,
    }


def ratio_lines(summary: dict) -> list[str]:
    """Each ratio with the median and range of its per-round ratios."""
    lines = []
    for k, v in summary["ratios"].items():
        r = summary["per_round_ratios"][k]
        lines.append(
            f"{k:26s} {v:6.2f}   per round: median {statistics.median(r):.2f}, "
            f"range {min(r):.2f}-{max(r):.2f}"
        )
    return lines
