"""The deployable policy: raw observation in, action in the environment's units out.

Everything here needs torch only (no gymnasium, mujoco or tensorboard), so a robotics stack can
`import embodied_ppo; embodied_ppo.load_policy(path)` with nothing else of ours installed.

The same :class:`PolicyNet` is what evaluation runs, what `load_policy` returns (wrapped for numpy
input) and what `export` writes as TorchScript or ONNX, so all of them act identically:
normalizer folded in as float32 constants, deterministic (Gaussian mean / categorical argmax),
Gaussian actions clipped to the action bounds.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from embodied_ppo.checkpoint import atomic_write_bytes, read_checkpoint
from embodied_ppo.errors import CheckpointError, UserError
from embodied_ppo.modules.actor_critic import ActorCritic

FORMATS = ("torchscript", "onnx")
ONNX_OPSET = 18


class ObservationError(UserError, ValueError):
    """An observation the policy cannot take (wrong shape or dtype)."""


class ExportError(UserError):
    """An export that cannot be done (unsupported format, missing optional dependency)."""


class PolicyNet(nn.Module):
    """Deterministic inference network, TorchScript- and torch.export-friendly.

    Takes a float tensor of shape (obs_dim,) or (B, obs_dim) and returns the action with the
    matching leading shape: (A,) / (B, A) float32 for a Gaussian policy, () / (B,) int64 for a
    categorical one.
    """

    # No class-level attribute annotations: with postponed evaluation TorchScript cannot read
    # them; it infers int/bool/float from the values set in __init__.

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        spec = policy.spec
        self.obs_dim = int(spec["obs_dim"])
        self.is_gaussian = bool(policy.is_gaussian)
        # The training module's own normalizer, statistics included: its forward never updates
        # them, so the copy is frozen, and it computes exactly what training computed.
        self.obs_normalizer = copy.deepcopy(policy.obs_normalizer)
        self.backbone = copy.deepcopy(policy.actor_backbone)
        self.head = copy.deepcopy(policy.action_head)
        self.register_buffer("action_low", policy.action_low.detach().to(torch.float32).clone())
        self.register_buffer("action_high", policy.action_high.detach().to(torch.float32).clone())
        _freeze(self)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x, single = self.inputs(obs)
        return self.decide(x, single)

    def inputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """The checked, normalized observation (B, obs_dim), and whether it was unbatched."""
        if obs.dim() < 1 or obs.dim() > 2 or obs.shape[-1] != self.obs_dim:
            raise ValueError(
                "observation: expected shape ("
                + str(self.obs_dim)
                + ",) or (batch, "
                + str(self.obs_dim)
                + "), got "
                + str(list(obs.shape))
            )
        if not obs.is_floating_point():
            raise ValueError(
                "observation: expected a floating-point tensor (float32), got " + str(obs.dtype)
            )
        single = obs.dim() == 1
        x = obs.to(torch.float32)
        if single:
            x = x.unsqueeze(0)
        return self.obs_normalizer(x), single

    def decide(self, x: torch.Tensor, single: bool) -> torch.Tensor:
        """The action for the backbone's input features (B, F)."""
        out = self.head(self.backbone(x))  # (B, A) means or logits
        return _action(out, self.is_gaussian, self.action_low, self.action_high, single)


def _action(
    out: torch.Tensor, gaussian: bool, low: torch.Tensor, high: torch.Tensor, single: bool
) -> torch.Tensor:
    """The deterministic action from the head's output (B, A): the mean clipped to the action
    bounds, or the most likely category; (A,) or () for a single observation."""
    action = torch.maximum(torch.minimum(out, high), low) if gaussian else out.argmax(dim=-1)
    if single:
        action = action.squeeze(0)
    return action


def _freeze(net: nn.Module) -> None:
    """Eval mode, no gradients, and every tensor in storage of its own: the training module's
    parameters are views of one flat tensor, which would otherwise travel with each copy."""
    for t in list(net.parameters()) + list(net.buffers()):
        t.data = t.data.clone()
    net.eval()
    net.requires_grad_(False)


class DictPolicyNet(nn.Module):
    """PolicyNet for Dict observations: the actor's keys in, the action out.

    Takes a dict of tensors, one per key of `keys` (extra keys are ignored: a privileged
    critic's keys never reach the actor), each batched (B, *shape) or single (*shape); vector
    keys float, image keys (H, W, C) uint8. Returns the action as PolicyNet does.
    """

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        spec = policy.spec
        self.keys = list(policy.actor_keys)
        self.shapes = [list(spec["obs_keys"][k]["shape"]) for k in self.keys]
        self.images = [spec["obs_keys"][k]["kind"] == "image" for k in self.keys]
        self.is_gaussian = bool(policy.is_gaussian)
        self.normalizers = nn.ModuleDict(
            {k: copy.deepcopy(n) for k, n in policy.obs_normalizers.items() if k in self.keys}
        )
        self.encoder = copy.deepcopy(policy.actor_encoder)
        self.backbone = copy.deepcopy(policy.actor_backbone)
        self.head = copy.deepcopy(policy.action_head)
        self.register_buffer("action_low", policy.action_low.detach().to(torch.float32).clone())
        self.register_buffer("action_high", policy.action_high.detach().to(torch.float32).clone())
        _freeze(self)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        x, single = self.inputs(obs)
        return self.decide(x, single)

    def inputs(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, bool]:
        """The checked, encoded observation (B, F), and whether it was unbatched."""
        single = False
        x: dict[str, torch.Tensor] = {}
        for i, key in enumerate(self.keys):
            if key not in obs:
                raise ValueError("observation: missing key " + key)
            t = obs[key]
            shape = self.shapes[i]
            rank = len(shape)
            if list(t.shape[t.dim() - rank :]) != shape or t.dim() < rank or t.dim() > rank + 1:
                raise ValueError(
                    "observation: key " + key + " expected shape " + str(shape)
                    + " or (batch, ...), got " + str(list(t.shape))
                )  # fmt: skip
            if self.images[i] and t.dtype != torch.uint8:
                raise ValueError("observation: image key " + key + " expected uint8")
            if not self.images[i] and not t.is_floating_point():
                raise ValueError("observation: key " + key + " expected a floating-point tensor")
            if i == 0:
                single = t.dim() == rank
            x[key] = t.unsqueeze(0) if single else (t if self.images[i] else t.to(torch.float32))
            if single and not self.images[i]:
                x[key] = x[key].to(torch.float32)
        for key, norm in self.normalizers.items():
            x[key] = norm(x[key])
        return self.encoder(x), single

    def decide(self, x: torch.Tensor, single: bool) -> torch.Tensor:
        """The action for the backbone's input features (B, F)."""
        out = self.head(self.backbone(x))  # (B, A) means or logits
        return _action(out, self.is_gaussian, self.action_low, self.action_high, single)


def _check_state(state: torch.Tensor, single: bool, size: int) -> torch.Tensor:
    """The recurrent state as (B, size), checked against the observation's batching."""
    if single:
        if state.dim() != 1 or state.shape[0] != size:
            raise ValueError(
                "state: expected shape (" + str(size) + ",) for one observation, got "
                + str(list(state.shape))
            )  # fmt: skip
        return state.to(torch.float32).unsqueeze(0)
    if state.dim() != 2 or state.shape[1] != size:
        raise ValueError(
            "state: expected shape (batch, " + str(size) + "), got " + str(list(state.shape))
        )
    return state.to(torch.float32)


class RecurrentPolicyNet(nn.Module):
    """A recurrent policy on flat observations: (obs, state) -> (action, new state).

    `obs` as PolicyNet takes it, `state` (state_size,) or (B, state_size) float32: zeros at an
    episode's start (`initial_state`), then the new state this returned for the previous step.
    Only the actor's recurrent state travels (a separate critic's is not needed to act).
    """

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.net = PolicyNet(policy)
        self.rnn = copy.deepcopy(policy.actor_rnn)
        self.state_size = int(policy.actor_rnn.state_size)
        self.obs_dim = self.net.obs_dim
        self.is_gaussian = self.net.is_gaussian
        self.register_buffer("action_low", self.net.action_low.clone())
        _freeze(self)

    def initial_state(self, batch: int = 1) -> torch.Tensor:
        return torch.zeros(batch, self.state_size, device=self.action_low.device)

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, single = self.net.inputs(obs)
        h, new_state = self.rnn.step(x, _check_state(state, single, self.state_size))
        if single:
            new_state = new_state.squeeze(0)
        return self.net.decide(h, single), new_state


class RecurrentDictPolicyNet(nn.Module):
    """RecurrentPolicyNet for Dict observations (the actor's keys, as DictPolicyNet takes them)."""

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.net = DictPolicyNet(policy)
        self.rnn = copy.deepcopy(policy.actor_rnn)
        self.state_size = int(policy.actor_rnn.state_size)
        self.keys, self.shapes, self.images = self.net.keys, self.net.shapes, self.net.images
        self.is_gaussian = self.net.is_gaussian
        self.register_buffer("action_low", self.net.action_low.clone())
        _freeze(self)

    def initial_state(self, batch: int = 1) -> torch.Tensor:
        return torch.zeros(batch, self.state_size, device=self.action_low.device)

    def forward(
        self, obs: dict[str, torch.Tensor], state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, single = self.net.inputs(obs)
        h, new_state = self.rnn.step(x, _check_state(state, single, self.state_size))
        if single:
            new_state = new_state.squeeze(0)
        return self.net.decide(h, single), new_state


InferenceNet = PolicyNet | DictPolicyNet | RecurrentPolicyNet | RecurrentDictPolicyNet


def inference_net(policy: ActorCritic) -> InferenceNet:
    """The deterministic inference network of a training module (what evaluation runs)."""
    if policy.actor_rnn is not None:
        return RecurrentDictPolicyNet(policy) if policy.dict_obs else RecurrentPolicyNet(policy)
    return DictPolicyNet(policy) if policy.dict_obs else PolicyNet(policy)


def is_recurrent(net: nn.Module) -> bool:
    return isinstance(net, (RecurrentPolicyNet, RecurrentDictPolicyNet))


class Policy(nn.Module):
    """What :func:`load_policy` returns: the inference network, also taking numpy arrays.

    Call it with a tensor and get a tensor (on the policy's device); call it with a numpy array
    (or a list) and get a numpy array back. Observation shape and dtype are checked with a clear
    :class:`ObservationError`.

    A recurrent policy (``policy.recurrent``) takes and returns its state:
    ``action, state = policy(obs, state)``, with ``state=None`` (or ``initial_state()``) at an
    episode's start.

    Attributes:
        net: the underlying inference network (what export writes).
        metadata: observation/action shapes and bounds, env id, source checkpoint, step.
    """

    def __init__(
        self, net: InferenceNet, metadata: dict[str, Any], check_finite: bool = True
    ) -> None:
        super().__init__()
        self.net = net
        self.metadata = metadata
        self.check_finite = check_finite

    @property
    def obs_dim(self) -> int:
        return self.net.obs_dim

    @property
    def recurrent(self) -> bool:
        return is_recurrent(self.net)

    @property
    def state_size(self) -> int:
        """Size of a recurrent policy's state (0 for a memoryless one)."""
        return int(self.net.state_size) if self.recurrent else 0

    def initial_state(self, batch: int | None = None) -> np.ndarray:
        """A recurrent policy's state at an episode's start: zeros (state_size,), or
        (batch, state_size) for batched observations."""
        shape = (self.state_size,) if batch is None else (batch, self.state_size)
        return np.zeros(shape, dtype=np.float32)

    def forward(self, obs: Any, state: Any = None) -> Any:
        x, as_numpy, single = self._prepare(obs)
        if not self.recurrent:
            if state is not None:
                raise ObservationError("state: this policy is not recurrent; call policy(obs)")
            with torch.no_grad():
                action = self.net(x)
            return action.cpu().numpy() if as_numpy else action
        device = self.net.action_low.device
        if state is None:
            state = torch.from_numpy(self.initial_state(None if single else x_rows(x)))
        try:
            state = torch.as_tensor(state, dtype=torch.float32).to(device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ObservationError(
                f"state: cannot convert {type(state).__name__} ({str(exc).splitlines()[0]})"
            ) from None
        expected = (self.state_size,) if single else (x_rows(x), self.state_size)
        if tuple(state.shape) != expected:
            raise ObservationError(
                f"state: expected shape {expected} for this observation, got {tuple(state.shape)}"
            )
        with torch.no_grad():
            action, new_state = self.net(x, state)
        if as_numpy:
            return action.cpu().numpy(), new_state.cpu().numpy()
        return action, new_state

    def _prepare(self, obs: Any) -> tuple[Any, bool, bool]:
        """(observation on the device, whether it came as numpy, whether it is unbatched)."""
        if isinstance(self.net, (DictPolicyNet, RecurrentDictPolicyNet)):
            return self._prepare_dict(obs)
        as_numpy = not isinstance(obs, torch.Tensor)
        if as_numpy:
            try:
                obs = torch.as_tensor(obs)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise ObservationError(
                    f"observation: expected a float array of shape ({self.obs_dim},) or (batch, {self.obs_dim}); "
                    f"cannot convert {type(obs).__name__} ({str(exc).splitlines()[0]})"
                ) from None
        self._check(obs)
        self._finite(obs, None)
        return obs.to(self.net.action_low.device), as_numpy, obs.dim() == 1

    def _prepare_dict(self, obs: Any) -> tuple[dict[str, torch.Tensor], bool, bool]:
        net = self.net
        if not isinstance(obs, dict):
            raise ObservationError(
                f"observation: expected a dict with keys {', '.join(net.keys)}, got {type(obs).__name__}"
            )
        missing = [k for k in net.keys if k not in obs]
        if missing:
            raise ObservationError(f"observation: missing key(s) {', '.join(missing)}")
        as_numpy = not isinstance(obs[net.keys[0]], torch.Tensor)
        device = net.action_low.device
        x = {}
        single = False
        for i, (key, shape, image) in enumerate(zip(net.keys, net.shapes, net.images, strict=True)):
            try:
                t = torch.as_tensor(obs[key])
            except (TypeError, ValueError, RuntimeError) as exc:
                raise ObservationError(
                    f"observation: key {key!r} cannot be converted ({str(exc).splitlines()[0]})"
                ) from None
            if tuple(t.shape[-len(shape) :]) != tuple(shape) or t.dim() not in (
                len(shape),
                len(shape) + 1,
            ):
                raise ObservationError(
                    f"observation: key {key!r} expected shape {tuple(shape)} or (batch, *{tuple(shape)}), "
                    f"got {tuple(t.shape)}"
                )
            if image and t.dtype != torch.uint8:
                raise ObservationError(
                    f"observation: image key {key!r} expected uint8, got {t.dtype}"
                )
            if not image and not t.is_floating_point():
                raise ObservationError(
                    f"observation: key {key!r} expected floating-point values, got {t.dtype}"
                )
            if not image:
                self._finite(t, key)
            if i == 0:
                single = t.dim() == len(shape)
            x[key] = t.to(device)
        return x, as_numpy, single

    def _finite(self, obs: torch.Tensor, key: str | None) -> None:
        if self.check_finite and not bool(torch.isfinite(obs).all()):
            where = f" key {key!r}" if key is not None else ""
            raise ObservationError(
                f"observation{where}: contains NaN or Inf (a failed sensor?); the policy would "
                "act on garbage (load_policy(..., check_finite=False) to allow it)"
            )

    def _check(self, obs: torch.Tensor) -> None:
        shape = f"({self.obs_dim},) or (batch, {self.obs_dim})"
        if obs.dim() not in (1, 2) or obs.shape[-1] != self.obs_dim:
            raise ObservationError(f"observation: expected shape {shape}, got {tuple(obs.shape)}")
        if not obs.is_floating_point():
            raise ObservationError(
                f"observation: expected a floating-point array of shape {shape} (float32), got dtype {obs.dtype}"
            )


def x_rows(x: torch.Tensor | dict[str, torch.Tensor]) -> int:
    """Rows of a batched observation (a tensor, or a dict of them)."""
    return int(next(iter(x.values())).shape[0] if isinstance(x, dict) else x.shape[0])


def build_actor_critic(state: dict[str, Any], where: str) -> ActorCritic:
    """The training module of a loaded checkpoint (eval mode), or a one-line CheckpointError."""
    spec = state.get("model_spec")
    weights = state.get("model")
    if not isinstance(spec, dict) or not isinstance(weights, dict):
        raise CheckpointError(f"{where}: checkpoint has no model_spec/model entries")
    try:
        policy = ActorCritic(spec)
        policy.load_state_dict(weights)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{where}: the model in this checkpoint cannot be rebuilt ({first[:200]})"
        ) from None
    return policy.eval()


def policy_metadata(
    spec: dict[str, Any], source: str | None = None, global_step: int | None = None
) -> dict[str, Any]:
    """Shapes, dtypes and bounds of the inference policy's input and output (JSON-safe)."""
    gaussian = spec["action_kind"] == "gaussian"
    action: dict[str, Any] = {
        "kind": spec["action_kind"],
        "shape": [int(spec["action_dim"])] if gaussian else [],
        "dtype": "float32" if gaussian else "int64",
    }
    if gaussian:
        action["low"] = [float(v) for v in spec["action_low"]]
        action["high"] = [float(v) for v in spec["action_high"]]
    else:
        action["num_actions"] = int(spec["action_dim"])
    observation: dict[str, Any] = {"shape": [int(spec["obs_dim"])], "dtype": "float32"}
    if spec.get("obs_keys") is not None:  # the actor's keys: what the deployed policy takes
        observation = {
            "keys": {
                k: {
                    "shape": list(spec["obs_keys"][k]["shape"]),
                    "dtype": "uint8" if spec["obs_keys"][k]["kind"] == "image" else "float32",
                }
                for k in spec["actor_keys"]
            }
        }
    meta = {
        "env_id": spec.get("env_id"),
        "observation": observation,
        "action": action,
        "source_checkpoint": source,
        "global_step": global_step,
    }
    if spec.get("recurrent") is not None:
        layers, size = int(spec["recurrent_layers"]), int(spec["recurrent_size"])
        parts = 2 if spec["recurrent"] == "lstm" else 1
        meta["recurrent"] = {
            "kind": spec["recurrent"],
            "layers": layers,
            "size": size,
            # The actor's state only: per layer [h, c] (LSTM) or h (GRU), flattened.
            "state_shape": [layers * parts * size],
            "initial_state": "zeros, at every episode start",
        }
    return meta


def policy_from_state(
    state: dict[str, Any], source: str = "checkpoint", device: str | torch.device = "cpu"
) -> Policy:
    """Build the inference :class:`Policy` from a loaded checkpoint dict."""
    net = inference_net(build_actor_critic(state, source))
    meta = policy_metadata(state["model_spec"], source, _int_or_none(state.get("global_step")))
    return Policy(net, meta).to(device)


def load_policy(
    path: str | Path, device: str | torch.device = "cpu", check_finite: bool = True
) -> Policy:
    """Load a trained policy for deployment.

    Args:
        path: a checkpoint file (e.g. ``runs/x/checkpoints/best.pt``) or a run directory (its
            ``checkpoints/latest.pt``).
        device: where the network runs (``"cpu"``, ``"cuda"``, ...).
        check_finite: refuse observations with NaN or Inf (a failed sensor would otherwise
            become a NaN action silently); False skips the check.

    Returns:
        A torch module mapping a raw observation, batched ``(B, obs_dim)`` or single
        ``(obs_dim,)``, tensor or numpy array, to the deterministic action in the environment's
        units (clipped to the action bounds; an integer index for discrete actions). A
        recurrent policy maps ``(obs, state)`` to ``(action, new_state)``: pass ``state=None``
        at an episode's start, then the state it returned.

    Raises:
        CheckpointError: the file is missing, truncated, or not an embodied-ppo checkpoint.
    """
    ckpt, state = read_checkpoint(path)
    policy = policy_from_state(state, str(ckpt), device)
    policy.check_finite = check_finite
    return policy


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


# ------------------------------------------------------------------------------------ export
def default_export_path(checkpoint: Path, fmt: str, global_step: int | None) -> Path:
    """``<run_dir>/exported/policy-<step>.pt|.onnx`` for a checkpoint inside a run directory,
    else a file beside the checkpoint."""
    checkpoint = Path(checkpoint)
    ext = ".pt" if fmt == "torchscript" else ".onnx"
    step = f"-{global_step}" if global_step is not None else ""
    if checkpoint.parent.name == "checkpoints":
        return checkpoint.parent.parent / "exported" / f"policy{step}{ext}"
    return checkpoint.with_name(f"{checkpoint.stem}.policy{ext}")


def metadata_path(out: Path) -> Path:
    """The JSON that describes an exported file: ``<file>.json``."""
    return out.with_name(out.name + ".json")


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ExportError(f"--format: got {fmt!r}, allowed: {' | '.join(FORMATS)}")


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


def torchscript_bytes(net: InferenceNet) -> bytes:
    """The scripted network, serialized (loadable with torch.jit.load and libtorch)."""
    with warnings.catch_warnings():
        # torch.jit.script is deprecated in favor of torch.export, but TorchScript is still what
        # libtorch (C++) loads; the warning would only confuse users.
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(copy.deepcopy(net).cpu())
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def _dict_obs(net: nn.Module) -> bool:
    return isinstance(net, (DictPolicyNet, RecurrentDictPolicyNet))


class _OnnxInputs(nn.Module):
    """The inference network with positional tensor inputs (ONNX graphs take named tensors):
    the observation, or one input per key of a Dict observation, then a recurrent state."""

    def __init__(self, net: InferenceNet) -> None:
        super().__init__()
        self.net, self.dict_obs, self.recurrent = net, _dict_obs(net), is_recurrent(net)

    def forward(self, *tensors: torch.Tensor) -> Any:
        parts = tensors[:-1] if self.recurrent else tensors
        obs = dict(zip(self.net.keys, parts, strict=True)) if self.dict_obs else parts[0]
        return self.net(obs, tensors[-1]) if self.recurrent else self.net(obs)


def onnx_io(net: InferenceNet) -> tuple[list[str], list[str]]:
    """The ONNX graph's input and output names: ``obs`` (or the actor's keys), ``state`` for a
    recurrent policy; ``action``, and ``state_out`` for a recurrent policy."""
    inputs = list(net.keys) if _dict_obs(net) else ["obs"]
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
    if _dict_obs(net):
        example = [
            torch.zeros(2, *shape, dtype=torch.uint8 if image else torch.float32)
            for shape, image in zip(net.shapes, net.images, strict=True)
        ]
    else:
        example = [torch.zeros(2, net.obs_dim)]
    if is_recurrent(net):
        example.append(torch.zeros(2, net.state_size))
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


def export_policy(
    source: str | Path, fmt: str, out: str | Path | None = None
) -> tuple[Path, Path, dict[str, Any]]:
    """Export a checkpoint's inference policy as TorchScript or ONNX, plus a metadata JSON.

    Nothing is written unless the export succeeds; both files are written atomically.

    Returns:
        (exported file, metadata JSON, metadata dict).
    """
    _check_format(fmt)
    if fmt == "onnx":
        _require_onnx()
    ckpt, state = read_checkpoint(source)
    policy = policy_from_state(state, str(ckpt))
    out_path = (
        Path(out)
        if out is not None
        else default_export_path(ckpt, fmt, policy.metadata["global_step"])
    )
    if out_path.is_dir():
        raise ExportError(f"--out: {out_path} is a directory; give a file name")
    try:
        data = torchscript_bytes(policy.net) if fmt == "torchscript" else onnx_bytes(policy.net)
    except ExportError:
        raise
    except Exception as exc:  # the exporter's own failure: one line, nothing written
        text = str(exc).strip()
        first = text.splitlines()[0][:200] if text else ""
        raise ExportError(
            f"--format {fmt}: the export failed ({type(exc).__name__}: {first})"
        ) from None

    from embodied_ppo import __version__

    net = policy.net
    if _dict_obs(net):
        # One input per key of the actor ("batch" = any size); TorchScript takes them as a dict.
        inputs: dict[str, Any] = {
            "input_names": list(net.keys),
            "input_shapes": {
                k: ["batch", *shape] for k, shape in zip(net.keys, net.shapes, strict=True)
            },
        }
    else:
        inputs = {
            "input_name": "obs",
            # Accepted input shapes ("batch" = any size).
            "input_shapes": [["batch", net.obs_dim]]
            if fmt == "onnx"
            else [[net.obs_dim], ["batch", net.obs_dim]],
        }
    outputs: dict[str, Any] = {"output_name": "action"}
    if is_recurrent(net):
        # (obs, state) -> (action, new state); TorchScript returns them as a tuple.
        inputs["state_input"] = "state"
        inputs["state_shape"] = ["batch", net.state_size]
        outputs = {
            "output_names": onnx_io(net)[1] if fmt == "onnx" else ["action", "state"],
        }
    meta = {
        "format": fmt,
        **policy.metadata,
        **inputs,
        **outputs,
        "deterministic": True,
        "normalizer": "folded in (raw observations in)",
        "package_version": __version__,
    }
    if fmt == "onnx":
        meta["onnx_opset"] = ONNX_OPSET
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_path, data)
        atomic_write_bytes(metadata_path(out_path), (json.dumps(meta, indent=2) + "\n").encode())
    except OSError as exc:
        raise ExportError(f"--out: cannot write {out_path}: {exc.strerror}") from None
    return out_path, metadata_path(out_path), meta
