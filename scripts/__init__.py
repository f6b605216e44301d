"""The repository's own programs, run from its root; none of them is part of the installed package.

- `scripts/bench/`: the benchmarks, one module per benchmark, each run as
  `python -m scripts.bench.<name>` (docs/benchmarks.md, "Running the benchmarks"), over a shared
  library (`scripts/bench/lib/`), the child processes they start (`scripts/bench/workers/`) and
  the writers of the pages and headline blocks made from their records (`scripts/bench/report/`).
- Tools that are not benchmarks, run by path: `check_architecture.py` (the layers, import
  circles and file sizes), `config_reference.py` (writes docs/configuration.md),
  `fault_injection.py` (kills and resumes a run, docs/reliability.md), `task_frames.py` (the
  tasks' pictures) and `gpu_check.sh` (what only a GPU can show, docs/performance.md).

The deployment example that drives an exported policy without this package lives in
`examples/deploy/`.
"""
