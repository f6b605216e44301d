"""How many threads numpy's BLAS may use: one while collecting, every core in the update.

numpy's OpenBLAS keeps a thread pool whose idle workers spin for a while after each product.
During collection, products are tiny and the envs need the cores: spinning workers slowed a
HalfCheetah rollout by a third. In the numpy update of a wide network the products are large
and a second thread makes them about 1.5 times faster. threadpoolctl switches the pool's size
at run time.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager

from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None


def limit(threads: int) -> AbstractContextManager:
    """Context in which numpy's BLAS uses at most `threads` threads."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=threads, user_api="blas")


def update_threads() -> int:
    """The cores this process may use, shared among the processes of a torchrun on this host."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, cores // local)
