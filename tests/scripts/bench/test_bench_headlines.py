"""The headline numbers: README.md's and docs/performance.md's generated blocks are exactly what
their records in docs/bench give (a number edited by hand, or a record that says another value,
fails here), every record they read names its command, commit, date and machine, and a block
whose record is missing is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from support import ROOT

from scripts.bench import headlines as entry
from scripts.bench.lib import records
from scripts.bench.lib.args import BadInput
from scripts.bench.report import headlines, speed


def test_each_page_holds_its_blocks_in_order():
    for rel, names in headlines.PAGES.items():
        assert tuple(headlines.blocks_of((ROOT / rel).read_text())) == names, rel


def test_the_headline_blocks_are_what_their_records_give():
    for path, (text, written) in headlines.pages().items():
        assert text == written, (
            f"{path.relative_to(ROOT)}: a generated block says other than its records; "
            "run `python -m scripts.bench.headlines`"
        )


def test_every_record_a_headline_reads_names_command_commit_date_and_machine():
    problems = [
        p for where, rec in headlines.sources() for p in records.check_provenance(rec, where)
    ]
    assert not problems, problems


def test_a_number_edited_by_hand_is_put_back_from_its_record():
    text = (ROOT / "README.md").read_text()
    _, part, _ = speed.record_of("configs/halfcheetah.yaml", 200_000)  # the record in use
    ratio = f"**{part['ratios'][speed.RATIO]:.2f}x**"
    assert text.count(ratio) == 1  # the speed table's halfcheetah.yaml ratio, from its record
    edited = text.replace(ratio, "**3.10x**")
    assert headlines.rewrite(edited, headlines.PAGES["README.md"]) == text


@pytest.fixture
def bench(tmp_path, monkeypatch):
    """A copy of docs/bench that the headlines read instead."""
    copy = tmp_path / "bench"
    shutil.copytree(ROOT / "docs" / "bench", copy)
    monkeypatch.setattr(records, "BENCH", copy)
    return copy


def test_a_record_that_names_another_value_makes_its_page_stale(bench):
    rel, part, _ = speed.record_of("configs/humanoid.yaml", 500_000)  # the record in use
    shown = f"**{part['ratios'][speed.RATIO]:.2f}x**"
    path = bench / rel
    record = json.loads(path.read_text())
    where = record["configs"]["configs/humanoid.yaml"] if "configs" in record else record
    where["ratios"][speed.RATIO] = 2.5
    path.write_text(json.dumps(record))
    text = (ROOT / "README.md").read_text()
    assert shown in text
    written = headlines.rewrite(text, headlines.PAGES["README.md"])
    assert written != text and "**2.50x**" in written and shown not in written


def test_a_headline_without_its_record_is_refused(bench):
    (bench / "arm.json").unlink()
    with pytest.raises(BadInput, match="no record docs/bench/arm.json"):
        headlines.results()
    text = (ROOT / "README.md").read_text().replace("headlines: gpu -->", "headlines: gpu ->")
    with pytest.raises(BadInput, match="no block 'gpu'"):
        headlines.rewrite(text, ("gpu",))


def test_the_speed_table_takes_the_whole_process_record_where_it_measured_a_config(bench):
    """What `python -m scripts.bench.whole_process` writes replaces the older record of each
    config it measured, with its own provenance; a config measured as it is now has no note."""
    old = json.loads((bench / speed.LEGACY["configs/halfcheetah.yaml"]).read_text())
    part = {k: old[k] for k in ("settings", "whole_process_steps", "results", "median", "ratios",
                                "per_round_ratios", "gradient_steps")}  # fmt: skip
    part["settings"] = dict(part["settings"], gae_lambda=0.9)
    part["ratios"] = {speed.RATIO: 2.75}
    prov = records.provenance("scripts.bench.whole_process", ["--rounds", "5"])
    record = {"rounds": 3, "configs": {"configs/halfcheetah.yaml": part}, "provenance": prov}
    (bench / "whole_process.json").write_text(json.dumps(record))
    lines = speed.table()
    row = next(x for x in lines if x.startswith("| `halfcheetah.yaml`"))
    assert "**2.75x**" in row and prov["commit"][:7] in row and prov["date"][:10] in row
    assert not any("`halfcheetah.yaml` changed since" in x for x in lines)
    assert any(x.startswith("| `humanoid.yaml`") and "0850240" in x for x in lines)  # the older


def test_the_check_names_a_stale_page_and_writes_nothing(monkeypatch, tmp_path, capsys):
    page = tmp_path / "README.md"
    page.write_text("stale")
    monkeypatch.setattr(headlines, "pages", lambda: {page: ("stale", "fresh")})
    monkeypatch.setattr(entry, "ROOT", tmp_path)
    assert entry.main(["--check"]) == 1
    assert page.read_text() == "stale" and "README.md" in capsys.readouterr().err
    assert entry.main([]) == 0 and page.read_text() == "fresh"
