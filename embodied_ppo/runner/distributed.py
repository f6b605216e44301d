"""torch.distributed glue: one learner per rank, reductions that make N ranks one learner.

Started by `torchrun` (which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). Every
function here is a no-op in a single process, so the training code calls them unconditionally.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, cast

import torch
import torch.distributed as dist

from embodied_ppo.core.errors import TrainingError, UserError
from embodied_ppo.core.system import elastic_restart, launched_world_size
from embodied_ppo.core.text import first_line

if TYPE_CHECKING:
    from embodied_ppo.runner.rollout import RolloutStats

T = TypeVar("T")


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process as one of several (WORLD_SIZE > 1)."""
    return launched_world_size() > 1


def launch_world_size() -> int:
    """The number of processes torchrun started (before the group is joined)."""
    return launched_world_size()


def launch_rank() -> int:
    """This process's rank as torchrun announced it (before the group is joined)."""
    return int(os.environ.get("RANK", "0"))


def is_initialized() -> bool:
    """Whether this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank in the group (0 outside one)."""
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    """The number of processes in the group (1 outside one)."""
    return dist.get_world_size() if is_initialized() else 1


def is_main() -> bool:
    """Whether this is process 0, the one that writes files and prints."""
    return rank() == 0


def local_device(device: torch.device) -> torch.device:
    """Each rank's own GPU (LOCAL_RANK) when training on cuda."""
    if device.type == "cuda" and device.index is None and is_initialized():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def init(device_name: str, backend: str = "auto", timeout_s: float = 600.0) -> None:
    """Join the process group torchrun set up (nccl for cuda, gloo for cpu unless overridden)."""
    if not launched_by_torchrun() or is_initialized():
        return
    if not dist.is_available():
        raise UserError("torch.distributed is not available in this torch build")
    wants_cuda = device_name.startswith("cuda") or (
        device_name == "auto" and torch.cuda.is_available()
    )
    if backend == "auto":
        backend = "nccl" if wants_cuda else "gloo"
    if wants_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        store = _restart_store(timeout)
        if store is None:
            dist.init_process_group(backend=backend, timeout=timeout)
        else:
            dist.init_process_group(
                backend=backend,
                store=store,
                rank=launch_rank(),
                world_size=launch_world_size(),
                timeout=timeout,
            )
    except Exception as exc:  # rendezvous failures: say what and where, in one line
        raise UserError(
            f"could not join the torch.distributed group ({backend}): {first_line(exc)}"
        ) from None


def _restart_store(timeout: datetime.timedelta) -> dist.Store | None:
    """The store this start of the processes meets in, where torchrun's elastic agent lends
    its own (TORCHELASTIC_USE_AGENT_STORE): keys under a prefix of this restart and world size.

    The agent keeps one store for the whole job, and every start of the processes would write
    and read the process group's keys under the same names: a restarted process could read the
    address a dead process published and wait on it until the connect times out (it happened
    in about half the restarts). None where torch's default rendezvous has no such store."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    client = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size=launch_world_size(),
        is_master=False,
        timeout=timeout,
    )
    prefix = f"embodied_ppo/restart{elastic_restart()}/world{launch_world_size()}"
    return dist.PrefixStore(prefix, client)


def shutdown() -> bool:
    """Leave the process group, if this process joined one; whether it had."""
    if is_initialized():
        dist.destroy_process_group()
        return True
    return False


def _guard(what: str) -> contextlib.AbstractContextManager[None]:
    """Turn a collective's timeout or a dead peer into a TrainingError with a clear message."""

    class _Ctx:
        def __enter__(self) -> None:
            return None

        def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
        ) -> bool:
            if exc is not None and isinstance(exc, RuntimeError | dist.DistBackendError):
                raise TrainingError(
                    f"rank {rank()}: {what} failed: another rank died, hangs or timed out "
                    f"(trainer.dist_timeout) ({first_line(exc)})"
                ) from None
            return False

    return _Ctx()


def backend_device() -> torch.device:
    """Where the group's collectives take their tensors: this process's GPU under NCCL (set
    as the current device when the group was joined), the CPU under Gloo or outside a group.

    Every collective below hands the backend its tensors on this device, whatever device they
    live on (a host-collected statistic under NCCL, a GPU tensor under Gloo), and writes the
    result back where they came from."""
    if is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _on_backend(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` itself where the backend can take it, else a copy on the backend's device."""
    device = backend_device()
    return tensor if tensor.device == device else tensor.to(device)


def all_reduce_sum(tensor: torch.Tensor, what: str = "all-reduce") -> torch.Tensor:
    """Sum `tensor` over ranks, in place; returned for chaining."""
    if is_initialized():
        work = _on_backend(tensor)
        with _guard(what):
            dist.all_reduce(work, op=dist.ReduceOp.SUM)
        if work is not tensor:
            tensor.copy_(work)
    return tensor


def sum_scalars(*values: torch.Tensor | float) -> list[torch.Tensor]:
    """Sum several scalars over ranks in one collective (float64, on the backend's device)."""
    device = backend_device()
    packed = torch.stack([torch.as_tensor(v, dtype=torch.float64).to(device) for v in values])
    all_reduce_sum(packed, "a statistics all-reduce")
    return list(packed.unbind())


def all_reduce_grads(params: list[torch.nn.Parameter], *extra: torch.Tensor) -> None:
    """Sum gradients (and the scalars `extra`, in place) over ranks in one collective.

    The losses are already weighted with global denominators, so the sum is the gradient of
    the whole batch of all ranks.
    """
    if not is_initialized():
        return
    grads = [p.grad for p in params if p.grad is not None] + list(extra)
    flat = torch.cat([g.reshape(-1).to(torch.float32) for g in grads])
    all_reduce_sum(flat, "the gradient all-reduce")
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def broadcast_module(module: torch.nn.Module) -> None:
    """Give every rank rank 0's parameters and buffers."""
    if not is_initialized():
        return
    with _guard("the parameter broadcast"):
        for t in list(module.parameters()) + list(module.buffers()):
            work = _on_backend(t.data)
            dist.broadcast(work, src=0)
            if work is not t.data:
                t.data.copy_(work)


def broadcast_object(obj: T) -> T:
    """Rank 0's `obj` on every rank."""
    if not is_initialized():
        return obj
    box = [obj]
    with _guard("an object broadcast"):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: T) -> list[T]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not is_initialized():
        return [obj]
    out: list[T | None] = [None] * world_size()
    with _guard("an object all-gather"):
        dist.all_gather_object(out, obj)
    return cast("list[T]", out)  # every entry filled in by the all-gather


def barrier() -> None:
    """Wait until every process of the group gets here."""
    if is_initialized():
        with _guard("a barrier"):
            dist.barrier()


# ------------------------------------------------------------------------------ run helpers
def agree(flag: bool) -> bool:
    """True on every process as soon as one process says so (graceful stop in lockstep)."""
    if world_size() == 1:
        return flag
    return bool(sum_scalars(float(flag))[0].item() > 0)


def gather_episodes(
    stats: RolloutStats,
) -> tuple[list[float], list[int], int, list[float], list[dict[str, float]]]:
    """Every process's finished episodes (returns, lengths), steps, successes and episode
    logs, on every process (the fields of a rollout.RolloutStats, in order)."""
    parts = gather_objects(
        (
            stats.episode_returns,
            stats.episode_lengths,
            stats.steps,
            stats.episode_successes,
            stats.episode_logs,
        )
    )
    returns = [r for p in parts for r in p[0]]
    lengths = [n for p in parts for n in p[1]]
    successes = [x for p in parts for x in p[3]]
    logs = [x for p in parts for x in p[4]]
    return returns, lengths, sum(p[2] for p in parts), successes, logs
