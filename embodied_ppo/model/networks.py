"""MLP building blocks and initialization."""

from __future__ import annotations

import math

from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


def mlp(
    in_dim: int, hidden_sizes: list[int], activation: str, orthogonal: bool = True
) -> nn.Sequential:
    """Linear + activation layers; orthogonal weights with gain sqrt(2) and zero biases."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layer = nn.Linear(in_dim, size)
        if orthogonal:
            init_linear(layer, math.sqrt(2.0))
        layers += [layer, ACTIVATIONS[activation]()]
        in_dim = size
    return nn.Sequential(*layers)


def init_linear(layer: nn.Linear, gain: float, bias: float = 0.0) -> nn.Linear:
    """Orthogonal weight with `gain`, constant bias."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer
