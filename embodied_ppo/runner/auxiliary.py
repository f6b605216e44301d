"""What a run adds to PPO's rollout and update beside its own terms: value normalization
(`algorithm.normalize_value`), the env's mirror (`algorithm.symmetry`) and random network
distillation (`algorithm.rnd`); the checks of what they need of the environment, made before
anything is written; and their state in the checkpoint.

The trainer calls `Auxiliary` at three points of an iteration: after collection (the critic's
outputs scaled back to values, the intrinsic reward added), when the update's batch is prepared
(the normalized value targets, the mirrored samples' behaviour log-probabilities and values) and
after the update (the RND predictor trained). With every key at its default it does nothing,
and a run's numbers are those of a run without it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from embodied_ppo.algo.batch import VALUE_ROWS, refresh_advantages
from embodied_ppo.algo.mirror import Mirror, MirrorError
from embodied_ppo.algo.rnd import RandomNetworkDistillation
from embodied_ppo.algo.symmetry import behaviour_fields
from embodied_ppo.algo.value_norm import ValueNormalizer
from embodied_ppo.config.auxiliary import rnd_weight
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.obs import map_obs
from embodied_ppo.core.types import CheckpointState, Reduce
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.vecenv.make import declared_mirror
from embodied_ppo.vecenv.spaces import SpaceInfo

# A seed of the RND networks' weights and shuffling, beside the run's seed.
RND_SEED = 0x524E44


# ------------------------------------------------------------------ checks and parts
def load_mirror(cfg: Config) -> Mirror:
    """The mirror the env of `cfg` declares (one env is built), checked against its spaces;
    a ConfigError of one line naming the entry where it is not a mirror of them."""
    declared, info = declared_mirror(cfg.env)
    where = f"algorithm.symmetry: {cfg.env.id}'s mirror (metadata['mirror'])"
    if declared is None:
        raise ConfigError(
            f"algorithm.symmetry: {cfg.env.id} declares no mirror (metadata['mirror']): "
            "see docs/environments.md#declare-a-mirror"
        )
    obs = info.obs_dim if info.obs_keys is None else {k: v.shape for k, v in info.obs_keys.items()}
    try:
        return Mirror.from_declaration(
            declared, obs, info.action_dim, discrete=info.action_kind == "categorical"
        )
    except MirrorError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def rnd_inputs(cfg: Config, info: SpaceInfo) -> tuple[list[str] | None, int]:
    """The observation keys the RND networks read (None: the flat observation) and their input
    size; a ConfigError naming algorithm.rnd.obs_keys where they are not vector keys."""
    keys = cfg.algorithm.rnd.obs_keys
    if info.obs_keys is None:
        if keys is not None:
            raise ConfigError(
                f"algorithm.rnd.obs_keys: got {keys}, but {cfg.env.id} has flat Box "
                "observations; observation keys apply to Dict observations (use null)"
            )
        return None, info.obs_dim
    m = cfg.model
    chosen = keys or [
        k for k in (m.critic_obs_keys or m.actor_obs_keys or info.obs_keys)
        if info.obs_keys[k].kind == "vector"
    ]  # fmt: skip
    for i, key in enumerate(chosen):
        spec = info.obs_keys.get(key)
        if spec is None or spec.kind != "vector":
            what = "not a key" if spec is None else "an image key"
            raise ConfigError(
                f"algorithm.rnd.obs_keys[{i}]: {key!r} is {what} of {cfg.env.id}'s observation; "
                f"the networks read vector keys: {', '.join(vector_keys(info))}"
            )
    if not chosen:
        raise ConfigError(
            "algorithm.rnd.obs_keys: the critic reads no vector key; name the keys the networks "
            f"read, of: {', '.join(vector_keys(info))}"
        )
    ordered = sorted(chosen)
    return ordered, sum(int(info.obs_keys[k].shape[0]) for k in ordered)


def vector_keys(info: SpaceInfo) -> list[str]:
    """The vector keys of a Dict observation."""
    return [k for k, v in (info.obs_keys or {}).items() if v.kind == "vector"]


def check_auxiliary_env(cfg: Config, info: SpaceInfo) -> None:
    """What value normalization, symmetry and RND need of the env, before anything is written."""
    a = cfg.algorithm
    if a.symmetry.enabled:
        load_mirror(cfg)
    if a.rnd.enabled:
        rnd_inputs(cfg, info)


# ------------------------------------------------------------------ during training
class Auxiliary:
    """A run's value normalizer, mirror and RND, and where an iteration calls them.

    Args:
        cfg: this process's config.
        info: the env's spaces.
        policy: the run's policy (the behaviour policy when a batch is prepared).
        reduce: sums a tensor over the processes of a distributed run (None: one process).
    """

    def __init__(
        self,
        cfg: Config,
        info: SpaceInfo,
        policy: ActorCritic,
        device: torch.device,
        reduce: Reduce | None = None,
    ) -> None:
        a = cfg.algorithm
        self.cfg, self.policy, self.reduce = cfg, policy, reduce
        self.value_norm = ValueNormalizer().to(device) if a.normalize_value else None
        self.mirror = load_mirror(cfg).to(device) if a.symmetry.enabled else None
        self.rnd = None
        if a.rnd.enabled:
            keys, in_dim = rnd_inputs(cfg, info)
            self.rnd = RandomNetworkDistillation(
                a.rnd,
                keys,
                in_dim,
                device,
                seed=cfg.trainer.seed + RND_SEED,
                reduce=reduce,
                micro_batch=a.micro_batch_size,
            )

    def after_collect(self, buf: RolloutBuffer, global_step: int) -> dict[str, float]:
        """The rollout's critic outputs scaled back to values, and its intrinsic reward added to
        its (scaled) rewards; returns the intrinsic reward's scalars."""
        if self.value_norm is not None:
            self.value_norm.to_values(buf.values, buf.next_values, buf.final_values)
        if self.rnd is None:
            return {}
        r = self.cfg.algorithm.rnd
        weight = rnd_weight(r, global_step, self.cfg.trainer.total_steps)
        obs = buf.flat("obs")["obs"]
        intrinsic, scalars = self.rnd.reward(obs, buf.mask.reshape(-1), weight)
        buf.rewards.add_(intrinsic.reshape(buf.rewards.shape))
        return scalars

    def prepare(
        self, buf: RolloutBuffer, batch: dict, refresh: Callable[[], None] | None
    ) -> Callable[[], None] | None:
        """The update's batch completed in place (normalized value targets, the mirrored
        samples' fields); returns what refreshes it between epochs
        (`algorithm.recompute_advantages`: `refresh` as it was where nothing here changes it)."""
        a, vn = self.cfg.algorithm, self.value_norm
        fields: dict[str, Tensor] = {}
        if self.mirror is not None:
            chunk = a.logprob_forward_micro_batch_size
            fields = behaviour_fields(self.policy, self.mirror, batch, buf.num_steps, chunk)
            if vn is not None:  # the critic's outputs under the statistics it was trained on
                fields["mirror_values"] = vn.denormalize(fields["mirror_values"])
        if vn is not None:
            vn.update(buf.returns, buf.mask, self.reduce)
            batch["values"], batch["returns"] = vn.targets(
                buf.values.reshape(-1), buf.returns.reshape(-1)
            )
            if "mirror_values" in fields:
                fields["mirror_values"] = vn.normalize(fields["mirror_values"])
        batch.update(fields)
        if refresh is None or (vn is None and self.mirror is None):
            return refresh
        return lambda: self._refresh(buf, batch)

    def _refresh(self, buf: RolloutBuffer, batch: dict) -> None:
        """Between epochs (`algorithm.recompute_advantages`): the values, advantages and returns
        again, under the critic as it is, and what of the batch is derived from them."""
        a, vn = self.cfg.algorithm, self.value_norm
        values = None if vn is None else vn.denormalize
        refresh_advantages(buf, self.policy, a, self.reduce, values)
        if vn is not None:
            old, ret = vn.targets(buf.values.reshape(-1), buf.returns.reshape(-1))
            batch["values"].copy_(old)
            batch["returns"].copy_(ret)
        if self.mirror is not None:
            with torch.no_grad():
                obs = batch["obs"]
                rows = buf.num_steps * buf.num_envs
                parts = [
                    self.policy.value(
                        self.mirror.obs(map_obs(lambda x, i=i: x[i : i + VALUE_ROWS], obs))
                    )
                    for i in range(0, rows, VALUE_ROWS)
                ]
            batch["mirror_values"].copy_(torch.cat(parts))

    def after_update(self, buf: RolloutBuffer) -> dict[str, float]:
        """The RND predictor trained on the rollout; returns its scalars."""
        if self.rnd is None:
            return {}
        return self.rnd.train(buf.flat("obs")["obs"], buf.mask.reshape(-1), buf.num_steps)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> CheckpointState:
        """The value normalizer's statistics and RND's state, by name (empty when neither)."""
        out: CheckpointState = {}
        if self.value_norm is not None:
            out["value_normalizer"] = self.value_norm.state_dict()
        if self.rnd is not None:
            out["rnd"] = self.rnd.state_dict()
        return out

    def restore(self, state: CheckpointState) -> None:
        """Continue from `state()`; a missing part is a KeyError naming it."""
        if self.value_norm is not None:
            self.value_norm.load_state_dict(_part(state, "value_normalizer"))
        if self.rnd is not None:
            self.rnd.load_state_dict(_part(state, "rnd"))


def _part(state: CheckpointState, name: str) -> CheckpointState:
    part = state.get(name)
    if not isinstance(part, dict):
        raise KeyError(f"the checkpoint holds no {name} (a run without it)")
    return part
