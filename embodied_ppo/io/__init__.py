"""What a run reads and writes: atomic files, checkpoints, random-generator state, run
directories and their lock, metrics, the progress line, videos, and headless rendering."""
