"""The speed table: whole training processes, ours against Stable-Baselines3, per config of the
README (scripts.bench.whole_process), from the newest record of each.

A config's numbers come from docs/bench/whole_process.json where that record measured it (what
`python -m scripts.bench.whole_process` writes), otherwise from the record that measured it
before that command existed (LEGACY). Each row names its record's commit, date and machine,
and a config whose settings changed since its record is named under the table.
"""

from __future__ import annotations

import json
import statistics

from scripts.bench.lib import ppo_settings, records
from scripts.bench.lib.args import BadInput
from scripts.bench.lib.proc import ROOT
from scripts.bench.lib.tasks import SPEED_HEADLINE

CURRENT = "whole_process.json"
LEGACY = {
    "configs/halfcheetah.yaml": "whole_halfcheetah_schedule.json",
    "configs/humanoid.yaml": "whole_humanoid_500k_schedule_15672a1.json",
}
RATIO = "ours / sb3 (speed)"


def record_of(config: str, steps: int) -> tuple[str, dict, dict]:
    """The record that measured `config` for `steps`: (its file, the config's part of it, its
    provenance)."""
    current = records.BENCH / CURRENT
    if current.is_file():
        record = json.loads(current.read_text())
        part = record["configs"].get(config)
        if part is not None and part["whole_process_steps"] == steps:
            return CURRENT, part, record["provenance"]
    path = records.BENCH / LEGACY[config]
    if not path.is_file():
        raise BadInput(f"no record of {config} at {steps:,} steps in docs/bench")
    record = json.loads(path.read_text())
    if record["whole_process_steps"] != steps:
        raise BadInput(f"docs/bench/{LEGACY[config]} is not of {steps:,} steps")
    return LEGACY[config], record, record["provenance"]


def _seconds(values: list[float]) -> str:
    """The median of a contender's rounds and their range."""
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


def changed(config: str, settings: dict) -> list[str]:
    """The shared settings of `config` that differ now from those its record measured."""
    now = ppo_settings.from_config(ROOT / config)
    return [f"{k} {settings.get(k)} then, {v} now" for k, v in now.items()
            if k in settings and settings[k] != v]  # fmt: skip


def machine_text(prov: dict) -> str:
    """A record's machine, short."""
    m = prov["machine"]
    cpu = (m.get("cpu") or "CPU model not recorded").split(", as ")[0]
    return f"{cpu}, {m.get('cores')} cores" + (f", {m['gpu']}" if m.get("gpu") else "")


def table(detail: bool = False) -> list[str]:
    """The table's lines (with `detail`, each contender's gradient steps too), its notes, and
    the records it reads."""
    head = "| config | steps | ours | Stable-Baselines3 | ours / SB3 (rounds' range) | rounds |"
    head += " gradient steps, ours / SB3 |" if detail else ""
    head += " measured |"
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if detail else "")
             + " --- |"]  # fmt: skip
    notes, sources = [], []
    for config, steps in SPEED_HEADLINE:
        rel, rec, prov = record_of(config, steps)
        res = rec["results"]
        per_round = rec["per_round_ratios"][RATIO]
        row = (
            f"| `{config.removeprefix('configs/')}` | {steps:,} | {_seconds(res['ours_whole'])} "
            f"| {_seconds(res['sb3_whole'])} | **{rec['ratios'][RATIO]:.2f}x** "
            f"({min(per_round):.2f}-{max(per_round):.2f}) | {len(res['ours_whole'])} |"
        )
        if detail:
            taken = rec.get("gradient_steps", {})
            cells = [
                ", ".join(sorted({"?" if v is None else f"{v:,}" for v in taken.get(c, [])})) or "?"
                for c in ("ours_whole", "sb3_whole")
            ]
            row += f" {' / '.join(cells)} |"
        row += f" {prov['commit'][:7]}, {prov['date'][:10]}, {machine_text(prov)} |"
        lines.append(row)
        sources.append(rel)
        diff = changed(config, rec["settings"])
        if diff:
            notes.append(
                f"`{config.removeprefix('configs/')}` changed since ({'; '.join(diff)}): its row "
                "is of the config as it was, until `python -m scripts.bench.whole_process "
                "--rounds 5` measures it again."
            )
    lines += ["", "Whole processes, start to exit, side by side; seconds: median of the rounds "
              f"(range). Records in docs/bench: {', '.join(dict.fromkeys(sources))}."]  # fmt: skip
    return lines + ["", *notes] if notes else lines
