"""Encoders of Dict observations: vector keys as they are (or a group of them through its own
MLP), image keys through a CNN."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from embodied_ppo.model.networks import mlp

# (kernel, stride) of the CNN's layers when none are given: a small Nature-DQN-style stack;
# further layers 3x3 / 1.
CONV_LAYERS = ((8, 4), (4, 2), (3, 1))


CNN_HEADS = ("flatten", "spatial_softmax")


@dataclass
class CNNSpec:
    """The architecture of each image key's CNN.

    Attributes:
        channels: output channels of each convolution (each followed by a ReLU).
        features: size of the encoder's output (a linear layer with ReLU).
        kernels: kernel size of each convolution (None: CONV_LAYERS' kernels).
        strides: stride of each convolution (None: CONV_LAYERS' strides).
        head: how the last feature map becomes a vector: "flatten" (every position of every
            channel), or "spatial_softmax" (each channel's expected image coordinates under a
            softmax over its positions: where that channel sees something, 2 numbers a channel).
    """

    channels: list[int]
    features: int
    kernels: list[int] | None = None
    strides: list[int] | None = None
    head: str = "flatten"
    layers: list[tuple[int, int]] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.channels)
        default = [CONV_LAYERS[i] if i < len(CONV_LAYERS) else (3, 1) for i in range(n)]
        kernels = self.kernels if self.kernels is not None else [k for k, _ in default]
        strides = self.strides if self.strides is not None else [s for _, s in default]
        if len(kernels) != n or len(strides) != n:
            raise ValueError(
                f"a CNN of {n} layers needs {n} kernels and strides, got {len(kernels)} and "
                f"{len(strides)}"
            )
        if self.head not in CNN_HEADS:
            raise ValueError(f"CNN head {self.head!r}: expected one of {', '.join(CNN_HEADS)}")
        self.layers = [(int(k), int(s)) for k, s in zip(kernels, strides)]

    def output_hw(self, shape: tuple[int, ...] | list[int]) -> tuple[int, int]:
        """(height, width) of the last feature map for an (H, W, C) image ((0, 0): none)."""
        h, w = int(shape[0]), int(shape[1])
        for k, s in self.layers:
            h, w = (h - k) // s + 1, (w - k) // s + 1
            if h < 1 or w < 1:
                return 0, 0
        return h, w


def cnn_output_size(shape: tuple[int, ...] | list[int], cnn: CNNSpec) -> int:
    """Positions (height x width) the CNN's last layer has for an (H, W, C) image (0: none)."""
    h, w = cnn.output_hw(shape)
    return h * w


class SpatialSoftmax(nn.Module):
    """(B, C, H, W) feature maps -> (B, 2C): for each channel, the expected (x, y) position in
    [-1, 1] under a softmax of its activations over the H x W positions (a learned
    temperature, one for all channels). A channel that fires on one object gives that object's
    image coordinates, finer than the map's grid: the keypoints of Levine et al. (2016)."""

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(
            torch.linspace(-1.0, 1.0, height), torch.linspace(-1.0, 1.0, width), indexing="ij"
        )
        # (H*W, 2): x and y of each position; not state: rebuilt from the spec.
        self.register_buffer("grid", torch.stack([xs, ys], dim=-1).reshape(-1, 2), persistent=False)
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Keypoints (B, 2C): each channel's expected (x, y) of feature maps (B, C, H, W)."""
        b, c = x.shape[0], x.shape[1]
        logits = x.reshape(b, c, -1) / self.log_temperature.exp()  # (B, C, H*W)
        weights = torch.softmax(logits, dim=-1)
        return (weights @ self.grid).reshape(b, 2 * c)  # (B, C, 2) -> (B, 2C)


class ImageEncoder(nn.Module):
    """(B, H, W, C) uint8 images, channels last, scaled to [0, 1] inside -> (B, features).

    Convolutions with ReLU, the head (flatten or spatial softmax, see CNNSpec), then a linear
    layer with ReLU.
    """

    def __init__(self, shape: tuple[int, ...] | list[int], cnn: CNNSpec) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = int(shape[2])
        for out, (k, s) in zip(cnn.channels, cnn.layers):
            conv = nn.Conv2d(in_channels, out, k, stride=s)
            nn.init.orthogonal_(conv.weight, math.sqrt(2.0))
            nn.init.zeros_(conv.bias)
            layers += [conv, nn.ReLU()]
            in_channels = out
        h, w = cnn.output_hw(shape)
        if cnn.head == "spatial_softmax":
            # The keypoints read the last convolution before its ReLU: a softmax needs logits
            # that can be negative, not a map clipped at zero.
            layers.pop()
            self.head: nn.Module = SpatialSoftmax(h, w)
            flat = 2 * in_channels
        else:
            self.head = nn.Flatten(1)
            flat = h * w * in_channels
        self.convs = nn.Sequential(*layers)
        self.out = nn.Linear(flat, cnn.features)
        nn.init.orthogonal_(self.out.weight, math.sqrt(2.0))
        nn.init.zeros_(self.out.bias)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """Features (B, features) of uint8 images (B, H, W, C)."""
        x = image.permute(0, 3, 1, 2).to(torch.float32) / 255.0  # (B, C, H, W) in [0, 1]
        x = self.head(self.convs(x))  # (B, flat)
        return torch.relu(self.out(x))


@dataclass(frozen=True)
class KeyGroupSpec:
    """A group of vector keys read through their own MLP instead of as they are: the keys
    (sorted) concatenated, then Linear + activation layers of `hidden_sizes` and of
    `features`. Many inputs become a few features before the backbone (e.g. a teacher's
    privileged state). With `zero_init`, the last layer's weights and bias start at 0: the
    features are 0 whatever the keys say until training grows them, so the backbone starts as
    the policy without the keys (every activation is 0 at 0)."""

    keys: tuple[str, ...]
    hidden_sizes: tuple[int, ...]
    features: int
    zero_init: bool = False


class ObsKeyLike(Protocol):
    """One key of a Dict observation as the encoder reads it (model.spec.ObsKeySpec)."""

    shape: tuple[int, ...]
    kind: str


class DictEncoder(nn.Module):
    """The features of the keys `keys` of a (normalized) Dict observation: the vector keys as
    they are, then the keys of `group` (if any) through their own MLP, then each image key
    through its own ImageEncoder, concatenated (in sorted key order within each kind).
    TorchScript-friendly (it is part of the exported policy).

    Args:
        keys: the keys read.
        obs_keys: every key's shape and kind.
        cnn: the CNN of image keys.
        group: vector keys (a subset of `keys`) read through their own MLP, with `activation`
            and orthogonal initialization when `orthogonal` (see networks.mlp).
    """

    def __init__(
        self,
        keys: list[str],
        obs_keys: Mapping[str, ObsKeyLike],
        cnn: CNNSpec,
        group: KeyGroupSpec | None = None,
        *,
        activation: str = "elu",
        orthogonal: bool = True,
    ) -> None:
        super().__init__()
        keys = sorted(keys)
        grouped = sorted(group.keys) if group is not None else []
        self.vector_keys = [k for k in keys if obs_keys[k].kind == "vector" and k not in grouped]
        self.group_keys = grouped
        # An empty Sequential when there is no group: no parameters, so the state dict of a
        # policy without a group is what it has always been.
        self.group = nn.Sequential()
        group_out = 0
        if group is not None:
            width = sum(int(obs_keys[k].shape[0]) for k in grouped)
            sizes = [*group.hidden_sizes, group.features]
            self.group = mlp(width, sizes, activation, orthogonal)
            group_out = group.features
            if group.zero_init:
                # After the draws of every layer's initialization, so that the rest of the
                # policy starts from the same weights with or without it.
                last = self.group[-2]
                assert isinstance(last, nn.Linear)
                nn.init.zeros_(last.weight)
                nn.init.zeros_(last.bias)
        self.images = nn.ModuleDict(
            {k: ImageEncoder(obs_keys[k].shape, cnn) for k in keys if obs_keys[k].kind == "image"}
        )
        self.out_dim = (
            sum(int(obs_keys[k].shape[0]) for k in self.vector_keys)
            + group_out
            + cnn.features * len(self.images)
        )

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Features (B, out_dim) of a batch of (normalized) Dict observations."""
        parts = [obs[k] for k in self.vector_keys]
        if len(self.group_keys) > 0:
            parts.append(self.group(torch.cat([obs[k] for k in self.group_keys], dim=-1)))
        for k, encoder in self.images.items():
            parts.append(encoder(obs[k]))
        return torch.cat(parts, dim=-1)
