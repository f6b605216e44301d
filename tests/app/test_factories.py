"""An environment factory wherever the Python API takes an id: trained, resumed, evaluated and
exported from Python; the run records how to make it again (`env.entry_point`), the command line
makes it from there or says exactly what to pass; bad values are one line."""

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
import toy_envs
import yaml
from support import ROOT

import embodied_ppo
from embodied_ppo.core.errors import ConfigError, UserError

TINY = [
    "env.num_envs=2",
    "model.hidden_sizes=[16]",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=16",
    "algorithm.update_epochs=1",
    "trainer.total_steps=64",
    "trainer.device=cpu",
    "trainer.compile=false",
]
TESTS = Path(__file__).resolve().parents[1]


def quiet() -> dict:
    return {"progress": io.StringIO()}


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The command in a fresh process, which knows only what it imports (toy_envs: on the
    path, as a user's module is)."""
    env = {**os.environ, "PYTHONPATH": str(TESTS), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "embodied_ppo", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )  # fmt: skip


def entry(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())["env"]


def test_an_importable_factory_is_recorded_and_made_again_by_the_command_line(tmp_path):
    run = tmp_path / "run"
    result = embodied_ppo.train(
        "configs/cartpole.yaml", TINY, run, env=toy_envs.make_counting, **quiet()
    )
    assert result.global_step == 64
    assert entry(run)["id"] == "make_counting"
    assert entry(run)["entry_point"] == "toy_envs:make_counting"
    # A fresh process imports the factory from its entry point: eval, export and resume work.
    out = cli("eval", str(run), "--episodes", "2", "--json", str(tmp_path / "e.json"))
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "e.json").read_text())
    assert summary["env_id"] == "make_counting" and summary["lengths"] == [8, 8]
    assert cli("export", str(run)).returncode == 0
    out = cli("train", "--resume", str(run), "--more", "32")
    assert out.returncode == 0, out.stderr
    assert "to 96 steps" in out.stdout


def test_a_lambda_trains_resumes_evaluates_and_exports_from_python(tmp_path):
    run = tmp_path / "run"

    def factory():
        return gym.wrappers.TimeLimit(toy_envs.CountingEnv(), 10)

    embodied_ppo.train("configs/cartpole.yaml", TINY, run, env=factory, **quiet())
    assert entry(run)["entry_point"].endswith(".<locals>.factory")  # recorded as it is
    lam = lambda: gym.wrappers.TimeLimit(toy_envs.CountingEnv(), 10)  # noqa: E731
    run2 = tmp_path / "run2"
    embodied_ppo.train("configs/cartpole.yaml", TINY, run2, env=lam, **quiet())
    assert entry(run2)["id"] == "lambda_env" and entry(run2)["entry_point"].endswith("<lambda>")

    # Another process cannot import it: one line that says what to pass.
    out = cli("eval", str(run2), "--episodes", "1")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("embodied-ppo: error: env.entry_point: ")
    assert "(a lambda)" in out.stderr and "embodied_ppo.evaluate" in out.stderr
    assert "env.entry_point=my_module:make_env" in out.stderr
    # ... and what it says is accepted: env.entry_point names a factory of a module.
    out = cli("eval", str(run2), "env.entry_point=toy_envs:make_counting", "--episodes", "1")
    assert out.returncode == 0, out.stderr

    # From Python, given again: resumed (in a process that has not seen it), evaluated.
    gym.registry.pop("lambda_env")
    result = embodied_ppo.train(resume=run2, more_steps=32, env=lam, **quiet())
    assert result.global_step == 96
    summary = embodied_ppo.evaluate(run2, episodes=2, env=lam)
    assert summary["lengths"] == [10, 10] and summary["env_id"] == "lambda_env"
    exported = embodied_ppo.export(run2)  # the policy alone: no env needed
    assert exported.metadata["global_step"] == 96


def test_a_dict_config_may_name_an_env_class_with_its_kwargs(tmp_path):
    cfg = {
        "env": {"id": toy_envs.CountingEnv, "num_envs": 2, "kwargs": {"terminate_at": 5}},
        "algorithm": {"rollout_steps": 16, "minibatch_size": 16, "update_epochs": 1},
        "trainer": {"total_steps": 32, "compile": False},
    }
    result = embodied_ppo.train(cfg, run_dir=tmp_path / "run", **quiet())
    assert entry(result.run_dir)["entry_point"] == "toy_envs:CountingEnv"
    assert embodied_ppo.evaluate(result.run_dir, episodes=1)["lengths"] == [5]


def test_an_env_object_or_a_non_plain_value_is_one_line(tmp_path):
    env = gym.make("CartPole-v1")
    for config, kwargs, fragment in [
        ({"env": {"id": env}}, {}, "env.id: got a TimeLimit object, an environment already made"),
        ("configs/cartpole.yaml", {"env": env}, "env: got a TimeLimit object"),
        ("configs/cartpole.yaml", {"env": 3}, "env: got int, expected a Gymnasium id"),
    ]:
        with pytest.raises(UserError) as info:
            embodied_ppo.train(config, TINY, tmp_path / "x", **kwargs, **quiet())
        assert fragment in str(info.value) and "\n" not in str(info.value)
    # Anything YAML cannot hold where plain data belongs: the key, and what it got.
    data = {"env": {"id": "CartPole-v1"}, "trainer": {"device": env}}
    with pytest.raises(ConfigError) as info:
        embodied_ppo.train(data, run_dir=tmp_path / "y", **quiet())
    message = str(info.value)
    assert message.startswith("trainer.device: got a gymnasium.wrappers.common.TimeLimit object")
    assert message.endswith("expected a string") and "\n" not in message
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    # numpy numbers are numbers, written to config.yaml as plain ones.
    data = {"env": {"id": "CartPole-v1"}, "trainer": {"seed": np.int64(3)}}
    assert embodied_ppo.train(data, TINY, tmp_path / "z", **quiet()).global_step == 64
    assert yaml.safe_load((tmp_path / "z" / "config.yaml").read_text())["trainer"]["seed"] == 3


def test_an_id_registered_with_a_class_in_a_session_is_recorded(tmp_path):
    importable, in_script = "EmbodiedPPOTestSession-v0", "EmbodiedPPOTestScript-v0"
    gym.register(importable, entry_point=toy_envs.CountingEnv, max_episode_steps=7)
    script_class = type("ScriptEnv", (toy_envs.CountingEnv,), {"__module__": "__main__"})
    gym.register(in_script, entry_point=script_class, max_episode_steps=7)
    try:
        for env_id in (importable, in_script):
            embodied_ppo.train(
                "configs/cartpole.yaml", [*TINY, f"env.id={env_id}"], tmp_path / env_id,
                **quiet(),
            )  # fmt: skip
    finally:
        gym.registry.pop(importable)
        gym.registry.pop(in_script)
    env = entry(tmp_path / importable)
    assert env["entry_point"] == "toy_envs:CountingEnv" and env["max_episode_steps"] == 7
    out = cli("eval", str(tmp_path / importable), "--episodes", "1", "--json", str(tmp_path / "e"))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "e").read_text())["lengths"] == [7]
    out = cli("eval", str(tmp_path / in_script), "--episodes", "1")
    assert out.returncode == 2 and "__main__:ScriptEnv" in out.stderr
    assert "env.entry_point=my_module:ScriptEnv" in out.stderr


def test_eval_accepts_the_module_its_hint_names(tmp_path):
    """An id a user's module registers, trained with that module imported but not named: eval
    suggests env.imports, and takes it."""
    (tmp_path / "session_robot.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('MyRobotTest-v0', entry_point='toy_envs:CountingEnv', max_episode_steps=6)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import session_robot  # noqa: F401  (registers the id, as a user's script does)

        embodied_ppo.train(
            "configs/cartpole.yaml", [*TINY, "env.id=MyRobotTest-v0"], tmp_path / "run", **quiet()
        )
    finally:
        sys.path.remove(str(tmp_path))
        gym.registry.pop("MyRobotTest-v0")
        sys.modules.pop("session_robot")
    assert entry(tmp_path / "run")["entry_point"] is None  # a module registers it by name
    out = cli("eval", "run", "--episodes", "1", cwd=tmp_path)
    assert out.returncode == 2 and "env.imports=[my_module]" in out.stderr, out.stderr
    assert "env.id=" not in out.stderr  # nothing eval would refuse
    out = cli("eval", "run", "env.imports=[session_robot]", "--episodes", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def test_env_worker_processes_take_an_importable_factory_and_refuse_a_lambda(tmp_path, capsys):
    more = [*TINY, "env.processes=2"]
    result = embodied_ppo.train(
        "configs/cartpole.yaml", more, tmp_path / "a", env=toy_envs.make_counting, **quiet()
    )
    assert result.global_step == 64
    with pytest.raises(ConfigError) as info:
        embodied_ppo.train(
            "configs/cartpole.yaml", more, tmp_path / "b", env=lambda: toy_envs.CountingEnv(),
            **quiet(),
        )  # fmt: skip
    assert str(info.value).startswith("env.processes: env worker processes cannot receive")
    assert not (tmp_path / "b").exists()


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timing = ("time", "SPS")
    return [{k: v for k, v in r.items() if not any(t in k for t in timing)} for r in rows]


def test_a_factory_of_a_whole_vector_env_trains_like_its_envs_one_by_one(tmp_path):
    """A vector env (SAME_STEP autoreset) is stepped as it is: the run equals the one whose
    factory makes its envs one at a time; eval runs its env 0; resume starts fresh episodes."""
    one, vec = tmp_path / "one", tmp_path / "vec"
    embodied_ppo.train("configs/cartpole.yaml", TINY, one, env=toy_envs.make_counting, **quiet())
    embodied_ppo.train(
        "configs/cartpole.yaml", TINY, vec, env=toy_envs.make_counting_vector, **quiet()
    )
    assert metrics(vec) == metrics(one)
    assert entry(vec)["entry_point"] == "toy_envs:make_counting_vector"
    assert embodied_ppo.evaluate(vec, episodes=2)["lengths"] == [8, 8]
    out = cli("eval", str(vec), "--episodes", "1", "--json", str(tmp_path / "e.json"))
    assert out.returncode == 0, out.stderr
    out = cli("train", "--resume", str(vec), "--more", "32")
    assert out.returncode == 0, out.stderr
    assert "whose envs' state is not captured" in out.stdout


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"autoreset": "NextStep"}, "makes a vector env with autoreset mode NextStep; make it"),
        ({"num_envs": 3}, "env.num_envs: got 2, but toy_envs:make_counting_vector makes a vector"),
    ],
)
def test_a_vector_env_that_does_not_fit_is_one_line(tmp_path, kwargs, fragment):
    with pytest.raises(ConfigError) as info:
        embodied_ppo.train(
            "configs/cartpole.yaml", [*TINY, f"env.kwargs={json.dumps(kwargs)}"], tmp_path / "r",
            env=toy_envs.make_counting_vector, **quiet(),
        )  # fmt: skip
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "r").exists()
