"""The inference network as bytes: TorchScript (what libtorch loads) and ONNX (torch's
torch.export-based exporter). Both write the same `InferenceNet` that evaluation runs."""

from __future__ import annotations

import copy
import io
import logging
import warnings

import torch
from torch import nn

from embodied_ppo.core.errors import ExportError
from embodied_ppo.model.inference import (
    ActorCore,
    InferenceNet,
    actor_of,
    inference_net,
    is_dict,
    is_recurrent,
)

FORMATS = ("torchscript", "onnx")


ONNX_OPSET = 18


def _require_onnx() -> None:
    missing = []
    for name in ("onnx", "onnxscript"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ExportError(
            f"ONNX export needs {' and '.join(missing)} (not installed): pip install 'embodied-ppo[onnx]'"
        )


def example_inputs(net: InferenceNet, batch: int = 2) -> list[torch.Tensor]:
    """Zero inputs of `net` with a leading batch: the observation (or one tensor per actor
    key, in order), then a recurrent state."""
    if is_dict(net):
        example = [
            torch.zeros(batch, *shape, dtype=torch.uint8 if image else torch.float32)
            for shape, image in zip(net.shapes, net.images, strict=True)
        ]
    else:
        example = [torch.zeros(batch, net.obs_dim)]
    if is_recurrent(net):
        example.append(torch.zeros(batch, net.state_size))
    return example


def torchscript_bytes(net: InferenceNet) -> bytes:
    """The network, serialized for torch.jit.load and libtorch: its input checks compiled by
    TorchScript around a trace of the trained module's actor (the actor runs no Python-level
    branches on data, so its trace is its computation)."""
    actor = actor_of(net)
    example = example_inputs(net)
    inputs = dict(zip(net.keys, example, strict=False)) if is_dict(net) else example[0]
    args = (inputs, example[-1]) if is_recurrent(net) else (inputs,)
    with warnings.catch_warnings():
        # torch.jit is deprecated in favor of torch.export, but TorchScript is still what
        # libtorch (C++) loads; the warnings would only confuse users.
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(ActorCore(copy.deepcopy(actor).cpu()), args, check_trace=False)
        scripted = torch.jit.script(inference_net(actor, core=traced))
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
    return buffer.getvalue()


class _OnnxInputs(nn.Module):
    """The inference network with positional tensor inputs (ONNX graphs take named tensors):
    the observation, or one input per key of a Dict observation, then a recurrent state."""

    def __init__(self, net: InferenceNet) -> None:
        super().__init__()
        self.net, self.dict_obs, self.recurrent = net, is_dict(net), is_recurrent(net)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The network's output for its inputs in `onnx_io` order: the action, and a recurrent
        policy's new state."""
        parts = tensors[:-1] if self.recurrent else tensors
        obs = dict(zip(self.net.keys, parts, strict=True)) if self.dict_obs else parts[0]
        return self.net(obs, tensors[-1]) if self.recurrent else self.net(obs)


def onnx_io(net: InferenceNet) -> tuple[list[str], list[str]]:
    """The ONNX graph's input and output names: ``obs`` (or the actor's keys), ``state`` for a
    recurrent policy; ``action``, and ``state_out`` for a recurrent policy."""
    inputs = list(net.keys) if is_dict(net) else ["obs"]
    if is_recurrent(net):
        return [*inputs, "state"], ["action", "state_out"]
    return inputs, ["action"]


def onnx_bytes(net: InferenceNet) -> bytes:
    """ONNX model with a dynamic batch: input ``obs`` (batch, obs_dim) float32, or for Dict
    observations one input per actor key (named after it, batched), and ``state``
    (batch, state_size) for a recurrent policy; output ``action`` (and ``state_out``)."""
    _require_onnx()
    net = copy.deepcopy(net).cpu()
    batch = torch.export.Dim("batch")
    example = example_inputs(net)
    names, outputs = onnx_io(net)
    # The exporter is chatty (missing torchvision ops, pytree deprecations); none of it matters here.
    noisy = logging.getLogger("torch.onnx")
    level = noisy.level
    noisy.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                _OnnxInputs(net),
                tuple(example),
                None,
                input_names=names,
                output_names=outputs,
                opset_version=ONNX_OPSET,
                # One entry per forward parameter: *tensors, one batch dimension per tensor.
                dynamic_shapes=(tuple({0: batch} for _ in example),),
                dynamo=True,
                verbose=False,
            )
            buffer = io.BytesIO()
            program.save(buffer, external_data=False)
    finally:
        noisy.setLevel(level)
    return buffer.getvalue()
