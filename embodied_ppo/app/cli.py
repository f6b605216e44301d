"""Command line: argument parsing for `embodied-ppo train | eval | export | plot | pack`.

Each command's work lives with what it does (api.train_command, evaluate.evaluate_command,
export.export_policy, plot.plot_runs); this module parses, dispatches and turns user errors
into one line and an exit status. It imports a command's module when the command runs, and
`train` checks a new run's config before that: a config error is reported before torch loads
(in a fraction of the second torch takes to import).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import logging
import os
import sys
from types import ModuleType

from embodied_ppo.core.errors import QuietError, UserError
from embodied_ppo.core.version import __version__
from embodied_ppo.io.render import configure_headless_gl


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        """Raise a UserError: one line, exit 2, no usage dump."""
        raise UserError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of `embodied-ppo` and its commands."""
    parser = _Parser(prog="embodied-ppo", description="PPO for embodied and continuous-control RL.")
    parser.add_argument("--version", action="version", version=f"embodied-ppo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    train = sub.add_parser(
        "train",
        help="train a policy from a YAML config",
        description="Train from CONFIG with dotted overrides, e.g. "
        "`embodied-ppo train configs/hopper.yaml algorithm.clip_ratio_high=0.28 trainer.seed=3`, "
        "or continue a run with `embodied-ppo train --resume RUN_DIR`.",
    )
    train.add_argument("config", nargs="?", help="YAML config file (omit with --resume)")
    train.add_argument("overrides", nargs="*", metavar="KEY.PATH=VALUE", help="config overrides")
    train.add_argument(
        "--resume",
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="continue the run in RUN_DIR from its latest checkpoint, or from the given one of "
        "its checkpoints (RUN_DIR/checkpoints/ckpt_<step>.pt)",
    )
    train.add_argument(
        "--use-intact",
        action="store_true",
        help="with --resume: if latest.pt is unreadable, continue from the newest intact checkpoint",
    )
    train.add_argument(
        "--more",
        type=int,
        metavar="STEPS",
        help="with --resume: train STEPS env steps past the checkpoint (sets trainer.total_steps)",
    )
    train.add_argument(
        "--for",
        dest="wall_time",
        metavar="DURATION",
        help="train for this wall time (90s, 10m, 1.5h): stop at the last iteration boundary it "
        "holds, with a checkpoint and exit status 0 (relay training, docs/reliability.md)",
    )
    pack = sub.add_parser(
        "pack",
        help="pack a run directory small, to continue it on another machine",
        description="Write RUN's config, metrics, logs and newest intact checkpoint to OUT "
        "(.tar.gz); `tar -xzf OUT -C runs/` unpacks it and `embodied-ppo train --resume "
        "runs/NAME` continues it.",
    )
    pack.add_argument("run", metavar="RUN_DIR")
    pack.add_argument("out", metavar="OUT.tar.gz")
    pack.add_argument("--best", action="store_true", help="carry checkpoints/best.pt too")
    _add_eval_export_plot(sub)
    launch = sub.add_parser(
        "torchrun",
        help="torchrun that stops like one process (Ctrl-C: one message, exit 130)",
        description="`embodied-ppo torchrun [TORCHRUN OPTIONS] COMMAND ...` runs COMMAND with "
        "N processes as `torchrun [TORCHRUN OPTIONS] -m embodied_ppo COMMAND ...` does, but a "
        "stop signal ends it like one process: the workers finish the iteration and save, one "
        "message with the resume command, exit 130 (SIGINT) or 143 (SIGTERM).",
    )
    launch.add_argument(
        "rest", nargs=argparse.REMAINDER, help="torchrun's options, then the command"
    )
    return parser


_USE_INTACT = "if RUN_DIR's latest.pt is unreadable, use its newest intact checkpoint"


def _add_eval_export_plot(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "eval",
        help="run evaluation episodes of a trained policy (optionally filmed)",
        description="Run episodes with a checkpoint's policy, print each return and length and the "
        "mean +- std, and write them to eval.json in the run directory. `env.kwargs.KEY=VALUE` "
        "evaluates under other conditions; `--sweep env.kwargs.KEY=[v1,v2]` repeats the episodes "
        "under each value.",
    )
    ev.add_argument(
        "checkpoint",
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="a run directory (its latest.pt) or a .pt file",
    )
    ev.add_argument(
        "overrides",
        nargs="*",
        metavar="env.kwargs.KEY=VALUE",
        help="evaluate under other env conditions (env.kwargs.*, env.max_episode_steps)",
    )
    ev.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="env.kwargs.KEY=[V1,V2,...]",
        help="after the episodes, repeat them under each value (repeatable; written to eval.json)",
    )
    ev.add_argument("--episodes", type=int, default=10, help="number of episodes (default 10)")
    mode = ev.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="deterministic",
        action="store_true",
        default=True,
        help="Gaussian mean / categorical argmax (default)",
    )
    mode.add_argument(
        "--stochastic",
        dest="deterministic",
        action="store_false",
        help="sample actions from the policy",
    )
    ev.add_argument(
        "--seed", type=int, default=None, help="evaluation seed (default: the run's trainer.seed)"
    )
    ev.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    ev.add_argument(
        "--video",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="write an mp4 of the episodes (default path: RUN_DIR/videos/eval-....mp4)",
    )
    ev.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="where to write the results (default RUN_DIR/eval.json)",
    )
    ev.add_argument("--use-intact", action="store_true", help=_USE_INTACT)

    ex = sub.add_parser(
        "export",
        help="export the deterministic policy as TorchScript or ONNX",
        description="Write the inference policy (raw observation -> action, normalizer folded in) as "
        "TorchScript or ONNX, with a JSON of shapes, bounds and provenance beside it.",
    )
    ex.add_argument(
        "checkpoint",
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="a run directory (its latest.pt) or a .pt file",
    )
    ex.add_argument("--format", default="torchscript", help="torchscript (default) or onnx")
    ex.add_argument(
        "--out",
        metavar="PATH",
        default=None,
        help="output file (default RUN_DIR/exported/policy-<step>.pt|.onnx)",
    )
    ex.add_argument("--use-intact", action="store_true", help=_USE_INTACT)

    pl = sub.add_parser(
        "plot",
        help="plot learning curves of one or more runs",
        description="Episodic return (train and eval) against environment steps; runs that differ "
        "only in trainer.seed are drawn as a mean with a +-1 std band.",
    )
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    pl.add_argument("--out", default="curves.png", help="PNG to write (default curves.png)")
    pl.add_argument(
        "--smooth",
        type=int,
        default=1,
        help="moving average of the training curve over N logged points (default 1: none)",
    )
    pl.add_argument("--title", default=None, help="figure title")


def cmd_train(args: argparse.Namespace) -> int:
    """`embodied-ppo train`; returns the exit status."""
    if args.use_intact and not args.resume:
        raise UserError("--use-intact goes with --resume RUN_DIR")
    if args.more is not None and not args.resume:
        raise UserError("--more goes with --resume RUN_DIR; a new run trains trainer.total_steps")
    # The interpreter's last collection at exit walks every object still alive: after training,
    # the compiler's ~0.5M, ~1 s on 2 cores. Everything is written and closed by then (logs,
    # checkpoints, env workers), so the process leaves them to the system instead.
    atexit.register(gc.freeze)
    if args.config and not args.resume:
        from embodied_ppo.config.loading import load_config

        load_config(args.config, args.overrides)  # checked again, the same, by the run
    from embodied_ppo.app.relay import parse_duration
    from embodied_ppo.app.train import train_command

    wall_time = None if args.wall_time is None else parse_duration(args.wall_time)
    return train_command(
        args.config, args.overrides, args.resume, args.use_intact, args.more, wall_time=wall_time
    )


def cmd_pack(args: argparse.Namespace) -> int:
    """`embodied-ppo pack`; returns the exit status."""
    from embodied_ppo.app.relay import pack_command

    return pack_command(args.run, args.out, args.best)


def cmd_eval(args: argparse.Namespace) -> int:
    """`embodied-ppo eval`; returns the exit status."""
    from embodied_ppo.app.evaluate import evaluate_command

    evaluate_command(
        args.checkpoint,
        episodes=args.episodes,
        deterministic=args.deterministic,
        seed=args.seed,
        device=args.device,
        video=args.video,
        json_path=args.json,
        overrides=args.overrides,
        sweeps=args.sweep,
        use_intact=args.use_intact,
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """`embodied-ppo export`; returns the exit status."""
    from embodied_ppo.app.export import export_policy

    path, meta_path, _ = export_policy(args.checkpoint, args.format, args.out, args.use_intact)
    print(f"wrote {path} ({args.format})")
    print(f"wrote {meta_path}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """`embodied-ppo plot`; returns the exit status."""
    from embodied_ppo.app.plot import plot_runs

    path = plot_runs(args.runs, args.out, smooth=args.smooth, title=args.title)
    print(f"wrote {path}")
    return 0


def cmd_torchrun(args: argparse.Namespace) -> int:
    """`embodied-ppo torchrun`; returns the launcher's exit status."""
    from embodied_ppo.app.launch import torchrun

    return torchrun(args.rest)


def main(argv: list[str] | None = None) -> None:
    """The `embodied-ppo` command: run the command `argv` names and exit with its status (a
    user's error: one line on stderr, status 2, or 1 for a training failure)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["torchrun"] and argv[1:2] not in (["-h"], ["--help"]):
            # torchrun's own options (--nproc_per_node=2 ...) come first: argparse's REMAINDER
            # does not take leading options, so everything after the word goes through as is.
            args = argparse.Namespace(command="torchrun", rest=argv[1:])
        else:
            args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            sys.exit(2)
        # Before anything imports MuJoCo or makes an OpenGL context: a headless machine gets an
        # offscreen backend (EGL, then OSMesa) unless MUJOCO_GL says otherwise.
        configure_headless_gl()
        # A user's module beside them (env.imports=[my_robot], env.id=my_robot:MyRobot-v0) is
        # found as `python -m embodied_ppo` finds it: the current directory is searched too.
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        commands = {
            "train": cmd_train,
            "eval": cmd_eval,
            "export": cmd_export,
            "plot": cmd_plot,
            "pack": cmd_pack,
            "torchrun": cmd_torchrun,
        }
        code = commands[args.command](args)
    except UserError as exc:
        if not isinstance(exc, QuietError):
            group = _process_group()
            rank = group.rank() if group is not None else 0
            prefix = f"rank {rank}: " if rank > 0 else ""
            print(f"embodied-ppo: error: {prefix}{exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside training (which handles it itself)
        print("\nembodied-ppo: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        group = _process_group()
        left_group = group.shutdown() if group is not None else False
    if left_group:
        exit_without_finalizing(code)
    sys.exit(code)


def _process_group() -> ModuleType | None:
    """runner.distributed once torch has loaded; None before (no process group exists then)."""
    if "torch" not in sys.modules:
        return None
    from embodied_ppo.runner import distributed

    return distributed


def exit_without_finalizing(code: int) -> None:
    """End a process that trained in a process group, its work done and its group left, without
    Python's finalization: there, torch's distributed C++ objects are torn down and, in about
    one process in fifty on 2 busy cores, one aborted (`terminate called without an active
    exception`, SIGABRT with no Python frame left) and turned a finished run into a failed one
    (torchrun then reports the rank as failed). Output is flushed first; nothing else of ours
    waits for finalization (the run's files are closed and written by then)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
