"""The `model:` block of the configuration: the actor-critic's layers, heads, encoders and
recurrent core, each key with its default and its one-line meaning, as in `config.schema`
(docs/configuration.md is generated from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from embodied_ppo.config.keys import key as _key


@dataclass(frozen=True)
class ModelConfig:
    """The `model:` block."""

    share_backbone: bool = _key(True, "one MLP for actor and critic; false: separate MLPs")
    hidden_sizes: list[int] = _key(lambda: [64, 64], "widths of the MLP's hidden layers")
    activation: Literal["tanh", "relu", "elu", "gelu", "silu", "leaky_relu"] = _key(
        "tanh", "activation of the hidden layers"
    )
    head: Literal["auto", "gaussian", "categorical"] = _key(
        "auto", "action head; auto: from the action space (Box: gaussian, Discrete: categorical)"
    )
    log_std_init: float = _key(0.0, "initial log-std of the Gaussian head, in [-5, 2]")
    state_dependent_std: bool = _key(
        False, "log-std computed from the features instead of a learned vector"
    )
    init: Literal["orthogonal", "torch_default"] = _key(
        "orthogonal",
        "orthogonal (gain sqrt 2 hidden, 0.01 action head, 1 value head) or torch_default "
        "(torch's own); a recurrent core is orthogonal with zero biases under either",
    )
    init_from: str | None = _key(
        None,
        "a run or checkpoint whose weights and normalizer this run starts from: the same "
        "policy, or one whose actor lacks model.actor_group_keys (grown into this one)",
    )
    actor_obs_keys: list[str] | None = _key(
        None, "Dict observations: keys the actor reads (and a deployed policy takes); null: all"
    )
    critic_obs_keys: list[str] | None = _key(
        None, "Dict observations: keys the critic reads; null: the actor's"
    )
    cnn_channels: list[int] = _key(
        lambda: [16, 32, 32], "image keys: channels of each convolution (ReLU after each)"
    )
    cnn_kernels: list[int] | None = _key(None, "kernel size per convolution; null: 8, 4, then 3")
    cnn_strides: list[int] | None = _key(None, "stride per convolution; null: 4, 2, then 1")
    cnn_head: Literal["flatten", "spatial_softmax"] = _key(
        "flatten", "last map to a vector: flattened, or keypoints by a spatial softmax"
    )
    cnn_features: int = _key(128, "features each image key contributes")
    actor_group_keys: list[str] | None = _key(None, "actor's vector keys read by their own MLP")
    actor_group_hidden_sizes: list[int] = _key(lambda: [64], "actor_group_keys: their MLP's widths")
    actor_group_features: int = _key(16, "actor_group_keys: the features their MLP outputs")
    actor_group_zero_init: bool = _key(False, "actor_group_keys: last layer starts at 0")
    recurrent: Literal["lstm", "gru", "history"] | None = _key(
        None,
        "recurrent core between encoders and MLP: lstm, gru, history (the last "
        "history_length inputs side by side) or null (none)",
    )
    recurrent_size: int = _key(128, "lstm, gru: units of each recurrent layer")
    recurrent_layers: int = _key(1, "lstm, gru: stacked recurrent layers")
    history_length: int = _key(
        4,
        "history: the steps whose inputs the MLP reads side by side, this one and those before "
        "it (zeros before an episode's first step)",
    )
