"""Every collective hands the process group its tensors on the device its backend needs: the
process's GPU under NCCL, the CPU under Gloo. Checked without a GPU by a recording fake of the
group, and under NCCL with fake tensors (which carry a CUDA device without CUDA)."""

from __future__ import annotations

import ast
import io

import pytest
import torch
import torch.distributed as dist
from conftest import tiny_config
from support import ROOT
from torch._subclasses.fake_tensor import FakeTensorMode

from embodied_ppo.runner import distributed


class RecordingGroup:
    """A process group of `world` ranks whose peers hold what this rank holds: a sum is the
    tensor times `world`, a gather repeats this rank's object. Records (collective, device) of
    every call."""

    def __init__(self, backend: str, world: int = 2) -> None:
        self.backend, self.world = backend, world
        self.calls: list[tuple[str, torch.device | None]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> RecordingGroup:
        for name in ("is_initialized", "get_rank", "get_world_size", "get_backend"):
            monkeypatch.setattr(dist, name, getattr(self, name))
        for name in ("all_reduce", "broadcast", "all_gather_object", "broadcast_object_list"):
            monkeypatch.setattr(dist, name, getattr(self, name))
        monkeypatch.setattr(dist, "barrier", self.barrier)
        return self

    def is_initialized(self) -> bool:
        return True

    def get_rank(self, group: object = None) -> int:
        return 0

    def get_world_size(self, group: object = None) -> int:
        return self.world

    def get_backend(self, group: object = None) -> str:
        return self.backend

    def all_reduce(self, tensor: torch.Tensor, op: object = None) -> None:
        self.calls.append(("all_reduce", tensor.device))
        tensor.mul_(self.world)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        self.calls.append(("broadcast", tensor.device))

    def all_gather_object(self, out: list, obj: object) -> None:
        self.calls.append(("all_gather_object", None))
        out[:] = [obj] * self.world

    def broadcast_object_list(self, box: list, src: int = 0) -> None:
        self.calls.append(("broadcast_object_list", None))

    def barrier(self) -> None:
        self.calls.append(("barrier", None))

    def devices(self) -> set[torch.device]:
        return {d for _, d in self.calls if d is not None}


def test_under_nccl_every_collective_takes_the_processs_gpu_tensors(monkeypatch):
    """NCCL reduces only tensors on the process's GPU (cuda:1 here): scalars packed for a
    sum (the graceful stop's agreement), a statistic that lives on the host, gradients and the
    initial weights all reach the group there, and results come back where they were."""
    group = RecordingGroup("nccl").install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    gpu = torch.device("cuda", 1)
    with FakeTensorMode(allow_non_fake_inputs=True):
        distributed.sum_scalars(1.0, torch.tensor(2.0))
        assert group.calls == [("all_reduce", gpu)]
        host = torch.zeros(3)
        assert distributed.all_reduce_sum(host) is host and host.device.type == "cpu"
        module = torch.nn.Linear(3, 2)
        for p in module.parameters():
            p.grad = torch.ones_like(p)
        distributed.all_reduce_grads(list(module.parameters()), torch.zeros(1))
        distributed.broadcast_module(module)
    assert group.calls[1:] == [("all_reduce", gpu)] * 2 + [("broadcast", gpu)] * 2
    assert distributed.backend_device() == gpu


def test_under_gloo_collectives_take_cpu_tensors_and_agree_sums_the_flags(monkeypatch):
    group = RecordingGroup("gloo").install(monkeypatch)
    stats = torch.tensor([1.0, 2.0])
    distributed.all_reduce_sum(stats)
    assert stats.tolist() == [2.0, 4.0]  # both ranks' sums, written back in place
    assert distributed.agree(True) is True and distributed.agree(False) is False
    assert group.devices() == {torch.device("cpu")}


def test_a_run_with_a_stop_request_makes_every_collective_through_the_group_device(
    monkeypatch, tmp_path
):
    """The command line's path: training polled by a stop request (the agreement step sums the
    flags every iteration), checkpoints gathered from the ranks, episodes gathered: every
    collective reaches the group on the backend's device, and the agreement stops the run."""
    from embodied_ppo.runner.trainer import Trainer

    group = RecordingGroup("gloo").install(monkeypatch)
    cfg = tiny_config("Pendulum-v1", trainer={"total_steps": 256, "checkpoint_interval": 1})
    polls: list[int] = []

    def should_stop() -> bool:
        polls.append(1)
        return len(polls) == 3  # asked to stop before the third iteration

    trainer = Trainer(cfg, tmp_path / "run", progress_stream=io.StringIO())
    summary = trainer.train(should_stop=should_stop)
    assert summary["stopped"] and summary["iteration"] == 2
    kinds = {k for k, _ in group.calls}
    assert {"all_reduce", "broadcast", "all_gather_object", "barrier"} <= kinds
    assert group.devices() == {distributed.backend_device()} == {torch.device("cpu")}


def test_only_the_distributed_module_calls_the_process_group():
    """The routing above covers every collective only if nothing else calls torch.distributed:
    the package imports it in runner/distributed.py alone (and the launcher, app/launch.py,
    its torchrun runner and error types, which make no collective)."""
    allowed = {"runner/distributed.py", "app/launch.py"}
    found = set()
    package = ROOT / "embodied_ppo"
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "torch.distributed" or n.startswith("torch.distributed.") for n in names):
                found.add(path.relative_to(package).as_posix())
    assert found and found <= allowed, found
