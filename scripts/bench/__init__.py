"""The benchmarks: one entry point per benchmark, each run from the repository's root as
`python -m scripts.bench.<name>` (`--help` says what it measures and writes; docs/benchmarks.md,
"Running the benchmarks", gives one canonical command for each).

Layers, each importing only those below it (scripts/check_architecture.py checks that no import
circle forms and that no file here grows past its size limit):

- `lib/`: what every benchmark shares: statistics over seeds, results files and the provenance
  of every record (command, commit, date, machine), subprocess helpers, run settings, the tasks'
  targets, plots. It imports nothing of the benchmarks.
- `workers/`: the child processes a benchmark starts (`python -m scripts.bench.workers.<name>`),
  each a module with its own entry point: one contender measured in a fresh process.
- `report/`: the writers of docs/benchmarks.md and of the headline blocks of README.md and
  docs/performance.md, from the records in docs/bench.
- the entry points, beside this file.
"""
