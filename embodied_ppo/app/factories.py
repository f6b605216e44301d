"""An environment factory handed to the Python API (`env=`, or a dict config's `env.id`), and
what a run records of an id registered with a class in the user's session."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import yaml

from embodied_ppo.config.building import upgrade
from embodied_ppo.config.loading import load_yaml
from embodied_ppo.config.schema import Config, with_values
from embodied_ppo.core.errors import UserError
from embodied_ppo.core.types import ConfigDict
from embodied_ppo.io.checkpoint import read_checkpoint
from embodied_ppo.io.run_dir import run_dir_of_target
from embodied_ppo.vecenv.factory import (
    FactoryRef,
    describe,
    recorded_entry_point,
    use_factory,
)

ConfigArg = str | Path | ConfigDict | Config | None


def _yaml_text(value: str) -> str:
    """`value` as an override's YAML value: quoted, whatever characters it holds."""
    return json.dumps(value)


def bind_env(
    config: ConfigArg, overrides: list[str], env: object | None
) -> tuple[ConfigArg, list[str]]:
    """The config and overrides of a new run whose env is `env` (an id, or a factory), or whose
    dict config names a factory as env.id: the factory registered in this process under its
    name, and env.id / env.entry_point set to record it."""
    if isinstance(config, dict) and isinstance(config.get("env"), dict):
        given = config["env"].get("id")
        if given is not None and not isinstance(given, str):
            if env is not None:
                raise UserError("env: given twice, as env= and as the config's env.id")
            describe(given, "env.id")  # an env object, or no callable, is named by its key
            config = {**config, "env": {k: v for k, v in config["env"].items() if k != "id"}}
            env = given
    if env is None:
        return config, overrides
    if isinstance(env, str):
        return config, [*overrides, f"env.id={_yaml_text(env)}"]
    ref = describe(env)
    use_factory(ref, env)
    return config, [
        *overrides,
        f"env.id={_yaml_text(ref.env_id)}",
        f"env.entry_point={_yaml_text(ref.entry_point)}",
    ]


def bind_env_to_run(source: str | Path, env: object | None) -> None:
    """Register the factory `env` under the env id of the run (or checkpoint) `source`, so that
    its evaluation or resume makes the env with it."""
    if env is None:
        return
    if isinstance(env, str):
        raise UserError(
            f"env: got {env!r}; a run keeps the env id it trained on: pass a factory (a "
            "callable) to make that env, or none"
        )
    ref = describe(env)
    use_factory(FactoryRef(run_env_id(source), ref.entry_point, ref.not_importable), env)


def run_env_id(source: str | Path) -> str:
    """The env id a run directory (its config.yaml) or checkpoint file trained on."""
    path = Path(source)
    run = run_dir_of_target(path)
    if (run / "config.yaml").is_file() and (path == run or path.suffix == ".pt"):
        data = upgrade(load_yaml(run / "config.yaml"))
    else:
        data = read_checkpoint(path)[1].get("config") or {}
    env_id = (data.get("env") or {}).get("id") if isinstance(data, dict) else None
    if not isinstance(env_id, str):
        raise UserError(f"{source}: its config names no env id")
    return env_id


def record_registered_env(cfg: Config) -> Config:
    """`cfg` with env.entry_point (and the registration's time limit and arguments) recorded,
    where env.id was registered in this process with a class or function of the user's (not
    by a module a later process can import): so `eval` and `--resume` from the command line
    can make the env again, or say exactly what to pass."""
    e = cfg.env
    if e.entry_point is not None or e.backend not in ("sync", "async"):
        return cfg
    entry_point = recorded_entry_point(e.id)
    if entry_point is None or entry_point.partition(":")[0] in e.imports:
        return cfg  # nothing to record, or a module the config imports registers it
    spec = gym.spec(e.id)
    limit = e.max_episode_steps if e.max_episode_steps is not None else spec.max_episode_steps
    kwargs = {**(spec.kwargs or {}), **e.kwargs}
    try:
        yaml.safe_dump(kwargs)
    except yaml.YAMLError:  # the registration's own arguments are not plain data: not recorded
        kwargs = e.kwargs
    return with_values(
        cfg, env__entry_point=entry_point, env__max_episode_steps=limit, env__kwargs=kwargs
    )
