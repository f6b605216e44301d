"""A recurrent core (LSTM or GRU) with a flat state that resets where an episode starts.

The cells are written out in a few tensor operations (the equations of torch's nn.LSTM and
nn.GRU, same parameter layout), so one module serves training (sequences, compiled), collection
(one step) and export (TorchScript and ONNX trace it like any other layer).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

KINDS = ("lstm", "gru")


class _Cell(nn.Module):
    """One layer: the input projection of a whole sequence at once, then one step at a time.

    Its state is flat (B, parts x size): [h, c] for an LSTM, h for a GRU.
    """

    def __init__(self, lstm: bool, in_dim: int, size: int) -> None:
        super().__init__()
        self.lstm, self.size = lstm, size
        gates = 4 if lstm else 3  # LSTM: input, forget, cell, output; GRU: reset, update, new
        self.weight_ih = nn.Parameter(torch.empty(gates * size, in_dim))
        self.weight_hh = nn.Parameter(torch.empty(gates * size, size))
        self.bias_ih = nn.Parameter(torch.zeros(gates * size))
        self.bias_hh = nn.Parameter(torch.zeros(gates * size))
        nn.init.orthogonal_(self.weight_ih)
        nn.init.orthogonal_(self.weight_hh)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The input projection (..., gates x size) of inputs (..., in): any leading shape."""
        return F.linear(x, self.weight_ih, self.bias_ih)

    def recur(self, xw: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output h, new state) from the projected input (B, gates x size) and the state."""
        if self.lstm:
            h, c = self.lstm_step(xw, *state.split(self.size, dim=1))
            return h, torch.cat([h, c], dim=1)
        h = self.gru_step(xw, state)
        return h, h

    def lstm_step(
        self, xw: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, c) after one LSTM step: nn.LSTM's equations, its gates split in one operation."""
        gates = xw + F.linear(h, self.weight_hh, self.bias_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def gru_step(self, xw: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """h after one GRU step: nn.GRU's equations."""
        hr, hz, hn = F.linear(h, self.weight_hh, self.bias_hh).chunk(3, dim=1)
        xr, xz, xn = xw.chunk(3, dim=1)
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return (1.0 - z) * n + z * h


class RecurrentCore(nn.Module):
    """An LSTM or GRU of `layers` layers, its state kept as one flat tensor (B, state_size).

    For an LSTM the state holds (h, c) of every layer, for a GRU h of every layer, layer by
    layer; flat either way, so buffers, checkpoints and exported policies treat both alike. The
    state at an episode's start is zeros.
    """

    def __init__(self, kind: str, in_dim: int, size: int, layers: int) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown recurrent core {kind!r}, allowed: {', '.join(KINDS)}")
        self.kind, self.size, self.layers = kind, size, layers
        self.out_dim = size  # what the MLP after it reads
        self.layer_state = size * (2 if kind == "lstm" else 1)
        self.state_size = layers * self.layer_state
        self.cells = nn.ModuleList(
            _Cell(kind == "lstm", in_dim if i == 0 else size, size) for i in range(layers)
        )

    def forward(
        self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs (L, B, size) and the state after the last step, for inputs x (L, B, in),
        the state before the first step (B, S) and episode starts (L, B): where starts[t] is
        1 the state is zeroed before step t, so nothing of one episode reaches the next."""
        keep = (1.0 - starts.to(x.dtype)).unsqueeze(-1)  # (L, B, 1)
        S = self.layer_state
        new_states = []
        seq = x
        for i, cell in enumerate(self.cells):
            s = state[:, i * S : (i + 1) * S]
            xw = cell.project(seq)  # every step's input projection in one product
            outputs = []
            if cell.lstm:  # h and c apart inside the loop: no concatenation per step
                h, c = s.split(self.size, dim=1)
                for t in range(x.shape[0]):
                    h, c = cell.lstm_step(xw[t], h * keep[t], c * keep[t])
                    outputs.append(h)
                s = torch.cat([h, c], dim=1)
            else:
                for t in range(x.shape[0]):
                    s = cell.gru_step(xw[t], s * keep[t])
                    outputs.append(s)
            seq = torch.stack(outputs)
            new_states.append(s)
        return seq, torch.cat(new_states, dim=1)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: output (B, size) and new state for input (B, in) and state (B, S)."""
        S = self.layer_state
        new_states = []
        h = x
        for i, cell in enumerate(self.cells):
            h, s = cell.recur(cell.project(h), state[:, i * S : (i + 1) * S])
            new_states.append(s)
        return h, torch.cat(new_states, dim=1)
