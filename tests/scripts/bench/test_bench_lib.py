"""scripts/bench/lib: results files written whole and refused when foreign, the provenance every
record carries, the run settings `--set` takes, the clocks of resumed runs."""

from __future__ import annotations

import json
import os
import platform
import subprocess

import pytest
from support import ROOT

from scripts.bench.lib import args, records, runs


def test_a_results_file_is_read_whole_or_refused_untouched(tmp_path):
    path = tmp_path / "r.json"
    assert records.read_results(path) == {}  # none yet
    records.write_results(path, {"a": {"env_id": "X"}})
    assert records.read_results(path, records="env_id") == {"a": {"env_id": "X"}}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    for text in ("{not json", "[1]", '{"a": {"other": 1}}'):
        path.write_text(text)
        with pytest.raises(args.BadInput, match="is not a results file of this arm benchmark"):
            records.read_results(path, records="env_id", name="arm benchmark")
        assert path.read_text() == text


def test_provenance_names_the_command_commit_date_and_machine(monkeypatch):
    prov = records.provenance("scripts.bench.arm", ["--tasks", "reach", "--set", "a b"])
    assert prov["command"] == "python -m scripts.bench.arm --tasks reach --set 'a b'"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert prov["commit"] == head.stdout.strip() and isinstance(prov["dirty"], bool)
    assert prov["date"].endswith("+00:00") and prov["date"][:2] == "20"
    m = prov["machine"]
    assert m["cores"] == os.cpu_count() and m["python"] == platform.python_version()
    assert m["cpu"] and m["torch"] and "gpu" in m
    assert records.check_provenance({"provenance": prov}, "x") == []


def test_a_record_is_dirty_with_code_changed_or_added_but_not_ignored(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                       check=True, capture_output=True)  # fmt: skip

    git("init", "-q")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "a.yaml").write_text("a: 1\n")
    (tmp_path / ".gitignore").write_text("*.pyc\n")
    git("add", ".")
    git("commit", "-q", "-m", "x")
    monkeypatch.setattr(records, "ROOT", tmp_path)
    assert records.commit()[1] is False
    (tmp_path / "configs" / "b.pyc").write_text("")  # ignored
    (tmp_path / "notes.txt").write_text("")  # outside the code
    assert records.commit()[1] is False
    (tmp_path / "configs" / "new.yaml").write_text("b: 2\n")  # a config not yet committed
    assert records.commit()[1] is True
    (tmp_path / "configs" / "new.yaml").unlink()
    (tmp_path / "configs" / "a.yaml").write_text("a: 2\n")
    assert records.commit()[1] is True


def test_a_record_without_whole_provenance_is_named():
    prov = records.provenance("scripts.bench.arm", [])
    assert records.check_provenance({}, "arm.json") == ["arm.json: no provenance"]
    lacking = {**prov, "commit": None, "machine": {**prov["machine"], "cpu": None}}
    assert records.check_provenance({"provenance": lacking}, "r") == [
        "r: provenance lacks commit, machine.cpu"
    ]
    # Recovered from the repository's history: what it could not recover is null, and said so.
    recovered = {**lacking, "recovered": True, "command": None}
    assert records.check_provenance({"provenance": recovered}, "r") == []
    del recovered["date"]
    assert records.check_provenance({"provenance": recovered}, "r") == ["r: provenance lacks date"]
    # A machine without a GPU names none; one without the key at all is incomplete.
    assert records.check_provenance({"provenance": {**prov, "machine": {
        **prov["machine"], "gpu": None}}}, "r") == []  # fmt: skip
    machine = dict(prov["machine"])
    del machine["gpu"]
    assert records.check_provenance({"provenance": {**prov, "machine": machine}}, "r") == [
        "r: provenance lacks machine.gpu"
    ]


def test_run_settings_take_only_how_a_run_runs():
    assert runs.run_settings(["trainer.torch_threads=1", "env.processes=2"]) == [
        "trainer.torch_threads=1",
        "env.processes=2",
    ]
    for bad in ("optim.lr=0.1", "trainer.torch_threads", "env.threads:1"):
        with pytest.raises(args.BadInput, match=f"--set {bad}: expected KEY=VALUE"):
            runs.run_settings([bad])


def test_a_resumed_runs_clock_continues_where_the_stopped_one_ended(tmp_path):
    # Stopped after step 300 (its last checkpoint at 200), resumed from 200 with a clock from 0.
    rows = [(100, 10.0), (200, 20.0), (300, 30.0), (300, 12.0), (400, 22.0)]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"global_step": s, "time": t}) + "\n" for s, t in rows)
    )
    stitched, seconds = runs.stitched(tmp_path)
    assert [r["global_step"] for r in stitched] == [100, 200, 300, 400]
    assert seconds == 20.0 + 22.0


def test_an_entry_points_errors_are_one_line(capsys):
    p = args.parser("scripts.bench.x", "doc")
    p.add_argument("--n", type=int)

    def body(a):
        raise args.BadInput(f"--n {a.n}: too many")

    with pytest.raises(SystemExit) as exit_:
        args.run_main(p, body, ["--n", "3"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "scripts.bench.x: error: --n 3: too many\n"
    assert args.run_main(p, lambda a: None, []) == 0
