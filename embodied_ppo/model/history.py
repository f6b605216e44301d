"""An observation history as a recurrent core: the MLP reads the last K steps' inputs side by
side, and the K - 1 before this step are the core's state.

Written as a core with the interface of `recurrent.RecurrentCore` (a flat state per env, zeroed
where an episode starts; `forward` over time-major sequences, `step` for one step), a history
travels the paths a recurrent policy's state travels: collection carries it, the rollout
buffer stores it before each step, the update replays chunks from it, checkpoints keep it, and a
deployed policy takes it and returns the next (docs/recurrent.md). It has no parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from embodied_ppo.model.recurrent import RecurrentCore
from embodied_ppo.model.spec import RecurrentSpec


class HistoryCore(nn.Module):
    """The last `length` inputs (B, length x in), oldest first; before an episode's first
    steps the missing ones are zeros.

    Its state (B, (length - 1) x in) holds the inputs of the steps before this one, oldest
    first.
    """

    def __init__(self, in_dim: int, length: int) -> None:
        super().__init__()
        if length < 2:
            raise ValueError(f"a history holds at least 2 steps, got {length}")
        self.in_dim, self.length = in_dim, length
        self.state_size = (length - 1) * in_dim
        self.out_dim = length * in_dim

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The history (B, out_dim) after input x (B, in) and the new state (B, S)."""
        out = torch.cat([state, x], dim=-1)
        return out, out[:, self.in_dim :]

    def forward(
        self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Histories (L, B, out_dim) and the state after the last step, for inputs x (L, B, in),
        the state before the first step (B, S) and episode starts (L, B): where starts[t] is 1
        the state is zeroed before step t."""
        keep = (1.0 - starts.to(x.dtype)).unsqueeze(-1)  # (L, B, 1)
        outputs = []
        for t in range(x.shape[0]):
            out, state = self.step(x[t], state * keep[t])
            outputs.append(out)
        return torch.stack(outputs), state


def make_core(spec: RecurrentSpec, in_dim: int) -> RecurrentCore | HistoryCore:
    """The core `spec` describes over inputs of `in_dim`: an LSTM or GRU, or a history of
    `spec.size` steps."""
    if spec.kind == "history":
        return HistoryCore(in_dim, spec.size)
    return RecurrentCore(spec.kind, in_dim, spec.size, spec.layers)
