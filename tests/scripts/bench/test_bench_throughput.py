"""scripts/bench/throughput.py, whole_process.py and their workers: the settings both learners
share (early stopping, the learning-rate schedule), the gradient steps each takes, and what a
whole-process record holds."""

from __future__ import annotations

import json

import pytest
import yaml
from bench_support import run_module, write_config

from scripts.bench import whole_process
from scripts.bench.lib import ppo_settings, sidebyside
from scripts.bench.workers import sb3_ppo


def load_bench_settings(tmp_path, schedule: str = "constant") -> dict:
    """The shared settings of a config with early_stop_kl 0.06 and the given schedule."""
    config = write_config(tmp_path / "tiny.yaml")
    data = yaml.safe_load(config.read_text().split("\n", 2)[2])
    data["algorithm"]["early_stop_kl"] = 0.06
    data.setdefault("optim", {})["schedule"] = schedule
    config.write_text(yaml.safe_dump(data))
    return ppo_settings.from_config(config)


def test_ours_gets_the_configs_early_stop(tmp_path):
    # early_stop_kl changes how many gradient steps an update takes: a side-by-side timing
    # that dropped it would compare different amounts of work.
    s = load_bench_settings(tmp_path)
    assert s["early_stop_kl"] == 0.06
    assert ppo_settings.ours_config(s, 2, str(tmp_path / "run"), 1).algorithm.early_stop_kl == 0.06


def test_stable_baselines3_gets_the_configs_early_stop(tmp_path):
    pytest.importorskip("stable_baselines3")  # the .[bench] extra
    s = load_bench_settings(tmp_path)
    model, _ = sb3_ppo.sb3_model(s, 1, 10_000)
    assert model.target_kl == pytest.approx(0.06 / 1.5)  # its rule: stop past 1.5 x target_kl


def test_stable_baselines3_gets_the_configs_learning_rate_schedule(tmp_path):
    # Under early stopping the rate decides how many gradient steps an update takes: both
    # contenders must take iteration k's update at the same rate.
    from embodied_ppo.algo.schedules import learning_rate
    from embodied_ppo.config.schema import OptimConfig

    s = load_bench_settings(tmp_path, "linear")
    assert s["schedule"] == "linear"
    assert ppo_settings.ours_config(s, 4, str(tmp_path / "run"), 1).optim.schedule == "linear"
    batch = s["rollout_steps"] * s["num_envs"]
    total = 4 * batch
    schedule = sb3_ppo.sb3_learning_rate(s, total)
    optim = OptimConfig(lr=s["lr"], schedule="linear")
    for k in range(4):
        # Stable-Baselines3 asks its schedule after rollout k, ours sets the rate before it.
        theirs = schedule(1.0 - (k + 1) * batch / total)
        assert theirs == pytest.approx(learning_rate(optim, k * batch / total))
    assert theirs > 0.0
    s = load_bench_settings(tmp_path)
    assert sb3_ppo.sb3_learning_rate(s, total) == s["lr"]


def test_our_gradient_steps_are_counted_from_the_metrics(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"iteration": 1, "losses/num_gradient_steps": 4.0}, {"iteration": 2}]
    rows.append({"iteration": 3, "losses/num_gradient_steps": 3.0})
    metrics.write_text("\n".join(json.dumps(r) for r in rows))
    assert whole_process.logged_gradient_steps(metrics) == 7
    metrics.write_text("\n".join(json.dumps(r) for r in rows[1:]))  # iteration 1 not logged
    assert whole_process.logged_gradient_steps(metrics) is None


def test_stable_baselines3s_gradient_steps_are_counted(tmp_path):
    pytest.importorskip("stable_baselines3")  # the .[bench] extra
    s = load_bench_settings(tmp_path)
    s["early_stop_kl"] = None
    # 2 envs x 32 steps a rollout, one epoch of minibatches of 32: 2 steps per iteration.
    assert sb3_ppo.whole(s, 128, 1) == {"steps": 128, "gradient_steps": 4}


def test_a_schedule_stable_baselines3_lacks_is_refused(tmp_path):
    load_bench_settings(tmp_path, "adaptive")
    config = str(tmp_path / "tiny.yaml")
    ran = run_module("scripts.bench.throughput", "--config", config, timeout=120)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert "optim.schedule: adaptive has no Stable-Baselines3 counterpart" in ran.stderr
    out = tmp_path / "record.json"
    ran = run_module("scripts.bench.whole_process", "--config", config, "--steps", "64",
                     "--out", str(out), timeout=120)  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and not out.exists()
    assert "optim.schedule: adaptive has no Stable-Baselines3 counterpart" in ran.stderr


def test_ratios_are_of_the_medians_and_of_each_round():
    results = {"sb3_whole": [60.0, 66.0, 70.0], "ours_whole": [20.0, 22.0, 20.0]}
    summary = sidebyside.ratios(results, whole_process.PAIRS)
    assert summary["median"] == {"sb3_whole": 66.0, "ours_whole": 20.0}
    assert summary["ratios"] == {"ours / sb3 (speed)": pytest.approx(3.3)}
    assert summary["per_round_ratios"]["ours / sb3 (speed)"] == pytest.approx([3.0, 3.0, 3.5])
    line = sidebyside.ratio_lines(summary)[0]
    assert "3.30" in line and "median 3.00, range 3.00-3.50" in line
    # A pair missing a contender is left out, not a ratio of nothing.
    assert sidebyside.ratios({"ours_whole": [1.0]}, whole_process.PAIRS)["ratios"] == {}


def test_whole_processes_side_by_side_write_a_record_with_provenance(tmp_path):
    """A smoke of the README's measurement: one round of whole processes of a tiny config,
    ours and Stable-Baselines3, into a record that names its command, commit, date and
    machine, with every round's seconds and gradient steps."""
    pytest.importorskip("stable_baselines3")  # the .[bench] extra
    config = write_config(tmp_path / "tiny.yaml")
    out = tmp_path / "whole.json"
    args = ["--config", str(config), "--steps", "128", "--rounds", "1", "--sb3-threads", "1",
            "--threads", "1", "--out", str(out)]  # fmt: skip
    ran = run_module("scripts.bench.whole_process", *args, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    record = json.loads(out.read_text())
    rec = record["configs"][str(config)]
    assert rec["whole_process_steps"] == 128 and record["rounds"] == 1
    assert [len(rec["results"][c]) for c in ("ours_whole", "sb3_whole")] == [1, 1]
    # 2 iterations of 2 envs x 32 steps, one epoch of two minibatches of 32: 4 gradient steps.
    assert rec["gradient_steps"] == {"ours_whole": [4], "sb3_whole": [4]}
    seconds = rec["results"]
    assert rec["ratios"]["ours / sb3 (speed)"] == pytest.approx(
        seconds["sb3_whole"][0] / seconds["ours_whole"][0]
    )
    prov = record["provenance"]
    assert prov["command"] == "python -m scripts.bench.whole_process " + " ".join(args)
    assert len(prov["commit"]) == 40 and prov["date"] and prov["machine"]["cores"] >= 1
    assert f"wrote {out}" in ran.stdout
