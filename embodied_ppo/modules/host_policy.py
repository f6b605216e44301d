"""A numpy snapshot of an ActorCritic for fast collection on the host.

For the small batches of a rollout (one observation per env), the Python and dispatch overhead
of torch modules costs several times the arithmetic. Weights do not change during collection, so
the collector takes a numpy snapshot of the policy once per rollout and runs the same forward
pass (normalizer, MLPs, heads, log-probability) with plain numpy. Sampling uses noise drawn by
torch for the whole rollout, so the torch and host paths sample the same actions (to float
precision) and chunking never changes a sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from embodied_ppo.modules.actor_critic import LOG_STD_MAX, LOG_STD_MIN, ActorCritic

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _leaky_relu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, 0.01 * x)


HOST_ACTIVATIONS: dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]] = {
    nn.Tanh: np.tanh,
    nn.ReLU: lambda x: np.maximum(x, 0.0),
    nn.ELU: _elu,
    nn.SiLU: _silu,
    nn.LeakyReLU: _leaky_relu,
}


def host_supported(policy: ActorCritic) -> bool:
    """Whether every layer of `policy` has a numpy counterpart here (GELU, for one, has not)."""
    for backbone in (policy.actor_backbone, policy.critic_backbone):
        if backbone is None:
            continue
        for layer in backbone:
            if not isinstance(layer, nn.Linear) and type(layer) not in HOST_ACTIVATIONS:
                return False
            if isinstance(layer, nn.LeakyReLU) and layer.negative_slope != 0.01:
                return False
    return True


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _layers(backbone: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray, Callable]]:
    out = []
    mods = list(backbone)
    for i in range(0, len(mods), 2):
        lin, act = mods[i], mods[i + 1]
        out.append((_np(lin.weight).T.copy(), _np(lin.bias), HOST_ACTIVATIONS[type(act)]))
    return out


class HostPolicy:
    """The forward pass of an ActorCritic, in float32 numpy, from a snapshot of its weights."""

    def __init__(self, policy: ActorCritic) -> None:
        if not host_supported(policy):
            raise ValueError("this policy has layers without a numpy counterpart")
        norm = policy.obs_normalizer
        self.normalize = norm.enabled
        self.shift, self.scale = _np(norm.shift), _np(norm.scale)
        self.clip = norm.clip
        self.actor = _layers(policy.actor_backbone)
        self.critic = None if policy.critic_backbone is None else _layers(policy.critic_backbone)
        self.head_w, self.head_b = (
            _np(policy.action_head.weight).T.copy(),
            _np(policy.action_head.bias),
        )
        # The one-column value head as a row-wise dot product: a (B, H) @ (H, 1) product may take
        # a BLAS path whose rounding depends on B.
        self.value_w, self.value_b = (
            _np(policy.value_head.weight)[0],
            _np(policy.value_head.bias)[0],
        )
        self.gaussian = policy.is_gaussian
        self.state_dependent_std = policy.state_dependent_std
        if self.gaussian:
            if self.state_dependent_std:
                self.std_w = _np(policy.log_std_head.weight).T.copy()
                self.std_b = _np(policy.log_std_head.bias)
            else:
                log_std = np.clip(_np(policy.log_std), LOG_STD_MIN, LOG_STD_MAX)
                self.log_std, self.std = log_std, np.exp(log_std)
                self.log_norm = float(-(log_std + _LOG_SQRT_2PI).sum())

    def _input(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        if self.normalize:
            x = (x - self.shift) * self.scale
        if self.clip is not None:
            x = np.clip(x, -self.clip, self.clip)
        return x

    @staticmethod
    def _mlp(x: np.ndarray, layers: list) -> np.ndarray:
        for w, b, act in layers:
            x = act(x @ w + b)
        return x

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values (B,) of raw observations (B, obs_dim)."""
        if obs.shape[0] == 1:
            return self.value(np.concatenate([obs, obs]))[:1]
        x = self._input(obs)
        feat = self._mlp(x, self.critic if self.critic is not None else self.actor)
        return (feat * self.value_w).sum(-1) + self.value_b

    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, log_prob, value) for raw observations (B, obs_dim) and sampling noise.

        Gaussian: noise (B, A) standard normal, action = mean + std * noise. Categorical: noise
        (B,) uniform, inverse-CDF sampling. The same rules as the torch distributions.
        """
        if obs.shape[0] == 1:
            # BLAS computes a single row with a different kernel (gemv) than a matrix (gemm);
            # padding to two rows keeps every row's result independent of the batch size, so
            # rollout_micro_batch_size never changes a number.
            pair = self.act(np.concatenate([obs, obs]), np.concatenate([noise, noise]))
            return tuple(x[:1] for x in pair)  # type: ignore[return-value]
        x = self._input(obs)
        actor = self._mlp(x, self.actor)
        critic = actor if self.critic is None else self._mlp(x, self.critic)
        value = (critic * self.value_w).sum(-1) + self.value_b
        out = actor @ self.head_w + self.head_b
        if self.gaussian:
            if self.state_dependent_std:
                log_std = np.clip(actor @ self.std_w + self.std_b, LOG_STD_MIN, LOG_STD_MAX)
                action = out + np.exp(log_std) * noise
                logprob = -0.5 * (noise * noise).sum(-1) - (log_std + _LOG_SQRT_2PI).sum(-1)
            else:
                action = out + self.std * noise
                logprob = -0.5 * (noise * noise).sum(-1) + self.log_norm
            return action.astype(np.float32), logprob.astype(np.float32), value
        logits = out - out.max(axis=-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        cdf = np.cumsum(np.exp(log_probs), axis=-1)
        action = np.minimum((cdf < noise[:, None]).sum(axis=-1), out.shape[-1] - 1)
        logprob = np.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
        return action.astype(np.int64), logprob.astype(np.float32), value
