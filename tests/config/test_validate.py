"""Every refusal of validate.py: one line naming the key, what was given, what is allowed."""

from __future__ import annotations

import pytest
import torch

from embodied_ppo.config.building import from_dict
from embodied_ppo.config.loading import load_config
from embodied_ppo.config.resume import check_resume_overrides
from embodied_ppo.config.scale import per_process
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.preflight import check_run, inference_path, resolve_device


@pytest.mark.parametrize(
    "data, fragment",
    [
        (
            {"algorithm": {"clip_ratio_hgih": 0.2}},
            "algorithm.clip_ratio_hgih: unknown key; did you mean 'clip_ratio_high'",
        ),
        ({"algorithm": {"ppo_epochs": 4}}, "did you mean 'update_epochs'"),
        ({"enviroment": {}}, "enviroment: unknown key; did you mean 'env'"),
        ({"algorithm": {"gamma": "high"}}, "algorithm.gamma: got 'high', expected a number"),
        (
            {"algorithm": {"update_epochs": 2.5}},
            "algorithm.update_epochs: got 2.5, expected an integer",
        ),
        ({"env": {"num_envs": True}}, "env.num_envs: got true, expected an integer"),
        (
            {"algorithm": {"normalize_advantages": "yes"}},
            "algorithm.normalize_advantages: got 'yes', expected true/false",
        ),
        (
            {"algorithm": {"adv_type": "vtrace"}},
            "algorithm.adv_type: got 'vtrace', allowed: gae | grpo | rloo | reinforce_plus_plus",
        ),
        ({"model": {"activation": "tahn"}}, "did you mean 'tanh'"),
        ({"algorithm": {"gamma": 1.5}}, "algorithm.gamma: got 1.5, expected a number in [0, 1]"),
        ({"algorithm": {"clip_ratio_c": 0.5}}, "algorithm.clip_ratio_c: got 0.5"),
        ({"algorithm": {"group_size": 4}}, "algorithm.group_size: got 4"),
        (
            {"algorithm": {"adv_type": "rloo", "group_size": 2, "recompute_advantages": True}},
            "algorithm.recompute_advantages: got true with adv_type 'rloo'",
        ),
        (
            {"algorithm": {"minibatch_size": 100}},
            "algorithm.minibatch_size: got 100, expected a divisor",
        ),
        ({"algorithm": {"micro_batch_size": 1024}}, "algorithm.micro_batch_size: got 1024"),
        ({"env": {"num_envs": 0}}, "env.num_envs: got 0"),
        (
            {"trainer": {"device": "tpu"}},
            "trainer.device: got 'tpu', allowed: auto | cpu | cuda | cuda:N",
        ),
        ({"model": {"hidden_sizes": [64, -1]}}, "model.hidden_sizes[1]: got -1"),
        (
            {"model": {"hidden_sizes": 64}},
            "model.hidden_sizes: got 64, expected a list of an integer",
        ),
        ({"optim": {"lr": float("nan")}}, "optim.lr: got .nan, expected a finite number"),
        (
            {"optim": {"schedule": "adaptive", "desired_kl_final": 0.0}},
            "optim.desired_kl_final: got 0.0, expected null or a number > 0",
        ),
        (
            {"optim": {"desired_kl_final": 0.01}},
            "optim.desired_kl_final: only the adaptive schedule aims at a KL; optim.schedule is "
            "'constant'",
        ),
        ({"trainer": {"total_steps": 0}}, "trainer.total_steps: got 0"),
        ({"env": {"id": None}}, "env.id: required"),
        ({"algorithm": 3}, "algorithm: got 3, expected a mapping"),
        ({"env": {"threads": 0}}, "env.threads: got 0, expected null or an integer >= 1"),
        (
            {"env": {"threads": 2, "backend": "async"}},
            "env.threads: got 2 with backend 'async'",
        ),
        ({"env": {"processes": 0}}, "env.processes: got 0, expected an integer >= 1"),
        (
            {"env": {"processes": 2, "backend": "async"}},
            "env.processes: got 2 with backend 'async'",
        ),
        (
            {"env": {"processes": 3, "num_envs": 2}},
            "env.processes: got 3 for 2 envs (env.num_envs), expected at most one process per env",
        ),
        (
            {"trainer": {"inference": "host"}, "model": {"activation": "gelu"}},
            "trainer.inference: got 'host', which does not support model.activation 'gelu'",
        ),
    ],
)
def test_config_errors_name_key_value_and_allowed(data, fragment):
    merged = {"env": {"id": "CartPole-v1"}}
    for block, values in data.items():
        if isinstance(values, dict) and isinstance(merged.get(block), dict):
            merged[block] = {**merged[block], **values}
        else:
            merged[block] = values
    with pytest.raises(ConfigError) as info:
        from_dict(merged)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            ["env.id=CartPol-v1"],
            "env.id: unknown environment 'CartPol-v1'; did you mean 'CartPole-v1'",
        ),
        (["env.id=Blackjack-v1"], "env.id: Blackjack-v1 has observation space Tuple"),
        (
            ["env.id=CartPole-v1", "model.head=gaussian"],
            "model.head: got 'gaussian' but CartPole-v1 needs 'categorical'",
        ),
        (
            ["env.id=Pendulum-v1", "env.kwargs={gravity: 9.8, bogus: 1}"],
            "env.kwargs: Pendulum-v1 rejected the arguments",
        ),
        (
            [
                "env.id=CartPole-v1",
                "algorithm.adv_type=grpo",
                "algorithm.group_size=2",
                "algorithm.rollout_steps=64",
            ],
            "algorithm.rollout_steps: got 64; adv_type 'grpo' collects one whole episode per env",
        ),
    ],
)
def test_environment_checks(overrides, fragment):
    pytest.importorskip("gymnasium")
    with pytest.raises(ConfigError) as info:
        check_run(load_config(None, overrides))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_an_env_that_cannot_be_created_is_one_line():
    # CarRacing needs Box2D, which is not a dependency of embodied-ppo.
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401
    except ImportError:
        with pytest.raises(
            ConfigError, match=r"env.id: cannot create CarRacing-v3 \(DependencyNotInstalled"
        ):
            check_run(load_config(None, ["env.id=CarRacing-v3"]))
    else:
        pytest.skip("Box2D is installed")


def test_environment_checks_return_the_spaces():
    info = check_run(load_config(None, ["env.id=Pendulum-v1"]))
    assert (info.obs_dim, info.action_kind, info.action_dim) == (3, "gaussian", 1)


def test_unavailable_cuda_is_a_config_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ConfigError, match="trainer.device: got 'cuda' but no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"


def test_host_inference_refuses_a_policy_the_snapshot_cannot_run():
    spec = {
        "obs_dim": 3, "action_kind": "gaussian", "action_dim": 1, "action_low": [-1.0],
        "action_high": [1.0], "hidden_sizes": [8], "activation": "gelu", "share_backbone": True,
        "log_std_init": 0.0, "state_dependent_std": False, "init": "orthogonal",
        "normalize_obs": True, "clip_obs": 10.0,
    }  # fmt: skip
    policy = ActorCritic(spec)
    with pytest.raises(
        ConfigError,
        match=r"trainer.inference: got 'host', but the numpy snapshot has no actor_backbone\[1\] \(GELU\)",
    ):
        inference_path("host", policy, 4)
    assert inference_path("auto", policy, 4) == "device"
    spec["activation"] = "tanh"
    assert inference_path("auto", ActorCritic(spec), 4) == "host"
    assert inference_path("auto", ActorCritic(spec), 1000) == "device"


def test_resume_may_change_only_how_a_run_runs():
    check_resume_overrides(["trainer.total_steps=10", "trainer.compile=false", "env.threads=2"])
    with pytest.raises(ConfigError, match="algorithm.gamma: cannot change when resuming"):
        check_resume_overrides(["algorithm.gamma=0.9"])


def test_global_num_envs_split_over_processes():
    cfg = from_dict({"env": {"id": "CartPole-v1", "num_envs": 8, "num_envs_scope": "global"}})
    assert per_process(cfg, 2).env.num_envs == 4 and cfg.env.num_envs == 8
    with pytest.raises(
        ConfigError,
        match="env.num_envs: got 8 with num_envs_scope global, expected a multiple of the 3",
    ):
        per_process(cfg, 3)


def test_the_minibatch_hint_lists_the_largest_divisors_in_the_usual_range():
    """The minibatch refusal suggests divisors of the batch; the hint is built on every check
    (also when the value is fine), so it must stay cheap for mjlab's batches of millions of
    transitions. Against a brute-force scan of every candidate."""
    from embodied_ppo.config.algorithm_checks import _divisors_hint

    def brute(n: int) -> list[int]:
        divs = [d for d in range(1, n + 1) if n % d == 0]
        return ([d for d in divs if 32 <= d <= 4096] or divs)[-4:]

    for n in [1, 2, 7, 31, 64, 97, 2048, 12288, 65521, 100000, 1 << 17]:
        assert _divisors_hint(n) == ", ".join(map(str, brute(n))), n
    n = 24 * 10_000_000  # 10 million envs x 24 steps
    hint = [int(d) for d in _divisors_hint(n).split(", ")]
    in_range = [d for d in range(32, 4097) if n % d == 0]
    assert hint == in_range[-4:]


def test_the_rnd_split_of_a_rollout_is_checked_only_where_the_predictor_trains():
    """algorithm.rnd.minibatches shares a rollout's steps among the predictor's steps: a
    rollout of 7 steps refuses 4 shares with RND on, and does not care with RND off (its
    default)."""
    base = {"env": {"id": "CartPole-v1"}, "algorithm": {"rollout_steps": 7, "minibatch_size": 7}}
    assert from_dict(base).algorithm.rnd.minibatches == 4
    on = {**base, "algorithm": {**base["algorithm"], "rnd": {"enabled": True}}}
    with pytest.raises(ConfigError, match=r"algorithm.rnd.minibatches: got 4, expected a divisor"):
        from_dict(on)
