"""scripts/bench/variants.py and its report: variants of one config on the same seeds, bad input
refused before anything runs, runs continued across invocations, the table of a results file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from bench_support import run_module, write_config

from scripts.bench import variants
from scripts.bench.report import variants as report


def refused(argv: list[str], capsys) -> str:
    """Run the entry point with `argv`; it must exit 2 with one line on stderr and print nothing."""
    with pytest.raises(SystemExit) as exit_:
        variants.main(argv)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("scripts.bench.variants: error: ")
    return err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--variant", "a="], "CONFIG and at least one --variant are required"),
        (["{config}"], "CONFIG and at least one --variant are required"),
        (["{tmp}/none.yaml", "--variant", "a="], "no such config"),
        (["{config}", "--variant", "a"], "expected NAME=[KEY=VALUE,...]"),
        (["{config}", "--variant", "a b="], "expected NAME=[KEY=VALUE,...]"),
        (["{config}", "--variant", "a=optim.lr"], "'optim.lr' is not KEY=VALUE"),
        (["{config}", "--variant", "a=trainer.seed=3"], "trainer.seed cannot vary"),
        (["{config}", "--variant", "a=env.threads=2"], "env.threads cannot vary (a run setting"),
        (["{config}", "--variant", "a=optim.lrr=1"], "--variant a: optim.lrr: unknown key"),
        (["{config}", "--variant", "a=optim.lr=-1"], "--variant a: optim.lr: got -1"),
        (["{config}", "--variant", "a=", "--variant", "a=optim.lr=1e-4"], "a name given twice"),
        (["{config}", "--variant", "a=", "--seeds", "10x"], "--seeds 10x: expected a seed"),
        (["{config}", "--variant", "a=", "--seeds", "109-100"], "--seeds 109-100: an empty"),
        (["{config}", "--variant", "a=", "--jobs", "0"], "--jobs and --episodes must be"),
        (["{config}", "--variant", "a=", "--set", "optim.lr=1"], "--set optim.lr=1: expected"),
        (["{config}", "--variant", "a=", "--target", "high"], "argument --target: invalid"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, args, says):
    config = write_config(tmp_path / "tiny.yaml")
    out, root = tmp_path / "results.json", tmp_path / "runs"
    argv = [a.format(config=config, tmp=tmp_path) for a in args]
    err = refused([*argv, "--out", str(out), "--root", str(root)], capsys)
    assert says in err
    assert not out.exists() and not root.exists()


def results_of(config: str = "tiny.yaml", **variants_: list[str]) -> dict:
    return {
        "config": config,
        "config_digest": "0",
        "episodes": 10,
        "target": None,
        "variants": {n: {"overrides": o, "runs": {}} for n, o in variants_.items()},
    }


@pytest.mark.parametrize(
    ("held", "argv", "says"),
    [
        ("[1, 2]", [], "is not a results file of this variants benchmark"),
        ('{"task": "cartpole"}', [], "is not a results file of this variants benchmark"),
        ("other-config", [], "holds runs of other.yaml as it was then"),
        ("same", ["--episodes", "5"], "scored its runs on 10 episodes, not --episodes 5"),
        ("same", ["--variant", "b=optim.lr=2e-4"], "holds it with the overrides optim.lr=1e-4"),
    ],
)
def test_a_results_file_of_other_runs_is_refused_and_left_as_it_was(
    tmp_path, capsys, held, argv, says
):
    config = write_config(tmp_path / "tiny.yaml")
    out = tmp_path / "results.json"
    text = held
    if held in ("same", "other-config"):
        rec = results_of(b=["optim.lr=1e-4"])
        rec["config"] = variants.shown(config) if held == "same" else "other.yaml"
        rec["config_digest"] = variants.config_digest(config)
        text = json.dumps(rec)
    out.write_text(text)
    argv = argv if "--variant" in argv else [*argv, "--variant", "a="]
    err = refused([str(config), *argv, "--out", str(out), "--root", str(tmp_path / "r")], capsys)
    assert says in err
    assert out.read_text() == text and not (tmp_path / "r").exists()


def test_a_config_changed_since_its_runs_is_refused_comments_and_run_settings_aside(tmp_path):
    config = write_config(tmp_path / "tiny.yaml")
    before = variants.config_digest(config)
    data = yaml.safe_load(config.read_text())
    config.write_text("# another comment\n" + yaml.safe_dump(data))
    assert variants.config_digest(config) == before
    data["trainer"]["torch_threads"] = 1  # how it runs, not what it learns
    config.write_text(yaml.safe_dump(data))
    assert variants.config_digest(config) == before
    data["optim"] = {"lr": 1e-4}
    config.write_text(yaml.safe_dump(data))
    assert variants.config_digest(config) != before


def test_variants_and_seeds_parse_as_written():
    wide = variants.parse_variant("wide=model.hidden_sizes=[128,128],optim.lr=1e-4")
    assert wide == variants.Variant("wide", ("model.hidden_sizes=[128,128]", "optim.lr=1e-4"))
    assert variants.parse_variant("rnd=") == variants.Variant("rnd", ())
    assert variants.parse_seeds(["100-103", "7", "101"]) == [100, 101, 102, 103, 7]


def run_record(final: float, wall: float = 60.0, kept: float | None = None) -> dict:
    rec = {"final": {"mean": final, "std": 1.0, "step": 300_000}, "wall_s": wall}
    if kept is not None:
        rec["kept"] = {"mean": kept, "std": 1.0, "step": 250_000}
    rec["provenance"] = {"command": "python -m scripts.bench.variants c.yaml", "commit": "a" * 40,
                         "dirty": False, "date": "2026-01-02T03:04:05+00:00",
                         "machine": {"cpu": "CPU X", "cores": 2, "torch": "2.13.0"}}  # fmt: skip
    return rec


def row(lines: list[str], *parts: str) -> str:
    (found,) = [x for x in lines if all(p in x for p in parts)]
    return found


def test_the_report_gives_each_variants_statistics_per_set_of_seeds():
    finals = [95.0, -3.0, 93.5, 94.0, -1.0, 92.0, 96.0, 91.0, -0.5, 94.5]  # seeds 100-109
    results = results_of(rnd=[], ppo=["algorithm.rnd.enabled=false"])
    results["target"] = 90.0
    runs = results["variants"]["rnd"]["runs"]
    for i, v in enumerate(finals):
        runs[str(100 + i)] = run_record(v, wall=60.0 + 6 * i, kept=v + 1)
    runs["3"] = run_record(50.0, wall=30.0, kept=51.0)  # a tuning seed: a row of its own
    ppo = results["variants"]["ppo"]["runs"]
    ppo |= {str(100 + i): run_record(-0.1 * i, wall=40.0) for i in range(5)}  # no kept policy
    results["remarks"] = ["two runs at a time beside other work: wall times not comparable"]
    lines = report.report_lines(results, "docs/bench/x.json")

    # The IQM of 10 sorted runs: the 3rd and 8th weigh half, the 4th to 7th whole (over 5).
    x = np.sort(finals)
    expected = (0.5 * x[2] + x[3:7].sum() + 0.5 * x[7]) / 5
    final = row(lines, "| `rnd` |", "| evaluation 100-109 |", "| final |")
    assert f"| {expected:.1f} [" in final
    assert "| 92.8 |" in final  # the median: (92.0 + 93.5) / 2
    assert "| -3.0 (seed 101) |" in final
    assert "| 7 of 10 (100, 102, 103, 105, 106, 107, 109) |" in final
    assert "| 87 s |" in final  # mean wall time: 60 + 6 * 4.5
    kept = row(lines, "| `rnd` |", "| evaluation 100-109 |", "| kept (best.pt) |")
    assert "96.0 (250k), -2.0 (250k)" in kept
    assert "| 10 of 10" not in kept and "| 7 of 10 (" in kept
    tuning = row(lines, "| `rnd` |", "| tuning 3 |", "| final |")
    assert "| 50.0 [50.0, 50.0] |" in tuning and "| 0 of 1 |" in tuning
    only = row(lines, "| `ppo` |", "| evaluation 100-104 |")  # the final policy alone
    assert "| `algorithm.rnd.enabled=false` |" in only and "| 0 of 5 |" in only
    assert "| -0.4 (seed 104) |" in only
    assert "| at the target (>= 90) |" in lines[2]
    assert any(x.startswith("Measured by `python -m scripts.bench.variants c.yaml`: commit "
                            "aaaaaaa, 2026-01-02, CPU X, 2 cores") for x in lines)  # fmt: skip
    assert lines[-1] == "- two runs at a time beside other work: wall times not comparable"
    # Another target, given at report time, counts seeds against it instead.
    lines = report.report_lines(results, "docs/bench/x.json", target=95.0)
    assert "| 2 of 10 (100, 106) |" in row(lines, "| `rnd` |", "evaluation", "| final |")


def test_report_mode_prints_the_table_of_a_results_file(tmp_path, capsys):
    out = tmp_path / "results.json"
    results = results_of(a=[])
    results["variants"]["a"]["runs"] = {"100": run_record(-150.0), "101": run_record(-170.0)}
    out.write_text(json.dumps(results))
    assert variants.main(["--report", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| `a` | as committed | evaluation 100, 101 | final | -160 [-170, -150] |" in printed
    refused(["--report", "--out", str(tmp_path / "none.json")], capsys)


def test_a_saved_run_keeps_the_runs_another_invocation_saved(tmp_path):
    out = tmp_path / "results.json"
    mine = results_of(a=[], b=["optim.lr=1e-4"])
    out.write_text(json.dumps(mine))
    other = json.loads(out.read_text())
    other["variants"]["b"]["runs"]["105"] = {"final": {"mean": 1.0}}  # saved meanwhile
    out.write_text(json.dumps(other))
    variants.Saver(out, mine).save("a", 100, {"final": {"mean": 2.0}})
    written = json.loads(out.read_text())
    assert written["variants"]["a"]["runs"] == {"100": {"final": {"mean": 2.0}}}
    assert written["variants"]["b"]["runs"] == {"105": {"final": {"mean": 1.0}}}


def test_variants_train_on_each_seed_and_a_second_invocation_trains_nothing(tmp_path):
    config = write_config(tmp_path / "tiny.yaml")
    out, root = tmp_path / "results.json", tmp_path / "runs"
    args = [str(config), "--variant", "plain=", "--variant", "vn=algorithm.normalize_value=true",
            "--seeds", "100", "--episodes", "2", "--jobs", "2", "--out", str(out),
            "--root", str(root)]  # fmt: skip
    ran = run_module("scripts.bench.variants", *args)
    assert ran.returncode == 0, ran.stderr
    results = json.loads(out.read_text())
    for name, normalized in (("plain", False), ("vn", True)):
        run = root / name / "seed100"
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["algorithm"]["normalize_value"] is normalized
        assert cfg["trainer"]["seed"] == 100 and cfg["trainer"]["torch_threads"] == 1
        rec = results["variants"][name]["runs"]["100"]
        scored = json.loads((run / "variants_eval.json").read_text())
        assert len(scored["returns"]) == 2 and rec["final"]["mean"] == scored["mean_return"]
        assert rec["settings"] == [["trainer.torch_threads=1", "env.threads=1"]]
        assert rec["provenance"]["command"].startswith("python -m scripts.bench.variants ")
        assert "kept" not in rec  # the config has no periodic evaluation
    assert "| `vn` | `algorithm.normalize_value=true` | evaluation 100 | final |" in ran.stdout
    again = run_module("scripts.bench.variants", *args)
    assert again.returncode == 0, again.stderr
    assert json.loads(out.read_text()) == results  # nothing trained or scored again
