"""Plumbing of torch.compile on the CPU: the instruction-set probe started early, the C++ compiler lookup, and which errors are the compiler's."""

from __future__ import annotations

import contextlib
import threading

import torch

_PROBE: threading.Thread | None = None


def probe_cpu_compiler() -> None:
    """Start finding out, in the background, which vector instructions compiled CPU kernels
    may use.

    Inductor learns it by building and loading a probe library per candidate instruction set,
    each load in a fresh Python subprocess, once per process: ~1.3 s of waiting on 2 cores,
    paid by the first compiled update. Started while the run builds its parts and collects
    its first rollout, the wait overlaps that work; the first compilation waits for what is
    left (`GradientStep`). A failure here is ignored: the compilation finds it again and
    reports it.

    Every module the probe needs is imported here, in the calling thread, first: the thread
    must import nothing. Two threads importing torch's compiler stack at once can each meet
    the other's half-initialized modules (CPython breaks an import deadlock that way); a run
    that did failed on `No module named 'torch.utils.flop_counter'`.
    """
    global _PROBE
    if _PROBE is not None:
        return
    try:  # in the function: torch's private compiler modules, whose layout changes by version
        import torch._inductor.codecache  # noqa: F401
        import torch.utils.cpp_extension  # noqa: F401  (what building the probe imports)
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except Exception:  # another torch layout: the first compilation tells
        return

    def probe() -> None:
        """Run Inductor's instruction-set probe (its answer is cached for the process)."""
        with contextlib.suppress(Exception):
            pick_vec_isa()

    _PROBE = threading.Thread(target=probe, name="embodied-ppo-isa-probe", daemon=True)
    _PROBE.start()


def _await_probe() -> None:
    if _PROBE is not None and _PROBE.is_alive():
        _PROBE.join()


def _missing_compiler(device: torch.device) -> Exception | None:
    """The error of looking for the C++ compiler torch.compile needs on the CPU, if any."""
    if device.type != "cpu":
        return None
    try:  # in the function: as in probe_cpu_compiler
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # another torch layout: let the first compilation tell
        return None
    try:
        get_cpp_compiler()
    except Exception as exc:
        return exc
    return None


def _is_compile_failure(exc: Exception) -> bool:
    """Whether `exc` comes from torch.compile's compiler stack, not from the step's own math."""
    # In the function: torch's compiler stack takes ~1 s to import, paid where it compiles only.
    import torch._dynamo.exc as dynamo_exc

    if isinstance(exc, dynamo_exc.BackendCompilerFailed):
        return True
    module = type(exc).__module__ or ""
    return module.startswith(("torch._inductor", "torch._dynamo"))
