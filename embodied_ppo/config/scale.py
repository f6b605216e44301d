"""The config one process of a distributed run runs."""

from __future__ import annotations

from embodied_ppo.config.checks import check_config
from embodied_ppo.config.schema import Config, with_values
from embodied_ppo.core.errors import ConfigError


def per_process(cfg: Config, world: int) -> Config:
    """The config one of `world` processes runs: num_envs_scope global splits num_envs (the
    result counts its envs per process). The minibatch size stays the run's: the update takes
    each process's share of every minibatch (algo.update)."""
    if cfg.env.num_envs_scope != "global" or world == 1:
        return check_config(cfg, world)
    e = cfg.env
    if e.num_envs % world:
        raise ConfigError(
            f"env.num_envs: got {e.num_envs} with num_envs_scope global, expected a multiple "
            f"of the {world} processes"
        )
    local = with_values(cfg, env__num_envs=e.num_envs // world, env__num_envs_scope="per_process")
    return check_config(local, world)
