"""The deployable policy: raw observation in, action in the environment's units out.

Everything here needs torch only (no gymnasium, mujoco or tensorboard), so a robotics stack can
`import embodied_ppo; embodied_ppo.load_policy(path)` with nothing else of ours installed.

The same inference network (`model.inference`) is what evaluation runs, what `load_policy`
returns (wrapped for numpy input) and what `export` writes as TorchScript or ONNX, so all of
them act identically: the trained module's own actor with its normalizer, deterministic
(Gaussian mean / categorical argmax), Gaussian actions clipped to the action bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from embodied_ppo.core.errors import CheckpointError, ObservationError
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import CheckpointState, JSONDict
from embodied_ppo.io.checkpoint import read_checkpoint_or_intact
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.inference import InferenceNet, inference_net, is_dict, is_recurrent
from embodied_ppo.model.spec import PolicySpec

# What the policy takes: an observation (or a recurrent state) as a tensor, a numpy array or
# what numpy reads as one (a list); a Dict observation as a mapping of them by key.
PolicyInput = torch.Tensor | npt.ArrayLike | Mapping[str, torch.Tensor | npt.ArrayLike]

# What it returns: the action, or (action, new state) for a recurrent policy; numpy arrays for
# numpy input, tensors for tensor input.
PolicyOutput = torch.Tensor | np.ndarray | tuple[torch.Tensor, ...] | tuple[np.ndarray, ...]


class Policy(nn.Module):
    """What :func:`load_policy` returns: the inference network, also taking numpy arrays.

    Call it with a tensor and get a tensor (on the policy's device); call it with a numpy array
    (or a list) and get a numpy array back. A wrong shape or dtype, or a NaN or Inf in the
    observation (unless `check_finite` is False), is an :class:`ObservationError` (a
    ValueError) that names what was expected.

    A recurrent policy (``policy.recurrent``) takes and returns its state:
    ``action, state = policy(obs, state)``, with ``state=None`` (or ``initial_state()``) at an
    episode's start.

    Attributes:
        net: the underlying inference network (what evaluation runs and export writes).
        metadata: observation/action shapes and bounds, env id, source checkpoint, step.
        check_finite: whether observations with NaN or Inf are refused.
    """

    def __init__(self, net: InferenceNet, metadata: JSONDict, check_finite: bool = True) -> None:
        super().__init__()
        self.net = net
        self.metadata = metadata
        self.check_finite = check_finite

    @property
    def obs_dim(self) -> int:
        """Size of a flat observation (0 for Dict observations)."""
        return 0 if is_dict(self.net) else int(self.net.obs_dim)

    @property
    def recurrent(self) -> bool:
        """Whether the policy takes and returns a recurrent state."""
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

    def forward(
        self, obs: PolicyInput, state: torch.Tensor | npt.ArrayLike | None = None
    ) -> PolicyOutput:
        """The action for `obs` (and, recurrent, the new state), numpy in -> numpy out."""
        as_numpy = not isinstance(
            next(iter(obs.values())) if isinstance(obs, dict) else obs, torch.Tensor
        )
        x = self._tensors(obs)
        device = next(iter(self.net.buffers())).device
        x = {k: v.to(device) for k, v in x.items()} if isinstance(x, dict) else x.to(device)
        if not self.recurrent and state is not None:
            raise ObservationError("state: this policy is not recurrent; call policy(obs)")
        try:
            with torch.no_grad():
                if not self.recurrent:
                    out = self.net(x)
                else:
                    out = self.net(x, self._state(state, x, device))
        except ValueError as exc:  # the network's own checks of shapes and dtypes
            raise ObservationError(str(exc)) from None
        if as_numpy:
            return out.cpu().numpy() if not self.recurrent else tuple(o.cpu().numpy() for o in out)
        return out

    def _tensors(self, obs: PolicyInput) -> torch.Tensor | dict[str, torch.Tensor]:
        """The observation as tensors, NaN/Inf refused (where checked)."""
        if is_dict(self.net):
            if not isinstance(obs, dict):
                raise ObservationError(
                    f"observation: expected a dict with keys {', '.join(self.net.keys)}, got "
                    f"{type(obs).__name__}"
                )
            x = {}
            for key, image in zip(self.net.keys, self.net.images, strict=True):
                if key in obs:
                    x[key] = _tensor(obs[key], f"key {key!r} ")
                    if not image:
                        self._finite(x[key], key)
            return x
        want = f"({self.obs_dim},) or (batch, {self.obs_dim})"
        x = _tensor(obs, "", f"expected a float array of shape {want}; ")
        self._finite(x, None)
        return x

    def _state(
        self,
        state: torch.Tensor | npt.ArrayLike | None,
        x: torch.Tensor | dict[str, torch.Tensor],
        device: torch.device,
    ) -> torch.Tensor:
        """A recurrent state on the device: zeros where none is given (an episode's start)."""
        first = next(iter(x.values())) if isinstance(x, dict) else x
        single = first.dim() == (len(self.net.shapes[0]) if is_dict(self.net) else 1)
        if state is None:
            return torch.zeros(
                (self.state_size,) if single else (first.shape[0], self.state_size), device=device
            )
        return _tensor(state, "", what="state").to(device, torch.float32)

    def _finite(self, obs: torch.Tensor, key: str | None) -> None:
        if self.check_finite and obs.is_floating_point() and not bool(torch.isfinite(obs).all()):
            where = f" key {key!r}" if key is not None else ""
            raise ObservationError(
                f"observation{where}: contains NaN or Inf (a failed sensor?); the policy would "
                "act on garbage (load_policy(..., check_finite=False) to allow it)"
            )


def _tensor(value: object, where: str, hint: str = "", what: str = "observation") -> torch.Tensor:
    """`value` as a tensor, or an ObservationError naming what could not be converted."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ObservationError(
            f"{what}: {where}{hint}cannot convert {type(value).__name__} ({first_line(exc)})"
        ) from None


def build_actor_critic(state: CheckpointState, where: str) -> ActorCritic:
    """The training module of a loaded checkpoint (eval mode), or a one-line CheckpointError."""
    spec = state.get("model_spec")
    weights = state.get("model")
    if not isinstance(spec, dict) or not isinstance(weights, dict):
        raise CheckpointError(f"{where}: checkpoint has no model_spec/model entries")
    try:
        policy = ActorCritic(spec)
        policy.load_state_dict(weights)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"{where}: the model in this checkpoint cannot be rebuilt ({first_line(exc)})"
        ) from None
    return policy.eval()


def policy_metadata(
    spec: PolicySpec,
    source: str | None = None,
    global_step: int | None = None,
    state_size: int | None = None,
) -> JSONDict:
    """Shapes, dtypes and bounds of the inference policy's input and output (JSON-safe);
    `state_size`: a recurrent actor's state size (an observation history's depends on its
    encoders)."""
    action: JSONDict = {
        "kind": spec.action_kind,
        "shape": [spec.action_dim] if spec.is_gaussian else [],
        "dtype": "float32" if spec.is_gaussian else "int64",
    }
    if spec.is_gaussian:
        action["low"] = list(spec.action_low or ())
        action["high"] = list(spec.action_high or ())
    else:
        action["num_actions"] = spec.action_dim
    observation: JSONDict = {"shape": [spec.obs_dim], "dtype": "float32"}
    if spec.dict_obs is not None:  # the actor's keys: what the deployed policy takes
        keys = spec.dict_obs.keys
        observation = {
            "keys": {
                k: {
                    "shape": list(keys[k].shape),
                    "dtype": "uint8" if keys[k].kind == "image" else "float32",
                }
                for k in spec.dict_obs.actor_keys
            }
        }
    meta: JSONDict = {
        "env_id": spec.env_id,
        "observation": observation,
        "action": action,
        "source_checkpoint": source,
        "global_step": global_step,
    }
    r = spec.recurrent
    if r is not None:
        parts = 2 if r.kind == "lstm" else 1
        # The actor's state only: per layer [h, c] (LSTM) or h (GRU), flattened; a history's:
        # the inputs of the steps before this one, oldest first.
        shape = [state_size or r.layers * parts * r.size]
        core: JSONDict = {"kind": r.kind, "layers": r.layers, "size": r.size}
        if r.kind == "history":
            core = {"kind": r.kind, "length": r.size}
        meta["recurrent"] = core | {
            "state_shape": shape,
            "initial_state": "zeros, at every episode start",
        }
    return meta


def policy_from_state(
    state: CheckpointState,
    source: str = "checkpoint",
    device: str | torch.device = "cpu",
    check_finite: bool = True,
) -> Policy:
    """Build the inference :class:`Policy` from a loaded checkpoint dict."""
    policy = build_actor_critic(state, source)
    step = _int_or_none(state.get("global_step"))
    meta = policy_metadata(policy.spec, source, step, policy.actor_state_size)
    return Policy(inference_net(policy), meta, check_finite).to(device)


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
    ckpt, state = read_checkpoint_or_intact(path)  # names the run's newest intact one, if any
    return policy_from_state(state, str(ckpt), device, check_finite)


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None
