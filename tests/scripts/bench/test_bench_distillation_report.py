"""The distillation pipeline's block of docs/distillation.md (scripts/bench/report/distillation.py):
its numbers over seeds against a hand computation on made-up records, the bar's verdict where it
flips, and records it cannot read refused in one line."""

from __future__ import annotations

import json
import re

import pytest

from scripts.bench.lib.args import BadInput
from scripts.bench.report import distillation

RUNS = {  # run -> its evaluation labels
    "teacher": ("final",),
    "student": ("final",),
    "blind": ("at_60_min", "at_85_min"),
    "finetune_warmup": ("final",),
    "finetune_no_warmup": ("final",),
}


def sweep(lin: float, falls: int) -> list[dict]:
    """An evaluation of 20 episodes from levels 0, 4, 9: errors growing 0.01 a level."""
    return [
        {"key": "env.kwargs.terrain_options.initial_level", "value": level,
         "tracking_error_lin": lin + 0.01 * i, "tracking_error_yaw": 2 * lin + 0.01 * i,
         "fall_rate": falls / 20}
        for i, level in enumerate((0, 4, 9))
    ]  # fmt: skip


# Each run's wall time (s) and its evaluations' steps, as a pipeline's phases give them.
WALL = {"teacher": 3600, "student": 1500, "blind": 5100, "finetune_warmup": 720,
        "finetune_no_warmup": 690}  # fmt: skip
STEPS = {"final": 4_000_000, "at_60_min": 12_340_000, "at_85_min": 18_000_000}


def write_record(
    bench, seed: int, teacher: float, student: float, falls: int = 1, extra: tuple[str, ...] = ()
) -> None:
    runs = {}
    for run, labels in (*RUNS.items(), *((r, ("final",)) for r in extra)):
        lin = {"teacher": teacher, "student": student}.get(run, 0.3)
        evals = {lab: {"episodes": 20, "sweep": sweep(lin, falls), "global_step": STEPS[lab]}
                 for lab in labels}  # fmt: skip
        runs[run] = {"seed": seed, "eval": evals, "wall_s": WALL.get(run, 600)}
    prov = {"commit": "0123456789abcdef", "date": "2026-11-29T00:00:00+00:00",
            "machine": {"cpu": "a CPU"}, "command": "python -m scripts.bench.quadruped record"}  # fmt: skip
    name = f"quadruped_rough_distillation_{seed}.json"
    (bench / name).write_text(json.dumps({"runs": runs, "provenance": prov}))


def row(lines: list[str], start: str) -> list[str]:
    (line,) = [x for x in lines if x.startswith(start)]
    return [c.strip() for c in line.strip("|").split("|")]


def test_each_cell_is_the_iqm_over_seeds_and_the_worst_seed(tmp_path):
    teachers = {100: 0.20, 101: 0.26, 102: 0.22}
    for seed, t in teachers.items():
        write_record(tmp_path, seed, t, 0.25, falls=seed - 99)  # 1, 2, 3 falls
    lines = distillation.block(tmp_path)
    cells = row(lines, "| teacher")
    # Three seeds: the middle one weighs 2/3 in the IQM, the other two 1/6 each.
    a, b, c = sorted(teachers.values())
    assert cells[1] == "0"
    assert cells[2].startswith(f"{a / 6 + 2 * b / 3 + c / 6:.3f} [")
    assert cells[2].endswith("worst 0.260 (101)")
    assert cells[3].startswith(f"{(2 * a) / 6 + 2 * (2 * b) / 3 + (2 * c) / 6:.3f} [")
    assert (
        cells[4].startswith(f"{1 / 6 + 2 * 2 / 3 + 3 / 6:.1f} [") and "worst 3.0 (102)" in cells[4]
    )
    low, high = map(float, re.search(r"\[(.*), (.*)\]", cells[2]).groups())
    assert a <= low <= high <= c  # a bootstrap interval of the IQM lies within the seeds' range
    assert "Seeds 100, 101, 102 (3)" in lines[0]
    assert (
        "_101.json](bench/quadruped_rough_distillation_101.json) (0123456, 2026-11-29, a CPU)"
        in (lines[-1])
    )


def test_the_student_against_its_teacher_and_the_bar(tmp_path):
    write_record(tmp_path, 100, teacher=0.20, student=0.22)  # 10% worse: within the bar
    write_record(tmp_path, 101, teacher=0.20, student=0.22)
    level0 = row(distillation.block(tmp_path), "| 0 |")
    assert level0[1] == "1.10 (1.10, 1.10)" and level0[3] == "yes"
    assert level0[4] == f"{0.22 / 0.3:.2f} ({0.22 / 0.3:.2f}, {0.22 / 0.3:.2f})"  # blind at 85 min
    write_record(tmp_path, 101, teacher=0.20, student=0.26)  # 30% worse on one seed
    level0 = row(distillation.block(tmp_path), "| 0 |")
    assert level0[1] == "1.20 (1.10, 1.30)" and level0[3] == "no"


def test_records_it_cannot_read_are_refused_in_one_line(tmp_path):
    with pytest.raises(BadInput, match="no record docs/bench/quadruped_rough_distillation"):
        distillation.block(tmp_path)
    write_record(tmp_path, 100, 0.2, 0.2)
    record = json.loads((tmp_path / "quadruped_rough_distillation_100.json").read_text())
    del record["runs"]["blind"]["eval"]["at_85_min"]
    (tmp_path / "quadruped_rough_distillation_100.json").write_text(json.dumps(record))
    with pytest.raises(BadInput, match="lacks blind:at_85_min's sweep"):
        distillation.block(tmp_path)
    write_record(tmp_path, 100, 0.2, 0.2)
    (tmp_path / "quadruped_rough_distillation.json").write_text(
        (tmp_path / "quadruped_rough_distillation_100.json").read_text()
    )
    with pytest.raises(BadInput, match="seed 100 has two distillation records"):
        distillation.block(tmp_path)


def test_each_seed_has_its_table_of_policies_in_the_seeds_order(tmp_path):
    write_record(tmp_path, 101, teacher=0.20, student=0.25, falls=3)
    write_record(tmp_path, 100, teacher=0.21, student=0.24, falls=2,
                 extra=("finetune_low_std_warmup",))  # fmt: skip
    lines = distillation.seeds_block(tmp_path)
    heads = [x for x in lines if x.startswith("Seed ")]
    assert [h.split(",")[0] for h in heads] == ["Seed 100", "Seed 101"]  # by seed, not file name
    assert "a CPU" in heads[0] and "0123456, 2026-11-29" in heads[0]
    first = lines[lines.index(heads[0]) : lines.index(heads[1])]
    # Linear / yaw / falls at levels 0, 4 and 9: the errors grow 0.01 a level (sweep()).
    assert row(first, "| teacher") == [
        "teacher (height scan)", "60 min", "4.0M",
        "0.210 / 0.420 / 2", "0.220 / 0.430 / 2", "0.230 / 0.440 / 2",
    ]  # fmt: skip
    assert row(first, "| blind student")[1:4] == ["+25 min", "4.0M", "0.240 / 0.480 / 2"]
    # Blind PPO's first evaluation was taken at the end of the teacher's phase: the teacher's
    # clock, its own checkpoint's steps; the second at the blind run's own end.
    assert row(first, "| blind PPO at the teacher's time")[1:3] == ["60 min", "12.3M"]
    assert row(first, "| blind PPO at teacher + student")[1:3] == ["85 min", "18.0M"]
    assert row(first, "| student + PPO fine-tune, no warm-up")[1] == "+12 min"  # 690 s
    assert row(first, "| the same at the student's std (`finetune.log_std=-2.0`), warm-up")[1:3] == [
        "+10 min", "4.0M"]  # fmt: skip
    second = lines[lines.index(heads[1]) :]
    assert not [x for x in second if x.startswith("| the same")]  # seed 101 has no such run
    assert row(second, "| blind student")[3] == "0.250 / 0.500 / 3"


def write_grown(bench, name: str, seeds: dict[int, tuple[float, float]], at_75: bool = False):
    """A record of the grown pipeline holding several seeds, its runs named <role>_<seed>:
    seed -> (teacher's, student's linear error)."""
    runs = {}
    for seed, (teacher, student) in seeds.items():
        blind_labels = (
            ("at_60_min", "at_75_min", "at_85_min") if at_75 else ("at_60_min", "at_85_min")
        )
        for role, labels, lin, wall in (
            ("teacher", ("final",), teacher, 900),
            ("student", ("final",), student, 610),
            ("blind", blind_labels, 0.3, 5100),
        ):
            evals = {lab: {"episodes": 20, "sweep": sweep(lin, 1), "global_step": 2_000_000}
                     for lab in labels}  # fmt: skip
            runs[f"{role}_{seed}"] = {"seed": seed, "eval": evals, "wall_s": wall}
    prov = {"commit": "fedcba9876543210", "date": "2026-12-08T00:00:00+00:00",
            "machine": {"cpu": "a CPU"}, "command": "python -m scripts.bench.quadruped record"}  # fmt: skip
    (bench / name).write_text(json.dumps({"runs": runs, "provenance": prov}))


def test_the_grown_pipeline_reads_several_seeds_from_one_record(tmp_path):
    grown = distillation.GROWN
    write_grown(
        tmp_path, "quadruped_rough_grown_teacher.json", {101: (0.2, 0.22), 100: (0.2, 0.24)}
    )
    write_grown(tmp_path, "quadruped_rough_grown_teacher_103.json", {103: (0.25, 0.25)}, at_75=True)
    write_record(tmp_path, 100, 0.2, 0.2)  # the other pipeline's record is not read
    lines = distillation.block(tmp_path, grown)
    assert "Seeds 100, 101, 103 (3)" in lines[0]
    # The student over its teacher per seed, in the seeds' order, and the IQM of the three.
    level0 = row(lines, "| 0 |")
    assert level0[1] == f"{1.2 / 6 + 2 * 1.1 / 3 + 1.0 / 6:.2f} (1.20, 1.10, 1.00)"
    assert level0[4] == f"{stats_iqm([0.24 / 0.3, 0.22 / 0.3, 0.25 / 0.3]):.2f} (0.80, 0.73, 0.83)"
    assert lines[-1].count("](bench/quadruped_rough_grown_teacher") == 2
    seeds = distillation.seeds_block(tmp_path, grown)
    heads = [x for x in seeds if x.startswith("Seed ")]
    assert [h.split(",")[0] for h in heads] == ["Seed 100", "Seed 101", "Seed 103"]
    assert "[quadruped_rough_grown_teacher_103.json]" in heads[2] and "fedcba9" in heads[2]
    last = seeds[seeds.index(heads[2]) :]
    # Blind PPO's checkpoints show the minutes of their labels, the grown runs their own "+".
    assert row(last, "| blind PPO |")[1] == "60 min"
    assert row(last, "| teacher grown from it")[1:3] == ["+15 min", "2.0M"]
    assert row(last, "| its blind student")[1:4] == ["+10 min", "2.0M", "0.250 / 0.500 / 1"]
    assert row(last, "| blind PPO, 75 min")[1] == "75 min"  # an extra row where it was evaluated
    assert not [x for x in seeds[: seeds.index(heads[2])] if x.startswith("| blind PPO, 75 min")]
    # A seed without a policy of the block over seeds, or a role recorded twice, is refused.
    record = json.loads((tmp_path / "quadruped_rough_grown_teacher_103.json").read_text())
    del record["runs"]["student_103"]
    (tmp_path / "quadruped_rough_grown_teacher_103.json").write_text(json.dumps(record))
    with pytest.raises(BadInput, match="lacks student:final's sweep"):
        distillation.block(tmp_path, grown)
    write_grown(tmp_path, "quadruped_rough_grown_teacher_103.json", {101: (0.2, 0.2)})
    with pytest.raises(BadInput, match="seed 101 has two distillation records of teacher"):
        distillation.block(tmp_path, grown)


def stats_iqm(values: list[float]) -> float:
    """The IQM of three values by hand: the middle one weighs 2/3, the others 1/6 each."""
    a, b, c = sorted(values)
    return a / 6 + 2 * b / 3 + c / 6
