from __future__ import annotations

import pytest
from support import ROOT

from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.config.loading import apply_overrides, dump_yaml, load_config, load_yaml
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import ConfigError

BASE = {"env": {"id": "CartPole-v1"}}


def cfg_with(**blocks):
    data = {"env": {"id": "CartPole-v1"}}
    for block, values in blocks.items():
        data.setdefault(block, {}).update(values)
    return from_dict(data)


def test_defaults_and_source_block_keys_exist():
    cfg = cfg_with()
    a = cfg.algorithm
    # Every key of the source documents' embodied `algorithm:` block is a field.
    for key in (
        "normalize_advantages",
        "group_size",
        "adv_type",
        "loss_type",
        "loss_agg_func",
        "rollout_micro_batch_size",
        "logprob_forward_micro_batch_size",
        "entropy_bonus",
        "clip_ratio_high",
        "clip_ratio_low",
        "value_clip",
        "gamma",
        "gae_lambda",
        "huber_delta",
        "clip_ratio_c",
    ):
        assert hasattr(a, key)
    assert a.adv_type == "gae" and a.loss_type == "actor_critic" and a.loss_agg_func == "token-mean"
    assert cfg.trainer.device == "auto"


def test_source_block_loads_verbatim(tmp_path):
    text = """
env: {id: Pendulum-v1}
algorithm:
   normalize_advantages: True
   group_size: 1
   adv_type: gae
   loss_type: actor_critic
   loss_agg_func: "token-mean"
   rollout_micro_batch_size: 256
   logprob_forward_micro_batch_size: 16
   entropy_bonus: 0
   clip_ratio_high: 0.2
   clip_ratio_low: 0.2
   value_clip: 0.2
   gamma: 0.99
   gae_lambda: 0.95
   huber_delta: 10.0
"""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.algorithm.rollout_micro_batch_size == 256
    assert cfg.algorithm.entropy_bonus == 0.0 and isinstance(cfg.algorithm.entropy_bonus, float)


def test_overrides_use_dotted_paths_and_yaml_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  id: Hopper-v5\n")
    cfg = load_config(
        path,
        [
            "algorithm.clip_ratio_high=0.28",
            "trainer.seed=3",
            "model.hidden_sizes=[32, 32]",
            "algorithm.value_clip=null",
        ],
    )
    assert cfg.algorithm.clip_ratio_high == 0.28
    assert cfg.trainer.seed == 3
    assert cfg.model.hidden_sizes == [32, 32]
    assert cfg.algorithm.value_clip is None


def test_resolved_yaml_round_trips(tmp_path):
    cfg = cfg_with(algorithm={"clip_ratio_c": 3.0})
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_yaml(cfg))
    again = load_config(path)
    assert again == cfg


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("trainer.seed", "expected KEY.PATH=VALUE"),
        ("=3", "expected KEY.PATH=VALUE"),
        ("trainer..seed=3", "expected KEY.PATH=VALUE"),
        ("algorithm.gamma=[1, ", "is not valid YAML"),
        ("trainer.seed.x=1", "trainer.seed is not a block"),
    ],
)
def test_bad_overrides(override, fragment):
    data = {"env": {"id": "CartPole-v1"}, "trainer": {"seed": 1}}
    with pytest.raises(ConfigError, match="override") as info:
        apply_overrides(data, [override])
    assert fragment in str(info.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("env:\n  id: CartPole-v1\n  num_envs: [1, 2\n")
    with pytest.raises(ConfigError, match=r"line \d+"):
        load_yaml(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_yaml(tmp_path / "nope.yaml")


def test_int_widened_to_float_but_not_bool():
    cfg = cfg_with(optim={"lr": 1})
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    with pytest.raises(ConfigError):
        cfg_with(optim={"lr": True})


def test_batch_properties():
    cfg = cfg_with(
        env={"num_envs": 4},
        algorithm={"rollout_steps": 8, "minibatch_size": 16},
        trainer={"total_steps": 100},
    )
    assert cfg.batch_size == 32
    assert isinstance(cfg, Config)


def test_scientific_notation_overrides_are_numbers():
    cfg = load_config(None, ["env.id=CartPole-v1", "trainer.total_steps=1e6", "optim.lr=3e-4"])
    assert cfg.trainer.total_steps == 1_000_000 and cfg.optim.lr == 3e-4


def test_a_removed_key_says_what_replaced_it():
    with pytest.raises(
        ConfigError, match="trainer.update: no longer a key; the update always runs"
    ):
        cfg_with(trainer={"update": "host"})


def test_a_runs_own_saved_config_drops_removed_keys():
    saved = {"env": {"id": "CartPole-v1"}, "trainer": {"update": "auto", "seed": 4}}
    assert from_dict(upgrade(saved)).trainer.seed == 4
    assert saved["trainer"]["update"] == "auto"  # the caller's dict is left alone


def test_a_run_saved_before_minibatch_scope_keeps_its_per_process_minibatch():
    saved = {"env": {"id": "CartPole-v1"}, "algorithm": {"minibatch_size": 64}}
    assert from_dict(upgrade(saved)).algorithm.minibatch_scope == "per_process"
    written = from_dict({"env": {"id": "CartPole-v1"}}).to_dict()  # what a run saves now
    assert from_dict(upgrade(written)).algorithm.minibatch_scope == "global"


def test_minibatches_are_checked_against_every_processs_envs():
    envs = {"id": "CartPole-v1", "num_envs": 2}
    cfg = from_dict({"env": envs, "algorithm": {"rollout_steps": 16, "minibatch_size": 64}}, 2)
    assert cfg.global_minibatch(2) == 64 and cfg.global_envs(2) == 4
    with pytest.raises(ConfigError, match=r"of all 2 processes' 4 envs"):
        from_dict({"env": {"id": "CartPole-v1", "num_envs": 2},
                   "algorithm": {"rollout_steps": 16, "minibatch_size": 128}}, world=2)  # fmt: skip
    with pytest.raises(ConfigError, match=r"got 64 per process, 128 for the 2 processes"):
        from_dict({"env": {"id": "CartPole-v1", "num_envs": 2},
                   "algorithm": {"rollout_steps": 16, "minibatch_size": 64,
                                 "minibatch_scope": "per_process"}}, world=2)  # fmt: skip


CONFIGS = ROOT / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_committed_config_is_valid_for_its_env(name):
    from embodied_ppo.config.loading import load_config
    from embodied_ppo.runner.preflight import check_policy
    from embodied_ppo.vecenv.preflight import check_env

    cfg = load_config(CONFIGS / name)
    if cfg.env.backend == "mjlab":
        pytest.importorskip("mjlab")  # the mjlab extra's environment checks these
    check_policy(cfg, check_env(cfg))  # keys, spaces, encoders: what `train` checks first
