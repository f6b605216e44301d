"""The deployable policy: raw observation in, action in the environment's units out.

Everything here needs torch only (no gymnasium, mujoco or tensorboard), so a robotics stack can
`import embodied_ppo; embodied_ppo.load_policy(path)` with nothing else of ours installed.

The same :class:`PolicyNet` is what evaluation runs, what `load_policy` returns (wrapped for numpy
input) and what `export` writes as TorchScript or ONNX, so all of them act identically:
normalizer folded in as float32 constants, deterministic (Gaussian mean / categorical argmax),
Gaussian actions clipped to the action bounds.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from embodied_ppo.model.actor_critic import ActorCritic


class PolicyNet(nn.Module):
    """Deterministic inference network, TorchScript- and torch.export-friendly.

    Takes a float tensor of shape (obs_dim,) or (B, obs_dim) and returns the action with the
    matching leading shape: (A,) / (B, A) float32 for a Gaussian policy, () / (B,) int64 for a
    categorical one.
    """

    # No class-level attribute annotations: with postponed evaluation TorchScript cannot read
    # them; it infers int/bool/float from the values set in __init__.

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        spec = policy.spec
        self.obs_dim = int(spec["obs_dim"])
        self.is_gaussian = bool(policy.is_gaussian)
        # The training module's own normalizer, statistics included: its forward never updates
        # them, so the copy is frozen, and it computes exactly what training computed.
        self.obs_normalizer = copy.deepcopy(policy.obs_normalizer)
        self.backbone = copy.deepcopy(policy.actor_backbone)
        self.head = copy.deepcopy(policy.action_head)
        self.register_buffer("action_low", policy.action_low.detach().to(torch.float32).clone())
        self.register_buffer("action_high", policy.action_high.detach().to(torch.float32).clone())
        _freeze(self)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x, single = self.inputs(obs)
        return self.decide(x, single)

    def inputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """The checked, normalized observation (B, obs_dim), and whether it was unbatched."""
        if obs.dim() < 1 or obs.dim() > 2 or obs.shape[-1] != self.obs_dim:
            raise ValueError(
                "observation: expected shape ("
                + str(self.obs_dim)
                + ",) or (batch, "
                + str(self.obs_dim)
                + "), got "
                + str(list(obs.shape))
            )
        if not obs.is_floating_point():
            raise ValueError(
                "observation: expected a floating-point tensor (float32), got " + str(obs.dtype)
            )
        single = obs.dim() == 1
        x = obs.to(torch.float32)
        if single:
            x = x.unsqueeze(0)
        return self.obs_normalizer(x), single

    def decide(self, x: torch.Tensor, single: bool) -> torch.Tensor:
        """The action for the backbone's input features (B, F)."""
        out = self.head(self.backbone(x))  # (B, A) means or logits
        return _action(out, self.is_gaussian, self.action_low, self.action_high, single)


def _action(
    out: torch.Tensor, gaussian: bool, low: torch.Tensor, high: torch.Tensor, single: bool
) -> torch.Tensor:
    """The deterministic action from the head's output (B, A): the mean clipped to the action
    bounds, or the most likely category; (A,) or () for a single observation."""
    action = torch.maximum(torch.minimum(out, high), low) if gaussian else out.argmax(dim=-1)
    if single:
        action = action.squeeze(0)
    return action


def _freeze(net: nn.Module) -> None:
    """Eval mode, no gradients, and every tensor in storage of its own: the training module's
    parameters are views of one flat tensor, which would otherwise travel with each copy."""
    for t in list(net.parameters()) + list(net.buffers()):
        t.data = t.data.clone()
    net.eval()
    net.requires_grad_(False)


class DictPolicyNet(nn.Module):
    """PolicyNet for Dict observations: the actor's keys in, the action out.

    Takes a dict of tensors, one per key of `keys` (extra keys are ignored: a privileged
    critic's keys never reach the actor), each batched (B, *shape) or single (*shape); vector
    keys float, image keys (H, W, C) uint8. Returns the action as PolicyNet does.
    """

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        spec = policy.spec
        self.keys = list(policy.actor_keys)
        self.shapes = [list(spec["obs_keys"][k]["shape"]) for k in self.keys]
        self.images = [spec["obs_keys"][k]["kind"] == "image" for k in self.keys]
        self.is_gaussian = bool(policy.is_gaussian)
        self.normalizers = nn.ModuleDict(
            {k: copy.deepcopy(n) for k, n in policy.obs_normalizers.items() if k in self.keys}
        )
        self.encoder = copy.deepcopy(policy.actor_encoder)
        self.backbone = copy.deepcopy(policy.actor_backbone)
        self.head = copy.deepcopy(policy.action_head)
        self.register_buffer("action_low", policy.action_low.detach().to(torch.float32).clone())
        self.register_buffer("action_high", policy.action_high.detach().to(torch.float32).clone())
        _freeze(self)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        x, single = self.inputs(obs)
        return self.decide(x, single)

    def inputs(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, bool]:
        """The checked, encoded observation (B, F), and whether it was unbatched."""
        single = False
        x: dict[str, torch.Tensor] = {}
        for i, key in enumerate(self.keys):
            if key not in obs:
                raise ValueError("observation: missing key " + key)
            t = obs[key]
            shape = self.shapes[i]
            rank = len(shape)
            if list(t.shape[t.dim() - rank :]) != shape or t.dim() < rank or t.dim() > rank + 1:
                raise ValueError(
                    "observation: key " + key + " expected shape " + str(shape)
                    + " or (batch, ...), got " + str(list(t.shape))
                )  # fmt: skip
            if self.images[i] and t.dtype != torch.uint8:
                raise ValueError("observation: image key " + key + " expected uint8")
            if not self.images[i] and not t.is_floating_point():
                raise ValueError("observation: key " + key + " expected a floating-point tensor")
            if i == 0:
                single = t.dim() == rank
            x[key] = t.unsqueeze(0) if single else (t if self.images[i] else t.to(torch.float32))
            if single and not self.images[i]:
                x[key] = x[key].to(torch.float32)
        for key, norm in self.normalizers.items():
            x[key] = norm(x[key])
        return self.encoder(x), single

    def decide(self, x: torch.Tensor, single: bool) -> torch.Tensor:
        """The action for the backbone's input features (B, F)."""
        out = self.head(self.backbone(x))  # (B, A) means or logits
        return _action(out, self.is_gaussian, self.action_low, self.action_high, single)


def _check_state(state: torch.Tensor, single: bool, size: int) -> torch.Tensor:
    """The recurrent state as (B, size), checked against the observation's batching."""
    if single:
        if state.dim() != 1 or state.shape[0] != size:
            raise ValueError(
                "state: expected shape (" + str(size) + ",) for one observation, got "
                + str(list(state.shape))
            )  # fmt: skip
        return state.to(torch.float32).unsqueeze(0)
    if state.dim() != 2 or state.shape[1] != size:
        raise ValueError(
            "state: expected shape (batch, " + str(size) + "), got " + str(list(state.shape))
        )
    return state.to(torch.float32)


class RecurrentPolicyNet(nn.Module):
    """A recurrent policy on flat observations: (obs, state) -> (action, new state).

    `obs` as PolicyNet takes it, `state` (state_size,) or (B, state_size) float32: zeros at an
    episode's start (`initial_state`), then the new state this returned for the previous step.
    Only the actor's recurrent state travels (a separate critic's is not needed to act).
    """

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.net = PolicyNet(policy)
        self.rnn = copy.deepcopy(policy.actor_rnn)
        self.state_size = int(policy.actor_rnn.state_size)
        self.obs_dim = self.net.obs_dim
        self.is_gaussian = self.net.is_gaussian
        self.register_buffer("action_low", self.net.action_low.clone())
        _freeze(self)

    def initial_state(self, batch: int = 1) -> torch.Tensor:
        return torch.zeros(batch, self.state_size, device=self.action_low.device)

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, single = self.net.inputs(obs)
        h, new_state = self.rnn.step(x, _check_state(state, single, self.state_size))
        if single:
            new_state = new_state.squeeze(0)
        return self.net.decide(h, single), new_state


class RecurrentDictPolicyNet(nn.Module):
    """RecurrentPolicyNet for Dict observations (the actor's keys, as DictPolicyNet takes them)."""

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.net = DictPolicyNet(policy)
        self.rnn = copy.deepcopy(policy.actor_rnn)
        self.state_size = int(policy.actor_rnn.state_size)
        self.keys, self.shapes, self.images = self.net.keys, self.net.shapes, self.net.images
        self.is_gaussian = self.net.is_gaussian
        self.register_buffer("action_low", self.net.action_low.clone())
        _freeze(self)

    def initial_state(self, batch: int = 1) -> torch.Tensor:
        return torch.zeros(batch, self.state_size, device=self.action_low.device)

    def forward(
        self, obs: dict[str, torch.Tensor], state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, single = self.net.inputs(obs)
        h, new_state = self.rnn.step(x, _check_state(state, single, self.state_size))
        if single:
            new_state = new_state.squeeze(0)
        return self.net.decide(h, single), new_state


InferenceNet = PolicyNet | DictPolicyNet | RecurrentPolicyNet | RecurrentDictPolicyNet


def inference_net(policy: ActorCritic) -> InferenceNet:
    """The deterministic inference network of a training module (what evaluation runs)."""
    if policy.actor_rnn is not None:
        return RecurrentDictPolicyNet(policy) if policy.dict_obs else RecurrentPolicyNet(policy)
    return DictPolicyNet(policy) if policy.dict_obs else PolicyNet(policy)


def is_recurrent(net: nn.Module) -> bool:
    return isinstance(net, (RecurrentPolicyNet, RecurrentDictPolicyNet))
