"""YAML files and dotted command-line overrides, into a checked Config, and back to YAML."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from embodied_ppo.config.building import from_dict
from embodied_ppo.config.intervals import overridden_unit_wins
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.types import ConfigDict, ConfigValue

_NUMBER_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def parse_override(text: str) -> tuple[list[str], ConfigValue]:
    """Parse `a.b.c=value` (value in YAML syntax) into (["a", "b", "c"], value)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. trainer.seed=3")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip() or any(not p for p in parts):
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. trainer.seed=3")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"override {text!r}: value {raw!r} is not valid YAML") from None
    if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e6 as a string; on a command line it is a number
    return parts, value


def set_dotted(
    data: ConfigDict, parts: list[str], value: ConfigValue, text: str | None = None
) -> ConfigDict:
    """A copy of the nested dict `data` with the key path `parts` set to `value`."""
    data = copy.deepcopy(data)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            where = text if text is not None else ".".join(parts)
            raise ConfigError(f"override {where!r}: {'.'.join(parts[: i + 1])} is not a block")
        node = child
    node[parts[-1]] = value
    return data


def apply_overrides(data: ConfigDict, overrides: list[str]) -> ConfigDict:
    """Set each dotted override in a copy of `data` (a nested dict); an interval overridden in
    one unit (iterations, env steps) replaces the other (`intervals.overridden_unit_wins`)."""
    data = copy.deepcopy(data)
    given = []
    for text in overrides:
        parts, value = parse_override(text)
        data = set_dotted(data, parts, value, text)
        given.append(".".join(parts))
    return overridden_unit_wins(data, given)


def load_yaml(path: str | Path) -> ConfigDict:
    """Read a YAML mapping, turning file and syntax problems into ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}:{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of blocks (env:, model:, ...), got {type(data).__name__}"
        )
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load YAML (or start from defaults when `path` is None), apply overrides, validate."""
    data = load_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    return from_dict(data)


def dump_yaml(cfg: Config) -> str:
    """The resolved config as YAML text (what ran, key for key)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)
