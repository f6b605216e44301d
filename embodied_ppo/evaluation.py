"""Evaluation episodes and videos: the `eval` command and periodic evaluation during training.

Episodes run one at a time on a single environment built exactly like a training env (same
`env:` block), each reset with its own seed, so a fixed seed gives the same episodes. The policy
acts through the same :class:`~embodied_ppo.export.PolicyNet` that `load_policy` and `export`
give a robot stack (deterministic, normalizer frozen, actions clipped), unless `--stochastic`.
Evaluation draws from no global RNG, so evaluating during training never changes training.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_ppo.checkpoint import atomic_write_bytes, checkpoints_dir, read_checkpoint
from embodied_ppo.config import Config, EnvConfig
from embodied_ppo.errors import CheckpointError, ConfigError, UserError
from embodied_ppo.export import InferenceNet, build_actor_critic, inference_net, is_recurrent
from embodied_ppo.logging import MetricsLogger
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.obs import map_obs
from embodied_ppo.render import GLChoice, configure_headless_gl, has_display
from embodied_ppo.vecenv.base import Obs, describe_spaces, episode_log, obs_cast

# Evaluation envs draw their seeds from global env indices no training env uses (training envs
# take indices 0..num_envs-1, times ranks), so evaluation episodes never repeat training ones.
EVAL_ENV_OFFSET = 1 << 32

# One observation (an array, or a dict of arrays) -> one action. An Action with memory (a
# recurrent policy) also has `reset()`, called before every episode.
Action = Callable[[Any], Any]


class RenderError(UserError):
    """Frames cannot be rendered or a video cannot be written."""


def eval_seeds(seed: int, episodes: int) -> list[int]:
    """The reset seed of each evaluation episode, derived from `seed`."""
    from embodied_ppo.vecenv.seeding import env_seeds

    return env_seeds(seed, episodes, offset=EVAL_ENV_OFFSET)


@dataclass
class EvalResult:
    """Raw (unscaled) returns and lengths of finished evaluation episodes."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    # info["is_success"] at the end of each episode, where the env reports it
    successes: list[float] = field(default_factory=list)
    # info["log"] at the end of each episode, where the env reports it (the episode's scalars)
    logs: list[dict[str, float]] = field(default_factory=list)

    @property
    def success_rate(self) -> float | None:
        return float(np.mean(self.successes)) if self.successes else None

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std_return(self) -> float:
        return float(np.std(self.returns))  # population std over episodes, as SB3 reports it

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))

    def log_means(self) -> dict[str, float]:
        """The mean over episodes of each key of the episodes' `info["log"]`."""
        keys = dict.fromkeys(k for log in self.logs for k in log)
        return {k: float(np.mean([log[k] for log in self.logs if k in log])) for k in keys}

    def summary(self) -> dict[str, Any]:
        """Mean and std of the returns, mean length, success rate and the env's own metrics
        (`metrics/<name>` of info["log"] under `<name>`; every log key under `log`)."""
        means = self.log_means()
        out: dict[str, Any] = {
            "mean_return": self.mean_return,
            "std_return": self.std_return,
            "mean_length": self.mean_length,
            "success_rate": self.success_rate,
        }
        out.update(
            {k.removeprefix("metrics/"): v for k, v in means.items() if k.startswith("metrics/")}
        )
        if means:
            out["log"] = means
        return out


# ------------------------------------------------------------------------------------ video
def _even(frame: np.ndarray) -> np.ndarray:
    """Pad odd heights/widths by one edge pixel: H.264 in yuv420p needs even sizes."""
    h, w = frame.shape[:2]
    if h % 2 or w % 2:
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    return frame


class VideoWriter:
    """An mp4 (H.264) written through imageio's ffmpeg plugin.

    Frames go to a hidden temporary file beside `path`, moved into place by :meth:`close`, so a
    failed or interrupted evaluation leaves no half-written video.
    """

    def __init__(self, path: Path, fps: float) -> None:
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary the plugin needs)
        except ImportError:
            raise RenderError(
                "--video needs imageio and imageio-ffmpeg (dependencies of embodied-ppo): pip install imageio imageio-ffmpeg"
            ) from None
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.stem}.{os.getpid()}.partial.mp4")
        self.fps = fps
        self.frames = 0
        self.size: tuple[int, int] | None = None  # (width, height)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = imageio.get_writer(
                self.tmp,
                format="FFMPEG",
                mode="I",
                fps=fps,
                codec="libx264",
                pixelformat="yuv420p",
                macro_block_size=1,  # we keep sizes even ourselves; never rescale frames
                ffmpeg_log_level="error",
            )
        except OSError as exc:
            raise RenderError(f"cannot write video {self.path}: {exc}") from None

    def append(self, frame: np.ndarray) -> None:
        frame = _even(np.ascontiguousarray(frame[..., :3], dtype=np.uint8))
        size = (frame.shape[1], frame.shape[0])
        if self.size is None:
            self.size = size
        elif size != self.size:
            raise RenderError(f"rendered frames changed size from {self.size} to {size}")
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> Path:
        """Finish the file and move it to `path`."""
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file."""
        with contextlib.suppress(Exception):  # already failing; the partial file goes anyway
            self._writer.close()
        if self.tmp.exists():
            self.tmp.unlink()


# ------------------------------------------------------------------------------------ episodes
def _dependency_hint(exc: BaseException) -> str | None:
    text = str(exc)
    if "pygame" in text:
        return "rendering this environment needs pygame (a dependency of embodied-ppo): pip install pygame"
    return None


class EpisodeRunner:
    """One evaluation environment, optionally rendering rgb_array frames."""

    def __init__(self, env_cfg: EnvConfig, render: bool = False) -> None:
        from embodied_ppo.validate import check_env_id
        from embodied_ppo.vecenv.gymnasium_backend import make_one

        self.env_cfg = env_cfg
        self.render = render
        self.gl: GLChoice | None = configure_headless_gl() if render else None
        check_env_id(env_cfg.id, env_cfg.imports)
        try:
            self.env = make_one(env_cfg, render_mode="rgb_array" if render else None)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            if render:
                # With rendering on, a failing import of the GL platform surfaces right here.
                hint = _dependency_hint(exc) or (self.gl.hint() if self.gl else "")
                raise RenderError(
                    f"cannot create {env_cfg.id} for rendering ({type(exc).__name__}: {first}); {hint}"
                ) from None
            raise ConfigError(
                f"env.id: cannot create {env_cfg.id} ({type(exc).__name__}: {first})"
            ) from None
        if render and "rgb_array" not in (self.env.metadata.get("render_modes") or []):
            self.close()
            raise RenderError(
                f"{env_cfg.id} cannot render frames (its render modes: {self.env.metadata.get('render_modes')})"
            )
        self.fps = float(self.env.metadata.get("render_fps") or 30)
        self.info = describe_spaces(self.env.observation_space, self.env.action_space)
        act_space = self.env.action_space
        self.low = getattr(act_space, "low", None)
        self.high = getattr(act_space, "high", None)

    def frame(self) -> np.ndarray:
        """The current rgb frame (H, W, 3) uint8; any rendering failure is a one-line RenderError."""
        try:
            frame = self.env.render()
        except Exception as exc:
            hint = _dependency_hint(exc) or (self.gl.hint() if self.gl else "")
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RenderError(
                f"cannot render {self.env_cfg.id} offscreen ({type(exc).__name__}: {first[:160]}); {hint}"
            ) from None
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise RenderError(
                f"{self.env_cfg.id} rendered {type(frame).__name__}, not an rgb image"
            )
        return frame

    def _check_gl(self) -> None:
        """Create and free a tiny MuJoCo GL context before Gymnasium builds its viewer.

        A viewer whose context fails half-way complains again from its destructor at exit; a
        failed probe here leaves nothing behind.
        """
        if not hasattr(self.env.unwrapped, "mujoco_renderer") or self.gl is None:
            return
        backend = os.environ.get("MUJOCO_GL", "").strip().lower()
        if not backend and not has_display():
            raise RenderError(f"cannot render {self.env_cfg.id} offscreen: {self.gl.hint()}")
        if backend not in ("egl", "osmesa"):
            return
        try:
            context = importlib.import_module(f"mujoco.{backend}").GLContext(8, 8)
            context.make_current()
            context.free()
        except Exception as exc:
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            raise RenderError(
                f"cannot render {self.env_cfg.id} offscreen ({type(exc).__name__}: {first}); {self.gl.hint()}"
            ) from None

    def check_render(self) -> tuple[int, int]:
        """Render one frame now (before any result is written); returns its (width, height)."""
        self._check_gl()
        self.env.reset(seed=0)
        frame = self.frame()
        return frame.shape[1], frame.shape[0]

    def run(
        self,
        act: Action,
        seeds: list[int],
        on_frame: Callable[[int, np.ndarray], None] | None = None,
        record_episodes: int | None = None,
        on_episode: Callable[[int, float, int, float | None], None] | None = None,
    ) -> EvalResult:
        """One episode per seed; frames of the first `record_episodes` (default all) go to
        `on_frame`; `on_episode(index, return, length, success or None)` hears of each episode
        as it ends."""
        result = EvalResult()
        for ep, seed in enumerate(seeds):
            record = on_frame is not None and (record_episodes is None or ep < record_episodes)
            obs, _ = self.env.reset(seed=int(seed))
            if hasattr(act, "reset"):
                act.reset()  # a recurrent policy starts every episode from its initial state
            if record:
                on_frame(ep, self.frame())
            total, length, done, info = 0.0, 0, False, {}
            while not done:
                action = act(obs_cast(obs, self.info))
                obs, reward, terminated, truncated, info = self.env.step(action)
                total += float(reward)
                length += 1
                done = bool(terminated or truncated)
                if record:
                    on_frame(ep, self.frame())
            result.returns.append(total)
            result.lengths.append(length)
            result.seeds.append(int(seed))
            success = float(info["is_success"]) if "is_success" in info else None
            if success is not None:
                result.successes.append(success)
            log = episode_log(info.get("log"))
            if log is not None:
                result.logs.append(log)
            if on_episode is not None:
                on_episode(ep, total, length, success)
        return result

    def close(self) -> None:
        # Frees the GL context now, while the GL library is still loaded (no errors at exit).
        self.env.close()


class _Recurrent:
    """An Action that carries a recurrent policy's state from step to step."""

    def __init__(self, step: Callable[[Obs, torch.Tensor], tuple[Any, torch.Tensor]]) -> None:
        self.step = step
        self.state: torch.Tensor | None = None

    def reset(self) -> None:
        self.state = None

    def __call__(self, obs: Obs) -> Any:
        action, self.state = self.step(obs, self.state)
        return action


def deterministic_action(net: InferenceNet) -> Action:
    """The deployed policy's action for one observation, as the env expects it."""
    device = net.action_low.device

    def as_env_action(action: torch.Tensor) -> Any:
        action = action.cpu().numpy()
        return int(action) if not net.is_gaussian else action

    def tensors(obs: Obs) -> Any:
        return map_obs(lambda x: torch.from_numpy(x).to(device), obs)

    if is_recurrent(net):

        def step(obs: Obs, state: torch.Tensor | None) -> tuple[Any, torch.Tensor]:
            if state is None:
                state = net.initial_state(1)[0]
            with torch.no_grad():
                action, state = net(tensors(obs), state)
            return as_env_action(action), state

        return _Recurrent(step)

    def act(obs: Obs) -> Any:
        with torch.no_grad():
            return as_env_action(net(tensors(obs)))

    return act


def stochastic_action(policy: Any, seed: int) -> Action:
    """Sample from the policy's distribution with its own generator (reproducible per seed)."""
    from embodied_ppo.modules.distributions import DiagGaussian

    gen = torch.Generator().manual_seed(seed)
    device = next(policy.parameters()).device
    low = policy.action_low.cpu().numpy()
    high = policy.action_high.cpu().numpy()

    def sample(dist: Any) -> Any:
        action = dist.sample(policy.sample_noise(1, torch.device("cpu"), gen).to(device))[0]
        if isinstance(dist, DiagGaussian):
            return np.clip(action.cpu().numpy(), low, high)  # as training envs clip
        return int(action)

    def batch(obs: Obs) -> Any:
        return map_obs(lambda x: torch.from_numpy(x).to(device).unsqueeze(0), obs)

    if policy.state_size:

        def step(obs: Obs, state: torch.Tensor | None) -> tuple[Any, torch.Tensor]:
            if state is None:
                state = policy.initial_state(1, device)
            with torch.no_grad():
                dist, _, state = policy.step(batch(obs), state)
                return sample(dist), state

        return _Recurrent(step)

    def act(obs: Obs) -> Any:
        with torch.no_grad():
            return sample(policy(batch(obs))[0])

    return act


# ------------------------------------------------------------------------------------ eval command
def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device: got {name!r} but no CUDA device is available; use cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"--device: got {name!r}, allowed: auto | cpu | cuda | cuda:N") from None


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory holding `checkpoint` (…/<run>/checkpoints/x.pt), if it is in one."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


# Keys `eval` may change: the conditions the policy is evaluated under, never the policy.
EVAL_OVERRIDABLE = ("env.kwargs", "env.max_episode_steps")


def _eval_key(key: str, flag: str) -> None:
    if not any(key == k or key.startswith(k + ".") for k in EVAL_OVERRIDABLE):
        raise UserError(
            f"{flag}{key}: eval can change only {' and '.join(k + '.*' if k == 'env.kwargs' else k for k in EVAL_OVERRIDABLE)} "
            "(the conditions of the episodes, not the policy)"
        )


def eval_configs(
    saved: dict[str, Any], overrides: list[str], sweeps: list[str]
) -> tuple[Config, list[tuple[str, Any, Config]]]:
    """The config the episodes run under (the run's, with `overrides`), and for each value of
    each `--sweep KEY=[v1, v2, ...]` (key, value, config): every one checked like a run's."""
    from embodied_ppo.config import apply_overrides, from_dict, parse_override, set_dotted

    for text in overrides:
        _eval_key(".".join(parse_override(text)[0]), "")
    data = apply_overrides(saved, overrides)
    cfg = from_dict(data)
    swept: list[tuple[str, Any, Config]] = []
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
    deterministic: bool = True,
    seed: int | None = None,
    device: str = "cpu",
    video: str | None = None,
    json_path: str | None = None,
    out: Any = None,
    overrides: list[str] | None = None,
    sweeps: list[str] | None = None,
) -> dict[str, Any]:
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
    """
    import sys

    out = out or sys.stdout
    if episodes < 1:
        raise UserError(f"--episodes: got {episodes}, expected an integer >= 1")
    if video is not None:
        configure_headless_gl()  # before anything imports mujoco
    from embodied_ppo.config import upgrade

    dev = _resolve_device(device)
    ckpt, state = read_checkpoint(source)
    if not isinstance(state.get("config"), dict):
        raise CheckpointError(f"{ckpt}: it holds no config")
    try:
        cfg, swept = eval_configs(upgrade(state["config"]), overrides or [], sweeps or [])
    except ConfigError as exc:
        if overrides or sweeps:
            raise
        raise CheckpointError(f"{ckpt}: its config cannot be read ({exc})") from None
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
        return deterministic_action(net) if deterministic else stochastic_action(policy, seed)

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
            line = f"episode {i + 1:>3}: return {ret:10.2f}  length {length:>6}"
            if success is not None:
                line += f"  success {'yes' if success else 'no'}"
            print(line, file=out, flush=True)

        on_frame = (lambda _ep, frame: writer.append(frame)) if writer is not None else None
        seeds = eval_seeds(seed, episodes)
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

    sweep = []
    for key, value, swept_cfg in swept:
        runner = EpisodeRunner(swept_cfg.env)
        try:
            swept_result = runner.run(actor(), seeds)
        finally:
            runner.close()
        sweep.append({"key": key, "value": value, **swept_result.summary()})
        print(f"{key}={value!r}: {_summary_line(swept_result, episodes)}", file=out, flush=True)

    from embodied_ppo import __version__

    summary = {
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


# ------------------------------------------------------------------------------------ training
def best_checkpoint_path(run_dir: Path) -> Path:
    return checkpoints_dir(run_dir) / "best.pt"


def read_best_return(run_dir: Path) -> float | None:
    """The evaluation return recorded in an existing best.pt (so a resumed run keeps its best)."""
    path = best_checkpoint_path(run_dir)
    if not path.is_file():
        return None
    try:
        value = read_checkpoint(path)[1]["eval"]["episodic_return"]
    except (CheckpointError, KeyError, TypeError):
        return None  # an unreadable best.pt is replaced by the next evaluation
    return float(value) if isinstance(value, (int, float)) else None


class PeriodicEvaluator:
    """Evaluation during training (trainer.eval_interval, eval_episodes, video_interval).

    Runs deterministic episodes on its own env every `eval_interval` iterations and after the last
    one, keeps the best policy as checkpoints/best.pt, and every `video_interval` evaluations
    records the first episode to videos/ and TensorBoard. The schedule depends on the iteration
    only, so a resumed run evaluates (and films) exactly where the uninterrupted one would.
    """

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        t = cfg.trainer
        assert t.eval_interval is not None
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.interval = t.eval_interval
        self.video_interval = t.video_interval
        self.seeds = eval_seeds(t.seed, t.eval_episodes)
        self.best = read_best_return(self.run_dir)
        self.runner = EpisodeRunner(cfg.env, render=self.video_interval is not None)
        if self.video_interval is not None:
            try:
                self.runner.check_render()  # a run that cannot film stops before it starts
            except RenderError as exc:
                self.runner.close()
                raise ConfigError(
                    f"trainer.video_interval: {exc}; or set trainer.video_interval=null"
                ) from None

    def due(self, iteration: int, num_iterations: int) -> bool:
        return iteration % self.interval == 0 or iteration == num_iterations

    def _films(self, iteration: int, num_iterations: int) -> bool:
        if self.video_interval is None:
            return False
        if iteration == num_iterations:
            return True
        return (
            iteration % self.interval == 0
            and (iteration // self.interval) % self.video_interval == 0
        )

    def evaluate(
        self,
        policy: ActorCritic,
        iteration: int,
        num_iterations: int,
        global_step: int,
        save_best: Callable[[dict[str, Any]], None],
        logger: MetricsLogger | None = None,
    ) -> dict[str, float]:
        """Evaluate `policy` now; returns the eval/ scalars to log.

        A new best evaluation calls `save_best(evaluation)` (the trainer writes best.pt with
        it); a filmed evaluation also goes to `logger`'s TensorBoard.
        """
        start = time.perf_counter()
        net = inference_net(policy).to("cpu")  # a frozen copy: one observation is fastest on CPU
        frames: list[np.ndarray] = []
        film = self._films(iteration, num_iterations)
        result = self.runner.run(
            deterministic_action(net),
            self.seeds,
            on_frame=(lambda _ep, f: frames.append(f)) if film else None,
            record_episodes=1,
        )
        scalars = {
            "eval/episodic_return": result.mean_return,
            "eval/episodic_return_std": result.std_return,
            "eval/episodic_length": result.mean_length,
        }
        if result.success_rate is not None:
            scalars["eval/success_rate"] = result.success_rate
        for key, value in result.log_means().items():  # the env's own metrics and reward terms
            scalars[f"eval/{key}"] = value
        if self.best is None or result.mean_return > self.best:
            self.best = result.mean_return
            save_best(
                {
                    "episodic_return": result.mean_return,
                    "episodic_return_std": result.std_return,
                    "episodic_length": result.mean_length,
                    "episodes": len(result.returns),
                    "global_step": global_step,
                }
            )
        scalars["eval/best_return"] = self.best
        if frames:
            mp4 = self.run_dir / "videos" / f"eval-step{global_step}.mp4"
            video = VideoWriter(mp4, self.runner.fps)
            try:
                for f in frames:
                    video.append(f)
                video.close()
            except BaseException:
                video.abort()
                raise
            if logger is not None:
                logger.add_video("eval/video", frames, self.runner.fps, global_step, mp4)
        scalars["eval/time"] = time.perf_counter() - start
        return scalars

    def close(self) -> None:
        self.runner.close()
