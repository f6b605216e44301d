"""Environments made by a Python callable (a factory) instead of a registered id.

The Python API takes a factory wherever it takes an id: an Env class, or a function returning
an Env or a whole vector env (`vector_factory`); `env.kwargs` are its arguments. The run registers it with Gymnasium under `env.id` (the
factory's name), so every part that makes envs by id makes it, and records how to make it again
in `env.entry_point`: `module:name`, which a later process imports (the CLI's eval, a resume).
A factory another process cannot import (a lambda, a function defined inside another, one of the
script that ran) is recorded by the same `module:name` form, and making it in another process
is a one-line error that says what to pass instead.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import ConfigError, UserError

Factory = Callable[..., gym.Env]

# id -> the factory this process registered it with (through the Python API).
_GIVEN: dict[str, Factory] = {}


class OneEnv:
    """A factory as Gymnasium's registry calls it, remembering the entry point it was recorded
    by. Pickled with its factory, for env worker processes."""

    def __init__(self, factory: Factory, entry_point: str) -> None:
        self.factory, self.entry_point = factory, entry_point

    def __call__(self, **kwargs: object) -> gym.Env:
        """The factory's env (a vector env is made through `vector_factory` instead)."""
        return self.factory(**kwargs)


@dataclass(frozen=True)
class FactoryRef:
    """How a run names and records a factory.

    Attributes:
        env_id: the Gymnasium id it is registered under (its name).
        entry_point: `module:qualified name`, as the run records it.
        not_importable: why another process cannot import it (None: it can).
    """

    env_id: str
    entry_point: str
    not_importable: str | None


def _resolve(entry_point: str) -> object:
    """The object `module:qualified.name` names (raises ImportError or AttributeError)."""
    module, _, name = entry_point.partition(":")
    obj: object = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def describe(factory: object, key: str = "env") -> FactoryRef:
    """The id and entry point of `factory`; a UserError naming `key` for what is no factory
    (an env object, a string, ...)."""
    if isinstance(factory, (gym.Env, gym.vector.VectorEnv)):
        raise UserError(
            f"{key}: got a {type(factory).__name__} object, an environment already made; pass "
            "what makes one: its class (env=MyEnv), a function returning it (env=make_env), "
            "or a lambda (env=lambda: gymnasium.make(...))"
        )
    if not callable(factory):
        raise UserError(
            f"{key}: got {type(factory).__name__}, expected a Gymnasium id (a string) or a "
            "callable that makes the env (an Env class or a function)"
        )
    if isinstance(factory, OneEnv):
        factory = factory.factory
    target = factory.func if isinstance(factory, functools.partial) else factory
    module = getattr(target, "__module__", None) or "?"
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    entry_point = f"{module}:{qualname}"
    why = None
    if isinstance(factory, functools.partial):
        why = "a functools.partial (its arguments belong in env.kwargs)"
    elif "<lambda>" in qualname:
        why = "a lambda"
    elif "<locals>" in qualname:
        why = "defined inside a function"
    elif module == "__main__":
        why = "defined in the script that ran (__main__)"
    else:
        try:
            if _resolve(entry_point) is not factory:
                why = f"{entry_point} names another object"
        except (ImportError, AttributeError):
            why = f"{entry_point} cannot be imported"
    return FactoryRef(_name(qualname), entry_point, why)


def _name(qualname: str) -> str:
    """The id a factory of this qualified name is registered under: its own name."""
    last = qualname.split(".")[-1]
    if last == "<lambda>":
        return "lambda_env"
    return re.sub(r"[^\w.-]", "", last) or "env"


def use_factory(ref: FactoryRef, factory: Factory) -> None:
    """Register `factory` under `ref.env_id` in this process (again, if it was)."""
    _GIVEN[ref.env_id] = factory
    gym.registry[ref.env_id] = EnvSpec(id=ref.env_id, entry_point=OneEnv(factory, ref.entry_point))


def register_entry_point(cfg: EnvConfig) -> None:
    """Register `cfg.id` from `cfg.entry_point` where this process does not know the id yet
    (a factory given in this process, or an id its code registered, is kept)."""
    if cfg.entry_point is None or cfg.id in gym.registry:
        return
    last = cfg.entry_point.partition(":")[2].split(".")[-1]
    ref_name = last if last.isidentifier() else "make_env"
    why = _not_importable(cfg.entry_point)
    if why is None:
        try:
            factory = _resolve(cfg.entry_point)
        except Exception as exc:  # ImportError, AttributeError, the module's own failure
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120]}"
        else:
            if callable(factory):
                made = OneEnv(factory, cfg.entry_point)
                gym.registry[cfg.id] = EnvSpec(id=cfg.id, entry_point=made)
                return
            why = "not a callable"
    raise ConfigError(
        f"env.entry_point: {cfg.entry_point} made this run's env, and this process cannot "
        f"import it ({why}); pass the factory again from Python (env=... to "
        "embodied_ppo.evaluate, or to embodied_ppo.train with resume=RUN), or define it at "
        f"the top of a module and give env.entry_point=my_module:{ref_name}"
    )


def _not_importable(entry_point: str) -> str | None:
    """Why a recorded entry point names nothing a process can import (None: it may)."""
    module, _, qualname = entry_point.partition(":")
    if not module or not qualname:
        return "expected module:name"
    if "<lambda>" in qualname:
        return "a lambda"
    if "<locals>" in qualname:
        return "it was defined inside a function"
    if module == "__main__":
        return "it was defined in the script that trained the run"
    return None


def recorded_entry_point(env_id: str) -> str | None:
    """For an id this process registered with a callable of the user's (a class given to
    gymnasium.register, a factory), `module:name` of that callable; else None (an id that a
    module registers, by a `module:name` string, is made again by importing that module)."""
    if env_id in _GIVEN:
        return describe(_GIVEN[env_id]).entry_point
    spec = gym.registry.get(env_id)
    if spec is None or isinstance(spec.entry_point, str) or spec.entry_point is None:
        return None
    return describe(spec.entry_point).entry_point
