"""The configuration: a typed schema, YAML and dotted overrides, and the checks that need no
environment. Every key has one meaning and is either honored or rejected (docs/design.md,
rule 4)."""

from __future__ import annotations

from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.config.loading import (
    apply_overrides,
    dump_yaml,
    load_config,
    load_yaml,
    parse_override,
    set_dotted,
)
from embodied_ppo.config.schema import (
    CRITIC_FREE,
    KL_TYPES,
    AlgorithmConfig,
    Config,
    EnvConfig,
    KLCtrlConfig,
    ModelConfig,
    OptimConfig,
    TrainerConfig,
    WandbConfig,
    WrapperConfig,
)

__all__ = [
    "CRITIC_FREE",
    "KL_TYPES",
    "AlgorithmConfig",
    "Config",
    "EnvConfig",
    "KLCtrlConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainerConfig",
    "WandbConfig",
    "WrapperConfig",
    "apply_overrides",
    "dump_yaml",
    "from_dict",
    "load_config",
    "load_yaml",
    "parse_override",
    "set_dotted",
    "upgrade",
]
