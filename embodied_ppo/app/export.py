"""The `export` command: the deployable policy as TorchScript or ONNX, and a JSON of shapes,
bounds and provenance beside it (for a policy of an mjlab task, also what a plain MuJoCo loop
needs to run it, and the task's MuJoCo model: vecenv.mjlab_deploy)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from embodied_ppo.app.deploy import policy_from_state
from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.core.errors import ExportError
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import JSONDict
from embodied_ppo.core.version import __version__
from embodied_ppo.io.checkpoint import read_checkpoint_or_intact
from embodied_ppo.io.files import atomic_write_bytes
from embodied_ppo.model.export import (
    FORMATS,
    ONNX_OPSET,
    _require_onnx,
    onnx_bytes,
    onnx_io,
    torchscript_bytes,
)
from embodied_ppo.model.inference import is_dict, is_recurrent
from embodied_ppo.vecenv.mjlab_deploy import describe


class ExportResult(NamedTuple):
    """What `export` wrote: the policy file, the JSON beside it, and that JSON's contents."""

    path: Path
    metadata_path: Path
    metadata: JSONDict


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


def export_policy(
    source: str | Path, fmt: str, out: str | Path | None = None, use_intact: bool = False
) -> ExportResult:
    """Export a checkpoint's inference policy as TorchScript or ONNX, plus a metadata JSON
    (`use_intact`: a run directory's newest intact checkpoint where latest.pt is unreadable).

    Nothing is written unless the export succeeds; both files are written atomically.
    """
    _check_format(fmt)
    if fmt == "onnx":
        _require_onnx()
    ckpt, state = read_checkpoint_or_intact(source, use_intact, "export")
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
        raise ExportError(
            f"--format {fmt}: the export failed ({type(exc).__name__}: {first_line(exc)})"
        ) from None

    net = policy.net
    if is_dict(net):
        # One input per key of the actor ("batch" = any size); TorchScript takes them as a dict.
        inputs: JSONDict = {
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
    outputs: JSONDict = {"output_name": "action"}
    if is_recurrent(net):
        # (obs, state) -> (action, new state); TorchScript returns them as a tuple.
        inputs["state_input"] = "state"
        inputs["state_shape"] = ["batch", net.state_size]
        outputs = {
            "output_names": onnx_io(net)[1] if fmt == "onnx" else ["action", "state"],
        }
    meta: JSONDict = {
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
    config = state.get("config") or {}
    if (config.get("env") or {}).get("backend") == "mjlab":
        # What a MuJoCo loop needs to run it (vecenv.mjlab_deploy), the task's model beside it.
        env_cfg = from_dict(upgrade(config)).env
        groups = list(net.keys) if is_dict(net) else []
        meta["mjlab"] = describe(env_cfg, groups, out_path.with_name(out_path.name + ".mjb"))
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_path, data)
        atomic_write_bytes(metadata_path(out_path), (json.dumps(meta, indent=2) + "\n").encode())
    except OSError as exc:
        raise ExportError(f"--out: cannot write {out_path}: {exc.strerror}") from None
    return ExportResult(out_path, metadata_path(out_path), meta)
