"""numpy's BLAS thread budget: one thread while collecting, every core in the numpy update."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_collector import build
from threadpoolctl import threadpool_info

from embodied_ppo import blas
from embodied_ppo.config import OptimConfig
from embodied_ppo.host_update import HostUpdate
from embodied_ppo.modules.host_policy import HostPolicy
from embodied_ppo.ppo import BATCH_FIELDS, make_optimizer


def blas_threads() -> int:
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


pytestmark = pytest.mark.skipif(
    not any(i["user_api"] == "blas" for i in threadpool_info()),
    reason="numpy is not linked against a BLAS threadpoolctl can see",
)


def test_limit_sets_and_restores_the_thread_count():
    before = blas_threads()
    with blas.limit(1):
        assert blas_threads() == 1
    assert blas_threads() == before


def test_update_threads_share_the_cores_among_local_processes(monkeypatch):
    monkeypatch.setattr(blas.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert blas.update_threads() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert blas.update_threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert blas.update_threads() == 1


def test_collection_and_update_run_with_their_budgets(monkeypatch):
    cfg = tiny_config("Pendulum-v1", env={"num_envs": 2})
    envs, policy, buf, col = build(cfg, inference="host")
    seen: dict[str, int] = {}

    def spy(name, real):
        def wrapper(*args):
            seen.setdefault(name, blas_threads())
            return real(*args)

        return wrapper

    make_act = HostPolicy.act_into_fn  # the per-step function it returns is spied on
    monkeypatch.setattr(
        HostPolicy, "act_into_fn", lambda *a, **k: spy("collect", make_act(*a, **k))
    )
    col.collect()
    envs.close()
    assert seen["collect"] == 1

    monkeypatch.setattr(HostUpdate, "_step", spy("update", HostUpdate._step))
    monkeypatch.setattr(blas, "update_threads", lambda: 2)
    optim = OptimConfig()
    upd = HostUpdate(policy, cfg.algorithm, optim, make_optimizer(policy, optim), torch.Generator())
    upd.update(buf.flat(*BATCH_FIELDS), buf.num_steps)
    assert seen["update"] == 2
    assert np.isfinite(upd.last_loss)
