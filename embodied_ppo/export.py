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

import torch
from torch import nn

from embodied_ppo.checkpoint import atomic_write_bytes, load_checkpoint, resolve_checkpoint
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
        self.eval()
        self.requires_grad_(False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
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
        out = self.head(self.backbone(self.obs_normalizer(x)))  # (B, A) means or logits
        if self.is_gaussian:
            action = torch.maximum(torch.minimum(out, self.action_high), self.action_low)
        else:
            action = out.argmax(dim=-1)
        if single:
            action = action.squeeze(0)
        return action


class Policy(nn.Module):
    """What :func:`load_policy` returns: a :class:`PolicyNet` that also takes numpy arrays.

    Call it with a tensor and get a tensor (on the policy's device); call it with a numpy array
    (or a list) and get a numpy array back. Observation shape and dtype are checked with a clear
    :class:`ObservationError`.

    Attributes:
        net: the underlying :class:`PolicyNet` (what export writes).
        metadata: observation/action shapes and bounds, env id, source checkpoint, step.
    """

    def __init__(self, net: PolicyNet, metadata: dict[str, Any]) -> None:
        super().__init__()
        self.net = net
        self.metadata = metadata

    @property
    def obs_dim(self) -> int:
        return self.net.obs_dim

    def forward(self, obs: Any) -> Any:
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
        device = self.net.action_low.device
        with torch.no_grad():
            action = self.net(obs.to(device))
        return action.cpu().numpy() if as_numpy else action

    def _check(self, obs: torch.Tensor) -> None:
        shape = f"({self.obs_dim},) or (batch, {self.obs_dim})"
        if obs.dim() not in (1, 2) or obs.shape[-1] != self.obs_dim:
            raise ObservationError(f"observation: expected shape {shape}, got {tuple(obs.shape)}")
        if not obs.is_floating_point():
            raise ObservationError(
                f"observation: expected a floating-point array of shape {shape} (float32), got dtype {obs.dtype}"
            )


def _build_actor_critic(state: dict[str, Any], where: str) -> ActorCritic:
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
    return {
        "env_id": spec.get("env_id"),
        "observation": {"shape": [int(spec["obs_dim"])], "dtype": "float32"},
        "action": action,
        "source_checkpoint": source,
        "global_step": global_step,
    }


def policy_from_state(
    state: dict[str, Any], source: str = "checkpoint", device: str | torch.device = "cpu"
) -> Policy:
    """Build the inference :class:`Policy` from a loaded checkpoint dict."""
    net = PolicyNet(_build_actor_critic(state, source))
    meta = policy_metadata(state["model_spec"], source, _int_or_none(state.get("global_step")))
    return Policy(net, meta).to(device)


def read_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """Resolve and load a checkpoint; whatever a foreign file makes the unpickler raise becomes
    a one-line CheckpointError (torch.load on arbitrary bytes can raise KeyError, IndexError,
    UnicodeDecodeError, ... besides the errors load_checkpoint already translates)."""
    ckpt = resolve_checkpoint(path)
    try:
        return ckpt, load_checkpoint(ckpt, map_location="cpu")
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"{ckpt}: not a readable checkpoint (corrupt or foreign: {type(exc).__name__})"
        ) from None


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> Policy:
    """Load a trained policy for deployment.

    Args:
        path: a checkpoint file (e.g. ``runs/x/checkpoints/best.pt``) or a run directory (its
            ``checkpoints/latest.pt``).
        device: where the network runs (``"cpu"``, ``"cuda"``, ...).

    Returns:
        A torch module mapping a raw observation, batched ``(B, obs_dim)`` or single
        ``(obs_dim,)``, tensor or numpy array, to the deterministic action in the environment's
        units (clipped to the action bounds; an integer index for discrete actions).

    Raises:
        CheckpointError: the file is missing, truncated, or not an embodied-ppo checkpoint.
    """
    ckpt, state = read_checkpoint(path)
    return policy_from_state(state, str(ckpt), device)


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


def torchscript_bytes(net: PolicyNet) -> bytes:
    """The scripted network, serialized (loadable with torch.jit.load and libtorch)."""
    with warnings.catch_warnings():
        # torch.jit.script is deprecated in favor of torch.export, but TorchScript is still what
        # libtorch (C++) loads; the warning would only confuse users.
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(copy.deepcopy(net).cpu())
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def onnx_bytes(net: PolicyNet) -> bytes:
    """ONNX model with input ``obs`` (batch, obs_dim) float32, output ``action``, dynamic batch."""
    _require_onnx()
    net = copy.deepcopy(net).cpu()
    example = (torch.zeros(2, net.obs_dim),)
    # The exporter is chatty (missing torchvision ops, pytree deprecations); none of it matters here.
    noisy = logging.getLogger("torch.onnx")
    level = noisy.level
    noisy.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                net,
                example,
                None,
                input_names=["obs"],
                output_names=["action"],
                opset_version=ONNX_OPSET,
                dynamic_shapes=({0: torch.export.Dim("batch")},),
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
    data = torchscript_bytes(policy.net) if fmt == "torchscript" else onnx_bytes(policy.net)

    from embodied_ppo import __version__

    meta = {
        "format": fmt,
        **policy.metadata,
        "input_name": "obs",
        "output_name": "action",
        # Accepted input shapes ("batch" = any size).
        "input_shapes": [["batch", policy.obs_dim]]
        if fmt == "onnx"
        else [[policy.obs_dim], ["batch", policy.obs_dim]],
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
