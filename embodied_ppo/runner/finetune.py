"""PPO going on from a loaded policy (`model.init_from`, e.g. a distilled student): a smaller
exploration noise to start from (`finetune.log_std`), and a critic warm-up
(`finetune.critic_warmup_updates`): the first updates train the critic alone, the actor's
parameters frozen, so that the advantages of a fresh critic cannot undo the loaded behaviour
before the critic has learned the values of the policy it judges.

The warm-up is an update of its own, built over the critic's parameters (its gradient step
holds only those; the actor's are read from the policy and never written). When the warm-up
ends, the update of the whole policy takes over with Adam's state of its own, fresh: the
actor's first steps are Adam's first steps, not steps scaled by moments that saw only zero
gradients. The run's checkpoints hold the optimizer of the update that was training, so a
resume takes the one its iteration calls for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import torch

from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.schema import Config, with_values
from embodied_ppo.core.types import Reduce
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.build import make_updater

# The top-level parts of an ActorCritic that belong to its critic alone.
CRITIC_PARTS = ("critic_encoder", "critic_rnn", "critic_backbone", "value_head")


def critic_only(name: str) -> bool:
    """Whether the policy's parameter `name` belongs to the critic alone (a shared backbone
    belongs to the actor)."""
    return name.split(".")[0] in CRITIC_PARTS


@contextmanager
def trainable_only(policy: ActorCritic, keep: Callable[[str], bool]) -> Iterator[None]:
    """While an update is built: only the parameters whose name `keep` accepts are trainable
    (its gradient step takes the trainable ones); afterwards every flag is as it was."""
    flags = {name: p.requires_grad for name, p in policy.named_parameters()}
    try:
        for name, p in policy.named_parameters():
            p.requires_grad_(flags[name] and keep(name))
        yield
    finally:
        for name, p in policy.named_parameters():
            p.requires_grad_(flags[name])


def apply_log_std(cfg: Config, policy: ActorCritic) -> None:
    """finetune.log_std, after model.init_from: the Gaussian head's log-std set to it."""
    value = cfg.finetune.log_std
    if value is None:
        return
    with torch.no_grad():
        policy.log_std.fill_(value)


class Updates:
    """The update each iteration trains with: the warm-up's for the first `warmup_updates`
    iterations (where there is one), then the main one."""

    def __init__(
        self, main: PPOUpdate, warmup: PPOUpdate | None = None, warmup_updates: int = 0
    ) -> None:
        self.main, self.warmup, self.warmup_updates = main, warmup, warmup_updates

    def at(self, iteration: int) -> PPOUpdate:
        """The update of iteration `iteration` (counted from 0)."""
        if self.warmup is not None and iteration < self.warmup_updates:
            return self.warmup
        return self.main


def make_ppo_updates(
    cfg: Config,
    policy: ActorCritic,
    generator: torch.Generator,
    reference: ActorCritic | None,
    *,
    reduce: Reduce | None,
    notes: TextIO | None,
) -> Updates:
    """A PPO run's updates: the whole policy's, after a critic warm-up where the config asks
    for one. The warm-up's learning rate follows optim.schedule, but an adaptive one stays at
    optim.lr (the frozen actor's KL is 0, and would drive it to optim.lr_max)."""
    main = make_updater(cfg, policy, generator, reference, reduce=reduce, notes=notes)
    n = cfg.finetune.critic_warmup_updates
    if n == 0:
        return Updates(main)
    warm_cfg = cfg
    if cfg.optim.schedule == "adaptive":
        warm_cfg = with_values(cfg, optim__schedule="constant")
    with trainable_only(policy, critic_only):
        warmup = make_updater(warm_cfg, policy, generator, reference, reduce=reduce, notes=notes)
    return Updates(main, warmup, n)
