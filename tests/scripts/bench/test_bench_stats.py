"""scripts/bench/lib/stats.py: the IQM, its bootstrap interval, median, worst seed, seeds at target."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from scripts.bench.lib import stats as benchstats


def test_the_iqm_of_4_runs_is_the_mean_of_the_middle_two():
    assert benchstats.iqm([10.0, 0.0, 4.0, 2.0]) == pytest.approx(3.0)  # sorted 0 2 4 10


def test_the_iqm_of_5_runs_weighs_the_runs_across_the_quartiles_by_their_share_inside():
    # Each run holds 0.2 of the mass; [0.25, 0.75] takes 0.15 of the 2nd and 4th, all of the 3rd:
    # (0.75 * 2 + 4 + 0.75 * 8) / 2.5.
    assert benchstats.iqm([8.0, 100.0, 1.0, 4.0, 2.0]) == pytest.approx(4.6)
    weights = benchstats.iqm_weights(5)
    assert weights == pytest.approx([0.0, 0.3, 0.4, 0.3, 0.0])


def test_the_iqm_of_10_runs_takes_half_of_the_3rd_and_8th():
    squares = [float(k * k) for k in range(10, 0, -1)]  # 100, 81, ..., 1
    # (0.5 * 9 + 16 + 25 + 36 + 49 + 0.5 * 64) / 5
    assert benchstats.iqm(squares) == pytest.approx(32.5)


def test_the_iqm_of_3_runs_and_of_one():
    assert benchstats.iqm([30.0, 0.0, 3.0]) == pytest.approx((0.25 * 0 + 3 + 0.25 * 30) / 1.5)
    assert benchstats.iqm([7.0]) == 7.0


@pytest.mark.parametrize("n", range(1, 13))
def test_the_weights_are_a_mean_over_half_the_mass(n):
    weights = benchstats.iqm_weights(n)
    assert weights.sum() == pytest.approx(1.0) and (weights >= 0).all()
    assert weights == pytest.approx(weights[::-1])  # symmetric: no side is favoured
    assert weights.max() <= min(1.0, 2.0 / n) + 1e-12  # a run: at most its share over 1/2


def test_ties_and_outliers():
    assert benchstats.iqm([5.0] * 5) == pytest.approx(5.0)
    assert benchstats.iqm([0.0, 1.0, 0.0, 1.0]) == pytest.approx(0.5)
    # The best and the worst of 5 or more runs do not count at all.
    runs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert benchstats.iqm([-1e9, *runs[1:4], 1e9]) == benchstats.iqm(runs)


def test_no_runs_is_an_error():
    with pytest.raises(ValueError):
        benchstats.iqm([])
    with pytest.raises(ValueError):
        benchstats.summarize({})


def test_the_interval_of_two_runs_is_their_range():
    # Resamples of [0, 1]: (0, 0), (0, 1), (1, 0), (1, 1), IQMs 0, 0.5, 0.5, 1, each of
    # probability 1/4: the 2.5th and 97.5th percentiles are 0 and 1. Drawn without
    # replacement every resample would be 0.5.
    assert benchstats.iqm_interval([0.0, 1.0]) == (0.0, 1.0)


def test_the_interval_is_reproducible_and_holds_the_iqm():
    runs = [120.0, 480.0, 500.0, 500.0, 310.0, 495.0, 500.0, 470.0, 45.0, 500.0]
    low, high = benchstats.iqm_interval(runs)
    assert benchstats.iqm_interval(runs) == (low, high)  # the same seed, the same report
    assert low <= benchstats.iqm(runs) <= high and low < high
    assert min(runs) <= low and high <= max(runs)
    other = benchstats.iqm_interval(runs, seed=1)
    assert other != (low, high) and other == pytest.approx((low, high), rel=0.05)


def test_the_interval_matches_the_exact_bootstrap_distribution():
    # Every one of the 5^5 resamples of 5 runs, with its probability: the exact percentiles.
    runs = [0.0, 1.0, 3.0, 7.0, 20.0]
    iqms = np.sort([benchstats.iqm(r) for r in itertools.product(runs, repeat=5)])
    exact = np.quantile(iqms, [0.025, 0.975])
    low, high = benchstats.iqm_interval(runs, resamples=20_000)
    assert low == pytest.approx(exact[0], abs=0.15) and high == pytest.approx(exact[1], abs=0.3)


def test_one_run_and_tied_runs_have_a_point_interval():
    assert benchstats.iqm_interval([7.0]) == (7.0, 7.0)
    assert benchstats.iqm_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_the_summary_names_the_worst_seed_and_the_seeds_at_target():
    s = benchstats.summarize({100: 500.0, 101: 296.0, 102: 498.0, 103: 475.0}, target=475.0)
    assert s.n == 4 and s.seeds == ("100", "101", "102", "103")
    assert s.iqm == pytest.approx((475.0 + 498.0) / 2)
    assert s.median == pytest.approx(486.5)
    assert (s.worst, s.worst_seed) == (296.0, "101")
    assert s.at_target == ("100", "102", "103") and s.fraction_at_target == 0.75
    cells = benchstats.cells(s)
    assert cells["at_target"] == "3 of 4 (100, 102, 103)"
    assert cells["worst"] == "296 (seed 101)" and cells["seeds"] == "100-103"
    assert cells["iqm"].startswith("486 [") and cells["median"] == "486"
    none = benchstats.summarize({1: 1.0})
    assert none.fraction_at_target is None and benchstats.cells(none)["at_target"] == "-"
    assert benchstats.cells(benchstats.summarize({1: 0.0}, target=1.0))["at_target"] == "0 of 1"


def test_seed_lists_are_written_short():
    assert benchstats.seeds_text(["1", "2", "3"]) == "1-3"
    assert benchstats.seeds_text(["100", "101"]) == "100, 101"
    assert benchstats.seeds_text(["0", "2", "5"]) == "0, 2, 5"
    assert benchstats.seeds_text([]) == "-"


def test_a_curve_band_reads_every_seed_at_the_same_steps():
    # Seed "a" logged every 10 steps, seed "b" every 20, seed "c" from step 10 only.
    curves = {
        "a": ([0, 10, 20, 30, 40], [0.0, 1.0, 2.0, 3.0, 4.0]),
        "b": ([0, 20, 40], [0.0, 4.0, 8.0]),
        "c": ([10, 40], [10.0, 10.0]),
    }
    band = benchstats.curve_band(curves, points=4)
    assert band.steps == pytest.approx([10, 20, 30, 40])  # the range every seed covers
    for k, step in enumerate(band.steps):
        at = [step / 10, step / 5, 10.0]  # each seed's value there
        assert band.iqm[k] == pytest.approx(benchstats.iqm(at))
        assert band.low[k] <= band.iqm[k] <= band.high[k]
        assert min(at) <= band.low[k] and band.high[k] <= max(at)
    assert band.seeds == ("a", "b", "c")
    same = benchstats.curve_band({1: ([0, 1], [2.0, 3.0]), 2: ([0, 1], [2.0, 3.0])}, points=3)
    assert same.low == pytest.approx(same.high) and same.iqm == pytest.approx([2.0, 2.5, 3.0])
    with pytest.raises(ValueError):
        benchstats.curve_band({1: ([0, 1], [0.0, 0.0]), 2: ([5, 6], [0.0, 0.0])})


def test_against_rliable():
    """rliable (the `bench` extra) trims whole runs; for a multiple of 4 runs its IQM is ours,
    and its percentile interval (20,000 resamples by its own generator) agrees within the
    resampling noise."""
    pytest.importorskip("rliable")
    from rliable import library, metrics

    rng = np.random.default_rng(3)
    for n in (4, 8):
        runs = rng.normal(1000.0, 300.0, size=n)
        assert metrics.aggregate_iqm(runs[:, None]) == pytest.approx(benchstats.iqm(runs))
        _, intervals = library.get_interval_estimates(
            {"x": runs[:, None]}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=20_000
        )
        low, high = benchstats.iqm_interval(runs, resamples=20_000)
        spread = runs.max() - runs.min()
        assert intervals["x"][0, 0] == pytest.approx(low, abs=0.02 * spread)
        assert intervals["x"][1, 0] == pytest.approx(high, abs=0.02 * spread)
    # 5 runs: rliable averages the middle 3 whole runs; ours weighs the 2nd and 4th by 3/4.
    runs = np.array([1.0, 2.0, 4.0, 8.0, 100.0])
    assert metrics.aggregate_iqm(runs[:, None]) == pytest.approx((2 + 4 + 8) / 3)
    assert benchstats.iqm(runs) == pytest.approx(4.6)
