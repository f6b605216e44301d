"""The checks of a config that need its environment (one env is built): the id, the modules
that register it, env.kwargs, env.wrappers, the spaces, and the episodic time limit. Each
refusal is one line naming the key."""

from __future__ import annotations

import difflib
import gc
import importlib
import pickle
import weakref

import gymnasium as gym

from embodied_ppo.config.schema import CRITIC_FREE, Config, EnvConfig
from embodied_ppo.core.errors import ConfigError, UserError
from embodied_ppo.core.text import first_line
from embodied_ppo.vecenv import mjlab_tasks
from embodied_ppo.vecenv.envpool_plan import plan
from embodied_ppo.vecenv.factory import register_entry_point
from embodied_ppo.vecenv.make import OWN_TASKS, episode_limit, make_one, resolve_wrapper
from embodied_ppo.vecenv.spaces import SpaceInfo, UnsupportedSpace, describe_spaces


# ------------------------------------------------------------------ checks that need the env
def check_env_id(env_id: str, imports: list[str] | None = None) -> None:
    """Raise ConfigError for an id Gymnasium does not know (after importing the modules that
    register ids: the project's own tasks, `imports`, and a "module:EnvId" id's module),
    suggesting close matches."""
    for i, name in enumerate(imports or []):
        _import(name, f"env.imports[{i}]")
    _import(OWN_TASKS, "env.id")
    module, _, name = env_id.rpartition(":")
    if module:
        _import(module, "env.id")
    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry.keys()), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    if not module:  # perhaps a user's own env whose module nothing imported
        hint += "; if your own module registers it, name the module: env.imports=[my_module]"
    where = f" (after importing {module!r})" if module else ""
    raise ConfigError(f"env.id: unknown environment {name!r}{where}{hint}")


def check_id(cfg: EnvConfig) -> None:
    """A ConfigError for an env id the backend of `cfg` does not know (closest ids named)."""
    if cfg.backend == "mjlab":
        mjlab_tasks.check_task_id(cfg)
    else:
        for i, name in enumerate(cfg.imports):
            _import(name, f"env.imports[{i}]")
        _import(OWN_TASKS, "env.id")
        register_entry_point(cfg)  # env.id made by a recorded factory, where nothing else made it
        check_env_id(cfg.id, cfg.imports)


def _check_factory(cfg: EnvConfig) -> None:
    """A factory's env (env.entry_point) runs with the Gymnasium backends, and reaches env
    worker processes only where they can import it."""
    if cfg.entry_point is None:
        return
    if cfg.backend in ("envpool", "mjlab"):
        raise ConfigError(
            f"env.entry_point: got {cfg.entry_point!r} with env.backend {cfg.backend!r}; an env "
            "a Python callable makes runs with env.backend sync or async"
        )
    workers = cfg.backend == "async" or cfg.processes > 1
    spec = gym.registry.get(cfg.id)
    if workers and spec is not None and not isinstance(spec.entry_point, str):
        try:
            pickle.dumps(spec.entry_point)
        except Exception:
            key = "env.backend" if cfg.backend == "async" else "env.processes"
            raise ConfigError(
                f"{key}: env worker processes cannot receive {cfg.entry_point} (it cannot be "
                "pickled): define the factory at the top of a module, or step the envs in this "
                "process (env.backend sync, env.processes=1)"
            ) from None


def _import(module: str, key: str) -> None:
    """Import `module` for the config key `key`; a failure is a ConfigError naming the key."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.split(".")[0] == exc.name.split(".")[0]:
            raise ConfigError(
                f"{key}: no module named {module!r}: Python finds modules in the current "
                "directory and on PYTHONPATH (e.g. PYTHONPATH=/path/to/its/folder)"
            ) from None
        raise ConfigError(
            f"{key}: cannot import {module!r} ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    except Exception as exc:  # the module itself fails
        raise ConfigError(
            f"{key}: cannot import {module!r} ({type(exc).__name__}: {first_line(exc)})"
        ) from None


def _check_wrappers(cfg: EnvConfig) -> list[type]:
    """The wrapper classes of env.wrappers, each a gymnasium.Wrapper, or a ConfigError."""
    wrappers = []
    for i, w in enumerate(cfg.wrappers):
        key = f"env.wrappers[{i}].name"
        if ":" in w.name:
            _import(w.name.partition(":")[0], key)
        try:
            wrapper = resolve_wrapper(w.name)
        except AttributeError:
            names = [n for n in dir(gym.wrappers) if n[0].isupper()]
            close = difflib.get_close_matches(w.name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{key}: unknown wrapper {w.name!r}: expected a gymnasium.wrappers name "
                f"(e.g. FlattenObservation) or module:Class{hint}"
            ) from None
        if not (isinstance(wrapper, type) and issubclass(wrapper, gym.Wrapper)):
            raise ConfigError(f"{key}: {w.name!r} is not a gymnasium.Wrapper class")
        wrappers.append(wrapper)
    return wrappers


def _spaces(cfg: EnvConfig) -> SpaceInfo:
    """Build one env of `cfg` to read its spaces."""
    check_id(cfg)
    _check_factory(cfg)
    wrappers = _check_wrappers(cfg)
    try:
        env = make_one(cfg, wrap=False)
    except UserError:
        raise  # already one line naming its key (a factory that made a vector env)
    except ValueError as exc:
        key = getattr(exc, "key", None)  # a task's own refusal of one of its arguments
        if not isinstance(key, str):
            raise _cannot_create(cfg, exc) from None
        raise ConfigError(f"env.kwargs.{key}: {first_line(exc)}") from None
    except TypeError as exc:
        raise ConfigError(
            f"env.kwargs: {cfg.id} rejected the arguments {cfg.kwargs}: {exc}"
        ) from None
    except Exception as exc:  # a missing optional dependency, a broken env module, ...
        raise _cannot_create(cfg, exc) from None
    for i, (w, wrapper) in enumerate(zip(cfg.wrappers, wrappers, strict=True)):
        try:
            env = wrapper(env, **w.kwargs)
        except Exception as exc:
            env.close()
            raise ConfigError(
                f"env.wrappers[{i}].kwargs: {w.name} rejected {w.kwargs} "
                f"({type(exc).__name__}: {first_line(exc)})"
            ) from None
    try:
        return describe_spaces(env.observation_space, env.action_space)
    except UnsupportedSpace as exc:
        raise ConfigError(f"env.id: {cfg.id} has {exc}; {_supported(exc)}") from None
    finally:
        # Freed now, not when the garbage collector gets to it: a MuJoCo renderer frees its GL
        # context again when collected, and that releases whichever context is current then,
        # so the training envs made in this process after it would render black frames.
        refs = _weak_refs(env)
        env.close()
        del env
        _collect_until_gone(refs)


def _weak_refs(env: gym.Env) -> list[weakref.ref] | None:
    """Weak references to `env` and its innermost env; None for a class without them."""
    try:
        return [weakref.ref(env), weakref.ref(env.unwrapped)]
    except TypeError:  # __slots__ without __weakref__
        return None


def _collect_until_gone(refs: list[weakref.ref] | None) -> None:
    """Most envs are gone with their last reference; one in a reference cycle (e.g. under
    Gymnasium's AddRenderObservation) takes a collection: the young generations first, since a
    full one costs ~0.1 s in a process that has loaded torch."""
    for generation in (1, 2):
        if refs is not None and all(ref() is None for ref in refs):
            return
        gc.collect(generation)


def _cannot_create(cfg: EnvConfig, exc: BaseException) -> ConfigError:
    return ConfigError(f"env.id: cannot create {cfg.id} ({type(exc).__name__}: {first_line(exc)})")


def _spaces_for_envpool(cfg: EnvConfig) -> SpaceInfo:
    try:
        return _spaces(cfg)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc} (env.backend envpool: evaluation runs the Gymnasium task with the same "
            "env.kwargs)"
        ) from None


def _supported(exc: UnsupportedSpace) -> str:
    """What the policy supports instead of the space `exc` refused."""
    if exc.why == "channels first":
        return (
            "images must be (height, width, channels) uint8, channels last: transpose it, "
            "e.g. with a wrapper in env.wrappers"
        )
    if exc.which == "observation" and exc.why == "an image":
        return "give the image as a key of a Dict observation space (channels last uint8)"
    if exc.which.startswith("observation"):
        return (
            "supported: a flat Box, or a Dict of flat Boxes and (height, width, channels) "
            "uint8 images (flatten others, e.g. env.wrappers: [{name: FlattenObservation}])"
        )
    if isinstance(exc.space, gym.spaces.Discrete):
        return "Discrete actions must start at 0"
    return "supported: flat Box (Gaussian head) or Discrete (categorical head)"


def _spaces_for_mjlab(cfg: Config) -> SpaceInfo:
    """Build one env of the mjlab task on the training device: its spaces, and whether
    env.num_envs of them fit in the device's memory."""
    device = mjlab_tasks.probe_device(cfg.trainer.device)
    env = mjlab_tasks.build(mjlab_tasks.task_config(cfg.env, 1, 0), device)
    try:
        info = mjlab_tasks.space_info(env, str(cfg.env.id))
        mjlab_tasks.check_memory(cfg.env, mjlab_tasks.per_env_bytes(env), device)
    finally:
        env.close()
    return info


def check_env(cfg: Config) -> SpaceInfo:
    """Everything about `cfg` that needs the environment (one is built); returns its SpaceInfo."""
    if cfg.env.backend == "mjlab":
        return _spaces_for_mjlab(cfg)
    if cfg.env.backend == "envpool":
        info = plan(cfg.env, _spaces_for_envpool).info
    else:
        info = _spaces(cfg.env)
    return info


def check_episodic(cfg: Config) -> None:
    """Critic-free estimators collect whole episodes: the time limit must fit in a rollout."""
    a = cfg.algorithm
    if a.adv_type not in CRITIC_FREE:
        return
    limit = episode_limit(cfg.env)
    if limit is None:
        raise ConfigError(
            f"env.max_episode_steps: {cfg.env.id} has no time limit; adv_type {a.adv_type!r} "
            "collects whole episodes, set env.max_episode_steps"
        )
    if a.rollout_steps < limit:
        raise ConfigError(
            f"algorithm.rollout_steps: got {a.rollout_steps}; adv_type {a.adv_type!r} collects "
            f"one whole episode per env, so it must be >= the episode limit {limit} "
            "(env.max_episode_steps)"
        )
