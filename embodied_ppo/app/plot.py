"""Learning curves from run directories: `embodied-ppo plot RUN_DIR... --out curves.png`.

Episodic return (training `charts/episodic_return`, solid; evaluation `eval/episodic_return`,
dashed) against environment steps, read from each run's metrics.jsonl. Runs whose config.yaml
agree on everything but trainer.seed (and keys that only say where or how often things
ran: run_dir, device, torch_threads, log/checkpoint/eval/video intervals) are one experiment: drawn as the mean
over seeds with a +-1 std band, on the steps all of them reached.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.core.errors import UserError
from embodied_ppo.core.types import ConfigDict
from embodied_ppo.io.files import atomic_write_bytes

TAGS = {"charts/episodic_return": "train", "eval/episodic_return": "eval"}


# Keys that say where or how a run ran, not what it trained: they never split an experiment.
_IGNORED_KEYS = {
    "trainer.seed",
    "trainer.run_dir",
    "trainer.device",
    "trainer.torch_threads",
    "env.threads",
    "env.processes",
    "trainer.update",  # (a key of earlier versions)
    "trainer.compile",
    "trainer.inference",
    "trainer.log_interval",
    "trainer.checkpoint_interval",
    "trainer.keep_checkpoints",
    "trainer.eval_interval",
    "trainer.video_interval",
    "trainer.log_interval_steps",
    "trainer.checkpoint_interval_steps",
    "trainer.eval_interval_steps",
    "trainer.wandb.project",
    "trainer.wandb.entity",
    "trainer.wandb.name",
    "trainer.wandb.mode",
    "trainer.wandb.tags",
}


@dataclass
class Run:
    """One run directory's curves: tag -> (steps, values), sorted by step."""

    path: Path
    config: ConfigDict
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _flatten(d: ConfigDict, prefix: str = "") -> dict[str, str]:
    """Every key path of a nested config ("env.id"), with its value as JSON text."""
    out: dict[str, str] = {}
    for key, value in d.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path != "env.kwargs":
            out.update(_flatten(value, path + "."))
        else:
            out[path] = json.dumps(value, sort_keys=True)  # hashable, comparable
    return out


def _with_defaults(config: ConfigDict) -> ConfigDict:
    """The config with every key present (runs written before a key existed compare equal to
    runs that state its default); unchanged when it no longer validates."""
    try:
        return from_dict(upgrade(config)).to_dict()
    except (UserError, TypeError, ValueError):
        return config


def read_run(path: str | Path) -> Run:
    """Read config.yaml and metrics.jsonl of a run; torn or foreign lines are skipped."""
    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not path.is_dir():
        raise UserError(f"{path}: not a run directory")
    if not metrics.is_file():
        raise UserError(f"{path}: no metrics.jsonl (is it a run directory?)")
    config: ConfigDict = {}
    config_file = path / "config.yaml"
    if config_file.is_file():
        try:
            loaded = yaml.safe_load(config_file.read_text())
            config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            config = {}
        config = _with_defaults(config)
    points: dict[str, dict[int, float]] = {tag: {} for tag in TAGS}
    with open(metrics, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if not isinstance(record, dict) or not isinstance(record.get("global_step"), int):
                continue
            for tag in TAGS:
                value = record.get(tag)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    # A resumed run logs some steps again; the later record wins.
                    points[tag][record["global_step"]] = float(value)
    run = Run(path, config)
    for tag, by_step in points.items():
        if by_step:
            steps = np.array(sorted(by_step), dtype=np.int64)
            run.curves[tag] = (steps, np.array([by_step[s] for s in steps], dtype=np.float64))
    return run


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs with the same config except seed (and where/how they ran), in first-seen order."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        flat = _flatten(run.config)
        key = tuple(sorted((k, v) for k, v in flat.items() if k not in _IGNORED_KEYS))
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def _labels(groups: list[list[Run]]) -> list[str]:
    """Name each group by the config values that tell it apart from the others."""
    flats = [
        {k: v for k, v in _flatten(g[0].config).items() if k not in _IGNORED_KEYS} for g in groups
    ]
    keys = sorted({k for f in flats for k in f}, key=lambda k: (k != "env.id", k))  # env first
    differing = [k for k in keys if len({f.get(k) for f in flats}) > 1]
    labels = []
    for group, flat in zip(groups, flats, strict=True):
        if differing:
            parts = [
                f"{k.split('.', 1)[-1]}={json.loads(flat[k]) if k in flat else 'default'}"
                for k in differing[:3]
            ]
            name = ", ".join(parts)
        elif len(groups) == 1:
            env = (
                group[0].config.get("env", {}).get("id")
                if isinstance(group[0].config.get("env"), dict)
                else None
            )
            name = env or group[0].path.name
        else:
            name = group[0].path.name
        labels.append(f"{name} ({_seeds_text(group)})")
    return labels


def _seeds_text(group: list[Run]) -> str:
    """What a group's runs are: one run's name, or its seeds counted by value (two runs of one
    seed are one seed)."""
    if len(group) == 1:
        return group[0].path.name
    seeds = {
        run.config.get("trainer", {}).get("seed") if isinstance(run.config.get("trainer"), dict)
        else None
        for run in group
    }  # fmt: skip
    n = len(seeds)
    seeds_part = f"{n} seed{'s' if n != 1 else ''}"
    return seeds_part if n == len(group) else f"{len(group)} runs, {seeds_part}"


def mean_band(
    curves: list[tuple[np.ndarray, np.ndarray]], smooth: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std over runs, each interpolated onto the union of steps in their common range."""
    curves = [(s, _smooth(v, smooth)) for s, v in curves]
    lo = max(s[0] for s, _ in curves)
    hi = min(s[-1] for s, _ in curves)
    grid = np.unique(np.concatenate([s for s, _ in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    if grid.size == 0:  # no common range: fall back to the first run alone
        s, v = curves[0]
        return s, v, np.zeros_like(v)
    stacked = np.stack([np.interp(grid, s, v) for s, v in curves])
    return grid, stacked.mean(axis=0), stacked.std(axis=0)


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over `window` points (1 = unchanged)."""
    if window <= 1 or values.size < 2:
        return values
    csum = np.cumsum(np.insert(values, 0, 0.0))
    out = np.empty_like(values)
    for i in range(values.size):
        j = max(0, i + 1 - window)
        out[i] = (csum[i + 1] - csum[j]) / (i + 1 - j)
    return out


@dataclass
class Drawn:
    """What a figure shows, for its title: training curves, evaluations, bands over seeds."""

    train: bool = False
    eval: bool = False
    band: bool = False

    def title(self, smooth: int) -> str:
        """A title that names what is drawn, and nothing that is not."""
        parts = []
        if self.train:
            how = ["solid"] if self.eval else []
            how += [f"moving average of {smooth} points"] if smooth > 1 else []
            parts.append("training episodes" + (f" ({', '.join(how)})" if how else ""))
        if self.eval:
            parts.append("evaluations (dashed)" if self.train else "evaluations")
        text = "Episodic return: " + ", ".join(parts)
        return text + ("; bands: +-1 std over seeds" if self.band else "")


def plot_runs(
    run_dirs: list[str], out: str | Path = "curves.png", smooth: int = 1, title: str | None = None
) -> Path:
    """Draw the learning curves of `run_dirs` into the PNG `out`; returns its path."""
    if smooth < 1:
        raise UserError(f"--smooth: got {smooth}, expected an integer >= 1")
    runs = [read_run(d) for d in run_dirs]
    if not any(run.curves for run in runs):
        raise UserError(
            "no episodic returns in the metrics.jsonl of "
            + ", ".join(str(r.path) for r in runs)
            + " (no episode finished yet?)"
        )
    try:  # in the function: matplotlib is an optional dependency
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("plot needs matplotlib: pip install 'embodied-ppo[plot]'") from None

    groups = group_runs(runs)
    labels = _labels(groups)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    drawn = Drawn()
    for i, (group, label) in enumerate(zip(groups, labels, strict=True)):
        color = colors[i % len(colors)]
        for tag, kind in TAGS.items():
            curves = [run.curves[tag] for run in group if tag in run.curves]
            if not curves:
                continue
            style = "-" if kind == "train" else "--"
            # Evaluations are sparse and already averaged over episodes: smooth training only.
            steps, mean, std = mean_band(curves, smooth if kind == "train" else 1)
            # A curve of one point (one evaluation so far) is a marker, not an invisible line.
            marker = "o" if steps.size == 1 or kind == "eval" else None
            ax.plot(steps, mean, style, color=color, label=f"{label} {kind}", linewidth=1.6,
                    marker=marker, markersize=4)  # fmt: skip
            drawn.train = drawn.train or kind == "train"
            drawn.eval = drawn.eval or kind == "eval"
            if len(curves) > 1:
                ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
                drawn.band = True
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.set_title(title or drawn.title(smooth), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)

    out = Path(out)
    try:
        if out.parent != Path(""):
            out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out, buffer.getvalue())
    except OSError as exc:
        raise UserError(f"--out: cannot write {out}: {exc.strerror}") from None
    return out
