"""Plumbing of torch.compile: the CPU's instruction-set probe started early, the C++ compiler
lookup, which errors are the compiler's, and the options that depend on torch's version."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

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


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether `fn` takes a keyword argument `name` (this torch's version of it)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def compile_options() -> dict[str, Any]:
    """The torch.compile arguments the update asks for, where this torch takes them: each
    compiled function keeps its own graphs (`isolate_recompiles`, torch 2.12 and later), up to
    8 of them. An older torch keeps the graphs of every GradientStep of a process on the one
    code object they share, up to torch._dynamo.config.recompile_limit (8) in all; past that
    a step runs eagerly (same results)."""
    wanted = {"isolate_recompiles": True, "recompile_limit": 8}
    return {k: v for k, v in wanted.items() if _accepts(torch.compile, k)}


def skipping_guards() -> contextlib.AbstractContextManager[Any]:
    """Calls of compiled graphs without Dynamo's guards where this torch can
    (`set_stance(skip_guard_eval_unsafe=True)`), else with them (the same graphs, ~0.1 ms more
    per call on the CPU)."""
    if _accepts(torch.compiler.set_stance, "skip_guard_eval_unsafe"):
        return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    return contextlib.nullcontext()


def inductor_options(options: dict[str, Any]) -> dict[str, Any]:
    """`options` less those this torch's Inductor does not know (it refuses unknown ones);
    a dotted key names an option of a section (`triton.cudagraphs`)."""
    import torch._inductor.config as inductor_config  # in the function, as above

    def known(key: str) -> bool:
        """Whether Inductor's config has the (dotted) option `key`."""
        section: Any = inductor_config
        for part in key.split("."):
            if not hasattr(section, part):
                return False
            section = getattr(section, part)
        return True

    return {k: v for k, v in options.items() if known(k)}


def step_compile_kwargs(device: torch.device) -> dict[str, Any]:
    """torch.compile's arguments for the update's functions on `device`.

    Static shapes, one graph per function, no runtime asserts of what Dynamo's guards already
    check (every input's sizes and strides). On the CPU the kernels launch from C++, not
    Python. On a GPU the graphs run as CUDA graphs: the options of mode="reduce-overhead",
    given as options, since torch.compile takes a mode or options, never both.
    """
    options: dict[str, Any] = {
        "size_asserts": False,
        "alignment_asserts": False,
        "scalar_asserts": False,
    }
    if device.type == "cpu":
        options["cpp_wrapper"] = True
    if device.type == "cuda":
        from torch._inductor import list_mode_options

        options.update(list_mode_options("reduce-overhead"))
    return {
        "fullgraph": True,
        "dynamic": False,
        "options": inductor_options(options),
        **compile_options(),
    }
