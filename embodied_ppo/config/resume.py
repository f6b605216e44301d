"""Which keys a resumed run may change: those that change when, where or how long it runs, not how it learns."""

from __future__ import annotations

from embodied_ppo.config.loading import parse_override
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.types import ConfigDict

# Keys that may change when a run resumes: they change when, where or how long it runs, or
# where its env's code is found (env.imports, env.entry_point), not how it learns. (A new trainer.total_steps moves a linear learning-rate schedule from the resume
# point on, as optim.schedule_extension says.)
RESUMABLE_KEYS = frozenset(
    {
        "trainer.total_steps",
        "trainer.log_interval",
        "trainer.checkpoint_interval",
        "trainer.keep_checkpoints",
        "trainer.wandb",
        "trainer.device",
        "trainer.torch_threads",
        "trainer.compile",
        "env.threads",
        "env.processes",
        "env.batched",
        "trainer.eval_interval",
        "trainer.eval_episodes",
        "trainer.video_interval",
        "trainer.log_interval_steps",
        "trainer.checkpoint_interval_steps",
        "trainer.eval_interval_steps",
        "optim.schedule_extension",
        "env.imports",
        "env.entry_point",
    }
)


# ------------------------------------------------------------------ resume
def check_resume_overrides(overrides: list[str]) -> None:
    """A resumed run may change only keys that do not change what it learns."""
    for text in overrides:
        key = ".".join(parse_override(text)[0])
        if key not in RESUMABLE_KEYS and ".".join(key.split(".")[:2]) not in RESUMABLE_KEYS:
            raise ConfigError(
                f"{key}: cannot change when resuming; allowed: {', '.join(sorted(RESUMABLE_KEYS))}"
            )


def check_more_steps(more_steps: object, overrides: list[str]) -> None:
    """`--more N` (train N steps more than the checkpoint holds): a positive integer, and not
    beside a trainer.total_steps of its own."""
    if more_steps is None:
        return
    if isinstance(more_steps, bool) or not isinstance(more_steps, int) or more_steps < 1:
        raise ConfigError(f"--more: got {more_steps!r}, expected an integer >= 1 (env steps)")
    for text in overrides:
        if ".".join(parse_override(text)[0]) == "trainer.total_steps":
            raise ConfigError(
                "--more: cannot be given with trainer.total_steps; --more N trains N steps past "
                "the checkpoint, trainer.total_steps=T up to step T: give one of them"
            )


def _learning_keys(d: ConfigDict) -> ConfigDict:
    """A config dict without the keys that may change on resume (nor trainer.run_dir)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for key in RESUMABLE_KEYS | {"trainer.run_dir"}:
        block, name = key.split(".")
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    return out
