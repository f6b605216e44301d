"""scripts/bench/distillation.py: the pipeline's phases in order, two runs side by side with the
protocol's settings, blind PPO evaluated at the checkpoint its first phase ended with, the
record of each seed, a seed continued after its last ended phase, and bad input refused in one
line before anything runs. The trainings are stand-ins that write what a run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.bench import distillation


class Done:
    def __init__(self, code: int) -> None:
        self.code = code

    def wait(self) -> int:
        return self.code


def value(cmd: list[str], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in cmd if a.startswith(key + "=")), None)


class Stand:
    """Stand-in for the processes: records each command and writes what it would have."""

    def __init__(self, fail: str | None = None) -> None:
        self.started: list[list[str]] = []
        self.fail = fail

    def __call__(self, cmd: list[str], log: Path):
        assert log.parent.is_dir()
        self.started.append(cmd)
        what = cmd[3]
        if what == "train":
            resume = cmd[cmd.index("--resume") + 1] if "--resume" in cmd else None
            run = Path(resume or value(cmd, "trainer.run_dir"))
            self.train(run, None if resume else int(value(cmd, "trainer.seed")))
        else:
            self.evaluate(cmd)
        return Done(1 if self.fail and self.fail in " ".join(cmd) else 0)

    @staticmethod
    def train(run: Path, seed: int | None) -> None:
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
        if seed is not None:
            (run / "config.yaml").write_text(
                f"env: {{id: EmbodiedPPO/QuadrupedRough-v0, kwargs: {{}}}}\ntrainer: {{seed: {seed}}}\n"
            )
        rows = (run / "metrics.jsonl").read_text().splitlines() if resume_of(run) else []
        step = 1000 * (len(rows) + 1)
        rows.append(json.dumps({"global_step": step, "iteration": len(rows) + 1, "time": 1.0}))
        (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")
        (run / "checkpoints" / f"ckpt_{step}.pt").write_text("")

    @staticmethod
    def evaluate(cmd: list[str]) -> None:
        target = Path(cmd[4])
        out = Path(cmd[cmd.index("--json") + 1]) if "--json" in cmd else target / "eval.json"
        sweep = [{"value": level, "tracking_error_lin": 0.2, "tracking_error_yaw": 0.2,
                  "fall_rate": 0.0} for level in (0, 4, 9)]  # fmt: skip
        out.write_text(json.dumps({"checkpoint": str(target), "episodes": 20, "sweep": sweep}))


def resume_of(run: Path) -> bool:
    return (run / "metrics.jsonl").is_file()


def invoke(tmp_path: Path, stand: Stand, *extra: str) -> int:
    args = ["--seeds", "7", "--runs", str(tmp_path / "runs"), "--out-dir", str(tmp_path / "bench"),
            *extra]  # fmt: skip
    parsed = distillation.build_parser().parse_args(args)
    return distillation.run(parsed, args, begin=stand)


def trained(started: list[list[str]]) -> list[str]:
    """Each training's run, in the order started."""
    return [Path(value(c, "trainer.run_dir") or c[c.index("--resume") + 1]).name + (
        "+" if "--resume" in c else "") for c in started if c[3] == "train"]  # fmt: skip


def test_the_phases_run_side_by_side_and_the_record_holds_every_evaluation(tmp_path):
    stand = Stand()
    assert invoke(tmp_path, stand, "--teacher-time", "2m") == 0
    assert trained(stand.started) == ["teacher", "blind", "student", "blind+", "ft_warmup",
                                      "ft_nowarm"]  # fmt: skip
    teacher, blind, student, _, warm, nowarm = (c for c in stand.started if c[3] == "train")
    assert teacher[-2:] == blind[-2:] == ["--for", "2m"] and student[-2:] == ["--for", "25m"]
    assert {"trainer.torch_threads=1", "env.threads=1", "env.processes=1"} <= set(blind)
    assert not {"trainer.torch_threads=1", "env.threads=1"} & set(teacher)  # the config's own
    runs = tmp_path / "runs" / "seed7"
    assert value(student, "distill.teachers") == f"[{runs / 'teacher'}]"
    assert (
        value(warm, "model.init_from") == value(nowarm, "model.init_from") == str(runs / "student")
    )
    assert "finetune.critic_warmup_updates=0" in nowarm and not any(
        "critic_warmup" in a for a in warm
    )
    record = json.loads((tmp_path / "bench" / "quadruped_rough_distillation_7.json").read_text())
    assert set(record["runs"]) == {"teacher", "student", "blind", "finetune_warmup",
                                   "finetune_no_warmup"}  # fmt: skip
    blind_evals = record["runs"]["blind"]["eval"]
    # Blind PPO at the teacher's time: the checkpoint phase 1 ended with, not the later one; each
    # labelled by blind PPO's wall time then (2 minutes, then 2 + 25).
    assert set(blind_evals) == {"at_2_min", "at_27_min"}
    assert blind_evals["at_2_min"]["checkpoint"] == str(runs / "blind/checkpoints/ckpt_1000.pt")
    assert blind_evals["at_27_min"]["checkpoint"] == str(runs / "blind")
    assert (runs / "blind/checkpoints/ckpt_2000.pt").is_file()
    assert record["runs"]["blind"]["steps"] == 2000 and record["runs"]["teacher"]["seed"] == 7
    assert record["provenance"]["command"].startswith("python -m scripts.bench.distillation")
    assert "seed 7" in record["note"] and "blind:at_2_min is" in record["note"]
    assert "ckpt_1000.pt" in record["note"]


def test_a_seed_goes_on_after_its_last_ended_phase(tmp_path):
    with pytest.raises(distillation.cli_args.BadInput, match="eval_blind_at_85_min failed"):
        invoke(tmp_path, Stand(fail="seed7/blind --episodes"))
    assert not (tmp_path / "bench").exists()
    again = Stand()
    assert invoke(tmp_path, again) == 0
    assert trained(again.started) == []  # every phase had ended: only the evaluations again
    assert len(again.started) == 6


def test_the_default_times_label_blind_ppo_at_60_and_85_minutes(tmp_path):
    assert invoke(tmp_path, Stand(), "--teacher-time", "1h") == 0
    record = json.loads((tmp_path / "bench" / "quadruped_rough_distillation_7.json").read_text())
    assert set(record["runs"]["blind"]["eval"]) == {"at_60_min", "at_85_min"}


def test_a_seed_is_not_continued_with_other_options_than_its_ended_phases(tmp_path):
    with pytest.raises(distillation.cli_args.BadInput, match="eval_teacher_final failed"):
        invoke(tmp_path, Stand(fail="seed7/teacher --episodes"))
    again = Stand()
    with pytest.raises(
        distillation.cli_args.BadInput, match=r"phase 2 ended with other options \(.*--for 25m\)"
    ):
        invoke(tmp_path, again, "--student-time", "10m")
    assert again.started == []
    assert invoke(tmp_path, again) == 0  # the same options go on: only the evaluations
    assert trained(again.started) == [] and len(again.started) == 6


def test_a_phase_that_did_not_end_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(distillation.cli_args.BadInput, match="student failed"):
        invoke(tmp_path, Stand(fail="seed7/student"))
    again = Stand()
    with pytest.raises(distillation.cli_args.BadInput, match="phase 2 began and did not end"):
        invoke(tmp_path, again)
    assert again.started == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "7", "--teacher-time", "an hour"], "--teacher-time an hour: expected"),
        (["--seeds", "7", "--student-time", "0m", "--dry-run"], "--student-time 0m: expected"),
        (["--seeds", "7", "--student", "configs/none.yaml"], "--student configs/none.yaml: no"),
        (["--seeds", "7", "--episodes", "0"], "--episodes and --every must be at least 1"),
        (["--teacher-time", "60m"], "the following arguments are required: --seeds"),
        # docs/bench, where the page's tables read every record, takes the default protocol only
        # (a dry run is refused as well, so that a broken refusal cannot start real trainings)
        (["--seeds", "7", "--teacher-time", "75m", "--dry-run"], "--teacher-time 75m: the tables"),
        (
            [
                "--seeds",
                "7",
                "--dry-run",
                "--teacher",
                "configs/quadruped_rough_teacher_encoder.yaml",
            ],
            "--teacher configs/quadruped_rough_teacher_encoder.yaml: the tables of docs/",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_runs(tmp_path, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        distillation.main([*argv, "--runs", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "runs").exists()


def test_a_dry_run_prints_the_protocol_and_runs_nothing(tmp_path, capsys):
    assert distillation.main(["--seeds", "7", "--runs", str(tmp_path / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("python -m embodied_ppo train") == 6
    assert out.count("python -m embodied_ppo eval") == 6
    assert "--sweep 'env.kwargs.terrain_options.initial_level=[0,4,9]'" in out
    assert not (tmp_path / "runs").exists()
