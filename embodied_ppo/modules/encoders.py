"""Encoders of Dict observations: vector keys as they are, image keys through a CNN."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

# (kernel, stride) of the CNN's layers: a small Nature-DQN-style stack; further layers 3x3/1.
CONV_LAYERS = ((8, 4), (4, 2), (3, 1))


def _conv(layer: int) -> tuple[int, int]:
    return CONV_LAYERS[layer] if layer < len(CONV_LAYERS) else (3, 1)


def cnn_output_size(shape: tuple[int, ...] | list[int], layers: int) -> int:
    """Positions (height x width) the CNN's last layer has for an (H, W, C) image (<1: none)."""
    h, w = int(shape[0]), int(shape[1])
    for i in range(layers):
        k, s = _conv(i)
        h, w = (h - k) // s + 1, (w - k) // s + 1
        if h < 1 or w < 1:
            return 0
    return h * w


class ImageEncoder(nn.Module):
    """(B, H, W, C) uint8 images, channels last, scaled to [0, 1] inside -> (B, features).

    Convolutions with ReLU (see CONV_LAYERS), flattened, then a linear layer with ReLU.
    """

    def __init__(
        self, shape: tuple[int, ...] | list[int], channels: list[int], features: int
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = int(shape[2])
        for i, out in enumerate(channels):
            k, s = _conv(i)
            conv = nn.Conv2d(in_channels, out, k, stride=s)
            nn.init.orthogonal_(conv.weight, math.sqrt(2.0))
            nn.init.zeros_(conv.bias)
            layers += [conv, nn.ReLU()]
            in_channels = out
        self.convs = nn.Sequential(*layers)
        flat = cnn_output_size(shape, len(channels)) * in_channels
        self.out = nn.Linear(flat, features)
        nn.init.orthogonal_(self.out.weight, math.sqrt(2.0))
        nn.init.zeros_(self.out.bias)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).to(torch.float32) / 255.0  # (B, C, H, W) in [0, 1]
        x = self.convs(x).flatten(1)
        return torch.relu(self.out(x))


class DictEncoder(nn.Module):
    """The features of the keys `keys` of a (normalized) Dict observation: the vector keys as
    they are, then each image key through its own ImageEncoder, concatenated (in sorted key
    order within each kind). TorchScript-friendly (it is part of the exported policy)."""

    def __init__(
        self,
        keys: list[str],
        obs_keys: dict[str, dict[str, Any]],
        channels: list[int],
        features: int,
    ) -> None:
        super().__init__()
        keys = sorted(keys)
        self.vector_keys = [k for k in keys if obs_keys[k]["kind"] == "vector"]
        self.images = nn.ModuleDict(
            {
                k: ImageEncoder(obs_keys[k]["shape"], channels, features)
                for k in keys
                if obs_keys[k]["kind"] == "image"
            }
        )
        self.out_dim = sum(int(obs_keys[k]["shape"][0]) for k in self.vector_keys) + features * len(
            self.images
        )

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [obs[k] for k in self.vector_keys]
        for k, encoder in self.images.items():
            parts.append(encoder(obs[k]))
        return torch.cat(parts, dim=-1)
