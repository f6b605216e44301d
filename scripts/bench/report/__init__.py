"""The pages written from the benchmarks' records: docs/benchmarks.md (`page.py`, with its
sections for the arm and memory tasks) and the generated blocks of README.md and
docs/performance.md (`headlines.py`)."""
