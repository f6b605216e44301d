"""Evaluation: the eval command, videos, headless rendering, and evaluation during training."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import tiny_config
from support import ROOT

from embodied_ppo.app.cli import main
from embodied_ppo.app.deploy import load_policy
from embodied_ppo.app.evaluate import evaluate_command
from embodied_ppo.core.errors import ConfigError, RenderError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.io.render import probe_backend
from embodied_ppo.runner.episodes import eval_seeds
from embodied_ppo.runner.trainer import Trainer

REPO = ROOT


def train_tiny(run_dir: Path, env_id: str = "CartPole-v1", **trainer) -> Trainer:
    cfg = tiny_config(env_id, trainer={"total_steps": 64, **trainer})
    t = Trainer(cfg, run_dir)
    t.train()
    return t


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cartpole")
    train_tiny(run_dir)
    return run_dir


def read_video(path: Path) -> list[np.ndarray]:
    import imageio.v2 as imageio

    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        return [frame for frame in reader]
    finally:
        reader.close()


def difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two frames' pixel values."""
    return float(np.abs(a.astype(np.int16) - b).mean())


def assert_film(frames: list[np.ndarray], count: int, shape: tuple, lit) -> None:
    """`count` frames of `shape`, every one a rendered picture (`lit`: not black, not blank),
    and a scene that moves: no frame is the picture of the frame 5 steps later (one frame
    repeated differs from itself by < 0.001 after the codec; the scenes here by > 0.05)."""
    assert len(frames) == count
    for i, frame in enumerate(frames):
        assert frame.shape == shape and lit(frame), f"frame {i} of {count}"
    for i in range(len(frames) - 5):
        assert difference(frames[i], frames[i + 5]) > 0.02, f"frames {i} and {i + 5} are alike"


def cartpole_lit(frame: np.ndarray) -> bool:
    """CartPole's picture: a white background (not black) with the cart and pole (not blank)."""
    return frame.mean() > 100 and frame.std() > 5


def replayed_frames(run_dir: Path, seeds: list[int]) -> list[np.ndarray]:
    """CartPole's own renders of the deployed policy's episodes, in a plain gymnasium loop: the
    reset's frame and one per step."""
    policy = load_policy(run_dir)
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    frames = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        frames.append(env.render())
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(int(policy(obs)))
            frames.append(env.render())
            done = terminated or truncated
    env.close()
    return frames


def assert_same_pictures(decoded: list[np.ndarray], rendered: list[np.ndarray]) -> None:
    """Each decoded frame is its rendered frame: the codec moves a pixel far (> 64 in a channel)
    at no more than 1e-4 of the pixels; the cart one step on, at more (up to 5e-4 five on)."""
    assert len(decoded) == len(rendered)
    for i, (a, b) in enumerate(zip(decoded, rendered, strict=True)):
        far = (np.abs(a.astype(np.int16) - b).max(axis=-1) > 64).mean()
        assert far < 3e-4, f"frame {i}: {far:.2e} of its pixels are not the rendered frame's"


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def test_eval_prints_and_writes_eval_json(cartpole_run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(cartpole_run), "--episodes", "3", "--seed", "5"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    result = json.loads((cartpole_run / "eval.json").read_text())
    assert result["episodes"] == 3 and result["deterministic"] is True and result["seed"] == 5
    assert len(result["returns"]) == len(result["lengths"]) == 3
    assert result["mean_return"] == pytest.approx(np.mean(result["returns"]))
    assert result["std_return"] == pytest.approx(np.std(result["returns"]))
    assert result["episode_seeds"] == eval_seeds(5, 3)
    assert result["video"] is None
    for i, ret in enumerate(result["returns"]):
        assert f"episode {i + 1:>3}: return {ret:10.2f}" in out
    assert f"mean return {result['mean_return']:.2f} +- {result['std_return']:.2f}" in out


def test_eval_equals_the_deployed_policy_in_a_plain_gym_loop(cartpole_run, tmp_path):
    """`eval` measures exactly what load_policy gives a robot stack."""
    summary = evaluate_command(
        str(cartpole_run),
        episodes=3,
        seed=11,
        json_path=str(tmp_path / "e.json"),
        out=io.StringIO(),
    )
    policy = load_policy(cartpole_run)
    env = gym.make("CartPole-v1")
    returns = []
    for seed in eval_seeds(11, 3):
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(policy(obs)))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    assert summary["returns"] == returns


def test_eval_is_reproducible_with_a_fixed_seed(cartpole_run, tmp_path):
    def run(seed, deterministic=True):
        return evaluate_command(
            str(cartpole_run),
            episodes=4,
            seed=seed,
            deterministic=deterministic,
            json_path=str(tmp_path / "e.json"),
            out=io.StringIO(),
        )

    a, b = run(3), run(3)
    assert a["returns"] == b["returns"] and a["lengths"] == b["lengths"]
    assert run(4)["episode_seeds"] != a["episode_seeds"]
    s1, s2 = run(3, deterministic=False), run(3, deterministic=False)
    assert (
        s1["returns"] == s2["returns"]
    )  # stochastic too: the sampler has its own seeded generator
    # Default seed: the run's trainer.seed, so `eval best.pt` repeats training's evaluation episodes.
    default = evaluate_command(
        str(cartpole_run), episodes=2, json_path=str(tmp_path / "d.json"), out=io.StringIO()
    )
    assert default["seed"] == 0


def test_eval_video_has_one_frame_per_step_plus_resets(cartpole_run, tmp_path):
    pytest.importorskip("pygame")
    pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "out" / "cartpole.mp4"
    summary = evaluate_command(
        str(cartpole_run),
        episodes=2,
        video=str(video),
        json_path=str(tmp_path / "e.json"),
        out=io.StringIO(),
    )
    frames = read_video(video)
    # The reset's frame and one per step, of every episode; CartPole renders 600x400.
    assert_film(frames, sum(summary["lengths"]) + 2, (400, 600, 3), cartpole_lit)
    assert summary["video_frames"] == len(frames) and summary["video_size"] == [600, 400]
    # Every frame is the one CartPole renders at that step of the deployed policy's episodes.
    assert_same_pictures(frames, replayed_frames(cartpole_run, summary["episode_seeds"]))
    assert not list(video.parent.glob(".*partial*"))


def test_eval_video_default_path_is_in_the_run_dir(cartpole_run, capsys):
    pytest.importorskip("pygame")
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["eval", str(cartpole_run / "checkpoints" / "latest.pt"), "--episodes", "1", "--video"]
        )
    assert exit_info.value.code == 0
    videos = list((cartpole_run / "videos").glob("eval-latest-step64-det-seed0.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0
    assert json.loads((cartpole_run / "eval.json").read_text())["video"] == str(videos[0])


def test_video_without_pygame_is_a_one_line_error(cartpole_run, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pygame", None)  # as if pygame were not installed
    before = snapshot(cartpole_run)
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(cartpole_run), "--episodes", "1", "--video"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("embodied-ppo: error: ") and err.count("\n") == 1
    assert "pip install pygame" in err
    assert snapshot(cartpole_run) == before


def test_bad_eval_arguments(cartpole_run, capsys):
    for args, fragment in [
        (["--episodes", "0"], "--episodes: got 0"),
        (
            ["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"],
            "--device",
        ),
        (["--deterministic", "--stochastic"], "not allowed with argument"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["eval", str(cartpole_run), *args])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("embodied-ppo: error: ") and fragment in err and err.count("\n") == 1


# ------------------------------------------------------------------------------ MuJoCo / headless
def _headless_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")
    }
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def mujoco_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("invpend")
    train_tiny(run_dir, "InvertedPendulum-v5")
    return run_dir


def test_mujoco_video_headless_picks_a_backend_and_exits_cleanly(mujoco_run, tmp_path):
    """No MUJOCO_GL, no display: EGL (or OSMesa) is chosen, the mp4 is written, no GL noise at exit."""
    if not (probe_backend("egl") or probe_backend("osmesa")):
        pytest.skip("no EGL or OSMesa renderer on this machine")
    video = tmp_path / "pendulum.mp4"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "embodied_ppo",
            "eval",
            str(mujoco_run),
            "--episodes",
            "2",
            "--video",
            str(video),
            "--json",
            str(tmp_path / "e.json"),
        ],
        capture_output=True,
        text=True,
        env=_headless_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no EGL/OpenGL tracebacks or "Exception ignored" at interpreter exit
    summary = json.loads((tmp_path / "e.json").read_text())
    frames = read_video(video)
    # Every frame a rendered scene (the pendulum lit on a dark ground: not blank), moving.
    assert_film(frames, sum(summary["lengths"]) + 2, (480, 480, 3), lambda f: f.std() > 5)
    assert summary["video_frames"] == len(frames)


def test_mujoco_video_when_no_renderer_can_start(mujoco_run):
    """A GL platform that cannot start is one line naming what to install or set; nothing written."""
    before = snapshot(mujoco_run)
    # EGL requested while PyOpenGL is pinned to another platform: fails on every machine.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "embodied_ppo",
            "eval",
            str(mujoco_run),
            "--episodes",
            "1",
            "--video",
        ],
        capture_output=True,
        text=True,
        env=_headless_env(MUJOCO_GL="egl", PYOPENGL_PLATFORM="osmesa"),
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("embodied-ppo: error: cannot render InvertedPendulum-v5")
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "MUJOCO_GL=egl" in proc.stderr and "libosmesa6" in proc.stderr
    assert snapshot(mujoco_run) == before


# ------------------------------------------------------------------------------ during training
def eval_records(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "eval/episodic_return" in r]


def test_evaluation_during_training(tmp_path):
    pytest.importorskip("pygame")
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        "CartPole-v1",
        trainer={
            "total_steps": 160,
            "eval_interval": 2,
            "eval_episodes": 2,
            "video_interval": 2,
            "log_interval": 100,
        },
    )
    trainer = Trainer(cfg, run_dir)
    trainer.train()
    evals = eval_records(run_dir)
    # 5 iterations of 32 steps: evaluations after iterations 2 and 4 and after the last one, logged
    # even though log_interval (100) would skip those iterations.
    assert [r["iteration"] for r in evals] == [2, 4, 5]
    for r in evals:
        assert (
            r["eval/episodic_length"] >= 1
            and r["eval/episodic_return"] == r["eval/episodic_length"]
        )
    best = max(r["eval/episodic_return"] for r in evals)
    assert evals[-1]["eval/best_return"] == best

    state = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    assert state["eval"]["episodic_return"] == best
    best_step = next(r["global_step"] for r in evals if r["eval/episodic_return"] == best)
    assert state["global_step"] == best_step
    # Evaluating best.pt with the run's seed and episode count repeats the episodes that chose it.
    again = evaluate_command(
        str(run_dir / "checkpoints" / "best.pt"),
        episodes=2,
        json_path=str(tmp_path / "e.json"),
        out=io.StringIO(),
    )
    assert again["mean_return"] == best

    # Videos every 2nd evaluation (iteration 4) and after the last one; first episode only.
    videos = sorted(p.name for p in (run_dir / "videos").iterdir())
    assert videos == ["eval-step128.mp4", "eval-step160.mp4"]
    # The first evaluation episode is filmed, every frame: after the last iteration, the
    # episode that evaluating the final policy with the run's seed repeats.
    final = evaluate_command(str(run_dir), 2, json_path=str(tmp_path / "f.json"), out=io.StringIO())
    frames = read_video(run_dir / "videos" / "eval-step160.mp4")
    assert_film(frames, final["lengths"][0] + 1, (400, 600, 3), cartpole_lit)
    assert_same_pictures(frames, replayed_frames(run_dir, final["episode_seeds"][:1]))
    earlier = read_video(run_dir / "videos" / "eval-step128.mp4")
    assert_film(earlier, len(earlier), (400, 600, 3), cartpole_lit)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    assert "eval/episodic_return" in acc.Tags()["scalars"]
    images = acc.Images("eval/video")
    assert [im.step for im in images] == [128, 160]
    assert images[0].encoded_image_string[:6] in (b"GIF87a", b"GIF89a")


def test_evaluation_does_not_change_training(tmp_path):
    """Evaluation draws from no training RNG (Rule 6): same final weights with and without it."""
    plain = train_tiny(tmp_path / "plain", "Pendulum-v1", total_steps=96)
    evaluated = train_tiny(
        tmp_path / "eval", "Pendulum-v1", total_steps=96, eval_interval=1, eval_episodes=1
    )
    assert len(eval_records(tmp_path / "eval")) == 3
    for key, value in plain.policy.state_dict().items():
        assert torch.equal(value, evaluated.policy.state_dict()[key]), key


def test_resumed_run_keeps_its_best(tmp_path):
    from embodied_ppo.runner.evaluator import read_best_return

    run_dir = tmp_path / "run"
    train_tiny(run_dir, total_steps=64, eval_interval=1, eval_episodes=1)
    best = read_best_return(run_dir)
    assert best is not None and best == max(
        r["eval/episodic_return"] for r in eval_records(run_dir)
    )


@pytest.mark.parametrize(
    "trainer, fragment",
    [
        (
            {"eval_interval": 0},
            "trainer.eval_interval: got 0, expected null (no evaluation) or an integer >= 1",
        ),
        (
            {"eval_interval": 1, "eval_episodes": 0},
            "trainer.eval_episodes: got 0, expected an integer >= 1",
        ),
        ({"eval_interval": 1, "video_interval": 0}, "trainer.video_interval: got 0"),
        ({"video_interval": 2}, "trainer.video_interval: got 2 but trainer.eval_interval is null"),
        (
            {"eval_interval": "often"},
            "trainer.eval_interval: got 'often', expected an integer or null",
        ),
    ],
)
def test_eval_config_is_validated(trainer, fragment):
    with pytest.raises(ConfigError) as info:
        tiny_config(trainer=trainer)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_training_video_that_cannot_render_stops_before_training(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pygame", None)
    cfg = tiny_config(trainer={"eval_interval": 1, "video_interval": 1})
    with pytest.raises(
        ConfigError, match=r"^trainer.video_interval: .*pygame.*trainer.video_interval=null"
    ):
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_render_error_is_a_user_error():
    from embodied_ppo.core.errors import UserError

    assert issubclass(RenderError, UserError)


@pytest.mark.parametrize(
    "env, works, expected",
    [
        ({"MUJOCO_GL": "osmesa"}, {"egl"}, "osmesa"),  # an explicit choice is always respected
        ({"DISPLAY": ":0"}, {"egl"}, None),  # a display: MuJoCo's default (GLFW)
        ({}, {"egl", "osmesa"}, "egl"),  # headless: EGL first
        ({}, {"osmesa"}, "osmesa"),  # then OSMesa where EGL is missing
        ({}, set(), None),  # neither: nothing set, the hint says what to install
    ],
)
def test_headless_backend_choice(monkeypatch, env, works, expected):
    from embodied_ppo.io import render

    for name in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(render, "_choice", None)
    monkeypatch.setattr(render.sys, "platform", "linux")
    monkeypatch.setattr(render, "probe_backend", lambda backend: backend in works)
    monkeypatch.setattr(render, "egl_device_initializes", lambda: "egl" in works)
    monkeypatch.delitem(sys.modules, "OpenGL", raising=False)
    choice = render.configure_headless_gl()
    assert choice.backend == expected
    assert os.environ.get("MUJOCO_GL") == expected
    if expected in ("egl", "osmesa"):
        assert os.environ["PYOPENGL_PLATFORM"] == expected
    if not env:
        assert os.environ["SDL_VIDEODRIVER"] == "dummy"
    if expected is None and not env:
        assert "apt-get install libegl1" in choice.hint() and "libosmesa6" in choice.hint()


# ------------------------------------------------------------------------------ episode logs
@pytest.fixture(scope="module")
def log_run(tmp_path_factory):
    from toy_envs import register_log

    run_dir = tmp_path_factory.mktemp("logs")
    cfg = tiny_config(register_log(), env={"kwargs": {"fall_at": 3}}, trainer={"total_steps": 64})
    Trainer(cfg, run_dir).train()
    return run_dir


def test_env_episode_logs_are_logged_by_training_and_written_by_eval(log_run, capsys):
    records = [json.loads(line) for line in (log_run / "metrics.jsonl").read_text().splitlines()]
    # Every episode falls at its third step: the means over each iteration's episodes.
    assert all(r["rewards/alive"] == 3.0 and r["metrics/fall_rate"] == 1.0 for r in records)
    assert all(r["episode/steps"] == 3.0 for r in records)  # a key without a section
    summary = evaluate_command(str(log_run), episodes=2, out=io.StringIO())
    assert summary["fall_rate"] == 1.0 and summary["mean_length"] == 3.0
    assert summary["log"] == {"rewards/alive": 3.0, "metrics/fall_rate": 1.0, "steps": 3.0}
    assert len(summary["episode_logs"]) == 2
    saved = json.loads((log_run / "eval.json").read_text())
    assert saved["fall_rate"] == 1.0


def test_eval_under_other_env_kwargs_and_a_sweep(log_run, tmp_path):
    out = io.StringIO()
    summary = evaluate_command(
        str(log_run),
        episodes=2,
        out=out,
        overrides=["env.kwargs.fall_at=2"],
        sweeps=["env.kwargs.fall_at=[null, 4]"],
        json_path=str(tmp_path / "e.json"),
    )
    assert summary["mean_length"] == 2.0 and summary["overrides"] == ["env.kwargs.fall_at=2"]
    # Each swept value runs the same episodes under it; the time limit (5) cuts what never falls.
    assert [(s["value"], s["fall_rate"], s["mean_length"]) for s in summary["sweep"]] == [
        (None, 0.0, 5.0),
        (4, 1.0, 4.0),
    ]
    assert "env.kwargs.fall_at=4: mean return 4.00" in out.getvalue()
    assert json.loads((tmp_path / "e.json").read_text())["sweep"] == summary["sweep"]


def test_eval_runs_episodes_on_one_torch_thread_and_restores_the_count(log_run, monkeypatch):
    from embodied_ppo.runner.episodes import EpisodeRunner

    seen = []
    run = EpisodeRunner.run

    def recording_run(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return run(self, *args, **kwargs)

    monkeypatch.setattr(EpisodeRunner, "run", recording_run)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        evaluate_command(
            str(log_run), episodes=1, out=io.StringIO(), sweeps=["env.kwargs.fall_at=[4]"]
        )
        assert seen == [1, 1]  # the main episodes and the swept ones
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["trainer.seed=3"],
            "trainer.seed: eval can change only env.kwargs.* and env.max_episode_steps",
        ),
        (["--sweep", "env.kwargs.fall_at=3"], "--sweep env.kwargs.fall_at: expected a list"),
        (
            ["--sweep", "model.hidden_sizes=[[8]]"],
            "--sweep model.hidden_sizes: eval can change only",
        ),
        (["env.max_episode_steps=0"], "env.max_episode_steps: got 0"),
    ],
)
def test_bad_eval_overrides_are_one_line_errors(log_run, capsys, args, fragment):
    before = snapshot(log_run)
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(log_run), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("embodied-ppo: error: ") and fragment in err and err.count("\n") == 1
    assert snapshot(log_run) == before
