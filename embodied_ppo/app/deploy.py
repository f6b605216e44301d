"""The deployable policy: raw observation in, action in the environment's units out.

Everything here needs torch only (no gymnasium, mujoco or tensorboard), so a robotics stack can
`import embodied_ppo; embodied_ppo.load_policy(path)` with nothing else of ours installed.

The same :class:`PolicyNet` is what evaluation runs, what `load_policy` returns (wrapped for numpy
input) and what `export` writes as TorchScript or ONNX, so all of them act identically:
normalizer folded in as float32 constants, deterministic (Gaussian mean / categorical argmax),
Gaussian actions clipped to the action bounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from embodied_ppo.core.errors import CheckpointError, ObservationError
from embodied_ppo.io.checkpoint import read_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.inference import (
    DictPolicyNet,
    InferenceNet,
    RecurrentDictPolicyNet,
    inference_net,
    is_recurrent,
)


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
