"""Statistics over seeds for the benchmarks: what a table of runs reports per config.

Few seeds and mean +- std mislead (Agarwal et al., "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", NeurIPS 2021). Each config's runs are summarized instead by:

- the interquartile mean (IQM): the mean of the middle 50% of the runs. The runs sorted, each
  holds an equal share 1/n of the probability mass; the IQM averages the mass between the 25th
  and the 75th percentile, so a run that straddles a quartile counts with the fraction of its
  share that lies inside (n = 5: the 2nd and 4th runs weigh 0.75, the 3rd 1). For n a multiple
  of 4 that is the mean of the middle n/2 runs, the same as rliable's `aggregate_iqm`
  (`scipy.stats.trim_mean(x, 0.25)`); for other n rliable drops floor(n/4) whole runs at each
  end (with 3 runs, none: their plain mean), which this module does not do.
- a 95% percentile bootstrap confidence interval of the IQM: the runs resampled with replacement
  RESAMPLES times by a generator seeded with BOOTSTRAP_SEED (so a report is the same every time
  it is written), the interval between the 2.5th and 97.5th percentiles of the resampled IQMs;
- the median, the worst seed (its value and which seed), and the seeds at or above a target
  (k of n, and which).

Learning curves get the same per point: the IQM over seeds and its bootstrap band, every
resample drawing whole runs (one draw of seeds for every point of the curve).

Higher is better everywhere (returns, success rates). numpy only: rliable brings arch, pandas,
statsmodels and seaborn for these few lines; tests/scripts/bench/test_stats.py checks this module
against it where it is installed (the `bench` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The seed protocol: configs are tuned on seeds 0-9 and reported on seeds 100 and up, which no
# tuning has seen. A seed below 100 counts as a tuning seed (it is not held out).
TUNING_SEEDS = range(10)
EVALUATION_FROM = 100
GROUPS = ("evaluation", "tuning")  # the order a report gives them

RESAMPLES = 10_000  # bootstrap resamples per interval
BOOTSTRAP_SEED = 0  # the resampling generator's seed: the same report every time
CONFIDENCE = 0.95


def iqm_weights(n: int) -> np.ndarray:
    """The weight of each of n sorted runs in the IQM (summing to 1): the share of its
    1/n of the mass that lies between the 25th and the 75th percentile, over 1/2."""
    if n < 1:
        raise ValueError("the IQM of no runs is undefined")
    lower = np.arange(n) / n  # run i holds [i/n, (i+1)/n)
    inside = np.clip(np.minimum(lower + 1 / n, 0.75) - np.maximum(lower, 0.25), 0.0, None)
    return inside / 0.5


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean of the values (see the module's docstring)."""
    x = np.sort(np.asarray(values, dtype=float))
    return float(x @ iqm_weights(len(x)))


def median(values: Sequence[float]) -> float:
    if len(values) == 0:
        raise ValueError("the median of no runs is undefined")
    return float(np.median(np.asarray(values, dtype=float)))


def _bootstrap_iqms(runs: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """The IQM of `resamples` resamples of the runs (axis 0 of `runs`, shape (n, ...)): one row
    of whole runs drawn with replacement per resample; shape (resamples, ...)."""
    n = runs.shape[0]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    drawn = np.sort(runs[picks], axis=1)  # (resamples, n, ...)
    return np.tensordot(drawn, iqm_weights(n), axes=([1], [0]))


def iqm_interval(
    values: Sequence[float],
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """The percentile bootstrap confidence interval of the IQM of the values."""
    runs = np.asarray(values, dtype=float)
    if runs.size == 0:
        raise ValueError("the IQM of no runs is undefined")
    iqms = _bootstrap_iqms(runs, resamples, seed)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(iqms, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Summary:
    """One config's runs: which seeds, their IQM and its interval, median, worst, at target."""

    seeds: tuple[str, ...]
    values: tuple[float, ...]
    iqm: float
    ci: tuple[float, float]
    median: float
    worst: float
    worst_seed: str
    target: float | None
    at_target: tuple[str, ...]  # the seeds at or above the target (empty without one)

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def fraction_at_target(self) -> float | None:
        return None if self.target is None else len(self.at_target) / self.n


def summarize(
    per_seed: Mapping[int | str, float],
    target: float | None = None,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Summary:
    """The statistics of one config's runs, given each seed's value (its final evaluation)."""
    if not per_seed:
        raise ValueError("no runs to summarize")
    seeds = tuple(str(s) for s in per_seed)
    values = tuple(float(v) for v in per_seed.values())
    worst = int(np.argmin(values))  # the first of tied worst seeds, in the order given
    at = () if target is None else tuple(s for s, v in zip(seeds, values) if v >= target)
    return Summary(
        seeds=seeds,
        values=values,
        iqm=iqm(values),
        ci=iqm_interval(values, resamples, seed),
        median=median(values),
        worst=values[worst],
        worst_seed=seeds[worst],
        target=target,
        at_target=at,
    )


@dataclass(frozen=True)
class Band:
    """A learning curve over seeds: at each step, the IQM over seeds and its interval."""

    steps: np.ndarray
    iqm: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: tuple[str, ...]


def curve_band(
    curves: Mapping[int | str, tuple[Sequence[float], Sequence[float]]],
    points: int = 100,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Band:
    """The IQM band of several seeds' curves, each given as (steps, values) with increasing
    steps. The curves are read (linear interpolation) at `points` evenly spaced steps over the
    range every seed covers, so seeds logged at different steps are compared at the same ones."""
    if not curves:
        raise ValueError("no curves")
    pairs = [(np.asarray(s, dtype=float), np.asarray(v, dtype=float)) for s, v in curves.values()]
    if any(len(s) == 0 or len(s) != len(v) for s, v in pairs):
        raise ValueError("every curve needs as many steps as values, at least one")
    start, end = max(s[0] for s, _ in pairs), min(s[-1] for s, _ in pairs)
    if start > end:
        raise ValueError("the curves cover no common steps")
    steps = np.linspace(start, end, points) if end > start else np.array([start])
    runs = np.stack([np.interp(steps, s, v) for s, v in pairs])  # (n, points)
    central = np.sort(runs, axis=0).T @ iqm_weights(len(pairs))
    iqms = _bootstrap_iqms(runs, resamples, seed)  # (resamples, points)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(iqms, [tail, 1.0 - tail], axis=0)
    return Band(steps, central, low, high, tuple(str(k) for k in curves))


def seed_group(seed: int | str) -> str:
    """'evaluation' for a seed from EVALUATION_FROM on, 'tuning' below."""
    return "evaluation" if int(seed) >= EVALUATION_FROM else "tuning"


def by_group(per_seed: Mapping[int | str, Any]) -> dict[str, dict[str, Any]]:
    """Per-seed entries split into evaluation and tuning seeds (in GROUPS' order, the empty
    left out), so that no statistic mixes held-out seeds with tuned ones."""
    out: dict[str, dict[str, Any]] = {}
    for group in GROUPS:
        part = {str(k): v for k, v in per_seed.items() if seed_group(k) == group}
        if part:
            out[group] = part
    return out


# ----------------------------------------------------------------------- table cells
def seeds_text(seeds: Sequence[str]) -> str:
    """'100-104' for a run of consecutive seeds, '1, 3, 7' otherwise, '-' for none."""
    if not seeds:
        return "-"
    ints = [int(s) for s in seeds]
    if len(ints) > 2 and ints == list(range(ints[0], ints[0] + len(ints))):
        return f"{ints[0]}-{ints[-1]}"
    return ", ".join(str(s) for s in ints)


def cells(s: Summary, fmt: str = ".0f") -> dict[str, str]:
    """A summary as a table's cells: IQM [95% CI], median, worst (seed), k of n at target."""
    at = "-"
    if s.target is not None:
        at = f"{len(s.at_target)} of {s.n}"
        if s.at_target:
            at += f" ({seeds_text(s.at_target)})"
    return {
        "iqm": f"{s.iqm:{fmt}} [{s.ci[0]:{fmt}}, {s.ci[1]:{fmt}}]",
        "median": f"{s.median:{fmt}}",
        "worst": f"{s.worst:{fmt}} (seed {s.worst_seed})",
        "at_target": at,
        "seeds": seeds_text(s.seeds),
        "n": str(s.n),
    }
