"""How every block of the configuration declares a key: its default and its one-line meaning, kept
in the dataclass field's metadata, where scripts/config_reference.py reads them to write
docs/configuration.md."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def key(default: Any, doc: str) -> Any:
    """A config key: its default (a list, dict or block default is given by its factory, e.g.
    `list` or `lambda: [64, 64]`) and its one-line meaning."""
    if callable(default):
        return field(default_factory=default, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})
