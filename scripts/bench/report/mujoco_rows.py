"""The MuJoCo benchmark's rows on docs/benchmarks.md: per config and set of seeds, the
statistics of the final policies (and of the policies a config keeps), against published PPO
and the budget's target, and the steps at which the training return first reached each
threshold."""

from __future__ import annotations

import statistics
from pathlib import Path

from scripts.bench.lib import stats
from scripts.bench.lib.tasks import PEERS, family, target_of, thresholds


def target_status(fam: str, steps: int, means: list[float]) -> str:
    """'met' or 'missed (IQM)' for the IQM over seeds against the target for this budget, '-'
    where none applies."""
    target = target_of(fam, steps)
    if target is None or not means:
        return "-"
    center = stats.iqm(means)
    return f">= {target}: met" if center >= target else f">= {target}: **missed** ({center:.0f})"


def peer_status(fam: str, steps: int, summary: stats.Summary) -> str:
    """Against the best published PPO mean at 1M steps (PEERS): the IQM above it and the worst
    seed at least 0.8 of it; '-' for other budgets and tasks without published results."""
    best = max((p for p in PEERS.get(fam, ()) if p is not None), default=None)
    if steps != 1_000_000 or best is None:
        return "-"
    held = summary.iqm > best and summary.worst >= 0.8 * best
    return f"> {best}, worst >= {0.8 * best:.0f}: {'met' if held else '**missed**'}"


def peers_text(fam: str) -> str:
    """The published results of PEERS as a cell: 'Tianshou / RL Zoo / CleanRL'."""
    return " / ".join("-" if p is None else str(p) for p in PEERS.get(fam, ()))


def header_comment(config: Path) -> str:
    """The comment block that opens a config file, without its '#' marks."""
    if not config.is_file():
        return ""
    lines = []
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines).strip()


def finished(side: dict) -> dict:
    """The seeds of one side (ours or sb3) that have an evaluation, by set of seeds."""
    return stats.by_group({s: r for s, r in side.items() if "eval" in r})


def final_row(name: str, rec: dict, group: str, ours: dict) -> str:
    """The table row of a config's final policies on one set of seeds, Stable-Baselines3's
    IQM on the same set beside it."""
    fam, steps = family(rec["env_id"]), rec["steps"]
    means = {s: r["eval"]["mean"] for s, r in ours.items()}
    summary = stats.summarize(means, target_of(fam, steps))
    cell = stats.cells(summary)
    wall = statistics.mean(r["wall_s"] for r in ours.values())
    each = ", ".join(f"{m:.0f}" for m in means.values())
    sb3 = finished(rec["sb3"]).get(group, {})
    sb3_walls = [r["wall_s"] for r in sb3.values()]
    sb3_cell = "none finished"
    if sb3:
        sb3_iqm = stats.iqm([r["eval"]["mean"] for r in sb3.values()])
        sb3_cell = f"{sb3_iqm:.0f} ({stats.seeds_text(list(sb3))})"
    return (
        f"| `{name}` | {steps:,} | {group} {cell['seeds']} | {cell['iqm']} | "
        f"{cell['median']} | {cell['worst']} | {cell['at_target']} | {each} | "
        f"{sb3_cell} | {wall / 60:.1f} min | {steps / wall if wall else 0:,.0f} | "
        f"{f'{statistics.mean(sb3_walls) / 60:.1f} min' if sb3_walls else '-'} | "
        f"{peers_text(fam) or '-'} | {peer_status(fam, steps, summary)} | "
        f"{target_status(fam, steps, list(means.values()))} |"
    )


def kept_row(name: str, rec: dict, group: str, ours: dict) -> str:
    """The table row of the policies a config with a periodic evaluation keeps
    (checkpoints/best.pt), scored on the same test episodes as the final policies: the same
    runs, so no wall time or Stable-Baselines3 of its own; each seed with the step it was
    kept at."""
    fam, steps = family(rec["env_id"]), rec["steps"]
    means = {s: r["kept"]["mean"] for s, r in ours.items()}
    summary = stats.summarize(means, target_of(fam, steps))
    cell = stats.cells(summary)
    each = ", ".join(f"{m:.0f} ({r['kept']['step'] / 1e6:.2f}M)"
                     for m, r in zip(means.values(), ours.values()))  # fmt: skip
    return (
        f"| `{name}`, kept policy (best.pt) | {steps:,} | {group} {cell['seeds']} | "
        f"{cell['iqm']} | {cell['median']} | {cell['worst']} | {cell['at_target']} | {each} | "
        f"- | same runs | - | - | {peers_text(fam) or '-'} | {peer_status(fam, steps, summary)} | "
        f"{target_status(fam, steps, list(means.values()))} |"
    )


def reach_rows(name: str, rec: dict, group: str, ours: dict) -> list[str]:
    """The rows of the time-to-reach table: per threshold, the mean steps and training time at
    which the seeds that reached it first did, and how many did."""
    rows = []
    seeds = stats.seeds_text(list(ours))
    for threshold in thresholds(family(rec["env_id"])):
        hits = [r["reached"].get(str(threshold)) for r in ours.values()]
        done = [h for h in hits if h]
        text = "not reached" if not done else (
            f"{statistics.mean(h[0] for h in done):,.0f} steps, "
            f"{statistics.mean(h[1] for h in done) / 60:.1f} min"
        )  # fmt: skip
        rows.append(f"| `{name}` | {group} {seeds} | {threshold} | {text} | "
                    f"{len(done)} of {len(hits)} |")  # fmt: skip
    return rows
