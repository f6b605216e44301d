"""A policy grown from a saved one whose actor lacks its key group (`model.init_from`).

The saved actor read some keys; the new one reads those and, through its own MLP whose last
layer starts at 0 (`actor_group_zero_init`), a group of further keys (a teacher's privileged
state). Every weight and normalizer statistic of the saved policy is carried over; the actor
backbone's first layer is widened: its columns for the group's features are the new policy's
own draws, every other column the saved one's. With the group silent, the grown policy acts as
the saved one did (to float rounding: the first layer also sums the group's zeros), and training
lets the new keys in as they become useful.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from embodied_ppo.model.spec import PolicySpec

# The spec keys in which a grown policy differs from the one it grows from.
GROWN_KEYS = frozenset(
    {
        "actor_keys",
        "actor_group_keys",
        "actor_group_hidden_sizes",
        "actor_group_features",
        "actor_group_zero_init",
    }
)
FIRST_LAYER = "actor_backbone.0.weight"


def is_growth(mine: PolicySpec, theirs: PolicySpec) -> bool:
    """Whether `mine` adds an actor key group to `theirs`, which has none (the case `grow`
    handles; whether it can is `grow`'s to say)."""
    if mine.dict_obs is None or theirs.dict_obs is None:
        return False
    return mine.dict_obs.actor_group is not None and theirs.dict_obs.actor_group is None


def spec_difference(mine: PolicySpec, theirs: PolicySpec, ignore=frozenset()) -> list[str]:
    """The spec keys (but env_id and `ignore`) in which two policies differ, sorted."""
    a, b = mine.to_dict(), theirs.to_dict()
    skip = {"env_id", *ignore}
    return sorted(k for k in set(a) | set(b) if k not in skip and a.get(k) != b.get(k))


def _check(mine: PolicySpec, theirs: PolicySpec) -> None:
    """Refuse (ValueError, one line) a growth this module cannot make exact."""
    other = spec_difference(mine, theirs, GROWN_KEYS)
    if other:
        raise ValueError(f"has a different {', '.join(other)} than this config's policy")
    assert mine.dict_obs is not None and theirs.dict_obs is not None
    group = mine.dict_obs.actor_group
    assert group is not None
    new, old = set(mine.dict_obs.actor_keys), set(theirs.dict_obs.actor_keys)
    if old & set(group.keys) or new != old | set(group.keys):
        raise ValueError(
            f"has an actor reading {sorted(old)}: growing it needs model.actor_obs_keys to be "
            f"those and model.actor_group_keys ({', '.join(group.keys)}) together"
        )
    if mine.recurrent is not None:
        raise ValueError(
            "has no actor key group: growing one needs a feed-forward policy (model.recurrent null)"
        )
    if not group.zero_init:
        raise ValueError(
            "has no actor key group: growing one needs model.actor_group_zero_init: true, so "
            "that the grown policy starts acting as the saved one"
        )


def grow(
    mine: PolicySpec,
    fresh: Mapping[str, torch.Tensor],
    theirs: PolicySpec,
    weights: Mapping[str, torch.Tensor],
) -> dict[str, torch.Tensor]:
    """The state dict of the grown policy.

    Args:
        mine: the new policy's spec (with the actor key group).
        fresh: the new policy's state dict as built (its group's last layer at 0).
        theirs, weights: the saved policy's spec and state dict (no group).

    Raises ValueError (one line) where `theirs` cannot grow into `mine`.
    """
    _check(mine, theirs)
    obs = mine.dict_obs
    assert obs is not None and obs.actor_group is not None
    group = obs.actor_group
    # The backbone reads the vector keys outside the group as they are (DictEncoder's order),
    # then the group's features, then any image features.
    width = sum(
        int(obs.keys[k].shape[0])
        for k in obs.actor_keys
        if obs.keys[k].kind == "vector" and k not in group.keys
    )
    out = {k: v.clone() for k, v in fresh.items()}
    for name, value in weights.items():
        if name not in out:
            raise ValueError(f"holds {name}, which the grown policy lacks")
        if name == FIRST_LAYER:
            g = group.features
            if value.shape[1] + g != out[name].shape[1]:
                raise ValueError(f"has a {name} of {tuple(value.shape)}: cannot widen it")
            out[name][:, :width] = value[:, :width]
            out[name][:, width + g :] = value[:, width:]
        elif value.shape != out[name].shape:
            raise ValueError(f"has a {name} of {tuple(value.shape)}, not {tuple(out[name].shape)}")
        else:
            out[name] = value.clone()
    new = ("actor_encoder.group.", *(f"obs_normalizers.{k}." for k in group.keys))
    unmatched = [n for n in out if n not in weights and not n.startswith(new)]
    if unmatched:
        raise ValueError(f"lacks {unmatched[0]}")
    return out
