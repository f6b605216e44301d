"""The PPO update in numpy, with hand-written gradients, for MLP policies on the CPU.

A MuJoCo-sized policy (two hidden layers of 64-256 units) trained on minibatches of 64-512 rows
does little arithmetic per gradient step; on the CPU the step costs the dispatch and autograd
bookkeeping of some hundred small torch operations. This module computes the same step (forward
pass, the `actor_critic` loss of `losses.ppo_loss`, its gradient, gradient clipping and Adam) with
a few dozen numpy operations on flat parameter, gradient and moment vectors, which is several
times faster for these sizes.

It is the same update as `PPOUpdate`, not an approximation: the same minibatches from the same
shuffling generator, the same loss terms, tie rules and clamps, the same metrics, the same Adam
(bias-corrected, eps outside the square root) and `clip_grad_norm_` rule. The weights and Adam's
moments live in the torch module and optimizer: they are read at the start of `update` and
written back at its end, so checkpoints, resume and the torch path see one state. Results equal
the torch path's to float32 rounding; tests compare gradients and whole updates with autograd.

Supported: MLP backbones (shared or separate) with the activations of `host_policy`, Gaussian
(state-independent or state-dependent std) and categorical heads, every `loss_agg_func`,
dual clip, value clipping, Huber, entropy bonus, early stopping, the adaptive learning rate and
the distributed gradient all-reduce. The KL loss against a reference policy and `torch.compile`
use the torch path (`pick_update`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from embodied_ppo import blas, distributed
from embodied_ppo.config import AlgorithmConfig, OptimConfig
from embodied_ppo.errors import ConfigError
from embodied_ppo.modules.actor_critic import LOG_STD_MAX, LOG_STD_MIN, ActorCritic
from embodied_ppo.modules.host_policy import HOST_ACTIVATIONS, host_supported
from embodied_ppo.ppo import NonFiniteError, PPOUpdate, adapt_learning_rate

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_ACT_NAMES: dict[type[nn.Module], str] = {
    nn.Tanh: "tanh",
    nn.ReLU: "relu",
    nn.ELU: "elu",
    nn.SiLU: "silu",
    nn.LeakyReLU: "leaky_relu",
}


def pick_update(
    mode: str, policy: ActorCritic, device: torch.device, algo: AlgorithmConfig, compile: bool
) -> str:
    """`host` (numpy) or `torch` for `trainer.update: auto | host | torch`; raises if impossible."""
    why_not = None
    if device.type != "cpu":
        why_not = f"the policy is on {device.type}"
    elif not host_supported(policy):
        why_not = "the policy has an activation without a numpy counterpart"
    elif algo.use_kl_loss:
        why_not = "the KL loss against a reference policy needs the torch path"
    elif compile:
        why_not = "trainer.compile applies to the torch path"
    if mode == "host" and why_not is not None:
        raise ConfigError(
            f"trainer.update: 'host' is not possible here: {why_not}; use auto or torch"
        )
    if mode == "auto":
        return "torch" if why_not is not None else "host"
    return mode


def _activation_grad(name: str, z: np.ndarray, h: np.ndarray) -> np.ndarray:
    """d act(z) / dz, from the pre-activation z and the output h = act(z), as torch computes it."""
    if name == "tanh":
        return 1.0 - h * h
    if name == "relu":
        return (h > 0).astype(np.float32)
    if name == "elu":
        return np.where(z > 0, np.float32(1.0), h + 1.0)
    if name == "silu":
        s = 1.0 / (1.0 + np.exp(-z))
        return s * (1.0 + z * (1.0 - s))
    return np.where(z > 0, np.float32(1.0), np.float32(0.01))  # leaky_relu, slope 0.01


def _max_grad(a: np.ndarray, b: np.ndarray, ga: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """Gradient of max(a, b) given those of a and b; a tie splits it in half, as torch does."""
    return np.where(a > b, ga, np.where(a < b, gb, 0.5 * (ga + gb)))


def _clamp_pass(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Where clamp(x, low, high) passes the gradient (the bounds included, as in torch)."""
    return ((x >= low) & (x <= high)).astype(np.float32)


class _Layer:
    """One Linear (+ activation) with views of its weight, bias and their gradients."""

    def __init__(
        self,
        w: np.ndarray,
        b: np.ndarray,
        gw: np.ndarray,
        gb: np.ndarray,
        activation: type[nn.Module] | None,
    ) -> None:
        self.w, self.b, self.gw, self.gb = w, b, gw, gb
        self.act = None if activation is None else _ACT_NAMES[activation]
        self.fn = None if activation is None else HOST_ACTIVATIONS[activation]


class HostUpdate(PPOUpdate):
    """`PPOUpdate` computed with numpy on the CPU (see the module docstring)."""

    def __init__(
        self,
        policy: ActorCritic,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
    ) -> None:
        super().__init__(policy, algo, optim, optimizer, generator)
        group = optimizer.param_groups[0]
        if (
            not isinstance(optimizer, torch.optim.Adam)
            or len(optimizer.param_groups) != 1
            or group["weight_decay"]
            or group["amsgrad"]
            or group["maximize"]
        ):
            raise ValueError("the host update implements plain Adam (one group) only")
        self.params = [p for p in policy.parameters() if p.requires_grad]
        sizes = [p.numel() for p in self.params]
        self.offsets = np.cumsum([0, *sizes])
        total = int(self.offsets[-1])
        self.flat = np.zeros(total, np.float32)  # weights
        self.grad = np.zeros(total, np.float32)
        self.exp_avg = np.zeros(total, np.float32)
        self.exp_avg_sq = np.zeros(total, np.float32)
        index = {id(p): i for i, p in enumerate(self.params)}

        def views(p: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
            i = index[id(p)]
            lo, hi = self.offsets[i], self.offsets[i + 1]
            return self.flat[lo:hi].reshape(p.shape), self.grad[lo:hi].reshape(p.shape)

        def linear(lin: nn.Linear, act: type[nn.Module] | None) -> _Layer:
            (w, gw), (b, gb) = views(lin.weight), views(lin.bias)
            return _Layer(w, b, gw, gb, act)

        def backbone(seq: nn.Sequential | None) -> list[_Layer] | None:
            if seq is None:
                return None
            mods = list(seq)
            return [linear(mods[i], type(mods[i + 1])) for i in range(0, len(mods), 2)]

        self.actor = backbone(policy.actor_backbone)
        self.critic = backbone(policy.critic_backbone)
        self.action_head = linear(policy.action_head, None)
        self.value_head = linear(policy.value_head, None)
        self.gaussian = policy.is_gaussian
        self.state_dependent_std = policy.state_dependent_std
        if self.gaussian:
            if self.state_dependent_std:
                self.std_head = linear(policy.log_std_head, None)
            else:
                self.log_std, self.g_log_std = views(policy.log_std)
        # Parameters the loss gives no gradient: the value head and a separate critic backbone
        # under loss_type actor.
        critic_params = [policy.value_head.weight, policy.value_head.bias]
        if policy.critic_backbone is not None:
            critic_params += list(policy.critic_backbone.parameters())
        frozen = {id(p) for p in critic_params} if algo.loss_type == "actor" else set()
        self.inactive = [
            (int(self.offsets[i]), int(self.offsets[i + 1]))
            for i, p in enumerate(self.params)
            if id(p) in frozen
        ]
        self.step_count = 0
        self.threads = blas.update_threads()  # numpy's BLAS threads in the update
        # Written by `update`, read by tests: the last minibatch's loss.
        self.last_loss = float("nan")

    # ------------------------------------------------------------------ state in and out

    def _load_state(self) -> None:
        """Copy the weights and Adam's moments from the module and optimizer."""
        o = self.offsets
        state = self.optimizer.state
        self.step_count = 0
        inactive = set(self.inactive)
        for i, p in enumerate(self.params):
            lo, hi = int(o[i]), int(o[i + 1])
            self.flat[lo:hi] = p.detach().reshape(-1).numpy()
            s = state.get(p)
            if s and "exp_avg" in s:
                self.exp_avg[lo:hi] = s["exp_avg"].reshape(-1).numpy()
                self.exp_avg_sq[lo:hi] = s["exp_avg_sq"].reshape(-1).numpy()
                if (lo, hi) not in inactive:
                    self.step_count = int(float(s["step"]))
            else:
                self.exp_avg[lo:hi] = 0.0
                self.exp_avg_sq[lo:hi] = 0.0
        if self.inactive:
            self._frozen_m, self._frozen_v = self.exp_avg.copy(), self.exp_avg_sq.copy()

    def _store_state(self) -> None:
        """Write the weights and Adam's state back, in the layout torch's Adam keeps."""
        o = self.offsets
        with torch.no_grad():
            for i, p in enumerate(self.params):
                lo, hi = o[i], o[i + 1]
                p.copy_(torch.from_numpy(self.flat[lo:hi].reshape(p.shape)))
                if self.step_count == 0 or (int(lo), int(hi)) in self.inactive:
                    continue
                s = self.optimizer.state[p]
                if "exp_avg" not in s:
                    s["step"] = torch.tensor(0.0, dtype=torch.float32)
                    s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                s["step"].fill_(float(self.step_count))
                s["exp_avg"].copy_(torch.from_numpy(self.exp_avg[lo:hi].reshape(p.shape)))
                s["exp_avg_sq"].copy_(torch.from_numpy(self.exp_avg_sq[lo:hi].reshape(p.shape)))

    # ------------------------------------------------------------------ forward and backward

    @staticmethod
    def _forward_mlp(x: np.ndarray, layers: list[_Layer]) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(input, pre-activation)] per layer and the output, kept for the backward pass."""
        cache = []
        for layer in layers:
            z = x @ layer.w.T
            z += layer.b
            cache.append((x, z))
            x = layer.fn(z)
        cache.append((x, x))
        return cache

    @staticmethod
    def _backward_mlp(
        dh: np.ndarray, layers: list[_Layer], cache: list[tuple[np.ndarray, np.ndarray]]
    ) -> None:
        """Accumulate-free backward: writes every layer's weight and bias gradient."""
        for k in range(len(layers) - 1, -1, -1):
            layer = layers[k]
            x, z = cache[k]
            h = cache[k + 1][0]
            dz = dh * _activation_grad(layer.act, z, h)
            np.matmul(dz.T, x, out=layer.gw)
            np.sum(dz, axis=0, out=layer.gb)
            if k > 0:
                dh = dz @ layer.w

    @staticmethod
    def _head_backward(layer: _Layer, feat: np.ndarray, dout: np.ndarray) -> np.ndarray:
        np.matmul(dout.T, feat, out=layer.gw)
        np.sum(dout, axis=0, out=layer.gb)
        return dout @ layer.w

    def _step(
        self,
        x: np.ndarray,
        actions: np.ndarray,
        old_logprob: np.ndarray,
        adv: np.ndarray,
        old_values: np.ndarray,
        returns: np.ndarray,
        w: np.ndarray,
    ) -> tuple[float, dict[str, float]]:
        """Loss, gradient (into self.grad) and metrics of one minibatch."""
        a = self.algo
        critic_loss = a.loss_type == "actor_critic"
        actor_cache = self._forward_mlp(x, self.actor)
        feat = actor_cache[-1][0]
        critic_cache = None
        cfeat = feat
        if critic_loss and self.critic is not None:
            critic_cache = self._forward_mlp(x, self.critic)
            cfeat = critic_cache[-1][0]
        head = self.action_head
        out = feat @ head.w.T
        out += head.b
        n = x.shape[0]

        # Log-probability, entropy and their gradients with respect to the head outputs.
        if self.gaussian:
            if self.state_dependent_std:
                raw_ls = feat @ self.std_head.w.T
                raw_ls += self.std_head.b
            else:
                raw_ls = self.log_std[None, :]
            ls = np.clip(raw_ls, LOG_STD_MIN, LOG_STD_MAX)
            inv_std = np.exp(-ls)
            zs = (actions - out) * inv_std
            logprob = (-0.5 * zs * zs - ls - _LOG_SQRT_2PI).sum(axis=-1)
            entropy = np.broadcast_to((0.5 + _LOG_SQRT_2PI + ls).sum(axis=-1), (n,))
        else:
            shifted = out - out.max(axis=-1, keepdims=True)
            logp_all = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
            probs = np.exp(logp_all)
            rows = np.arange(n)
            logprob = logp_all[rows, actions]
            p_logp = np.where(probs > 0, probs * logp_all, np.float32(0.0))
            entropy = -p_logp.sum(axis=-1)

        # The clipped surrogate (losses.ppo_loss), elementwise, and d loss / d logprob.
        raw_log_ratio = logprob - old_logprob
        log_ratio = np.clip(raw_log_ratio, -20.0, 20.0)
        ratio = np.exp(log_ratio)
        lo, hi = 1.0 - a.clip_ratio_low, 1.0 + a.clip_ratio_high
        clipped_ratio = np.clip(ratio, lo, hi)
        surr = -adv * ratio
        surr_clipped = -adv * clipped_ratio
        pg = np.maximum(surr, surr_clipped)
        d_pg = _max_grad(surr, surr_clipped, -adv, -adv * _clamp_pass(ratio, lo, hi))
        dual = np.zeros(n, dtype=bool)
        if a.clip_ratio_c is not None:
            bound = -adv * a.clip_ratio_c
            neg = adv < 0
            dual = neg & (pg > bound)
            d_min = np.where(pg < bound, d_pg, np.where(pg > bound, 0.0, 0.5 * d_pg))
            d_pg = np.where(neg, d_min, d_pg)
            pg = np.where(neg, np.minimum(pg, bound), pg)
        d_logprob = w * d_pg * ratio * _clamp_pass(raw_log_ratio, -20.0, 20.0)

        log_ratio64 = log_ratio.astype(np.float64)
        policy_loss = float(np.dot(w, pg))
        ent = float(np.dot(w, entropy))
        loss = policy_loss - a.entropy_bonus * ent
        metrics = {
            "policy_loss": policy_loss,
            "entropy": ent,
            # (ratio - 1) - log ratio in float64: float32 would leave rounding noise of ~1e-8
            # where the ratio is 1 up to float32 precision.
            "approx_kl": float(np.dot(w, np.expm1(log_ratio64) - log_ratio64)),
            "clipfrac": float(np.dot(w, ((ratio < lo) | (ratio > hi)).astype(np.float32))),
            "dual_clipfrac": float(np.dot(w, dual.astype(np.float32))),
        }

        if self.gaussian:
            # d logprob / d mean = z / std; d logprob / d log_std = z^2 - 1; d entropy / d ls = 1.
            dl = d_logprob[:, None]
            d_out = dl * zs * inv_std
            d_ls = dl * (zs * zs - 1.0) - (a.entropy_bonus * w)[:, None]
            d_ls *= _clamp_pass(raw_ls, LOG_STD_MIN, LOG_STD_MAX)
            metrics["std"] = float(np.dot(w, np.broadcast_to(np.exp(ls), out.shape).mean(axis=-1)))
        else:
            # d logprob_a / d logits = onehot(a) - p; d entropy / d logits = -p (log p + H).
            d_out = -d_logprob[:, None] * probs
            d_out[rows, actions] += d_logprob
            d_out += (a.entropy_bonus * w)[:, None] * probs * (logp_all + entropy[:, None])

        # The value loss and d loss / d value.
        d_value = None
        if critic_loss:
            vh = self.value_head
            value = cfeat @ vh.w[0] + vh.b[0]
            delta = a.huber_delta
            err = returns - value
            v_loss, g1 = self._value_error(err, delta)
            d_v = -g1
            if a.value_clip is not None:
                delta_v = value - old_values
                v_clipped = old_values + np.clip(delta_v, -a.value_clip, a.value_clip)
                v_loss2, g2 = self._value_error(returns - v_clipped, delta)
                d_v2 = -g2 * _clamp_pass(delta_v, -a.value_clip, a.value_clip)
                d_v = _max_grad(v_loss, v_loss2, d_v, d_v2)
                v_loss = np.maximum(v_loss, v_loss2)
                metrics["value_clipfrac"] = float(
                    np.dot(w, (np.abs(delta_v) > a.value_clip).astype(np.float32))
                )
            else:
                metrics["value_clipfrac"] = 0.0
            value_loss = float(np.dot(w, v_loss))
            loss += a.value_loss_coef * value_loss
            metrics["value_loss"] = value_loss
            d_value = (a.value_loss_coef * w) * d_v
        # Order the metrics as the torch path does.
        ordered = {k: metrics[k] for k in _METRIC_ORDER if k in metrics}

        # Backward through the heads and the backbones.
        d_feat = self._head_backward(head, feat, d_out)
        if self.gaussian:
            if self.state_dependent_std:
                d_feat += self._head_backward(self.std_head, feat, d_ls)
            else:
                np.sum(d_ls, axis=0, out=self.g_log_std)
        vh = self.value_head
        if d_value is None:
            vh.gw[...] = 0.0
            vh.gb[...] = 0.0
            if self.critic is not None:
                for layer in self.critic:
                    layer.gw[...] = 0.0
                    layer.gb[...] = 0.0
        else:
            np.matmul(d_value[None, :], cfeat, out=vh.gw)
            vh.gb[0] = d_value.sum()
            d_cfeat = d_value[:, None] * vh.w
            if self.critic is None:
                d_feat += d_cfeat
            else:
                assert critic_cache is not None
                self._backward_mlp(d_cfeat, self.critic, critic_cache)
        self._backward_mlp(d_feat, self.actor, actor_cache)
        return loss, ordered

    @staticmethod
    def _value_error(err: np.ndarray, delta: float | None) -> tuple[np.ndarray, np.ndarray]:
        """(losses.value_error(err), its derivative with respect to err)."""
        if delta is None:
            return 0.5 * err * err, err
        abs_err = np.abs(err)
        quad = abs_err < delta
        loss = np.where(quad, 0.5 * err * err, delta * (abs_err - 0.5 * delta))
        return loss, np.clip(err, -delta, delta)

    # ------------------------------------------------------------------ the update

    def _adam(self, lr: float) -> None:
        group = self.optimizer.param_groups[0]
        b1, b2 = group["betas"]
        eps = group["eps"]
        self.step_count += 1
        t = self.step_count
        g, m, v = self.grad, self.exp_avg, self.exp_avg_sq
        m *= b1
        m += (1.0 - b1) * g
        v *= b2
        v += (1.0 - b2) * (g * g)
        bc1, bc2 = 1.0 - b1**t, 1.0 - b2**t
        denom = np.sqrt(v)
        denom /= math.sqrt(bc2)
        denom += eps
        step = (lr / bc1) * (m / denom)
        if not self.inactive:
            self.flat -= step
        else:
            # Parameters without a gradient (the critic under loss_type actor) are skipped, as
            # torch's Adam skips a parameter whose .grad is None: weights and moments unchanged.
            for lo, hi in self.inactive:
                m[lo:hi], v[lo:hi] = self._frozen_m[lo:hi], self._frozen_v[lo:hi]
                step[lo:hi] = 0.0
            self.flat -= step

    def update(self, batch: dict[str, torch.Tensor], num_steps: int) -> dict[str, float]:
        with blas.limit(self.threads):
            return self._update(batch, num_steps)

    def _update(self, batch: dict[str, torch.Tensor], num_steps: int) -> dict[str, float]:
        a, o = self.algo, self.optim
        self._load_state()
        obs = batch["obs"].numpy()
        x_all = self._normalize(obs)
        actions_all = batch["actions"].numpy()
        fields = {k: batch[k].numpy() for k in ("logprobs", "advantages", "values", "returns")}
        mask_all = batch["mask"].numpy()
        size = x_all.shape[0]
        records: list[dict[str, float]] = []
        stopped = False
        lr = self.lr
        kl_sum = a.early_stop_kl is not None or o.schedule == "adaptive"
        try:
            for epoch in range(a.update_epochs):
                # The epoch's minibatches partition the batch: gather it once in their order,
                # then every minibatch is a contiguous slice.
                parts = [t.numpy() for t in self._minibatches(size, num_steps, torch.device("cpu"))]
                order = np.concatenate(parts)
                ep = [
                    x_all[order],
                    actions_all[order],
                    *(fields[f][order] for f in ("logprobs", "advantages", "values", "returns")),
                ]
                sizes = [part.shape[0] for part in parts]
                weights = self._epoch_weights(mask_all[order], sizes, num_steps)
                start = 0
                for k, (size_k, w) in enumerate(zip(sizes, weights, strict=True)):
                    mb_rows = slice(start, start + size_k)
                    start += size_k
                    loss, mb = self._step(*(f[mb_rows] for f in ep), w)
                    if self.reduce is not None:
                        sums = self._all_reduce([loss, mb["approx_kl"]])
                        loss = sums[0]
                        if kl_sum:
                            mb["approx_kl"] = sums[1]
                    if a.early_stop_kl is not None and mb["approx_kl"] > a.early_stop_kl:
                        stopped = True
                        break
                    grad_norm = float(np.sqrt(np.dot(self.grad, self.grad)))
                    if o.max_grad_norm is not None:
                        # clip_grad_norm_: scale by min(1, max_norm / (norm + 1e-6)).
                        coef = min(o.max_grad_norm / (grad_norm + 1e-6), 1.0)
                        self.grad *= np.float32(coef)
                    if o.schedule == "adaptive":
                        lr = adapt_learning_rate(lr, mb["approx_kl"], o)
                        self.set_lr(lr)
                    if not math.isfinite(grad_norm + loss):
                        raise NonFiniteError(self._culprit(mb), epoch, k)  # type: ignore[arg-type]
                    self._adam(lr)
                    self.last_loss = loss
                    mb["grad_norm"] = grad_norm
                    records.append(mb)
                if stopped:
                    break
        finally:
            self._store_state()
        out: dict[str, float] = {}
        if records:
            for name in records[0]:
                values = np.array([r[name] for r in records], dtype=np.float64)
                reduced = name == "grad_norm" or (name == "approx_kl" and kl_sum)
                if self.reduce is not None and not reduced:
                    values = self.reduce(
                        torch.tensor(values)
                    ).numpy()  # torch-owned: see _all_reduce
                out[name] = float(values.mean())
        out["num_gradient_steps"] = float(len(records))
        out["early_stopped"] = float(stopped)
        return out

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        norm = self.policy.obs_normalizer
        x = obs
        if norm.enabled:
            x = (x - norm.shift.numpy()) * norm.scale.numpy()
        if norm.clip is not None:
            x = np.clip(x, -norm.clip, norm.clip)
        return np.ascontiguousarray(x, dtype=np.float32)

    def _epoch_weights(self, mask: np.ndarray, sizes: list[int], seq_len: int) -> list[np.ndarray]:
        """`ppo.aggregation_weights` (float32) of each minibatch of an epoch.

        `mask` holds the epoch's minibatches back to back (`sizes` rows each). In a distributed
        run the denominators of all of them are summed over the ranks in one all-reduce.
        """
        mode = self.algo.loss_agg_func
        mask = mask.astype(np.float32)
        bounds = np.cumsum([0, *sizes])
        chunks = [mask[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        if mode == "token-mean":
            counts = [float(c.sum()) for c in chunks]
        else:
            seqs = [c.reshape(-1, seq_len) for c in chunks]
            lengths = [q.sum(axis=1, keepdims=True) for q in seqs]
            counts = [float((n > 0).sum()) for n in lengths]
        if self.reduce is not None:
            summed = self.reduce(torch.tensor(counts, dtype=torch.float32))
            counts = summed.tolist()
        totals = [np.float32(max(c, 1.0)) for c in counts]
        if mode == "token-mean":
            return [c / t for c, t in zip(chunks, totals, strict=True)]
        if mode == "seq-mean-token-sum":
            return [(q / t).reshape(-1) for q, t in zip(seqs, totals, strict=True)]
        return [
            (q / (np.maximum(n, 1.0) * t)).reshape(-1)
            for q, n, t in zip(seqs, lengths, totals, strict=True)
        ]

    def _all_reduce(self, extra: list[float]) -> list[float]:
        """Sum the gradient and a few scalars over the ranks in one all-reduce."""
        # A tensor that owns its memory: one made by torch.from_numpy keeps a reference to a
        # Python object, and Gloo's threads may release their last reference to the tensor
        # after the interpreter has begun to shut down (which aborts the process).
        n = self.grad.shape[0]
        packed = torch.empty(n + len(extra), dtype=torch.float32)
        view = packed.numpy()
        view[:n] = self.grad
        view[n:] = extra
        distributed.all_reduce_sum(packed, "the gradient all-reduce")
        self.grad[...] = view[:n]
        return [float(v) for v in packed[n:]]


_METRIC_ORDER = (
    "value_clipfrac",
    "value_loss",
    "policy_loss",
    "entropy",
    "approx_kl",
    "clipfrac",
    "dual_clipfrac",
    "std",
)


def make_updater(
    policy: ActorCritic,
    algo: AlgorithmConfig,
    optim: OptimConfig,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    reference: ActorCritic | None,
    mode: str,
    compile: bool,
) -> PPOUpdate:
    """The host or the torch update, as `pick_update` decides for `mode`."""
    device = next(iter(policy.parameters())).device
    if pick_update(mode, policy, device, algo, compile) == "host":
        return HostUpdate(policy, algo, optim, optimizer, generator)
    return PPOUpdate(policy, algo, optim, optimizer, generator, reference, compile=compile)
