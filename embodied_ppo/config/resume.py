"""Which keys a resumed run may change: those that change when or how it runs, not what it learns."""

from __future__ import annotations

from embodied_ppo.config.loading import parse_override
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.types import ConfigDict

# Keys that may change when a run resumes: they change when or how it runs, not what it learns.
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
        "trainer.eval_interval",
        "trainer.eval_episodes",
        "trainer.video_interval",
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


def _learning_keys(d: ConfigDict) -> ConfigDict:
    """A config dict without the keys that may change on resume (nor trainer.run_dir)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for key in RESUMABLE_KEYS | {"trainer.run_dir"}:
        block, name = key.split(".")
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    return out
