"""Variants of one config side by side: each trained on the same seeds and scored on the same
test episodes, so that an option's effect on learning is measured, not guessed.

    python -m scripts.bench.variants CONFIG --variant NAME=[KEY=VALUE,...] [--variant ...] \\
        --seeds 100-109 --out docs/bench/<name>.json [--target X] [--episodes 10] [--jobs 2]

A variant is the config with its overrides (none: the config as committed; several: separated by
commas, e.g. `ppo=algorithm.rnd.enabled=false`, `wide=model.hidden_sizes=[128,128],optim.lr=1e-4`).
For each seed and variant, `embodied-ppo train CONFIG OVERRIDES trainer.seed=S` trains in its own
process under ROOT/<variant>/seed<S>, with the run settings of `--set` (default one core each:
trainer.torch_threads=1 env.threads=1; a config that steps its envs in several processes takes
one core with `--set trainer.torch_threads=1 env.threads=1 env.processes=1`). `--jobs 2` trains
two runs at a time, the variants of a seed side by side. Each final policy is evaluated deterministically (`embodied-ppo eval RUN --episodes N
--seed 10000`), and where the config has a periodic evaluation (trainer.eval_interval) so is the
policy it kept as checkpoints/best.pt (chosen on episodes of the run's own seed, none of them
test episodes).

The results file (`--out`) is written after every run: each run's evaluations, training wall
time (summed over invocations), run settings, training curve and provenance (command, commit,
date, machine). Run again, the same command continues where it stopped: finished runs are kept,
an interrupted training resumes from its last checkpoint (`train --resume`, exact). The file
holds one config: a config changed since its runs (comments and run settings aside), or a variant
named again with other overrides, is refused before anything trains. `--report` prints the
markdown table of a results file (scripts/bench/report/variants.py): per variant and set of seeds
(evaluation seeds 100 and up, tuning seeds below; lib/stats.py) the IQM of the evaluation returns
with its 95% bootstrap interval, the median, the worst seed, the seeds at the target and the mean
wall time. Remarks (a list of sentences, `"remarks"` in the file, written by hand) are printed
under it: how the runs were measured where the table does not say it.

    python -m scripts.bench.variants configs/mountaincar_rnd.yaml --variant rnd= \\
        --variant ppo=algorithm.rnd.enabled=false --seeds 100-109 --target 90 --jobs 2 \\
        --out docs/bench/variants_mountaincar_rnd.json
    python -m scripts.bench.variants --report --out docs/bench/variants_mountaincar_rnd.json
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import proc, records
from scripts.bench.lib.proc import ROOT
from scripts.bench.lib.runs import RUN_SETTINGS, run_settings, training_curve
from scripts.bench.lib.tasks import EVAL_SEED
from scripts.bench.report import variants as report

MODULE = "scripts.bench.variants"
NAME = "variants benchmark"
ONE_CORE = ["trainer.torch_threads=1", "env.threads=1"]
# Keys the benchmark sets for every run: a variant may not set them.
SET_BY_BENCHMARK = ("trainer.seed", "trainer.run_dir")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A comma that starts the next override (`,KEY=`), not one inside a value such as [64,64].
_NEXT_OVERRIDE = re.compile(r",(?=\s*[A-Za-z_][\w.]*\s*=)")


@dataclass(frozen=True)
class Variant:
    """One contender: its name (its key in the results, its folder) and its config overrides."""

    name: str
    overrides: tuple[str, ...]


def parse_variant(text: str) -> Variant:
    """`NAME=KEY=VALUE,KEY=VALUE` (or `NAME=` for the config as it is) into a Variant."""
    name, eq, rest = text.partition("=")
    if not eq or not _NAME_RE.match(name):
        raise cli_args.BadInput(
            f"--variant {text}: expected NAME=[KEY=VALUE,...], NAME of letters, digits, _ . -"
        )
    overrides = tuple(o.strip() for o in _NEXT_OVERRIDE.split(rest)) if rest.strip() else ()
    for override in overrides:
        key, eq, _ = override.partition("=")
        if not eq or not key:
            raise cli_args.BadInput(f"--variant {text}: {override!r} is not KEY=VALUE")
        if key in SET_BY_BENCHMARK or key in RUN_SETTINGS:
            what = "the benchmark sets it" if key in SET_BY_BENCHMARK else "a run setting: --set"
            raise cli_args.BadInput(f"--variant {text}: {key} cannot vary ({what})")
    return Variant(name, overrides)


def parse_seeds(items: Sequence[str]) -> list[int]:
    """`100-109`, `100 101 105`, or both mixed, into the seeds in the order given."""
    seeds: list[int] = []
    for item in items:
        first, dash, last = item.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise cli_args.BadInput(f"--seeds {item}: expected a seed (100) or a range (100-109)")
        span = range(int(first), int(last if dash else first) + 1)
        if not span:
            raise cli_args.BadInput(f"--seeds {item}: an empty range")
        seeds += [s for s in span if s not in seeds]
    return seeds


def check_variants(config: Path, variants: Sequence[Variant], settings: Sequence[str]) -> None:
    """Each variant's config must load (the package's own checks), before anything trains."""
    from embodied_ppo.config.loading import load_config
    from embodied_ppo.core.errors import UserError

    names = [v.name for v in variants]
    if len(set(names)) < len(names):
        raise cli_args.BadInput(f"--variant: a name given twice ({', '.join(names)})")
    for v in variants:
        try:
            load_config(config, [*v.overrides, *settings])
        except UserError as exc:
            raise cli_args.BadInput(f"--variant {v.name}: {exc}") from None


def config_digest(config: Path) -> str:
    """What a config trains, as a short hash of its settings: comments and the keys a resume
    may change (how a run runs, not what it learns) do not count."""
    import hashlib

    import yaml

    from embodied_ppo.config.resume import RESUMABLE_KEYS

    data = yaml.safe_load(config.read_text()) or {}
    for key in RESUMABLE_KEYS:
        block, _, name = key.partition(".")
        if isinstance(data.get(block), dict):
            data[block].pop(name, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def shown(path: Path) -> str:
    """A path relative to the repository's root where it lies inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def read(path: Path) -> dict:
    """The results file, {} where there is none yet; one this benchmark did not write is refused."""
    results = records.read_results(path, name=NAME)
    if results and not isinstance(results.get("variants"), dict):
        raise cli_args.BadInput(f"{path} is not a results file of this {NAME}")
    return results


def prepare(args, variants: Sequence[Variant]) -> dict:
    """The results file with this invocation's config and variants in it, or a refusal where
    it holds runs of other settings."""
    results = read(args.out)
    config, digest = shown(args.config), config_digest(args.config)
    if results and (results.get("config"), results.get("config_digest")) != (config, digest):
        raise cli_args.BadInput(
            f"{args.out} holds runs of {results.get('config')} as it was then, not of {config} "
            "as it is now; give another --out (or remove that file)"
        )
    if results and results.get("episodes") != args.episodes:
        raise cli_args.BadInput(
            f"{args.out} scored its runs on {results.get('episodes')} episodes, not "
            f"--episodes {args.episodes}"
        )
    results = results or {"config": config, "config_digest": digest, "episodes": args.episodes,
                          "variants": {}}  # fmt: skip
    if args.target is not None:
        results["target"] = args.target
    results.setdefault("target", None)
    for v in variants:
        known = results["variants"].setdefault(v.name, {"overrides": list(v.overrides),
                                                        "runs": {}})  # fmt: skip
        if known["overrides"] != list(v.overrides):
            raise cli_args.BadInput(
                f"--variant {v.name}: {args.out} holds it with the overrides "
                f"{','.join(known['overrides']) or '(none)'}; give it another name"
            )
    return results


def score(policy: Path, out: Path, episodes: int) -> dict:
    """`embodied-ppo eval` of a run (its final policy) or a checkpoint on the test episodes."""
    proc.cli(["eval", str(policy), "--episodes", str(episodes), "--seed", str(EVAL_SEED),
              "--json", str(out)])  # fmt: skip
    summary = json.loads(out.read_text())
    return {"mean": summary["mean_return"], "std": summary["std_return"],
            "step": summary.get("global_step")}  # fmt: skip


def run_one(config: Path, variant: Variant, seed: int, run: Path, job: dict) -> dict:
    """Train (or resume) one variant on one seed, then score its final policy and the one it
    kept; the run's record. `job`: the run `settings` and the evaluation `episodes`."""
    state_file = run / "variants_state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"wall_s": 0.0}
    settings = list(job["settings"])
    if not state.get("trained"):
        if (run / "checkpoints" / "latest.pt").exists():
            cmd = ["train", "--resume", str(run), *settings]
        else:
            cmd = ["train", str(config), *variant.overrides, f"trainer.seed={seed}",
                   f"trainer.run_dir={run}", *settings]  # fmt: skip
        state.setdefault("settings", []).append(settings)
        start = time.perf_counter()
        try:
            proc.cli(cmd)
            state["trained"] = True
        finally:  # an interrupted invocation's time still counts
            state["wall_s"] += time.perf_counter() - start
            run.mkdir(parents=True, exist_ok=True)
            state_file.write_text(json.dumps(state, indent=2) + "\n")
    record = {"final": score(run, run / "variants_eval.json", job["episodes"])}
    kept = run / "checkpoints" / "best.pt"
    if kept.is_file():
        record["kept"] = score(kept, run / "variants_eval_kept.json", job["episodes"])
    record |= {"wall_s": state["wall_s"], "settings": state["settings"],
               "curve": training_curve(run)}  # fmt: skip
    return record


class Saver:
    """Writes each finished run into the results file at once, one writer at a time, keeping
    what the file holds (runs another invocation saved since this one started)."""

    def __init__(self, path: Path, results: dict) -> None:
        self.path, self.results, self.lock = path, results, threading.Lock()

    def save(self, variant: str, seed: int, record: dict) -> None:
        """Add one run's record and write the file."""
        with self.lock:
            current = read(self.path) or self.results
            current.setdefault("variants", {}).setdefault(
                variant, self.results["variants"][variant]
            )["runs"][str(seed)] = record  # fmt: skip
            for key in ("config", "config_digest", "episodes", "target"):
                current[key] = self.results[key]
            records.write_results(self.path, current)


def run(args, argv: list[str]) -> int:
    """Train what is missing (or print the report with --report)."""
    if args.report:
        results = read(args.out)
        if not results:
            raise cli_args.BadInput(f"no results in {args.out}")
        print("\n".join(report.report_lines(results, shown(args.out), args.target)))
        return 0
    if args.config is None or not args.variant:
        raise cli_args.BadInput("CONFIG and at least one --variant are required (or --report)")
    if not args.config.is_file():
        raise cli_args.BadInput(f"no such config: {args.config}")
    if args.jobs < 1 or args.episodes < 1:
        raise cli_args.BadInput("--jobs and --episodes must be at least 1")
    variants = [parse_variant(v) for v in args.variant]
    seeds = parse_seeds(args.seeds)
    settings = run_settings(args.set)
    check_variants(args.config, variants, settings)
    results = prepare(args, variants)
    saver = Saver(args.out, results)
    records.write_results(args.out, results)
    root = (args.root or ROOT / "runs" / "variants" / args.out.stem).resolve()
    todo = [(v, s) for s in seeds for v in variants
            if str(s) not in results["variants"][v.name]["runs"]]  # fmt: skip
    job = {"settings": settings, "episodes": args.episodes}

    def one(v: Variant, seed: int) -> None:
        prov = records.provenance(MODULE, argv)
        try:
            rec = run_one(args.config.resolve(), v, seed, root / v.name / f"seed{seed}", job)
        except subprocess.CalledProcessError as exc:
            what = "train" if "train" in exc.cmd else "eval"
            raise RuntimeError(
                f"{v.name} seed {seed}: {what} exited with {exc.returncode}; "
                "the same command continues where it stopped"
            ) from None
        saver.save(v.name, seed, {**rec, "provenance": prov})
        print(f"{v.name} seed {seed}: {rec['final']['mean']:.1f} ({rec['wall_s'] / 60:.1f} min)",
              flush=True)  # fmt: skip

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(one, v, s) for v, s in todo]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:  # the runs under way finish and are saved; none starts after a failure
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True)
            print(f"{MODULE}: {failed[0].exception()}", file=sys.stderr)
            return 1
    print("\n".join(report.report_lines(read(args.out), shown(args.out))))
    return 0


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("config", nargs="?", type=Path, metavar="CONFIG")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=[KEY=VALUE,...]")
    p.add_argument("--seeds", nargs="+", default=["100-109"], metavar="SEED|FIRST-LAST")
    p.add_argument("--out", type=Path, required=True, help="the results file (JSON)")
    p.add_argument("--target", type=float, default=None,
                   help="the evaluation return at which a seed counts as reaching the goal")  # fmt: skip
    p.add_argument("--episodes", type=int, default=10, help="test episodes per policy")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (one core each)")
    p.add_argument("--root", type=Path, default=None,
                   help="where the runs go (default: runs/variants/<--out's name>)")  # fmt: skip
    p.add_argument("--set", nargs="+", default=ONE_CORE, metavar="KEY=VALUE",
                   help=f"run settings of every run ({', '.join(RUN_SETTINGS)}); default: "
                        f"{' '.join(ONE_CORE)}")  # fmt: skip
    p.add_argument("--report", action="store_true", help="print the table of --out and stop")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_args.run_main(build_parser(), lambda args: run(args, argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
