"""Adam's state as the gradient step keeps it, and as checkpoints keep it.

The step keeps Adam's moments flat, one (P,) tensor each for P trainable parameters, beside one
0-d float32 step count (the parameters step together). Checkpoints keep the form of
`torch.optim.Adam.state_dict()`: per-parameter moments numbered in the policy's parameter
order, the step count, and one parameter group with the learning rate and the constants. So a
checkpoint written while a `torch.optim.Adam` held this state loads, and a checkpoint written
now loads into a `torch.optim.Adam` of the policy's parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor

from embodied_ppo.core.types import CheckpointState

# (moments, second moments, step count): the tensors a step reads and writes.
AdamState = tuple[Tensor, Tensor, Tensor]


class FlatAdam:
    """Adam's state for P flat parameters: created once on their device, then only written
    in place (so a CUDA graph may keep their addresses), or moved whole with `to`.

    Args:
        shapes: the parameters' shapes, in order (their flat sizes add up to P).
        betas, eps, weight_decay: Adam's constants (torch's defaults but `eps`).
    """

    def __init__(
        self,
        shapes: list[torch.Size],
        device: torch.device,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        self.shapes = shapes
        self.sizes = [s.numel() for s in shapes]
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        total = sum(self.sizes)
        self.tensors: AdamState = (
            torch.zeros(total, device=device),
            torch.zeros(total, device=device),
            torch.zeros((), dtype=torch.float32, device=device),
        )

    def to(self, device: torch.device) -> None:
        """Move the state to `device` (new tensors there, the same values)."""
        exp_avg, exp_avg_sq, step = self.tensors
        self.tensors = (exp_avg.to(device), exp_avg_sq.to(device), step.to(device))

    def state_dict(self, lr: float) -> CheckpointState:
        """The state in torch.optim.Adam's form, learning rate `lr` (copies, not views of the
        live tensors: the next step does not change what was returned)."""
        exp_avg, exp_avg_sq, step = self.tensors
        first = exp_avg.detach().split(self.sizes)
        second = exp_avg_sq.detach().split(self.sizes)
        count = step.detach().cpu()
        # A step count per parameter, as torch's Adam keeps them (one tensor shared by all would
        # be counted once per parameter by a torch.optim.Adam that loads it).
        state = {
            i: {
                "step": count.clone(),
                "exp_avg": m1.reshape(s).clone(),
                "exp_avg_sq": m2.reshape(s).clone(),
            }
            for i, (m1, m2, s) in enumerate(zip(first, second, self.shapes, strict=True))
        }
        group = {
            "lr": lr,
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "amsgrad": False,
            "maximize": False,
            "foreach": None,
            "capturable": False,
            "differentiable": False,
            "fused": None,
            "decoupled_weight_decay": False,
            "params": list(range(len(self.shapes))),
        }
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, saved: CheckpointState) -> float:
        """Copy a state in torch.optim.Adam's form into this one; returns its learning rate.

        A state with no entries (saved before the first step) is Adam's start: zero moments,
        step 0. Raises ValueError where the state does not fit these parameters."""
        groups = saved["param_groups"]
        n = len(self.shapes)
        if len(groups) != 1 or len(groups[0]["params"]) != n:
            got = [len(g["params"]) for g in groups]
            raise ValueError(
                f"the optimizer state holds parameter groups of {got} parameters, this policy "
                f"has one group of {n}"
            )
        exp_avg, exp_avg_sq, step = self.tensors
        entries = saved["state"]
        if not entries:
            for t in self.tensors:
                t.zero_()
            return float(groups[0]["lr"])
        order = groups[0]["params"]  # the ids the entries are keyed by, in parameter order
        if any(i not in entries for i in order):
            raise ValueError("the optimizer state has no moments for some of the parameters")
        loaded = [entries[i] for i in order]
        for k, (entry, shape) in enumerate(zip(loaded, self.shapes, strict=True)):
            for key in ("exp_avg", "exp_avg_sq"):
                if tuple(entry[key].shape) != tuple(shape):
                    raise ValueError(
                        f"the optimizer state's {key} of parameter {k} has shape "
                        f"{tuple(entry[key].shape)}, the parameter {tuple(shape)}"
                    )
        with torch.no_grad():
            exp_avg.copy_(torch.cat([e["exp_avg"].reshape(-1) for e in loaded]))
            exp_avg_sq.copy_(torch.cat([e["exp_avg_sq"].reshape(-1) for e in loaded]))
            step.copy_(torch.as_tensor(loaded[0]["step"], dtype=torch.float32))
        return float(groups[0]["lr"])
