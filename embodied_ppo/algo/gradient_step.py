"""One gradient step of the PPO update, written once in torch and compiled.

A step is: the policy's forward pass on a minibatch, `losses.ppo_loss`, its gradient
(`torch.func.grad` of that function when compiled, `torch.autograd.grad` of the same function
when eager), gradient clipping, and torch's own Adam on the state the step keeps. Nothing here
re-implements the model, the loss or its gradient: speed comes from `torch.compile` fusing the
whole step into a few kernels (and, on a GPU, from CUDA graphs where they apply). Without a
working compiler, or with `trainer.compile: false`, the same functions run eagerly.

A step the update must not take (a non-finite loss or gradient, or the minibatch that trips
`early_stop_kl`) changes nothing: weights, Adam's moments and its step counts are left as they
were, decided inside the step, so no host synchronization is needed to decide it.

Each call returns one vector of metrics (see `minibatch_loss.metric_names`), so that what the
update keeps of a step is one small tensor (which CUDA graphs would otherwise overwrite on their
next replay).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Hashable, Iterator
from typing import Protocol

import torch
from torch import Tensor
from torch.optim.adam import adam as adam_step

from embodied_ppo.algo.adam_state import AdamState, FlatAdam
from embodied_ppo.algo.compiler import (
    _await_probe,
    _is_compile_failure,
    _missing_compiler,
    skipping_guards,
    step_compile_kwargs,
)
from embodied_ppo.algo.minibatch_loss import MinibatchLoss
from embodied_ppo.algo.schedules import adapt_learning_rate
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.model.actor_critic import ActorCritic

# The last three entries of `step`'s and `apply`'s vectors.
STEP_FIELDS = ("grad_norm", "skipped", "nonfinite")


class StepLoss(Protocol):
    """A minibatch loss the step can take in place of PPO's (`minibatch_loss.MinibatchLoss`):
    its metric `names` (with "loss" and "approx_kl" among them, which the step reads) and the
    loss with its metrics vector as a function of the policy's parameters and buffers."""

    names: list[str]

    def __call__(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        mb: tuple[Tensor, ...],
        weights: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """(loss, metrics vector) of minibatch `mb` with its aggregation `weights`."""
        ...


class GradientStep:
    """The update's gradient step for `policy`, with Adam.

    The step owns what it writes: the trainable parameters as one flat tensor, a working copy
    of the policy's (the loss takes them as views of it, through `torch.func`), and Adam's
    moments and step count, flat too (`adam_state.FlatAdam`). A step is one gradient vector,
    one clipping norm and one Adam update, and the compiled graph has a handful of inputs,
    each created once (under CUDA graphs their addresses never change). The policy's own
    parameters are read into the working copy when an update begins (`pull`) and written
    back, in place, when it ends (`push`), as an optimizer updates the parameters it was
    given; nothing else of the policy is changed. Checkpoints keep Adam's state in
    torch.optim.Adam's form (`state_dict`).

    `grads` computes one (micro-)batch's gradient and metrics; `apply` clips a (summed)
    gradient and takes the Adam step; `step` is both in one call (one compiled graph), for
    minibatches that are neither split into micro-batches nor reduced across processes.

    Args:
        settings: the algorithm and optimizer blocks; `compile` compiles the step with
            torch.compile (if compiling fails, no C++ compiler, no Triton, the step runs eagerly
            after one note to `notes`).
        reference: frozen reference policy of the KL loss (used when algo.use_kl_loss).
        loss: the minibatch loss (default: PPO's, `MinibatchLoss`); a distillation's trains the
            same parameters through the same step.
    """

    def __init__(
        self,
        policy: ActorCritic,
        settings: UpdateSettings,
        reference: ActorCritic | None = None,
        loss: StepLoss | None = None,
    ) -> None:
        algo, optim, compile = settings.algo, settings.optim, settings.compile
        self.policy, self.algo, self.optim = policy, algo, optim
        self.names = [n for n, p in policy.named_parameters() if p.requires_grad]
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.shapes = [p.shape for p in self.params]
        self.sizes = [p.numel() for p in self.params]
        # Where the Gaussian head's log-std parameter lies in the flat parameters: each step puts
        # it back into [LOG_STD_MIN, LOG_STD_MAX] (past the forward pass's clamp it would get
        # no gradient and stay there; below the floor the action noise rounds away).
        self.log_std_slice, offset = None, 0
        for name, size in zip(self.names, self.sizes, strict=True):
            if name == "log_std":
                self.log_std_slice = slice(offset, offset + size)
            offset += size
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])  # (P,)
        self.device = self.flat.device
        self.adam = FlatAdam(self.shapes, self.device, eps=optim.adam_eps)
        self.betas, self.eps = self.adam.betas, self.adam.eps
        self.weight_decay = self.adam.weight_decay
        self.lr = optim.lr  # the rate of the next update (the schedule sets it)
        self._lr = torch.zeros((), dtype=torch.float32, device=self.device)
        self.kl_target = optim.desired_kl  # the adaptive schedule's aim in the next update
        self._kl_target = torch.zeros((), dtype=torch.float32, device=self.device)
        mirror, distill = settings.mirror, settings.distill
        self.loss = loss or MinibatchLoss(policy, algo, reference, mirror, distill)
        self.metric_names = self.loss.names
        self.notes = settings.notes or sys.stdout
        # Compiled, the gradient is torch.func.grad's, which torch.compile traces; eager, the
        # same function's through autograd (the same kernels), which keeps torch's compiler
        # stack unimported: torch.func.grad imports it when first called, ~0.9 s of every
        # eager run's start.
        self.grad_fn = torch.func.grad(self._loss, has_aux=True) if compile else self._autograd
        self.compiled = False
        self._trusted: Hashable | None = None  # see `calls`
        self._impls = (self._grads_impl, self._apply_impl, self._step_impl)
        self._grads, self._apply, self._step = self._impls
        # CUDA graphs (reduce-overhead) reuse their output memory on the next replay.
        self.cudagraphs = compile and self.device.type == "cuda"
        if compile:
            # Each GradientStep keeps its own compiled graphs (a process may train several runs,
            # each with other shapes); a few per function: the last micro-batch of a minibatch
            # may have another size.
            kwargs = step_compile_kwargs(self.device)
            self._grads, self._apply, self._step = (torch.compile(f, **kwargs) for f in self._impls)
            self.compiled = True
            missing = _missing_compiler(self.device)
            if missing is not None:  # say so now rather than after seconds of tracing
                self._fall_back(missing)

    @property
    def capturable(self) -> bool:
        """Whether Adam runs in its graph-safe form (the step count stays a device tensor):
        torch's adam() refuses to be traced on a GPU without it, and the whole compiled step
        would run eagerly."""
        return self.device.type in ("cuda", "xpu")

    # ------------------------------------------------------------------ the step's own state
    def _views(self, flat: Tensor) -> list[Tensor]:
        return [v.view(shape) for v, shape in zip(flat.split(self.sizes), self.shapes, strict=True)]

    def _mark_static(self) -> None:
        """Under CUDA graphs, mark every tensor a step writes: a graph that writes an input not
        marked static is not captured (torch runs it without CUDA graphs), and a graph replays
        from the addresses it was captured with. The mark belongs to the tensor object, so the
        calls pass these very tensors, never an alias (`detach`)."""
        if self.cudagraphs:
            for t in (self.flat, *self.adam.tensors, self._lr, self._kl_target):
                torch._dynamo.mark_static_address(t)

    def pull(self) -> None:
        """Read the policy's parameters into the flat working copy (an update begins: they may
        have been loaded, broadcast or moved since the last one)."""
        device = self.params[0].device
        if device != self.device:  # the policy moved: the step's state follows it
            self.device = device
            self.flat = self.flat.to(device)
            self.adam.to(device)
            self._lr = self._lr.to(device)
            self._kl_target = self._kl_target.to(device)
        self._mark_static()
        with torch.no_grad():
            for view, p in zip(self._views(self.flat), self.params, strict=True):
                view.copy_(p)

    def push(self) -> None:
        """Write the flat parameters into the policy's, in place (an update ends, or the
        batch is about to be valued between epochs)."""
        with torch.no_grad():
            for p, view in zip(self.params, self._views(self.flat), strict=True):
                p.copy_(view)

    def state_dict(self) -> CheckpointState:
        """Adam's state and the learning rate, in torch.optim.Adam's form (see `adam_state`)."""
        return self.adam.state_dict(self.lr)

    def load_state_dict(self, state: CheckpointState) -> None:
        """Continue from `state_dict()` (or a torch.optim.Adam's state of the policy's
        parameters): Adam's moments, its step count and the learning rate."""
        self.lr = self.adam.load_state_dict(state)

    def learning_rate(self) -> Tensor:
        """The 0-d tensor the steps read their learning rate from, filled with `lr` (and the
        KL target's beside it, with `kl_target`).

        One tensor each for the life of this step, filled anew each update and marked static
        under CUDA graphs: a graph replays from the addresses it was captured with, and one that
        changes an input not marked static in place (the adaptive schedule's step) is not
        captured at all; a static input is read and written where it lies."""
        self._lr.fill_(self.lr)
        self._kl_target.fill_(self.kl_target)
        return self._lr

    # ------------------------------------------------------------------ the step, in torch
    def _loss(
        self, flat: Tensor, buffers: dict[str, Tensor], mb: tuple[Tensor, ...], weights: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The minibatch loss as a function of the flat parameters, and its metrics vector."""
        params = dict(zip(self.names, self._views(flat), strict=True))
        return self.loss(params, buffers, mb, weights)

    def _autograd(
        self, flat: Tensor, buffers: dict[str, Tensor], mb: tuple[Tensor, ...], weights: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(gradient of the loss in `flat`, metrics vector), as torch.func.grad gives them."""
        with torch.enable_grad():
            leaf = flat.detach().requires_grad_()
            loss, metrics = self._loss(leaf, buffers, mb, weights)
            (grad,) = torch.autograd.grad(loss, leaf)
        return grad, metrics.detach()

    def _grads_impl(
        self, flat: Tensor, mb: tuple[Tensor, ...], weights: Tensor
    ) -> tuple[Tensor, Tensor]:
        buffers = {n: b.detach() for n, b in self.policy.named_buffers()}
        return self.grad_fn(flat, buffers, mb, weights)

    def _apply_impl(
        self,
        flat: Tensor,
        grad: Tensor,
        loss: Tensor,
        approx_kl: Tensor,
        rates: tuple[Tensor, Tensor],
        adam: AdamState,
    ) -> Tensor:
        o, a = self.optim, self.algo
        lr, kl_target = rates  # the learning rate and the adaptive schedule's KL target
        norm = torch.linalg.vector_norm(grad)
        nonfinite = ~torch.isfinite(norm + loss)  # a non-finite loss can have finite gradients
        skip = nonfinite
        if a.early_stop_kl is not None:
            # The policy already moved too far from the behaviour policy: drop this minibatch.
            skip = skip | (approx_kl > a.early_stop_kl)
        if o.schedule == "adaptive":
            lr.copy_(
                torch.where(skip & ~nonfinite, lr, adapt_learning_rate(lr, approx_kl, kl_target, o))
            )
        coef = torch.ones_like(norm)
        if o.max_grad_norm is not None:  # the rule of torch.nn.utils.clip_grad_norm_
            coef = torch.clamp(o.max_grad_norm / (norm + 1e-6), max=1.0)
        grad = torch.where(skip, 0.0, grad * coef)
        with torch.no_grad():
            if torch.compiler.is_compiling():
                # In a graph: take the step, then put back whatever a skipped step changed (the
                # compiler fuses the selection into the update's own kernels).
                state = (flat, *adam)
                saved = [t.clone() for t in state]
                self._adam(flat, grad, adam, lr, fused=False, found_inf=None)
                for t, old in zip(state, saved, strict=True):
                    t.copy_(torch.where(skip, old, t))
            elif self.device.type in ("cpu", "cuda"):
                # Eagerly: torch's fused Adam skips the whole step where found_inf is set.
                self._adam(flat, grad, adam, lr, fused=True, found_inf=skip.float())
            elif not bool(skip):
                self._adam(flat, grad, adam, lr, fused=False, found_inf=None)
            if self.log_std_slice is not None:
                flat[self.log_std_slice].clamp_(LOG_STD_MIN, LOG_STD_MAX)
        return torch.stack([norm, skip.float(), nonfinite.float()])

    def _adam(
        self,
        flat: Tensor,
        grad: Tensor,
        adam: AdamState,
        lr: Tensor,
        fused: bool,
        found_inf: Tensor | None,
    ) -> None:
        exp_avg, exp_avg_sq, step = adam
        adam_step(
            [flat],
            [grad],
            [exp_avg],
            [exp_avg_sq],
            [],
            [step],
            foreach=False,
            fused=fused,
            found_inf=found_inf,
            capturable=self.capturable and not fused,
            amsgrad=False,
            beta1=self.betas[0],
            beta2=self.betas[1],
            lr=lr,
            weight_decay=self.weight_decay,
            eps=self.eps,
            maximize=False,
        )

    def _step_impl(
        self,
        flat: Tensor,
        mb: tuple[Tensor, ...],
        weights: Tensor,
        rates: tuple[Tensor, Tensor],
        adam: AdamState,
    ) -> Tensor:
        grad, metrics = self._grads_impl(flat, mb, weights)
        loss = metrics[self.metric_names.index("loss")]
        approx_kl = metrics[self.metric_names.index("approx_kl")]
        return torch.cat([metrics, self._apply_impl(flat, grad, loss, approx_kl, rates, adam)])

    # ------------------------------------------------------------------ calls
    def grads(self, mb: tuple[Tensor, ...], weights: Tensor) -> tuple[Tensor, Tensor]:
        """Flat gradient (P,) and metrics vector of one micro-batch, with its minibatch's
        aggregation weights."""
        grad, metrics = self._guarded(0, self.flat, mb, weights)
        if self.cudagraphs:
            return grad.clone(), metrics.clone()
        return grad, metrics

    def apply(self, grad: Tensor, loss: Tensor, approx_kl: Tensor) -> Tensor:
        """Clip `grad`, take the Adam step (or skip it); returns the STEP_FIELDS vector."""
        rates = (self._lr, self._kl_target)
        out = self._guarded(1, self.flat, grad, loss, approx_kl, rates, self.adam.tensors)
        return out.clone() if self.cudagraphs else out

    def step(self, mb: tuple[Tensor, ...], weights: Tensor) -> Tensor:
        """`grads` and `apply` of one whole minibatch in one call: metrics + STEP_FIELDS."""
        rates = (self._lr, self._kl_target)
        out = self._guarded(2, self.flat, mb, weights, rates, self.adam.tensors)
        return out.clone() if self.cudagraphs else out

    def will_compile(self) -> bool:
        """Whether the next update compiles (no update with its inputs has run yet)."""
        return self.compiled and self._trusted is None

    @contextlib.contextmanager
    def calls(self, signature: Hashable) -> Iterator[None]:
        """Context for one update's calls; `signature` names every shape and dtype its inputs
        will have (the batch's fields and the rollout length).

        Before each call of a compiled function, Dynamo checks each input against the guards
        of its graphs: ~0.1 ms on the CPU, a third of a 64x64 network's whole step. An update
        that ran to its end with a signature has compiled every graph such an update calls, and
        the next update with the same signature calls them with inputs of the same sizes,
        dtypes and devices; so those updates skip the guards that do not choose between graphs
        (`torch.compiler.set_stance(skip_guard_eval_unsafe=True)`). Anything else (a first
        update, another signature, parameters moved or replaced) runs with every guard.
        """
        if not self.compiled:
            yield
            return
        key = (signature, self.flat.device, self.flat.dtype, self.flat.shape)
        if key == self._trusted:
            with skipping_guards():
                yield
            return
        self._trusted = None
        yield  # an exception leaves the signature untrusted
        if self.compiled:  # not fallen back to eager meanwhile
            self._trusted = key

    def _guarded(self, which: int, *args: object) -> tuple[Tensor, Tensor] | Tensor:
        fn = (self._grads, self._apply, self._step)[which]
        if not self.compiled:
            return fn(*args)
        _await_probe()  # a compilation may follow: never two probes at once
        try:
            return fn(*args)
        except Exception as exc:  # compilation failed before anything ran: run eagerly
            if not _is_compile_failure(exc):
                raise
            self._fall_back(exc)
            return self._impls[which](*args)

    def _fall_back(self, exc: BaseException) -> None:
        cause = getattr(exc, "inner_exception", None) or exc  # BackendCompilerFailed wraps it
        first = f"{type(cause).__name__}: {first_line(cause)}"
        print(
            f"note: trainer.compile: the update could not be compiled ({first}); "
            "it runs eagerly (same results, slower)",
            file=self.notes,
            flush=True,
        )
        self.compiled = self.cudagraphs = False
        self.grad_fn = self._autograd
        self._grads, self._apply, self._step = self._impls
