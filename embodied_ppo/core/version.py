"""The package's version (written into checkpoints, exports and eval.json)."""

from __future__ import annotations

__version__ = "0.1.0"
