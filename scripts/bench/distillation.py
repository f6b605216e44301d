"""The distillation pipeline on rough ground, measured as docs/distillation.md reports it: per seed,
two runs side by side with a core each, then every policy evaluated, into one record per seed.

    python -m scripts.bench.distillation --seeds 104 --runs runs/distillation

Per seed S, in RUNS/seedS (each training `embodied-ppo train ... trainer.seed=S --for TIME`):

1. the teacher (configs/quadruped_rough_teacher.yaml, privileged height scan) beside blind PPO
   (configs/quadruped_rough.yaml with trainer.torch_threads=1 env.threads=1 env.processes=1),
   each for --teacher-time;
2. the blind student (configs/quadruped_rough_student.yaml, distill.teachers=[the teacher])
   beside blind PPO resumed, each for --student-time: blind PPO then has had the teacher's and
   the student's wall time together;
3. the student fine-tuned with PPO (configs/quadruped_rough_finetune.yaml,
   model.init_from=the student) beside the same with finetune.critic_warmup_updates=0, each for
   --finetune-time;
4. each policy evaluated, two at a time (`embodied-ppo eval RUN --episodes 20 --seed 1000
   --sweep env.kwargs.terrain_options.initial_level=[0,4,9]`): the teacher, the student, blind
   PPO at the end of phase 1 (its newest checkpoint then) and at the end, both fine-tunes;
5. the record docs/bench/quadruped_rough_distillation_S.json (the runs' curves and evaluations,
   `scripts.bench.quadruped`'s `collect`), then docs/distillation.md's blocks from every seed's
   record, over seeds and seed by seed (`scripts.bench.headlines`).

Blind PPO's two evaluations are labelled by its wall time in minutes: at_60_min and at_85_min
with the default times. The tables of docs/distillation.md read the default protocol (its four
configs and three times), so records of any other are refused there: give them another
--out-dir.

A phase that ended writes RUNS/seedS/phaseN.json with its commands; invoked again with the same
--runs, a seed goes on after its last ended phase, and is refused if a phase that ended ran other
commands than these options give. A phase that was cut short is refused: remove its runs.
`--dry-run` prints each phase's commands and runs nothing.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from embodied_ppo.app.relay import parse_duration
from embodied_ppo.core.errors import UserError
from scripts.bench.lib import args as cli_args
from scripts.bench.lib import records
from scripts.bench.lib.proc import ROOT
from scripts.bench.lib.runs import collect as collect_runs
from scripts.bench.report import headlines

MODULE = "scripts.bench.distillation"
PAGE = ROOT / "docs" / "distillation.md"
ONE_CORE = ["trainer.torch_threads=1", "env.threads=1", "env.processes=1"]
LEVELS = "env.kwargs.terrain_options.initial_level=[0,4,9]"
# Each policy evaluated: (run, label in the record, the run folder `eval` reads or None for blind
# PPO's checkpoint at the end of phase 1, the eval.json it writes). Blind PPO's labels name its
# wall time then (`labels`).
EVALS = (
    ("teacher", "final", "teacher", "teacher/eval.json"),
    ("student", "final", "student", "student/eval.json"),
    ("blind", "{phase1}", None, "blind_phase1_eval.json"),
    ("blind", "{end}", "blind", "blind/eval.json"),
    ("finetune_warmup", "final", "ft_warmup", "ft_warmup/eval.json"),
    ("finetune_no_warmup", "final", "ft_nowarm", "ft_nowarm/eval.json"),
)
RUNS = {"teacher": "teacher", "student": "student", "blind": "blind",
        "finetune_warmup": "ft_warmup", "finetune_no_warmup": "ft_nowarm"}  # fmt: skip
NEW_RUNS = (("teacher", "blind"), ("student",), ("ft_warmup", "ft_nowarm"))  # made by each phase
Start = Callable[[list[str], Path], "subprocess.Popen"]


def minutes(wall: str) -> float:
    """A wall time as --for takes it (90s, 60m, 1.5h) in minutes, read as `train --for` reads it."""
    return parse_duration(wall) / 60


def labels(args) -> dict[str, str]:
    """Blind PPO's evaluation labels: its wall time at the end of phase 1 and of phase 2."""
    teacher = minutes(args.teacher_time)
    both = teacher + minutes(args.student_time)
    return {"phase1": f"at_{round(teacher, 2):g}_min", "end": f"at_{round(both, 2):g}_min"}


def evaluations(args) -> list[tuple[str, str, str | None, str]]:
    """EVALS with blind PPO's labels for these options' times."""
    named = labels(args)
    return [(run, label.format(**named), what, out) for run, label, what, out in EVALS]


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    """`cmd` from the repository's root, its output into `log`."""
    with log.open("w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def train(*args: str) -> list[str]:
    return [sys.executable, "-m", "embodied_ppo", "train", *args]


def here(path: Path | str) -> Path:
    """`path` as the commands, run from the repository's root, name it: relative to the root
    where it lies inside it, else absolute."""
    absolute = Path(path).resolve()
    return absolute.relative_to(ROOT) if absolute.is_relative_to(ROOT) else absolute


def phases(args, seed: int, folder: Path) -> list[list[tuple[str, list[str]]]]:
    """Each training phase's pairs of (log name, command), side by side."""
    s, d = f"trainer.seed={seed}", here(folder)
    teacher, blind, student, finetune = (
        str(here(getattr(args, k))) for k in ("teacher", "blind", "student", "finetune")
    )
    return [
        [("teacher", train(teacher, s, f"trainer.run_dir={d / 'teacher'}",
                           "--for", args.teacher_time)),
         ("blind", train(blind, s, *ONE_CORE, f"trainer.run_dir={d / 'blind'}",
                         "--for", args.teacher_time))],
        [("student", train(student, s, f"distill.teachers=[{d / 'teacher'}]",
                           f"trainer.run_dir={d / 'student'}", "--for", args.student_time)),
         ("blind2", train("--resume", str(d / "blind"), "--for", args.student_time))],
        [("ft_warmup", train(finetune, s, f"model.init_from={d / 'student'}",
                             f"trainer.run_dir={d / 'ft_warmup'}", "--for", args.finetune_time)),
         ("ft_nowarm", train(finetune, s, f"model.init_from={d / 'student'}",
                             "finetune.critic_warmup_updates=0",
                             f"trainer.run_dir={d / 'ft_nowarm'}", "--for", args.finetune_time))],
    ]  # fmt: skip


def eval_commands(args, folder: Path, blind_checkpoint: str) -> list[tuple[str, list[str]]]:
    """Each policy's evaluation command (by log name), in EVALS' order."""
    out = []
    for run, label, what, written in evaluations(args):
        target = blind_checkpoint if what is None else str(here(folder / what))
        cmd = [sys.executable, "-m", "embodied_ppo", "eval", target, "--episodes",
               str(args.episodes), "--seed", str(args.eval_seed), "--sweep", LEVELS]  # fmt: skip
        if what is None:  # a checkpoint: its eval.json goes where the record reads it
            cmd += ["--json", str(here(folder / written))]
        out.append((f"eval_{run}_{label}", cmd))
    return out


def shown(cmd: list[str]) -> str:
    """A command as a user types it from the repository's root."""
    return shlex.join(["python", *cmd[1:]])


def newest_checkpoint(run: Path) -> Path:
    """The run's checkpoint of the most steps (ckpt_STEPS.pt)."""
    found = sorted((run / "checkpoints").glob("ckpt_*.pt"), key=lambda p: int(p.stem[5:]))
    if not found:
        raise cli_args.BadInput(f"{run} has no checkpoint after its phase")
    return found[-1]


def side_by_side(pairs: Sequence[tuple[str, list[str]]], folder: Path, begin: Start) -> None:
    """Run the commands together, each with its log in `folder`; any failure stops the seed."""
    procs = [(name, begin(cmd, folder / f"{name}.log")) for name, cmd in pairs]
    failed = [name for name, p in procs if p.wait() != 0]
    if failed:
        raise cli_args.BadInput(f"{', '.join(failed)} failed: see {folder}/{failed[0]}.log")


def run_seed(args, seed: int, begin: Start) -> dict | None:
    """One seed's phases (those not ended before), its evaluations and its record."""
    folder = Path(args.runs).resolve() / f"seed{seed}"
    plan = phases(args, seed, folder)
    for n, pairs in enumerate(plan, 1):
        marker = folder / f"phase{n}.json"
        if args.dry_run:
            print(f"# seed {seed}, phase {n}, side by side{' (ended)' * marker.is_file()}")
            print("\n".join(shown(cmd) for _, cmd in pairs))
            continue
        commands = [shown(cmd) for _, cmd in pairs]
        if marker.is_file():
            ran = json.loads(marker.read_text()).get("commands", commands)  # older: none kept
            if ran != commands:
                other = next(c for c, d in zip(ran, commands, strict=True) if c != d)
                raise cli_args.BadInput(f"{folder}: phase {n} ended with other options ({other}): "
                                        "give the same ones, or another --runs folder")  # fmt: skip
            continue
        if any((folder / run).exists() for run in NEW_RUNS[n - 1]):
            raise cli_args.BadInput(f"{folder}: phase {n} began and did not end (its runs are "
                                    "there, its phase file is not): start the seed again in "
                                    "another --runs folder")  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        side_by_side(pairs, folder, begin)
        ended = {"phase": n, "commands": commands}
        if n == 1:  # blind PPO at the teacher's time: the checkpoint its phase ended with
            ended["blind_checkpoint"] = str(here(newest_checkpoint(folder / "blind")))
        marker.write_text(json.dumps(ended) + "\n")
    checkpoint = f"{here(folder)}/blind/checkpoints/ckpt_<newest after phase 1>.pt"
    if not args.dry_run:
        checkpoint = json.loads((folder / "phase1.json").read_text())["blind_checkpoint"]
    evals = eval_commands(args, folder, checkpoint)
    if args.dry_run:
        print(f"# seed {seed}, evaluations, two at a time")
        print("\n".join(shown(cmd) for _, cmd in evals))
        return None
    for i in range(0, len(evals), 2):
        side_by_side(evals[i : i + 2], folder, begin)
    return collect(args, seed, folder, checkpoint)


def collect(args, seed: int, folder: Path, checkpoint: str) -> dict:
    """The seed's record: its runs, their evaluations, the protocol in its note."""
    runs = {name: folder / sub for name, sub in RUNS.items()}
    evals = {(run, label): folder / path for run, label, _, path in evaluations(args)}
    note = (
        f"The distillation pipeline on rough ground, seed {seed}, two runs side by side with a "
        f"core each: teacher ({args.teacher}) beside blind PPO ({args.blind} "
        f"{' '.join(ONE_CORE)}) for {args.teacher_time}; the student ({args.student}) beside "
        f"blind PPO resumed for {args.student_time}; the fine-tune ({args.finetune}) beside the "
        f"same with finetune.critic_warmup_updates=0 for {args.finetune_time}. Evaluations: "
        f"--episodes {args.episodes} --seed {args.eval_seed} --sweep {LEVELS}; "
        f"blind:{labels(args)['phase1']} is blind PPO's checkpoint at the end of the first phase ({Path(checkpoint).name})."
    )
    collected = collect_runs(runs, evals, args.every)
    for name, run in runs.items():
        collected[name]["run_dir"] = str(here(run))
    return {"note": note, "runs": collected}


def run(args, argv: Sequence[str], begin: Start = start) -> int:
    """Every seed in turn; each record written as its seed ends, then the page's block."""
    for key in ("teacher_time", "student_time", "finetune_time"):
        try:
            minutes(getattr(args, key))
        except UserError:
            raise cli_args.BadInput(f"--{key.replace('_', '-')} {getattr(args, key)}: "
                                    "expected a wall time such as 60m, 90s or 1.5h") from None  # fmt: skip
    for key in ("teacher", "blind", "student", "finetune"):
        if not Path(getattr(args, key)).is_file():
            raise cli_args.BadInput(f"--{key} {getattr(args, key)}: no such config")
    if args.episodes < 1 or args.every < 1:
        raise cli_args.BadInput("--episodes and --every must be at least 1")
    bench = Path(args.out_dir)
    if bench.resolve() == records.BENCH.resolve():
        refuse_other_protocol(args)
    for seed in args.seeds:
        rec = run_seed(args, seed, begin)
        if rec is None:
            continue
        rec["provenance"] = records.provenance(MODULE, argv)
        out = bench / f"quadruped_rough_distillation_{seed}.json"
        records.write_results(out, rec)
        print(f"wrote {out}", flush=True)
    if not args.dry_run and bench.resolve() == records.BENCH.resolve():
        blocks = headlines.PAGES["docs/distillation.md"]
        PAGE.write_text(headlines.rewrite(PAGE.read_text(), blocks))
        print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


def refuse_other_protocol(args) -> None:
    """docs/bench holds the default protocol's records only: the page's tables read them all."""
    parser = build_parser()
    for key in ("teacher_time", "student_time", "finetune_time"):
        if minutes(getattr(args, key)) != minutes(parser.get_default(key)):
            raise cli_args.BadInput(f"--{key.replace('_', '-')} {getattr(args, key)}: the tables "
                                    "of docs/distillation.md read the default protocol; write "
                                    "this record elsewhere with --out-dir")  # fmt: skip
    for key in ("teacher", "blind", "student", "finetune"):
        if Path(getattr(args, key)).resolve() != Path(parser.get_default(key)).resolve():
            raise cli_args.BadInput(f"--{key} {getattr(args, key)}: the tables of "
                                    "docs/distillation.md read the default protocol; write this "
                                    "record elsewhere with --out-dir")  # fmt: skip


def build_parser() -> cli_args.Parser:
    """The command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--runs", default="runs/distillation", help="a folder for the runs")
    p.add_argument("--teacher-time", default="60m", help="phase 1's wall time, each side")
    p.add_argument("--student-time", default="25m", help="phase 2's wall time, each side")
    p.add_argument("--finetune-time", default="12m", help="phase 3's wall time, each side")
    p.add_argument("--teacher", default="configs/quadruped_rough_teacher.yaml")
    p.add_argument("--blind", default="configs/quadruped_rough.yaml")
    p.add_argument("--student", default="configs/quadruped_rough_student.yaml")
    p.add_argument("--finetune", default="configs/quadruped_rough_finetune.yaml")
    p.add_argument("--episodes", type=int, default=20, help="evaluation episodes per level")
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--every", type=int, default=20, help="keep every n-th curve row")
    p.add_argument("--out-dir", default=str(records.BENCH), help="where the records go")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_args.run_main(build_parser(), lambda a: run(a, argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
