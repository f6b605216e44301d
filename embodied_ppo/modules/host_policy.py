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


def _block_diag(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((a.shape[0] + b.shape[0], a.shape[1] + b.shape[1]), np.float32)
    out[: a.shape[0], : a.shape[1]] = a
    out[a.shape[0] :, a.shape[1] :] = b
    return out


# Up to this width, every layer is one matrix product with its bias folded in, and separate
# actor and critic MLPs that must both run run as one MLP of twice the width with
# block-diagonal weights: half the numpy calls for a few more (zero) multiply-adds.
FUSE_MAX_WIDTH = 128
# Pre-activation of the constant column that carries biases through a layer (see
# HostPolicy._prepare_small): tanh maps it to exactly 1, the other activations to itself.
_CONSTANT = 64.0
# np.dot passes through numpy's __array_function__ dispatch, which costs more than the product
# of a small layer; the C function behind it takes the plain arrays used here.
_dot = getattr(np.dot, "_implementation", np.dot)


class HostPolicy:
    """The forward pass of an ActorCritic, in float32 numpy, from a snapshot of its weights.

    The snapshot is laid out for few numpy calls per step: weights transposed to (in, out), the
    action head, state-dependent log-std head and value head as one matrix, and separate actor
    and critic backbones of moderate width fused into one (first layer side by side, later layers
    block-diagonal). Zero blocks add exact zeros, so every output is the sum the unfused network
    computes, up to the order of float32 additions. Fused separate networks can also run one
    without the other (`act_into_fn(values=False)`, `value`).
    """

    def __init__(self, policy: ActorCritic) -> None:
        if not host_supported(policy):
            raise ValueError("this policy has layers without a numpy counterpart")
        norm = policy.obs_normalizer
        self.normalize = norm.enabled
        self.shift, self.scale = _np(norm.shift), _np(norm.scale)
        self.clip = norm.clip
        self.gaussian = policy.is_gaussian
        self.state_dependent_std = policy.state_dependent_std
        self.act_dim = int(policy.action_head.out_features)

        def linear(lin: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
            return _np(lin.weight).T.copy(), _np(lin.bias)

        actor = [m for m in policy.actor_backbone if isinstance(m, nn.Linear)]
        self.activation = HOST_ACTIVATIONS[type(policy.actor_backbone[1])]
        heads = [policy.action_head]
        if self.gaussian and self.state_dependent_std:
            heads.append(policy.log_std_head)
        head_w = np.concatenate([linear(h)[0] for h in heads], axis=1)
        head_b = np.concatenate([linear(h)[1] for h in heads])
        value_w, value_b = linear(policy.value_head)
        self.critic: list[tuple[np.ndarray, np.ndarray]] | None = None
        # (layers, head weights, head biases) of the actor alone and of the critic alone, when
        # they are separate networks fused into one here.
        self.actor_only: tuple | None = None
        self.critic_only: tuple | None = None
        if policy.critic_backbone is None:
            # Shared features: one head matrix (actions | log-std | value).
            self.layers = [linear(m) for m in actor]
            self.head_w = np.concatenate([head_w, value_w], axis=1)
            self.head_b = np.concatenate([head_b, value_b])
        else:
            critic = [m for m in policy.critic_backbone if isinstance(m, nn.Linear)]
            if max(m.out_features for m in actor) <= FUSE_MAX_WIDTH:
                self.actor_only = ([linear(m) for m in actor], head_w, head_b)
                self.critic_only = ([linear(m) for m in critic], value_w, value_b)
                first = [linear(actor[0]), linear(critic[0])]
                self.layers = [
                    (
                        np.concatenate([first[0][0], first[1][0]], axis=1),
                        np.concatenate([first[0][1], first[1][1]]),
                    )
                ]
                for la, lc in zip(actor[1:], critic[1:], strict=True):
                    (wa, ba), (wc, bc) = linear(la), linear(lc)
                    self.layers.append((_block_diag(wa, wc), np.concatenate([ba, bc])))
                self.head_w = _block_diag(head_w, value_w)
                self.head_b = np.concatenate([head_b, value_b])
            else:
                # Wide networks: block-diagonal products would double the arithmetic.
                self.layers = [linear(m) for m in actor]
                self.critic = [linear(m) for m in critic]
                self.head_w, self.head_b = head_w, head_b
                self.value_w, self.value_b = value_w, value_b
        self.head_w = np.ascontiguousarray(self.head_w)
        if self.gaussian and not self.state_dependent_std:
            log_std = np.clip(_np(policy.log_std), LOG_STD_MIN, LOG_STD_MAX)
            self.std = np.exp(log_std)
            self.log_norm = np.float32(-(log_std + _LOG_SQRT_2PI).sum())
        # Laid out by `_prepare_small` for moderate widths: {part: (hidden layers, head)}.
        self.small_parts: dict[str, tuple[list[np.ndarray], np.ndarray]] | None = None
        if self.critic is None and max(w.shape[1] for w, _ in self.layers) <= FUSE_MAX_WIDTH:
            self._prepare_small()
        self._buffers: dict[tuple[int, int, str], tuple] = {}

    def _prepare_small(self) -> None:
        """The layout of `_heads_small`: every layer one matrix product, biases included.

        Each layer's input carries one constant column, so the bias is one more row of the
        weight matrix. A layer produces its successor's constant column itself: an extra output
        whose pre-activation is 64, a value every activation here maps to exactly 1 or 64, so
        the next bias row is scaled by an exact power of two. The normalizer's scale goes into
        the first layer's weights; its shift and clip stay separate steps (folding the shift
        into the bias would subtract large, nearly equal float32 numbers).
        """
        post = float(self.activation(np.full(1, _CONSTANT, np.float32))[0])
        assert post in (1.0, _CONSTANT), post
        scale = self.scale if self.normalize else np.ones_like(self.scale)
        self.shift_small = self.shift if self.normalize else None
        self.bounds = None
        if self.clip is not None:  # clip((x - shift) * scale) == clip(x, bounds) - shift ...
            shift = self.shift if self.normalize else np.zeros_like(self.shift)
            self.bounds = (
                (shift - self.clip / scale).astype(np.float32),
                (shift + self.clip / scale).astype(np.float32),
            )

        def augment(w: np.ndarray, b: np.ndarray, carried: float, hidden: bool) -> np.ndarray:
            out = np.zeros((w.shape[0] + 1, w.shape[1] + int(hidden)), np.float32)
            out[:-1, : w.shape[1]] = w
            out[-1, : w.shape[1]] = b / carried
            if hidden:
                out[-1, -1] = _CONSTANT / carried
            return out

        def net(layers: list, head_w: np.ndarray, head_b: np.ndarray) -> tuple[list, np.ndarray]:
            (w1, b1), rest = layers[0], layers[1:]
            hidden = [augment(scale[:, None] * w1, b1, 1.0, True)]
            hidden += [augment(w, b, post, True) for w, b in rest]
            return hidden, augment(head_w, head_b, post, False)

        self.small_parts = {"both": net(self.layers, self.head_w, self.head_b)}
        if self.actor_only is not None:
            self.small_parts["actor"] = net(*self.actor_only)
            self.small_parts["critic"] = net(*self.critic_only)

    def _input(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        if self.normalize:
            x = (x - self.shift) * self.scale
        if self.clip is not None:
            x = np.minimum(x, self.clip, out=x if x is not obs else None)
            np.maximum(x, -self.clip, out=x)
        return x

    def _small(self, rows: int, used: int, part: str = "both") -> tuple:
        """The forward function of `_heads_small` for `rows` computed rows of which `used` are
        read, and the reused arrays it fills; of the actor and critic (`both`), or of one of
        them when they are separate (`actor`: no values; `critic`: values only).

        The arrays: input, its observation columns, layer outputs, head outputs, then views of
        the head outputs (heads, values, action means). The function has every array bound in
        advance, and the clip bounds and shift tiled to the used rows: elementwise operations
        on equal shapes take numpy's fastest loops.
        """
        key = (rows, used, part)
        cached = self._buffers.get(key)
        if cached is not None:
            return cached
        hidden, head = self.small_parts[part]
        x = np.zeros((rows, self.shift.shape[0] + 1), np.float32)
        x[:, -1] = 1.0
        zs = [np.zeros((rows, w.shape[1]), np.float32) for w in hidden]
        out = np.zeros((rows, head.shape[1]), np.float32)
        heads, values = {
            "both": (out[:used, :-1], out[:used, -1]),
            "actor": (out[:used], None),
            "critic": (out[:used, :0], out[:used, 0]),
        }[part]
        bufs = (x, x[:used, :-1], zs, out, heads, values, heads[:, : self.act_dim])

        def tile(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.ascontiguousarray(np.broadcast_to(a, (used, a.size)))

        xv = bufs[1]
        lo, hi = (tile(a) for a in self.bounds) if self.bounds is not None else (None, None)
        shift = tile(self.shift_small)
        layers = list(zip(hidden, zs, strict=True))
        activation = self.activation
        tanh = activation is np.tanh
        minimum, maximum, subtract = np.minimum, np.maximum, np.subtract

        def forward(obs: np.ndarray) -> None:
            if hi is not None:
                minimum(obs, hi, out=xv)
                maximum(xv, lo, out=xv)
                if shift is not None:
                    subtract(xv, shift, xv)
            elif shift is not None:
                subtract(obs, shift, xv)
            else:
                xv[...] = obs
            h = x
            for w, z in layers:
                _dot(h, w, z)  # (dot: less call overhead than the matmul ufunc)
                if tanh:
                    np.tanh(z, z)
                else:
                    z[...] = activation(z)
                h = z
            _dot(h, head, out)

        self._buffers[key] = (forward, bufs)
        return forward, bufs

    def _heads_small(self, obs: np.ndarray, rows: int, part: str = "both") -> tuple:
        """`_heads` for moderate widths in a few float32 numpy calls into reused arrays.

        `rows` >= the rows of `obs`: a single observation is computed as the first of two rows,
        so it takes the matrix-product kernel every other batch size takes. Returns the arrays
        of `_small`, which the next call with the same `rows` overwrites.
        """
        forward, bufs = self._small(rows, obs.shape[0], part)
        forward(obs)
        return bufs

    def _heads(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(head outputs (B, A or 2A), values (B,)) of raw observations (B >= 2)."""
        if self.small_parts is not None:
            return self._heads_small(obs, obs.shape[0])[4:6]
        x = self._input(obs)
        out = self._actor_heads(x)
        if self.critic is None:
            return out[:, :-1], out[:, -1]
        value = self._mlp(x, self.critic) @ self.value_w
        value += self.value_b
        return out, value[:, 0]

    def _actor_heads(self, x: np.ndarray) -> np.ndarray:
        """Head outputs of the actor's layers for normalized inputs (wide layout)."""
        out = self._mlp(x, self.layers) @ self.head_w
        out += self.head_b
        return out

    def _mlp(self, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        for w, b in layers:
            x = x @ w
            x += b
            x = self.activation(x)
        return x

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values (B,) of raw observations (B, obs_dim)."""
        if self.small_parts is not None:  # (one observation as the first of two rows, as in `act`)
            part = "critic" if "critic" in self.small_parts else "both"
            return self._heads_small(obs, max(obs.shape[0], 2), part)[5].copy()
        if obs.shape[0] == 1:
            return self.value(np.concatenate([obs, obs]))[:1]
        return self._heads(obs)[1].astype(np.float32)

    def noise_terms(self, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(std * noise, log-prob) for a whole rollout's noise (..., A), when they do not depend
        on the observation (state-independent Gaussian); None otherwise. See `act_with`."""
        if not self.gaussian or self.state_dependent_std:
            return None
        offset = (self.std * noise).astype(np.float32)
        logprob = -0.5 * (noise * noise).sum(-1) + self.log_norm
        return offset, logprob.astype(np.float32)

    def act_with(
        self, obs: np.ndarray, offset: np.ndarray, logprob: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`act` with the noise terms of `noise_terms`: action = mean + offset."""
        if obs.shape[0] == 1:  # as in `act`: two rows, so a row never depends on the batch
            if self.small_parts is not None:
                out, value = self._heads_small(obs, 2)[4:6]
            else:
                out, value = self._heads(np.concatenate([obs, obs]))
            action = out[:1, : self.act_dim] + offset
            return action.astype(np.float32), logprob, value[:1].astype(np.float32)
        out, value = self._heads(obs)
        action = out[:, : self.act_dim] + offset
        return action.astype(np.float32), logprob, value.astype(np.float32)

    def act_into(
        self, obs: np.ndarray, offset: np.ndarray, action: np.ndarray, value: np.ndarray
    ) -> None:
        """`act_with` writing the action and value into the given arrays (no log-prob: it is
        the one `noise_terms` returned)."""
        self.act_into_fn(obs.shape[0])(obs, offset, action, value)

    @property
    def separate_critic(self) -> bool:
        """Whether the actor runs without the critic (the values then cost a pass of their own)."""
        return self.actor_only is not None or self.critic is not None

    def act_into_fn(self, rows: int, values: bool = True) -> Callable[..., None]:
        """`act_into` for batches of `rows` observations, as a function that looks nothing up
        (the collector calls it once per step). Without `values`, the value argument is ignored
        and a separate critic is not run."""
        actor = not values and self.separate_critic
        if self.small_parts is not None:
            forward, bufs = self._small(max(rows, 2), rows, "actor" if actor else "both")
            value_out, mean = bufs[5], bufs[6]
            add = np.add

            def run(obs: np.ndarray, offset: np.ndarray, action: np.ndarray, value: np.ndarray):
                forward(obs)
                add(mean, offset, action)
                if values:
                    value[...] = value_out

            return run

        def run_wide(obs: np.ndarray, offset: np.ndarray, action: np.ndarray, value: np.ndarray):
            x = np.concatenate([obs, obs]) if rows == 1 else obs
            if actor:
                out = self._actor_heads(self._input(x))
            else:
                out, value_out = self._heads(x)
                if values:
                    value[...] = value_out[:rows]
            np.add(out[:rows, : self.act_dim], offset, out=action)

        return run_wide

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
        out, value = self._heads(obs)
        value = value.astype(np.float32)  # (a copy: `out` may be a reused array)
        A = self.act_dim
        if self.gaussian:
            mean = out[:, :A]
            if self.state_dependent_std:
                log_std = np.clip(out[:, A:], LOG_STD_MIN, LOG_STD_MAX)
                action = mean + np.exp(log_std) * noise
                logprob = -0.5 * (noise * noise).sum(-1) - (log_std + _LOG_SQRT_2PI).sum(-1)
            else:
                action = self.std * noise + mean
                logprob = -0.5 * (noise * noise).sum(-1) + self.log_norm
            return action.astype(np.float32), logprob.astype(np.float32), value
        logits = out - out.max(axis=-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        cdf = np.cumsum(np.exp(log_probs), axis=-1)
        action = np.minimum((cdf < noise[:, None]).sum(axis=-1), out.shape[-1] - 1)
        logprob = np.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
        return action.astype(np.int64), logprob.astype(np.float32), value
