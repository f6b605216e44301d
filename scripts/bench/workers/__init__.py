"""The child processes of the benchmarks: each module is run as
`python -m scripts.bench.workers.<name>` by the benchmark that measures it, in a fresh process
(so that one contender's threads, imports and caches cannot reach another's), and prints its
measurement as one JSON line."""
