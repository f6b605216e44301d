"""A numpy snapshot of an ActorCritic, for collection on the host.

During a rollout the policy acts on one observation per env at a time, and the per-call overhead
of torch modules costs several times their arithmetic. The weights do not change during
collection, so the collector takes a float32 numpy snapshot of the policy once per rollout and
runs its forward pass with a few numpy calls per layer.

The snapshot is generated from the module: it walks the module's parts and knows a fixed list of
them (the normalizer, MLP layers and activations below, the linear heads). A policy with any other
part (an image encoder, a recurrent core, a new activation) has no snapshot (`unsupported_part`
names the part) and collection runs the torch module instead, so a part the snapshot does not
know can never be skipped silently. Tests compare every supported layout with the module.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.normalizer import ObsNormalizer

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


Layer = Callable[[np.ndarray], np.ndarray]


def _activation(module: nn.Module) -> Layer | None:
    """The numpy function of an activation module (None if unknown)."""
    kind = type(module)
    if kind is nn.Tanh:
        return np.tanh
    if kind is nn.ReLU:
        return lambda x: np.maximum(x, 0.0)
    if kind is nn.ELU and module.alpha == 1.0:
        return lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))
    if kind is nn.SiLU:
        return lambda x: x / (1.0 + np.exp(-x))
    if kind is nn.LeakyReLU:
        slope = np.float32(module.negative_slope)
        return lambda x: np.where(x > 0, x, slope * x)
    if kind is nn.Identity:
        return lambda x: x
    return None


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _linear(layer: nn.Linear) -> Layer:
    weight, bias = _array(layer.weight).T.copy(), _array(layer.bias)  # (in, out), (out,)

    def apply(x: np.ndarray) -> np.ndarray:
        """x @ W.T + b, the bias added in place."""
        y = x @ weight
        y += bias
        return y

    return apply


def _sequential(seq: nn.Module, where: str) -> list[Layer] | str:
    """The layers of an nn.Sequential MLP, or the name of the first part it cannot run."""
    if type(seq) is not nn.Sequential:
        return f"{where} ({type(seq).__name__})"
    layers: list[Layer] = []
    for i, module in enumerate(seq):
        fn = _linear(module) if type(module) is nn.Linear else _activation(module)
        if fn is None:
            return f"{where}[{i}] ({type(module).__name__})"
        layers.append(fn)
    return layers


# The parts of an ActorCritic the snapshot knows: child name -> module type.
_KNOWN_CHILDREN: dict[str, type[nn.Module]] = {
    "obs_normalizer": ObsNormalizer,
    "actor_backbone": nn.Sequential,
    "critic_backbone": nn.Sequential,
    "action_head": nn.Linear,
    "value_head": nn.Linear,
    "log_std_head": nn.Linear,
}


_KNOWN_PARAMETERS = {"log_std"}


def unsupported_part(policy: nn.Module) -> str | None:
    """The first part of `policy` the snapshot cannot run, or None if it can run all of it."""
    if type(policy) is not ActorCritic:
        return f"policy module {type(policy).__name__}"
    for name, child in policy.named_children():
        if _KNOWN_CHILDREN.get(name) is not type(child):
            return f"part {name} ({type(child).__name__})"
        if type(child) is nn.Sequential:
            layers = _sequential(child, name)
            if isinstance(layers, str):
                return layers
    for name, _ in policy.named_parameters(recurse=False):
        if name not in _KNOWN_PARAMETERS:
            return f"parameter {name}"
    return None


class SnapshotMismatch(ValueError):
    """The snapshot does not compute what the module computes (the module's forward pass
    changed in a way the snapshot does not know): collection must run the module itself."""


# The snapshot's outputs may differ from the module's by float32 rounding, not more: this,
# relative to the output's size, plus, for a Gaussian log-probability, what rounding the action
# to float32 does to it (`_log_prob_rounding`).
CHECK_TOLERANCE = 1e-4
CHECK_ROWS = 8


def _log_prob_rounding(mean: np.ndarray, log_std: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """How far float32 rounding can move a Gaussian log-probability (B,) between the two ways of
    computing it: from the noise (the snapshot: -noise^2 / 2 - ...) and from the stored action
    (the module: z = (action - mean) / std, -z^2 / 2 - ...).

    The action mean + std x noise is rounded to the float32 grid at its size, so z differs from
    the noise by up to dz = (spacing(|action|) + spacing(|mean|)) / std per dimension, and -z^2/2
    by |noise| dz + dz^2 / 2. Negligible for a std well above the grid's spacing; at the std
    floor (exp(-5)) with |mean| ~ 100 it is ~1e-3 a dimension, beyond any fixed tolerance.
    """
    std = np.exp(log_std.astype(np.float64))
    action = (mean + np.exp(log_std) * noise).astype(np.float32)
    spacing = np.spacing(np.abs(action)).astype(np.float64) + np.spacing(np.abs(mean))
    dz = spacing / std  # (B, A)
    return (np.abs(noise) * dz + 0.5 * dz * dz).sum(axis=-1)  # (B,)


class NumpyPolicy:
    """The forward pass of an ActorCritic in float32 numpy, from a snapshot of its weights.

    Sampling uses noise given by the caller (drawn for a whole rollout at once), with the rules
    of the torch distributions: Gaussian action = mean + std * noise, categorical by inverse CDF.

    Built from the module's parts, then checked against the module itself on a few probe
    observations (`check`): a snapshot that would compute anything else raises
    SnapshotMismatch instead of acting.
    """

    def __init__(self, policy: ActorCritic) -> None:
        missing = unsupported_part(policy)
        if missing is not None:
            raise ValueError(f"the numpy snapshot cannot run the policy's {missing}")
        self._build(policy)
        self.check(policy)

    def check(self, policy: ActorCritic) -> None:
        """Raise SnapshotMismatch unless the snapshot's actions, log-probabilities and values
        equal the module's (to float32 rounding) on probe observations and noise drawn from a
        generator of its own (no global random state is touched)."""
        rng = np.random.default_rng(0x5EED)
        dim = policy.spec.obs_dim
        obs = (rng.standard_normal((CHECK_ROWS, dim)) * 3.0).astype(np.float32)
        if self.gaussian:
            noise = rng.standard_normal((CHECK_ROWS, policy.spec.action_dim)).astype(np.float32)
        else:
            noise = rng.random(CHECK_ROWS, dtype=np.float32)
        ours = self._act(obs, noise, with_value=True)
        device = policy.action_low.device
        with torch.no_grad():
            dist, value = policy(torch.from_numpy(obs).to(device))
            action = dist.sample(torch.from_numpy(noise).to(device))
            theirs = (action, dist.log_prob(action), value)
        slack = np.zeros(CHECK_ROWS, np.float32)
        if self.gaussian:
            slack = _log_prob_rounding(_array(dist.mean), _array(dist.log_std), noise)
        names = ("action", "log-probability", "value")
        for name, a, b, extra in zip(names, ours, theirs, (0.0, slack, 0.0), strict=True):
            b = b.cpu().numpy()
            if a is None or a.shape != b.shape:
                raise SnapshotMismatch(
                    f"the numpy snapshot's {name} has another shape than the policy module's "
                    f"({None if a is None else a.shape} against {b.shape}): the module computes "
                    "something the snapshot does not know"
                )
            gap = np.abs(a.astype(np.float64) - b)  # (rows, ...)
            allowed = CHECK_TOLERANCE * (1.0 + np.abs(b)) + extra
            if not (gap <= allowed).all():
                worst = int(np.argmax(gap - allowed))
                raise SnapshotMismatch(
                    f"the numpy snapshot's {name} differs from the policy module's by "
                    f"{gap.flat[worst]:.3g} where float32 rounding allows "
                    f"{np.asarray(allowed).flat[worst]:.3g} (probe row {worst // max(1, gap[0].size)}): "
                    "the module computes something the snapshot does not know"
                )

    def _build(self, policy: ActorCritic) -> None:
        norm = policy.obs_normalizer
        self.shift = _array(norm.shift) if norm.enabled else None
        self.scale = _array(norm.scale) if norm.enabled else None
        self.clip = norm.clip
        self.gaussian = policy.is_gaussian
        self.actor = _sequential(policy.actor_backbone, "actor_backbone")
        critic = policy.critic_backbone
        self.critic = None if critic is None else _sequential(critic, "critic_backbone")
        self.action_head = _linear(policy.action_head)
        self.value_head = _linear(policy.value_head)
        self.log_std_head = _linear(policy.log_std_head) if policy.state_dependent_std else None
        self.std: np.ndarray | None = None
        if self.gaussian and not policy.state_dependent_std:
            log_std = np.clip(_array(policy.log_std), LOG_STD_MIN, LOG_STD_MAX)
            self.std = np.exp(log_std)
            self.log_norm = np.float32(-(log_std + _LOG_SQRT_2PI).sum())  # log-density at the mean

    @property
    def separate_critic(self) -> bool:
        """Whether the critic has its own network (acting then need not run it)."""
        return self.critic is not None

    def _input(self, obs: np.ndarray) -> np.ndarray:
        x = obs.astype(np.float32, copy=False)
        if self.shift is not None:
            x = x - self.shift
            x *= self.scale
        if self.clip is not None:
            x = np.minimum(x, self.clip, out=x if x is not obs else None)
            np.maximum(x, -self.clip, out=x)
        return x

    @staticmethod
    def _run(layers: list[Layer], x: np.ndarray) -> np.ndarray:
        for layer in layers:
            x = layer(x)
        return x

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values (B,) of raw observations (B, obs_dim)."""
        x = self._input(obs)
        features = self._run(self.critic if self.critic is not None else self.actor, x)
        return self.value_head(features)[:, 0]

    def noise_terms(self, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(std x noise, log-prob) of a whole rollout's noise (..., A) at once, where they do not
        depend on the observation (a state-independent Gaussian); None otherwise. `act` takes
        one step's pair as `terms`: action = mean + std x noise, log-prob as computed here."""
        if self.std is None:
            return None
        sq_noise = np.einsum("...a,...a->...", noise, noise)
        return self.std * noise, (self.log_norm - 0.5 * sq_noise).astype(np.float32)

    def act(
        self,
        obs: np.ndarray,
        noise: np.ndarray,
        with_value: bool = True,
        terms: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(action, log_prob, value) of raw observations (B, obs_dim) and sampling noise.

        Gaussian noise is (B, A) standard normal, categorical noise (B,) uniform. Without
        `with_value` a separate critic is not run and the value is None. `terms`: this step's
        part of `noise_terms(noise)`, computed for the whole rollout beforehand.
        """
        return self._act(obs, noise, with_value, terms)

    def _act(
        self,
        obs: np.ndarray,
        noise: np.ndarray,
        with_value: bool = True,
        terms: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        x = self._input(obs)
        features = self._run(self.actor, x)
        value = None
        if with_value:
            critic = features if self.critic is None else self._run(self.critic, x)
            value = self.value_head(critic)[:, 0]
        out = self.action_head(features)
        if not self.gaussian:
            logits = out - out.max(axis=-1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
            cdf = np.cumsum(np.exp(log_probs), axis=-1)
            action = np.minimum((cdf < noise[:, None]).sum(axis=-1), out.shape[-1] - 1)
            logprob = np.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
            return action.astype(np.int64), logprob.astype(np.float32), value
        if terms is not None:
            out += terms[0]
            return out, terms[1], value
        # log N(mean + std * noise; mean, std) = -noise^2 / 2 - log std - log sqrt(2 pi)
        sq_noise = np.einsum("ij,ij->i", noise, noise)
        if self.std is not None:
            out += self.std * noise
            logprob = self.log_norm - 0.5 * sq_noise
        else:
            log_std = np.clip(self.log_std_head(features), LOG_STD_MIN, LOG_STD_MAX)
            out += np.exp(log_std) * noise
            logprob = -0.5 * sq_noise - (log_std + _LOG_SQRT_2PI).sum(-1)
        return out, logprob.astype(np.float32, copy=False), value
