"""Exceptions that carry a message meant for the user (printed without a traceback)."""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input; the CLI prints its message and exits non-zero."""

    exit_code = 2


class QuietError(UserError):
    """An error another process has already printed (the CLI exits without a line)."""


class ConfigError(UserError):
    """An invalid configuration: unknown key, wrong type, value out of range, bad combination."""


class CheckpointError(UserError):
    """A checkpoint that is missing, unreadable, or does not belong to this run."""


class TrainingError(UserError):
    """Training cannot continue (non-finite loss, environment failure)."""

    exit_code = 1


class ObservationError(UserError, ValueError):
    """An observation the policy cannot take (wrong shape or dtype)."""


class ExportError(UserError):
    """An export that cannot be done (unsupported format, missing optional dependency)."""


class RenderError(UserError):
    """Frames cannot be rendered or a video cannot be written."""


def require(condition: bool, message: str) -> None:
    """A ConfigError with `message` (one line: the key path, what was given, what is allowed)
    unless `condition` holds."""
    if not condition:
        raise ConfigError(message)
