"""The scripts import each other by name (scripts/ is their folder on sys.path when run)."""

from __future__ import annotations

import sys

from support import ROOT

if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))
