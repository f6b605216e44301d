"""The config one process of a distributed run runs."""

from __future__ import annotations

from embodied_ppo.config.checks import check_config
from embodied_ppo.config.schema import Config, with_values
from embodied_ppo.core.errors import ConfigError


def per_process(cfg: Config, world: int) -> Config:
    """The config one of `world` processes runs: num_envs_scope global splits num_envs."""
    if cfg.env.num_envs_scope != "global" or world == 1:
        return cfg
    e = cfg.env
    if e.num_envs % world:
        raise ConfigError(
            f"env.num_envs: got {e.num_envs} with num_envs_scope global, expected a multiple "
            f"of the {world} processes"
        )
    return check_config(with_values(cfg, env__num_envs=e.num_envs // world))
