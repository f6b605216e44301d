"""The Python API (embodied_ppo.train / evaluate), the run lock, resume from damage,
keep_checkpoints, evaluation lines, and W&B logging (offline)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, tiny_config
from support import ROOT

import embodied_ppo
from embodied_ppo.app import cli
from embodied_ppo.core.errors import CheckpointError, UserError
from embodied_ppo.io.checkpoint import load_checkpoint


def quiet(**kw):
    return {"progress": io.StringIO(), **kw}


def test_import_stays_free_of_torch_until_used():
    # Registering the project's env ids imports Gymnasium's registry, nothing heavier.
    code = (
        "import sys, embodied_ppo; assert 'torch' not in sys.modules; "
        "embodied_ppo.load_policy; assert 'mujoco' not in sys.modules; "
        "assert 'tensorboard' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_api_is_discoverable_and_every_name_resolves():
    names = [n for n in dir(embodied_ppo) if not n.startswith("_")]
    assert {"train", "evaluate", "export", "load_policy", "plot", "TrainResult", "Policy"} <= set(
        names
    )
    for name in names:
        value = getattr(embodied_ppo, name)
        assert value.__doc__, name  # every public name says what it is
    assert (
        embodied_ppo.TrainResult.__doc__ and "run_dir" in embodied_ppo.TrainResult.__annotations__
    )


def test_the_projects_env_ids_work_in_a_users_code_after_import_embodied_ppo():
    code = (
        "import gymnasium as gym, embodied_ppo\n"
        "env = gym.make('EmbodiedPPO/Reach-v0')\n"
        "obs, _ = env.reset(seed=0)\n"
        "print(obs.shape)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(15,)"


def test_export_and_plot_from_python(tmp_path):
    run = tmp_path / "run"
    embodied_ppo.train(tiny_config(), TINY, run, **quiet())
    result = embodied_ppo.export(run, "torchscript", tmp_path / "policy.pt")
    assert isinstance(result, embodied_ppo.ExportResult)
    assert result.path == tmp_path / "policy.pt" and result.path.is_file()
    assert json.loads(result.metadata_path.read_text())["format"] == "torchscript"
    scripted = torch.jit.load(str(result.path))
    assert scripted(torch.zeros(4)).shape == ()  # CartPole: one discrete action
    png = embodied_ppo.plot([run], tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_writes_the_run_directory_the_command_resumes_bitwise(tmp_path, capsys):
    cfg = tiny_config("Pendulum-v1", trainer={"total_steps": 128, "checkpoint_interval": 1})
    straight = embodied_ppo.train(cfg, run_dir=tmp_path / "straight", **quiet())
    assert straight.global_step == 128 and not straight.stopped
    assert (tmp_path / "straight" / "config.yaml").is_file()
    assert "losses/approx_kl" in straight.metrics

    half = embodied_ppo.train(cfg, ["trainer.total_steps=64"], tmp_path / "half", **quiet())
    assert half.global_step == 64
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--resume", str(tmp_path / "half"), "trainer.total_steps=128"])
    assert info.value.code == 0
    a, b = load_checkpoint(tmp_path / "straight"), load_checkpoint(tmp_path / "half")
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k


def test_config_may_be_a_yaml_path_a_dict_or_a_config(tmp_path):
    data = {"env": {"id": "CartPole-v1", "num_envs": 2}, "trainer": {"total_steps": 32}}
    for i, config in enumerate([str(ROOT / "configs/cartpole.yaml"), data, tiny_config()]):
        result = embodied_ppo.train(
            config, TINY + ["trainer.total_steps=32"], tmp_path / str(i), **quiet()
        )
        assert result.global_step >= 32 and result.run_dir == tmp_path / str(i)
    with pytest.raises(UserError, match="expected a YAML path, dict or Config"):
        embodied_ppo.train(3.5, run_dir=tmp_path / "x")


def test_callbacks_see_every_iteration_and_can_stop_gracefully(tmp_path):
    seen = []

    def watch(run, metrics):
        seen.append((run.global_step, run.iteration, metrics["charts/SPS"] > 0))
        return run.iteration == 2  # stop after the second iteration

    result = embodied_ppo.train(tiny_config(trainer={"total_steps": 320}), run_dir=tmp_path,
                                callbacks=[watch], **quiet())  # fmt: skip
    assert seen == [(32, 1, True), (64, 2, True)]
    assert result.stopped and result.global_step == 64
    assert load_checkpoint(tmp_path)["global_step"] == 64  # a checkpoint of where it stopped


def test_callbacks_read_the_mean_return_of_the_last_100_episodes(tmp_path):
    """charts/episodic_return_100 is the mean of the last 100 episodes that ended, over
    iterations: checked against a wrapper's own record of every episode's return."""
    import toy_envs

    toy_envs.RETURNS.clear()
    seen = []

    def watch(run, metrics):
        seen.append((metrics["charts/episodic_return_100"], list(toy_envs.RETURNS)))
        # One iteration's mean (a few episodes) is not the measure: it swings past the window's.
        return metrics["charts/episodic_return_100"] >= 1e9

    config = tiny_config(
        toy_envs.register(),
        env={
            "kwargs": {"terminate_at": 3},
            "wrappers": [{"name": "toy_envs:EpisodeReturns"}],
            "normalize_obs": False,  # no warm-up rollout, whose episodes are not logged
        },
        trainer={"total_steps": 32 * 15},
    )
    result = embodied_ppo.train(config, run_dir=tmp_path, callbacks=[watch], **quiet())
    assert len(seen) == 15 and len(toy_envs.RETURNS) > 100  # the window fills, then slides
    for logged, returns in seen:
        assert logged == pytest.approx(np.mean(returns[-100:]), abs=1e-9)
    assert result.metrics["charts/episodic_return_100"] == seen[-1][0]
    assert seen[-1][0] != pytest.approx(np.mean(toy_envs.RETURNS))  # the last 100, not all
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["charts/episodic_return_100"] for r in records] == [m for m, _ in seen]


def test_evaluate_from_python(tmp_path):
    embodied_ppo.train(tiny_config(), run_dir=tmp_path, **quiet())
    summary = embodied_ppo.evaluate(tmp_path, episodes=3, seed=5)
    assert len(summary["returns"]) == 3 and summary["seed"] == 5
    assert json.loads((tmp_path / "eval.json").read_text())["mean_return"] == summary["mean_return"]


# ------------------------------------------------------------------------------- the run lock
LONG = [
    "env.num_envs=2", "model.hidden_sizes=[16]", "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=16", "algorithm.update_epochs=2", "trainer.total_steps=100000000",
    "trainer.device=cpu", "trainer.compile=false", "trainer.checkpoint_interval=2",
]  # fmt: skip


def start_training(run: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "embodied_ppo", "train", "configs/cartpole.yaml", *LONG,
         f"trainer.run_dir={run}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    for _ in range(1200):
        if (run / "checkpoints" / "latest.pt").exists():
            return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


def test_a_second_writer_is_refused_and_a_dead_writers_lock_taken_over(tmp_path, capsys):
    run = tmp_path / "run"
    first = start_training(run)
    try:
        config_before = (run / "config.yaml").read_text()
        with pytest.raises(SystemExit) as info:
            cli.main(["train", "--resume", str(run), "trainer.total_steps=64"])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"this run is being trained by process {first.pid}" in err[0]
        assert (run / "config.yaml").read_text() == config_before  # nothing touched
        with pytest.raises(UserError, match=f"process {first.pid}"):
            embodied_ppo.train(resume=run, progress=io.StringIO())
    finally:
        first.send_signal(signal.SIGKILL)  # killed: it cannot release anything itself
        first.communicate()
    step = load_checkpoint(run)["global_step"]
    result = embodied_ppo.train(
        resume=run, overrides=[f"trainer.total_steps={step + 32}"], progress=io.StringIO()
    )
    assert result.global_step == step + 32  # the stale lock was taken over


# --------------------------------------------------------------------------- resume from damage
def test_resume_offers_and_uses_the_newest_intact_checkpoint(tmp_path, capsys):
    cfg = tiny_config(trainer={"total_steps": 96, "checkpoint_interval": 1})
    embodied_ppo.train(cfg, run_dir=tmp_path, **quiet())
    latest = tmp_path / "checkpoints" / "latest.pt"
    latest.unlink()  # (a hard link of ckpt_96.pt: damage it alone)
    (tmp_path / "checkpoints" / "ckpt_96.pt").write_bytes(b"torn")
    latest.write_bytes(b"torn")
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--resume", str(tmp_path), "trainer.total_steps=128"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    intact = tmp_path / "checkpoints" / "ckpt_64.pt"
    assert "not a readable checkpoint" in err and f"the newest intact one is {intact}" in err
    assert "--use-intact" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--resume", str(tmp_path), "--use-intact", "trainer.total_steps=128"])
    assert info.value.code == 0
    assert f"resuming {tmp_path} at step 64" in capsys.readouterr().out
    assert load_checkpoint(tmp_path)["global_step"] == 128


def test_resume_accepts_a_checkpoint_path(tmp_path, capsys):
    cfg = tiny_config(trainer={"total_steps": 96, "checkpoint_interval": 1})
    embodied_ppo.train(cfg, run_dir=tmp_path, **quiet())
    ckpt = tmp_path / "checkpoints" / "ckpt_32.pt"
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--resume", str(ckpt), "trainer.total_steps=64"])
    assert info.value.code == 0
    assert f"resuming {tmp_path} at step 32" in capsys.readouterr().out
    metrics = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["global_step"] for x in metrics] == [32, 64]  # logged once each
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        embodied_ppo.train(resume=tmp_path / "checkpoints" / "nope.pt", progress=io.StringIO())


# ---------------------------------------------------------------------- checkpoints, eval lines
def test_keep_checkpoints_keeps_the_newest_and_best(tmp_path):
    cfg = tiny_config(
        trainer={"total_steps": 160, "checkpoint_interval": 1, "keep_checkpoints": 2,
                 "eval_interval": 2, "eval_episodes": 1}
    )  # fmt: skip
    out = io.StringIO()
    embodied_ppo.train(cfg, run_dir=tmp_path, progress=out)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["best.pt", "ckpt_128.pt", "ckpt_160.pt", "latest.pt"]
    # Evaluations print a line each (every 2 iterations and after the last).
    lines = [x for x in out.getvalue().splitlines() if x.startswith("eval at step")]
    assert [x.split(":")[0] for x in lines] == [f"eval at step {s}" for s in (64, 128, 160)]
    assert "return" in lines[0] and "best" in lines[0]


def test_a_non_finite_observation_is_an_error_unless_allowed(tmp_path):
    from embodied_ppo.core.errors import ObservationError

    embodied_ppo.train(tiny_config("Pendulum-v1"), run_dir=tmp_path, **quiet())
    policy = embodied_ppo.load_policy(tmp_path)
    bad = np.array([np.nan, 0.0, 0.0], dtype=np.float32)
    with pytest.raises(ObservationError, match="contains NaN or Inf"):
        policy(bad)
    with pytest.raises(ObservationError, match="contains NaN or Inf"):
        policy(torch.tensor([[0.0, np.inf, 0.0]]))
    lenient = embodied_ppo.load_policy(tmp_path, check_finite=False)
    assert np.isnan(lenient(bad)).all()


# ------------------------------------------------------------------------------------- W&B
def test_wandb_offline_gets_the_scalars_and_videos(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged: list[tuple[int, dict]] = []
    real_init = wandb.init

    def init(*args, **kwargs):
        run = real_init(*args, **kwargs)
        real_log = run.log

        def log(data, step=None, **kw):
            logged.append((step, dict(data)))
            return real_log(data, step=step, **kw)

        run.log = log
        return run

    monkeypatch.setattr(wandb, "init", init)
    cfg = tiny_config(
        "CartPole-v1",
        trainer={"total_steps": 64, "eval_interval": 2, "eval_episodes": 1, "video_interval": 1,
                 "wandb": {"project": "embodied-ppo-tests", "mode": "offline"}},
    )  # fmt: skip
    embodied_ppo.train(cfg, run_dir=tmp_path, **quiet())
    assert list((tmp_path / "wandb").glob("offline-run-*"))  # W&B's own offline record
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scalars = [(s, d) for s, d in logged if "eval/video" not in d]
    assert [s for s, _ in scalars] == [r["global_step"] for r in records]
    for (_, data), record in zip(scalars, records, strict=True):
        assert data == {k: v for k, v in record.items() if "/" in k and v is not None}
    videos = [(s, d["eval/video"]) for s, d in logged if "eval/video" in d]
    assert [s for s, _ in videos] == [64] and isinstance(videos[0][1], wandb.Video)
    run_id = (tmp_path / "wandb_id").read_text().strip()
    assert run_id in next((tmp_path / "wandb").glob("offline-run-*")).name


SECOND_CALL = """
import json, sys, torch
import embodied_ppo
out = []
for i, threads in enumerate([2, 1]):  # what a caller may change between runs
    torch.set_num_threads(threads)
    embodied_ppo.train("configs/hopper.yaml", overrides=sys.argv[2:], run_dir=f"{sys.argv[1]}/{i}")
    assert torch.get_num_threads() == threads  # the caller's setting is back
"""


def _learned(run: Path) -> list[dict]:
    """A run's logged scalars without the ones that measure time."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timed = ("time", "SPS", "_time")
    return [{k: v for k, v in r.items() if not any(t in k for t in timed)} for r in rows]


def test_a_second_run_in_one_process_is_the_first_and_the_cli_run(tmp_path):
    """Nothing of a run outlives it in the process: a second embodied_ppo.train() with the same
    config, seed and a caller's other thread count logs what the first and the CLI log, bit for
    bit."""
    args = ["trainer.total_steps=4096", "trainer.eval_interval=null", "trainer.seed=3"]
    subprocess.run([sys.executable, "-c", SECOND_CALL, str(tmp_path), *args], cwd=ROOT,
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    subprocess.run([sys.executable, "-m", "embodied_ppo", "train", "configs/hopper.yaml", *args,
                    f"trainer.run_dir={tmp_path / 'cli'}"], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    first, second, cli = (_learned(tmp_path / name) for name in ("0", "1", "cli"))
    assert len(first) == 2 and first == second == cli
