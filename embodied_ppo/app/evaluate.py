"""The `eval` command: episodes, eval.json, a video, conditions and sweeps."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import torch

from embodied_ppo.app.deploy import build_actor_critic
from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.config.loading import apply_overrides, parse_override, set_dotted
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import CheckpointError, ConfigError, UserError
from embodied_ppo.core.types import ConfigDict, ConfigValue, JSONDict, JSONValue
from embodied_ppo.core.version import __version__
from embodied_ppo.io.checkpoint import read_checkpoint_or_intact
from embodied_ppo.io.files import atomic_write_bytes
from embodied_ppo.io.render import configure_headless_gl
from embodied_ppo.io.video import VideoWriter
from embodied_ppo.model.inference import inference_net
from embodied_ppo.runner.batched_eval import batched_episodes
from embodied_ppo.runner.episodes import (
    Action,
    EpisodeRunner,
    EvalResult,
    deterministic_action,
    eval_seeds,
    stochastic_action,
)
from embodied_ppo.runner.preflight import resolve_device
from embodied_ppo.vecenv.preflight import check_env


# ------------------------------------------------------------------------------------ eval command
def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory holding `checkpoint` (…/<run>/checkpoints/x.pt), if it is in one."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


@contextmanager
def one_thread_on_cpu(device: torch.device) -> Iterator[None]:
    """Torch runs one thread while episodes run on the CPU, as training's collection does: the
    policy sees one observation at a time, and a second thread only waits on the first (on a
    busy machine, 3x slower per step)."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# Keys `eval` may change: the conditions the policy is evaluated under, never the policy; and
# where the env's code is found.
EVAL_OVERRIDABLE = ("env.kwargs", "env.max_episode_steps", "env.imports", "env.entry_point")


def _eval_key(key: str, flag: str) -> None:
    if not any(key == k or key.startswith(k + ".") for k in EVAL_OVERRIDABLE):
        raise UserError(
            f"{flag}{key}: eval can change only env.kwargs.* and env.max_episode_steps (the "
            "conditions of the episodes, not the policy), and env.imports and env.entry_point "
            "(where the env's code is)"
        )


def eval_configs(
    saved: ConfigDict, overrides: list[str], sweeps: list[str]
) -> tuple[Config, list[tuple[str, ConfigValue, Config]]]:
    """The config the episodes run under (the run's, with `overrides`), and for each value of
    each `--sweep KEY=[v1, v2, ...]` (key, value, config): every one checked like a run's."""
    for text in overrides:
        _eval_key(".".join(parse_override(text)[0]), "")
    data = apply_overrides(saved, overrides)
    cfg = from_dict(data)
    swept: list[tuple[str, ConfigValue, Config]] = []
    for text in sweeps:
        parts, values = parse_override(text)
        key = ".".join(parts)
        _eval_key(key, "--sweep ")
        if not isinstance(values, list) or not values:
            raise UserError(f"--sweep {key}: expected a list of values, e.g. {key}=[0.5, 1.0]")
        for value in values:
            swept.append((key, value, from_dict(set_dotted(data, parts, value))))
    return cfg, swept


def evaluate_command(
    source: str,
    episodes: int = 10,
    *,
    deterministic: bool = True,
    seed: int | None = None,
    device: str = "cpu",
    video: str | None = None,
    json_path: str | None = None,
    out: TextIO | None = None,
    overrides: list[str] | None = None,
    sweeps: list[str] | None = None,
    use_intact: bool = False,
) -> JSONDict:
    """`embodied-ppo eval`: run episodes, print them, write eval.json (and an mp4 with `video`).

    Args:
        source: checkpoint file or run directory.
        seed: evaluation seed; default the run's trainer.seed, so evaluating `best.pt` repeats the
            episodes that selected it during training.
        video: None for no video, "" for the default path, else the mp4 path.
        json_path: where to write the results; default `<run_dir>/eval.json`.
        overrides: `env.kwargs.KEY=VALUE` (or `env.max_episode_steps=N`): evaluate under other
            conditions than the run trained in (e.g. a fixed command schedule).
        sweeps: `env.kwargs.KEY=[v1, v2, ...]`: after the main episodes, the same episodes again
            under each value (a robustness sweep), each result in eval.json's `sweep`.
        use_intact: for a run directory whose latest.pt is unreadable, evaluate its newest
            intact checkpoint (else the error names it).
    """
    out = out or sys.stdout
    if episodes < 1:
        raise UserError(f"--episodes: got {episodes}, expected an integer >= 1")
    if video is not None:
        configure_headless_gl()  # before anything imports mujoco
    dev = resolve_device(device, "--device")
    ckpt, state = read_checkpoint_or_intact(source, use_intact, "eval")
    if not isinstance(state.get("config"), dict):
        raise CheckpointError(f"{ckpt}: it holds no config")
    try:
        cfg, swept = eval_configs(upgrade(state["config"]), overrides or [], sweeps or [])
    except ConfigError as exc:
        if overrides or sweeps:
            raise
        raise CheckpointError(f"{ckpt}: its config cannot be read ({exc})") from None
    if overrides or sweeps:
        # Every condition is checked as a run's config is, before any episode runs: an argument
        # the task refuses is one line naming env.kwargs.<key>, and nothing is written.
        for condition in (cfg, *(c for _, _, c in swept)):
            check_env(condition)
    policy = build_actor_critic(state, str(ckpt)).to(dev)
    net = inference_net(policy).to(dev)
    seed = cfg.trainer.seed if seed is None else seed
    if not 0 <= seed < 2**63:
        raise UserError(f"--seed: got {seed}, expected an integer in [0, 2^63)")
    step = state.get("global_step")

    run_dir = run_dir_of(ckpt)
    base = run_dir if run_dir is not None else ckpt.parent
    result_path = (
        Path(json_path)
        if json_path
        else (base / "eval.json" if run_dir else ckpt.with_name(f"{ckpt.stem}.eval.json"))
    )
    video_path = None
    if video is not None:
        mode = "det" if deterministic else "stoch"
        video_path = (
            Path(video)
            if video
            else base / "videos" / f"eval-{ckpt.stem}-step{step}-{mode}-seed{seed}.mp4"
        )

    def actor() -> Action:
        """A fresh actor of the policy: deterministic, or sampling with its own generator."""
        return deterministic_action(net) if deterministic else stochastic_action(policy, seed)

    with one_thread_on_cpu(dev):
        runner = EpisodeRunner(cfg.env, render=video_path is not None)
        writer: VideoWriter | None = None
        try:
            if video_path is not None:
                runner.check_render()  # fail now, before episodes run or files are written
                writer = VideoWriter(video_path, runner.fps)
            kind = "deterministic" if deterministic else "stochastic"
            at = f", step {step:,}" if isinstance(step, int) else ""
            changed = f" with {' '.join(overrides)}" if overrides else ""
            print(
                f"evaluating {ckpt} ({cfg.env.id}{at}) for {episodes} {kind} episode(s), "
                f"seed {seed}{changed}",
                file=out,
                flush=True,
            )

            def report(i: int, ret: float, length: int, success: float | None) -> None:
                """Print episode i's return and length (and success, where reported)."""
                line = f"episode {i + 1:>3}: return {ret:10.2f}  length {length:>6}"
                if success is not None:
                    line += f"  success {'yes' if success else 'no'}"
                print(line, file=out, flush=True)

            on_frame = (lambda _ep, frame: writer.append(frame)) if writer is not None else None
            seeds = eval_seeds(seed, episodes)
            # Where the task steps many envs itself, the episodes at once (bit for bit the same).
            together = None if on_frame is not None else batched_episodes(cfg.env, actor(), seeds)
            if together is not None:
                result = together
                every = len(result.successes) == len(result.returns)  # each reported one
                for i, (ret, length) in enumerate(zip(result.returns, result.lengths)):
                    report(i, ret, length, result.successes[i] if every else None)
            else:
                result = runner.run(actor(), seeds, on_frame=on_frame, on_episode=report)
            frames, size = (writer.frames, writer.size) if writer is not None else (0, None)
            if writer is not None:
                writer.close()
                writer = None
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        finally:
            runner.close()
        print(_summary_line(result, episodes), file=out, flush=True)

        sweep: list[JSONValue] = []
        for key, value, swept_cfg in swept:
            swept_result = batched_episodes(swept_cfg.env, actor(), seeds)
            if swept_result is None:
                runner = EpisodeRunner(swept_cfg.env)
                try:
                    swept_result = runner.run(actor(), seeds)
                finally:
                    runner.close()
            sweep.append({"key": key, "value": value, **swept_result.summary()})
            print(f"{key}={value!r}: {_summary_line(swept_result, episodes)}", file=out, flush=True)

    summary: JSONDict = {
        "checkpoint": str(ckpt),
        "env_id": cfg.env.id,
        "global_step": step,
        "episodes": episodes,
        "deterministic": deterministic,
        "seed": seed,
        "overrides": list(overrides or []),
        **result.summary(),
        "returns": result.returns,
        "lengths": result.lengths,
        "episode_seeds": result.seeds,
        "successes": result.successes or None,
        "episode_logs": result.logs or None,
        "sweep": sweep or None,
        "video": str(video_path) if video_path is not None else None,
        "package_version": __version__,
    }
    if video_path is not None:
        summary["video_frames"] = frames
        summary["video_size"] = list(size) if size else None
    try:
        result_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(result_path, (json.dumps(summary, indent=2) + "\n").encode())
    except OSError as exc:
        raise UserError(f"cannot write {result_path}: {exc.strerror}") from None
    print(f"wrote {result_path}", file=out)
    if video_path is not None:
        print(
            f"wrote {video_path} ({frames} frames, {size[0]}x{size[1]}, {runner.fps:g} fps)",
            file=out,
        )
    return summary


def _summary_line(result: EvalResult, episodes: int) -> str:
    """mean return +- std, mean length, success rate and the env's metrics, in one line."""
    success = "" if result.success_rate is None else f", success rate {result.success_rate:.0%}"
    metrics = {k: v for k, v in result.summary().items() if k not in _PLAIN_SUMMARY}
    extra = "".join(f", {k} {v:.3g}" for k, v in metrics.items() if isinstance(v, float))
    return (
        f"mean return {result.mean_return:.2f} +- {result.std_return:.2f} over {episodes} "
        f"episode(s) (mean length {result.mean_length:.1f}{success}{extra})"
    )


_PLAIN_SUMMARY = ("mean_return", "std_return", "mean_length", "success_rate", "log")
