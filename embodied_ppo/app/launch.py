"""`embodied-ppo torchrun [TORCHRUN OPTIONS] train ...`: torchrun that stops like one process.

Plain `torchrun` treats Ctrl-C (or SIGTERM) as a failure of its own: it forwards the signal to
the workers, prints a traceback and exits 1, whatever the workers did. This launcher runs the
same elastic agent (torch.distributed.run) in-process, but the stop signals are its own: the
first is passed to the workers once (which finish the iteration, save a checkpoint and exit
130/143; rank 0 says so in one message with the resume command), and the launcher exits with
the workers' code, quietly. A second signal stops everything at once, with the same codes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
from pathlib import Path
from types import FrameType

import torch.distributed.run as run
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from embodied_ppo.core.errors import UserError

# The workers read this to print the resume command with the launcher that started them.
LAUNCHER_ENV = "EMBODIED_PPO_LAUNCHER"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _children(pid: int) -> list[int]:
    """Every descendant of `pid` (Linux /proc; elsewhere none are known)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent:
                found.append(child)
                frontier.append(child)
    return found


def torchrun(argv: list[str]) -> int:
    """Run `torchrun ARGV -m embodied_ppo ...` (ARGV: torchrun's options, then the command)."""
    split = next((i for i, a in enumerate(argv) if a in ("train", "eval", "export", "plot")), None)
    if split is None:
        raise UserError("torchrun: give torchrun's options, then the command, e.g. "
                        "`embodied-ppo torchrun --nproc_per_node=2 train configs/humanoid.yaml`")  # fmt: skip
    options, command = argv[:split], argv[split:]
    args = run.parse_args([*options, "-m", "embodied_ppo", *command])
    # The agent leaves SIGINT / SIGTERM to us (it handles these instead). Newer torch sets the
    # agent's signals from the --signals_to_handle option, older ones from the environment.
    if hasattr(args, "signals_to_handle"):
        args = argparse.Namespace(**(vars(args) | {"signals_to_handle": "SIGHUP,SIGQUIT"}))
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGHUP,SIGQUIT"
    os.environ[LAUNCHER_ENV] = " ".join(["embodied-ppo", "torchrun", *map(shlex.quote, options)])
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        """Pass a stop signal on to the workers (the second one as SIGKILL)."""
        # A signal sent to the launcher alone does not reach the workers: pass it on. (Ctrl-C
        # reaches them by itself too; a worker under torchrun takes the same signal twice in
        # a row as one.) A second signal stops them at once.
        first = not received
        received.append(signum)
        if first:  # the workers' exit codes are a stop, not a failure: no failure report
            logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
        for pid in _children(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signum if first else signal.SIGKILL)

    previous = {s: signal.signal(s, handle) for s in STOP_SIGNALS}
    try:
        run.run(args)
    except ChildFailedError:
        if not received:
            raise  # a real failure: torchrun's own report
        return _exit_code(received[0])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return _exit_code(received[0]) if received else 0


def _exit_code(signum: int) -> int:
    return 128 + int(signum)
