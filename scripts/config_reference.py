"""Write docs/configuration.md, the reference of every config key, from the config's schema.

    python scripts/config_reference.py            # print the page
    python scripts/config_reference.py --write    # write docs/configuration.md
    python scripts/config_reference.py --check    # exit 1 when the committed page is stale

Each key's type and default come from its dataclass field in embodied_ppo/config/schema.py, its
meaning from the field's metadata ("doc"). A key without a meaning is an error: the page is
generated, never edited by hand (tests/docs/test_docs.py checks both).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
sys.path.insert(0, str(ROOT))

from embodied_ppo.config import schema  # noqa: E402

BLOCKS: dict[str, tuple[type, str]] = {
    "env": (
        schema.EnvConfig,
        "The environment: which task, how many copies, how they are stepped, and how "
        "observations and rewards are normalized.",
    ),
    "model": (
        schema.ModelConfig,
        "The policy module: the MLP, the action head, image encoders for `Dict` observations, "
        "and an optional recurrent core.",
    ),
    "algorithm": (
        schema.AlgorithmConfig,
        "The learning algorithm. The keys from `normalize_advantages` to `huber_delta` keep "
        "the names of the source PPO documents, verbatim. The formulas are in "
        "[algorithm.md](algorithm.md).",
    ),
    "optim": (schema.OptimConfig, "The optimizer (Adam) and its learning-rate schedule."),
    "trainer": (
        schema.TrainerConfig,
        "How the run runs: its length, seed, device, directory, logging, checkpoints, "
        "evaluation and speed settings.",
    ),
    "distill": (
        schema.DistillConfig,
        "Teacher-student distillation: a run that names teachers trains its policy to output "
        "their mean actions on the states it visits, instead of PPO. The pipeline is in "
        "[distillation.md](distillation.md).",
    ),
    "finetune": (
        schema.FinetuneConfig,
        "PPO going on from a loaded policy (`model.init_from`), such as a distilled student "
        "([distillation.md](distillation.md#fine-tune-with-ppo)).",
    ),
}

# Keys whose meaning goes on in another page: the page and its section.
MORE: dict[str, str] = {
    "env.id": "environments.md#register-your-env",
    "env.backend": "environments.md#vector-env-backends",
    "env.processes": "environments.md#vector-env-backends",
    "env.threads": "environments.md#vector-env-backends",
    "env.batched": "environments.md#vector-env-backends",
    "env.kwargs": "environments.md#task-arguments-envkwargs",
    "env.imports": "environments.md#register-your-env",
    "env.wrappers": "environments.md#wrappers",
    "env.num_envs_scope": "scaling.md",
    "env.normalize_obs": "design.md#rule-2-the-normalizer-lives-inside-the-policy",
    "env.normalize_reward": "algorithm.md#reward-scaling",
    "model.actor_obs_keys": "environments.md#a-privileged-critic",
    "model.critic_obs_keys": "environments.md#a-privileged-critic",
    "model.actor_group_keys": "environments.md#dict-observations-and-cameras",
    "model.cnn_channels": "environments.md#dict-observations-and-cameras",
    "model.cnn_head": "environments.md#dict-observations-and-cameras",
    "model.recurrent": "recurrent.md",
    "model.history_length": "recurrent.md#an-observation-history",
    "distill.teachers": "distillation.md",
    "distill.teacher_key": "distillation.md#several-teachers",
    "distill.loss": "distillation.md#how-a-student-learns",
    "distill.teacher_acts_steps": "distillation.md#how-a-student-learns",
    "finetune.log_std": "distillation.md#fine-tune-with-ppo",
    "finetune.critic_warmup_updates": "distillation.md#fine-tune-with-ppo",
    "model.init_from": "algorithm.md#the-reference-policy-and-fine-tuning",
    "algorithm.group_size": "algorithm.md#critic-free-estimators",
    "algorithm.adv_type": "algorithm.md#critic-free-estimators",
    "algorithm.loss_agg_func": "algorithm.md#aggregation",
    "algorithm.rollout_micro_batch_size": "design.md#rule-3-micro-batches-never-change-the-math",
    "algorithm.logprob_forward_micro_batch_size": (
        "design.md#rule-3-micro-batches-never-change-the-math"
    ),
    "algorithm.micro_batch_size": "design.md#rule-3-micro-batches-never-change-the-math",
    "algorithm.sequence_length": "recurrent.md#how-a-recurrent-policy-trains",
    "algorithm.recompute_advantages": "algorithm.md#advantages-gae",
    "algorithm.early_stop_kl": "algorithm.md#step-size-control",
    "algorithm.use_kl_loss": "algorithm.md#kl-to-a-reference-policy",
    "algorithm.kl_loss_type": "algorithm.md#kl-to-a-reference-policy",
    "algorithm.use_kl_in_reward": "algorithm.md#kl-in-the-reward",
    "algorithm.kl_ctrl.type": "algorithm.md#kl-in-the-reward",
    "algorithm.reference_checkpoint": "algorithm.md#the-reference-policy-and-fine-tuning",
    "algorithm.normalize_value": "algorithm.md#value-normalization",
    "algorithm.symmetry.augment": "algorithm.md#mirror-symmetry",
    "algorithm.symmetry.mirror_loss_coef": "algorithm.md#mirror-symmetry",
    "algorithm.rnd.enabled": "algorithm.md#random-network-distillation",
    "algorithm.rnd.schedule": "algorithm.md#random-network-distillation",
    "optim.schedule": "algorithm.md#step-size-control",
    "trainer.device": "scaling.md",
    "trainer.run_dir": "commands.md#the-run-directory",
    "trainer.keep_checkpoints": "commands.md#resume",
    "trainer.torch_threads": "performance.md",
    "trainer.inference": "performance.md#where-the-time-goes",
    "trainer.compile": "performance.md#where-the-time-goes",
    "trainer.dist_backend": "scaling.md",
    "trainer.dist_timeout": "scaling.md",
    "trainer.log_interval_steps": "commands.md#intervals-in-iterations-or-env-steps",
    "trainer.checkpoint_interval_steps": "commands.md#intervals-in-iterations-or-env-steps",
    "trainer.eval_interval": "commands.md#evaluation-during-training",
    "trainer.eval_interval_steps": "commands.md#intervals-in-iterations-or-env-steps",
    "trainer.video_interval": "commands.md#evaluation-during-training",
    "optim.schedule_extension": "commands.md#train-longer",
    "trainer.wandb.project": "commands.md#weights--biases",
}

INTRO = """\
# Configuration reference

<!-- Generated by scripts/config_reference.py from embodied_ppo/config/schema.py: edit the
meanings there and run `python scripts/config_reference.py --write`. -->

A config is a YAML file with the blocks `env`, `model`, `algorithm`, `optim` and `trainer`,
and, for distillation and what follows it, `distill` and `finetune`.
Every key below is honored. Anything else stops the run before it starts, in one line that
names the key and the closest valid one. A value of the wrong type, out of range, or in a
combination that is not supported is refused the same way. `null` is YAML's "none".

A config needs only what differs from the defaults; `env.id` is the one required key. On the
command line, any key can be set with its dotted path and a YAML value:

<!-- runnable: trainer.seed=3 => trainer.seed=3 trainer.total_steps=512 trainer.compile=false -->
```bash
embodied-ppo train configs/cartpole.yaml model.hidden_sizes=[32,32] algorithm.value_clip=null trainer.seed=3
```

A run writes the whole resolved config, defaults filled in, to `RUN_DIR/config.yaml`. On
resume, only the keys that do not change what is learned may change (see
[commands.md](commands.md#resume)).
"""

NOTES = {
    "env": """\
Per-env seeds derive from `trainer.seed` and the env's index, so env k is the same env
whatever `num_envs` is. Continuous actions are clipped to the action bounds when they enter
the environment; the rollout buffer keeps the sampled action, so log-probabilities stay exact.
""",
    "algorithm": """\
The batch of one iteration is `rollout_steps` x `env.num_envs` transitions. Under `torchrun`,
`minibatch_size` and `micro_batch_size` count per process (see [scaling.md](scaling.md)).
A recurrent policy trains on chunks: `minibatch_size` must then be `sequence_length` times a
divisor of the number of chunks per rollout, and the refusal names the values that fit.
""",
}


def type_name(tp: Any) -> str:
    """A field's type as the page shows it: `int`, `float or null`, `sync | async`, ..."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(str(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        parts = [a for a in typing.get_args(tp) if a is not type(None)]
        text = " or ".join(type_name(a) for a in parts)
        return f"{text} or null" if len(parts) < len(typing.get_args(tp)) else text
    if origin is list:
        inner = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(inner):
            return "list of entries"
        return f"list of {type_name(inner)}"
    if tp is dict or origin is dict:
        return "mapping"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(tp, str(tp))


def default_text(f: dataclasses.Field) -> str:
    """A field's default, written as YAML would write it."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:  # every key has a default
        raise ValueError(f"{f.name}: no default")
    return yaml_value(value)


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if value == "":
        return '""'
    return str(value) if not isinstance(value, float) else repr(value)


def rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, meaning) of every key of `cls`, nested blocks expanded."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        tp = hints[f.name]
        doc = f.metadata.get("doc")
        if not doc:
            raise ValueError(f"{key}: no meaning (metadata 'doc') in embodied_ppo/config/schema.py")
        if dataclasses.is_dataclass(tp):  # a block inside the block: its keys, one row each
            out += rows(tp, key)
            continue
        out.append((key, type_name(tp), default_text(f), doc))
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is list else None
        if inner is not None and dataclasses.is_dataclass(inner):  # a list of entries
            out += rows(inner, f"{key}[i]")
    return out


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def meaning(key: str, doc: str) -> str:
    more = MORE.get(key)
    if more is None:
        return doc
    return f"{doc} (see [{more.split('#')[0]}]({more}))"


def page() -> str:
    parts = [INTRO]
    for block, (cls, intro) in BLOCKS.items():
        parts.append(f"\n## `{block}:`\n\n{intro}\n\n")
        parts.append("| key | type | default | meaning |\n| --- | --- | --- | --- |\n")
        for key, tp, default, doc in rows(cls, block):
            name = key.removeprefix(f"{block}.")
            parts.append(
                f"| `{name}` | {cell(tp)} | `{cell(default)}` | {cell(meaning(key, doc))} |\n"
            )
        if block in NOTES:
            parts.append(f"\n{NOTES[block]}")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    what.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    try:
        text = page()
    except ValueError as exc:
        print(f"config_reference: {exc}", file=sys.stderr)
        return 1
    if args.write:
        PAGE.write_text(text)
        print(f"wrote {PAGE.relative_to(ROOT)}")
    elif args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(
                f"{PAGE.relative_to(ROOT)} is stale: run `python scripts/config_reference.py "
                "--write`",
                file=sys.stderr,
            )
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
