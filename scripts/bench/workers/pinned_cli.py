"""The package's command line pinned to one core: the core of this process's LOCAL_RANK (0
without torchrun), then `embodied-ppo ARGS`; one process of scripts.bench.scaling.

    python -m scripts.bench.workers.pinned_cli train configs/halfcheetah.yaml ...
    python -m torch.distributed.run --nproc_per_node=2 -m scripts.bench.workers.pinned_cli \\
        train configs/halfcheetah.yaml ...
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Pin this process to its core, then run the command line with `argv`."""
    core = int(os.environ.get("LOCAL_RANK", "0")) % os.cpu_count()
    os.sched_setaffinity(0, {core})
    from embodied_ppo.app.cli import main as cli_main

    cli_main(sys.argv[1:] if argv is None else argv)  # exits with the command's status
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
