"""scripts/bench/arm.py and its report: success rates per set of seeds, requirements, seeds saved
by invocations side by side."""

from __future__ import annotations

import json

from scripts.bench import arm
from scripts.bench.report import arm as arm_report


def test_bench_arm_reports_success_rates_per_set_of_seeds(tmp_path):
    def run(rate: float) -> dict:
        return {"success_rate": rate, "wall_s": 60.0, "curve": [[0, 0.0], [100, rate * 100]]}

    rates = (0.99, 0.6, 0.8, 0.75, 0.72)
    results = {"push": {str(s): run(r) for s, r in zip(range(100, 105), rates)}}
    results["push"]["3"] = run(0.55)
    lines = arm_report.summary_lines(results)
    evaluation = next(x for x in lines if "evaluation 100-104" in x)
    # Sorted 0.6 0.72 0.75 0.8 0.99: (0.75 * 0.72 + 0.75 + 0.75 * 0.8) / 2.5; target 0.7.
    assert f"| {(0.75 * 0.72 + 0.75 + 0.75 * 0.8) / 2.5:.2f} [" in evaluation
    assert "| 0.60 (seed 101) | 4 of 5 (100, 102, 103, 104) |" in evaluation
    assert any("tuning 3 | 0.55 [0.55, 0.55]" in x and "0 of 1" in x for x in lines)
    arm_report.plot(results, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["arm_push_evaluation_iqm.png"]  # one seed: none


def test_bench_arm_holds_each_task_to_its_requirement_on_evaluation_seeds(tmp_path):
    """reach needs 5 of 5 seeds at 95%, push 4 of 5 at 70%: met, missed, or open while the
    seeds yet to run could still make it; tasks without evaluation seeds are named."""

    def runs(*rates, first=100):
        return {str(first + i): {"success_rate": r, "wall_s": 60.0} for i, r in enumerate(rates)}

    def row(results, task):
        lines = arm_report.report_lines(results, tmp_path)
        return next(x for x in lines if x.startswith(f"| `configs/{task}.yaml` | evaluation"))

    assert "| 5 of 5: met |" in row({"reach": runs(0.96, 0.95, 1.0, 0.99, 0.97)}, "reach")
    assert "| 5 of 5: **missed** |" in row({"reach": runs(0.96, 0.91)}, "reach")
    assert "| 4 of 5: open (2 seeds to run) |" in row({"push": runs(0.8, 0.5, 0.9)}, "push")
    assert "| 4 of 5: met |" in row({"push": runs(0.8, 0.7, 0.9, 0.75)}, "push")
    assert "| 4 of 5: open (1 seed to run) |" in row({"push": runs(0.8, 0.5, 0.9, 0.75)}, "push")
    assert "| 4 of 5: **missed** |" in row({"push": runs(0.8, 0.5, 0.6, 0.75)}, "push")
    lines = arm_report.report_lines({"push": runs(0.8, 0.9) | runs(0.6, first=3)}, tmp_path)
    tuning = next(x for x in lines if "| tuning 3 |" in x)
    assert "| >= 0.70: 0 of 1 | - |" in tuning  # no requirement on tuning seeds
    assert any(x.startswith("Not yet measured on evaluation seeds: `configs/reach.yaml`, "
                            "`configs/reach_pixels.yaml`") for x in lines)  # fmt: skip
    assert arm_report.report_lines({}, tmp_path) == []


def test_bench_arm_keeps_the_seeds_another_invocation_saved(tmp_path):
    """Two invocations side by side (say push 100-102 and push 103-104, or reach and push)
    each save their finished seeds into the same results file: neither drops the other's."""
    results = tmp_path / "arm.json"
    arm.save_seed(results, "push", 100, {"success_rate": 0.8})
    arm.save_seed(results, "push", 103, {"success_rate": 0.7})  # the other invocation
    written = arm.save_seed(results, "reach", 100, {"success_rate": 0.96})
    expected = {"push": {"100": {"success_rate": 0.8}, "103": {"success_rate": 0.7}},
                "reach": {"100": {"success_rate": 0.96}}}  # fmt: skip
    assert written == expected and json.loads(results.read_text()) == expected
    assert [p.name for p in tmp_path.iterdir()] == ["arm.json"]
