"""Command line: `embodied-ppo train CONFIG [KEY.PATH=VALUE ...]` and `--resume RUN_DIR`."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from embodied_ppo import distributed
from embodied_ppo.errors import ConfigError, UserError

# Keys that may change when a run resumes: they change when or how it runs, not what it learns.
RESUMABLE_KEYS = {
    "trainer.total_steps",
    "trainer.log_interval",
    "trainer.checkpoint_interval",
    "trainer.device",
    "trainer.torch_threads",
    "env.threads",
    "trainer.eval_interval",
    "trainer.eval_episodes",
    "trainer.video_interval",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UserError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="embodied-ppo", description="PPO for embodied and continuous-control RL.")
    from embodied_ppo import __version__

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
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint"
    )
    _add_eval_export_plot(sub)
    return parser


def _add_eval_export_plot(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "eval",
        help="run evaluation episodes of a trained policy (optionally filmed)",
        description="Run episodes with a checkpoint's policy, print each return and length and the "
        "mean +- std, and write them to eval.json in the run directory.",
    )
    ev.add_argument(
        "checkpoint",
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="a run directory (its latest.pt) or a .pt file",
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


def _default_run_dir(config_path: str | None, seed: int) -> Path:
    stem = Path(config_path).stem if config_path else "run"
    return Path("runs") / f"{stem}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"


def _prepare_new_run(config_path: str, overrides: list[str]):
    from embodied_ppo.config import dump_yaml, load_config
    from embodied_ppo.envs import check_episodic, space_info
    from embodied_ppo.trainer import model_spec, resolve_device

    cfg = load_config(config_path, overrides)
    info = space_info(cfg.env)  # unknown ids and unsupported spaces fail here, before any file
    model_spec(cfg, info)
    check_episodic(cfg)
    resolve_device(cfg.trainer.device)
    run_dir = (
        Path(cfg.trainer.run_dir)
        if cfg.trainer.run_dir
        else _default_run_dir(config_path, cfg.trainer.seed)
    )
    if run_dir.is_dir() and not (run_dir / "config.yaml").exists():
        # A start killed while writing config.yaml leaves only its temp file: not a run yet.
        for leftover in run_dir.glob(".config.yaml.*.tmp"):
            leftover.unlink(missing_ok=True)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise ConfigError(
            f"trainer.run_dir: {str(run_dir)!r} already exists; continue it with "
            f"`embodied-ppo train --resume {run_dir}` or choose another trainer.run_dir"
        )
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"trainer.run_dir: cannot create {str(run_dir)!r}: {exc.strerror}"
        ) from None
    cfg.trainer.run_dir = str(run_dir)
    try:
        from embodied_ppo.checkpoint import atomic_write_bytes

        atomic_write_bytes(run_dir / "config.yaml", dump_yaml(cfg).encode())
    except OSError as exc:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise ConfigError(
            f"trainer.run_dir: cannot write to {str(run_dir)!r}: {exc.strerror}"
        ) from None
    return cfg, run_dir, created


def _prepare_resume(run_dir_arg: str, overrides: list[str]):
    from embodied_ppo.checkpoint import (
        atomic_write_bytes,
        checkpoints_dir,
        load_checkpoint,
        remove_stale_temp_files,
    )
    from embodied_ppo.config import apply_overrides as apply
    from embodied_ppo.config import dump_yaml, from_dict, load_yaml, parse_override

    run_dir = Path(run_dir_arg)
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        raise UserError(f"--resume {run_dir}: not a run directory (no config.yaml)")
    for text in overrides:
        key = ".".join(parse_override(text)[0])
        if key not in RESUMABLE_KEYS:
            raise ConfigError(
                f"{key}: cannot change when resuming; allowed: {', '.join(sorted(RESUMABLE_KEYS))}"
            )
    saved = load_yaml(config_file)
    cfg = from_dict(apply(saved, overrides))
    ckpt_dir = checkpoints_dir(run_dir)
    if not (ckpt_dir / "latest.pt").exists() and not any(ckpt_dir.glob("ckpt_*.pt")):
        # Stopped before its first checkpoint: nothing was learned yet, so start it over.
        state = None
    else:
        state = load_checkpoint(run_dir)
        ckpt_cfg = state.get("config")
        if not isinstance(ckpt_cfg, dict) or _strip(ckpt_cfg) != _strip(from_dict(saved).to_dict()):
            raise UserError(
                f"--resume {run_dir}: the latest checkpoint was not written by this run's config"
            )
    # Whoever wrote them is gone (a kill mid-write); loading never reads them.
    if distributed.launch_rank() == 0:  # one writer in a distributed run
        remove_stale_temp_files(run_dir)
        if overrides:
            atomic_write_bytes(config_file, dump_yaml(cfg).encode())
    return cfg, run_dir, state


def _strip(d: dict) -> dict:
    """A config dict without the keys that may change on resume."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for key in RESUMABLE_KEYS | {"trainer.run_dir"}:
        block, name = key.split(".")
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    return out


def cmd_train(args: argparse.Namespace) -> int:
    from embodied_ppo.signals import GracefulStop

    # Installed before anything starts, so that even an early SIGINT / SIGTERM stops cleanly.
    with GracefulStop() as stop:
        return _train(args, stop)


def say(*args: Any, **kwargs: Any) -> None:
    """print, on the first process of a distributed run only."""
    if distributed.launch_rank() == 0:
        print(*args, **kwargs)


def _prepare_new_run_distributed(config_path: str, overrides: list[str]):
    """Every process validates; process 0 creates the run directory and tells the others."""
    from embodied_ppo.config import load_config

    cfg = load_config(config_path, overrides)
    distributed.init(cfg.trainer.device, cfg.trainer.dist_backend, cfg.trainer.dist_timeout)
    outcome: tuple[str | None, str | None] = (None, None)
    created = False
    if distributed.is_main():
        try:
            cfg, run_dir, created = _prepare_new_run(config_path, overrides)
            outcome = (str(run_dir), None)
        except UserError as exc:
            outcome = (None, str(exc))
    run_dir_text, error = distributed.broadcast_object(outcome)
    if error is not None:
        if distributed.is_main():
            raise ConfigError(error)
        raise _Quiet(error)  # already reported by process 0
    cfg.trainer.run_dir = run_dir_text
    return cfg, Path(run_dir_text), created


class _Quiet(UserError):
    """An error another process has already printed."""


def _train(args: argparse.Namespace, stop: Any) -> int:
    from embodied_ppo.signals import exit_code
    from embodied_ppo.trainer import Trainer

    if args.resume:
        overrides = ([args.config] if args.config else []) + args.overrides
        cfg, run_dir, state = _prepare_resume(args.resume, overrides)
        if state is None:
            say(f"{run_dir}: no checkpoint yet, starting the run from the beginning")
        elif state["global_step"] >= cfg.trainer.total_steps:
            say(
                f"{run_dir}: already trained to {state['global_step']:,} steps (trainer.total_steps={cfg.trainer.total_steps:,})"
            )
            return 0
        trainer = Trainer(cfg, run_dir, resume=state)
        say(f"resuming {run_dir} at step {trainer.global_step:,} (iteration {trainer.iteration})")
        if trainer.resume_note:
            say(f"  note: {trainer.resume_note}")
    else:
        if not args.config:
            raise UserError(
                "train: give a config file, e.g. `embodied-ppo train configs/cartpole.yaml`, or --resume RUN_DIR"
            )
        if distributed.launched_by_torchrun():
            cfg, run_dir, created = _prepare_new_run_distributed(args.config, args.overrides)
        else:
            cfg, run_dir, created = _prepare_new_run(args.config, args.overrides)
        try:
            trainer = Trainer(cfg, run_dir)
        except BaseException:
            if created:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        say(
            f"training {cfg.env.id} for {cfg.trainer.total_steps:,} steps on {trainer.device} -> {run_dir}"
            + (f" ({trainer.world} processes)" if trainer.world > 1 else "")
        )
        say(f"  tensorboard --logdir {run_dir.parent}")
    resume_hint = f"continue with `embodied-ppo train --resume {run_dir}`"
    try:
        summary = trainer.train(should_stop=stop)
    except KeyboardInterrupt as exc:  # a second signal: stop at once
        last = trainer.last_checkpoint or "no checkpoint yet"
        say(f"\nstopped at once; last checkpoint: {last}; {resume_hint}", file=sys.stderr)
        return exit_code(getattr(exc, "signum", signal.SIGINT))
    if summary["stopped"]:
        say(
            f"stopped at step {trainer.global_step:,} (iteration {trainer.iteration}); "
            f"checkpoint: {trainer.last_checkpoint}; {resume_hint}",
            file=sys.stderr,
        )
        return stop.exit_code
    ret = summary.get("charts/episodic_return")
    say(
        f"done: {summary['global_step']:,} steps"
        + (f", last mean episodic return {ret:.2f}" if ret is not None else "")
    )
    say(f"checkpoint: {trainer.last_checkpoint}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from embodied_ppo.evaluate import evaluate_command

    evaluate_command(
        args.checkpoint,
        episodes=args.episodes,
        deterministic=args.deterministic,
        seed=args.seed,
        device=args.device,
        video=args.video,
        json_path=args.json,
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from embodied_ppo.export import export_policy

    path, meta_path, _ = export_policy(args.checkpoint, args.format, args.out)
    print(f"wrote {path} ({args.format})")
    print(f"wrote {meta_path}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from embodied_ppo.plot import plot_runs

    path = plot_runs(args.runs, args.out, smooth=args.smooth, title=args.title)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            sys.exit(2)
        code = {"train": cmd_train, "eval": cmd_eval, "export": cmd_export, "plot": cmd_plot}[
            args.command
        ](args)
    except UserError as exc:
        if not isinstance(exc, _Quiet):
            prefix = f"rank {distributed.rank()}: " if distributed.rank() > 0 else ""
            print(f"embodied-ppo: error: {prefix}{exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside training (which handles it itself)
        print("\nembodied-ppo: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        distributed.shutdown()
    sys.exit(code)
