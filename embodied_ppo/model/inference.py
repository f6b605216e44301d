"""The deployable policy: raw observations in, the deterministic action out.

An `InferenceNet` is the trained module's own actor (`ActorCritic.actor_copy`, acting through
`ActorCritic.deterministic_action`: normalizer folded in, Gaussian mean clipped to the action
bounds or the most likely category) behind a check of its inputs. Evaluation runs it,
`load_policy` returns it (wrapped for numpy), and `export` writes it: the same module scripted
for TorchScript (its actor traced once, `model.export`) or traced for ONNX. Nothing here wires
the actor again.

Every check is written so that TorchScript can compile it (C++ callers get the same errors).
"""

from __future__ import annotations

import torch
from torch import nn

from embodied_ppo.model.actor_critic import ActorCritic


def shape_text(shape: list[int]) -> str:
    """A shape as Python writes a tuple: (3,), (2, 5), ()."""
    if len(shape) == 1:
        return "(" + str(shape[0]) + ",)"
    return "(" + ", ".join([str(n) for n in shape]) + ")"


def _checked_state(state: torch.Tensor, single: bool, size: int) -> torch.Tensor:
    """A recurrent state as (B, size) float32, checked against the observation's batching."""
    if single:
        if state.dim() != 1 or state.shape[0] != size:
            raise ValueError(
                "state: expected shape (" + str(size) + ",) for one observation, got "
                + shape_text(list(state.shape))
            )  # fmt: skip
        return state.to(torch.float32).unsqueeze(0)
    if state.dim() != 2 or state.shape[1] != size:
        raise ValueError(
            "state: expected shape (batch, " + str(size) + "), got " + shape_text(list(state.shape))
        )
    return state.to(torch.float32)


class ActorCore(nn.Module):
    """The trained module's deterministic actor, on checked, batched inputs."""

    def __init__(self, actor: ActorCritic) -> None:
        super().__init__()
        self.actor = actor

    def forward(
        self, obs: torch.Tensor | dict[str, torch.Tensor], state: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The action of batched inputs, and a recurrent actor's new state (given its state)."""
        action, new_state = self.actor.deterministic_action(obs, state)
        return action if new_state is None else (action, new_state)


class FlatPolicy(nn.Module):
    """InferenceNet of flat observations: (obs_dim,) or (B, obs_dim) float -> the action
    ((A,) / (B, A) float32, or () / (B,) int64)."""

    def __init__(self, core: nn.Module, obs_dim: int, is_gaussian: bool) -> None:
        super().__init__()
        self.core, self.obs_dim, self.is_gaussian = core, obs_dim, is_gaussian

    def inputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """The checked observation (B, obs_dim) float32, and whether it was unbatched."""
        expected = "(" + str(self.obs_dim) + ",) or (batch, " + str(self.obs_dim) + ")"
        if obs.dim() < 1 or obs.dim() > 2 or obs.shape[-1] != self.obs_dim:
            raise ValueError(
                "observation: expected shape " + expected + ", got " + shape_text(list(obs.shape))
            )
        if not obs.is_floating_point():
            raise ValueError(
                "observation: expected a floating-point array of shape " + expected
                + " (float32), got dtype " + str(obs.dtype)
            )  # fmt: skip
        single = obs.dim() == 1
        x = obs.to(torch.float32)
        return (x.unsqueeze(0) if single else x), single

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The action of one observation or a batch; refuses a wrong shape or dtype."""
        x, single = self.inputs(obs)
        action = self.core(x)
        return action.squeeze(0) if single else action


class RecurrentFlatPolicy(FlatPolicy):
    """FlatPolicy of a recurrent actor: (obs, state) -> (action, new state); the state is
    (state_size,) or (B, state_size) float32, zeros at an episode's start."""

    def __init__(self, core: nn.Module, obs_dim: int, is_gaussian: bool, state_size: int) -> None:
        super().__init__(core, obs_dim, is_gaussian)
        self.state_size = state_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        """(action, new state) of one observation or a batch and the state before it."""
        x, single = self.inputs(obs)
        action, new_state = self.core(x, _checked_state(state, single, self.state_size))
        if single:
            return action.squeeze(0), new_state.squeeze(0)
        return action, new_state


class DictPolicy(nn.Module):
    """InferenceNet of Dict observations: the actor's keys in (extra keys are ignored, so a
    privileged critic's keys never reach the actor), each batched (B, *shape) or single
    (*shape); vector keys float, image keys (H, W, C) uint8."""

    def __init__(
        self,
        core: nn.Module,
        keys: list[str],
        shapes: list[list[int]],
        images: list[bool],
        is_gaussian: bool,
    ) -> None:
        super().__init__()
        self.core, self.keys, self.shapes, self.images = core, keys, shapes, images
        self.is_gaussian = is_gaussian

    def inputs(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], bool]:
        """The checked, batched observation of the actor's keys, and whether it was single."""
        single = False
        x: dict[str, torch.Tensor] = {}
        for i, key in enumerate(self.keys):
            if key not in obs:
                raise ValueError("observation: missing key '" + key + "'")
            t = obs[key]
            shape = self.shapes[i]
            rank = len(shape)
            if t.dim() < rank or t.dim() > rank + 1 or list(t.shape[t.dim() - rank :]) != shape:
                raise ValueError(
                    "observation: key '" + key + "' expected shape " + shape_text(shape)
                    + " or (batch, *" + shape_text(shape) + "), got " + shape_text(list(t.shape))
                )  # fmt: skip
            if self.images[i] and t.dtype != torch.uint8:
                raise ValueError(
                    "observation: image key '" + key + "' expected uint8, got " + str(t.dtype)
                )
            if not self.images[i] and not t.is_floating_point():
                raise ValueError(
                    "observation: key '" + key + "' expected floating-point values, got "
                    + str(t.dtype)
                )  # fmt: skip
            if i == 0:
                single = t.dim() == rank
            if not self.images[i]:
                t = t.to(torch.float32)
            x[key] = t.unsqueeze(0) if single else t
        return x, single

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The action of one Dict observation or a batch; refuses a missing key, a wrong shape
        or dtype."""
        x, single = self.inputs(obs)
        action = self.core(x)
        return action.squeeze(0) if single else action


class RecurrentDictPolicy(DictPolicy):
    """DictPolicy of a recurrent actor: (obs, state) -> (action, new state)."""

    def __init__(
        self,
        core: nn.Module,
        keys: list[str],
        shapes: list[list[int]],
        images: list[bool],
        is_gaussian: bool,
        state_size: int,
    ) -> None:
        super().__init__(core, keys, shapes, images, is_gaussian)
        self.state_size = state_size

    def forward(  # type: ignore[override]
        self, obs: dict[str, torch.Tensor], state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, new state) of one Dict observation or a batch and the state before it."""
        x, single = self.inputs(obs)
        action, new_state = self.core(x, _checked_state(state, single, self.state_size))
        if single:
            return action.squeeze(0), new_state.squeeze(0)
        return action, new_state


InferenceNet = FlatPolicy | RecurrentFlatPolicy | DictPolicy | RecurrentDictPolicy


def inference_net(policy: ActorCritic, core: nn.Module | None = None) -> InferenceNet:
    """The deterministic inference network of a training module: a frozen copy of its actor
    behind the input checks. `core` replaces the actor (e.g. by its trace, for TorchScript)."""
    actor = policy if not policy.has_critic else policy.actor_copy()
    core = core if core is not None else ActorCore(actor)
    gaussian = actor.is_gaussian
    d = actor.spec.dict_obs
    if d is None:
        if actor.actor_rnn is not None:
            return RecurrentFlatPolicy(core, actor.spec.obs_dim, gaussian, actor.actor_state_size)
        return FlatPolicy(core, actor.spec.obs_dim, gaussian)
    keys = list(d.actor_keys)
    shapes = [list(d.keys[k].shape) for k in keys]
    images = [d.keys[k].kind == "image" for k in keys]
    if actor.actor_rnn is not None:
        return RecurrentDictPolicy(core, keys, shapes, images, gaussian, actor.actor_state_size)
    return DictPolicy(core, keys, shapes, images, gaussian)


def actor_of(net: InferenceNet) -> ActorCritic:
    """The actor-only module an eager inference network runs."""
    core = net.core
    if not isinstance(core, ActorCore):
        raise TypeError("this inference network runs a traced actor")
    return core.actor


def is_recurrent(net: nn.Module) -> bool:
    """Whether `net` takes and returns a recurrent state."""
    return isinstance(net, (RecurrentFlatPolicy, RecurrentDictPolicy))


def is_dict(net: nn.Module) -> bool:
    """Whether `net` takes Dict observations."""
    return isinstance(net, DictPolicy)


def initial_state(net: InferenceNet, batch: int = 1) -> torch.Tensor:
    """A recurrent net's state at an episode's start: zeros (batch, state_size)."""
    device = next(iter(actor_of(net).buffers())).device
    return torch.zeros(batch, getattr(net, "state_size", 0), device=device)
