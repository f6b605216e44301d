"""model.init_from into a policy whose actor adds a silent key group to the saved actor's keys:
the saved policy grown (model.grow), acting exactly as it did until training lets the new keys
in."""

from __future__ import annotations

import io

import pytest
import torch
from test_dict_obs import dict_config, obs_batch

from embodied_ppo.core.errors import CheckpointError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer

# The saved ("blind") actor reads the image and position; the critic reads position and goal.
GROWN = {
    "actor_obs_keys": ["image", "position", "goal"],
    "actor_group_keys": ["goal"],
    "actor_group_hidden_sizes": [8],
    "actor_group_features": 3,
    "actor_group_zero_init": True,
}
FIRST = "actor_backbone.0.weight"


def trainer(run_dir, **model):
    return Trainer(dict_config(**model), run_dir, progress_stream=io.StringIO())


@pytest.fixture(scope="module")
def blind(tmp_path_factory):
    """A trained run whose actor reads image and position (its critic also goal)."""
    run = tmp_path_factory.mktemp("grow") / "blind"
    trainer(run).train()
    return run


def test_a_grown_policy_starts_as_the_saved_one_and_learns_the_new_keys(tmp_path, blind):
    saved = load_checkpoint(blind)["model"]
    grown = trainer(tmp_path / "grown", init_from=str(blind), **GROWN)
    fresh = trainer(tmp_path / "fresh", **GROWN)  # the same draws, nothing loaded
    state, drawn = grown.policy.state_dict(), fresh.policy.state_dict()
    # Every saved tensor is carried over, the goal's normalizer (the saved critic's) with them.
    for name, value in saved.items():
        if name != FIRST:
            assert torch.equal(state[name], value), name
    assert saved["obs_normalizers.goal.count"] > 0
    # The backbone reads [position (2), the group's 3 features, the image's 16]: the saved
    # columns around the group's, which are the grown policy's own draws.
    assert saved[FIRST].shape[1] == 2 + 16 and state[FIRST].shape[1] == 2 + 3 + 16
    assert torch.equal(state[FIRST][:, :2], saved[FIRST][:, :2])
    assert torch.equal(state[FIRST][:, 5:], saved[FIRST][:, 2:])
    assert torch.equal(state[FIRST][:, 2:5], drawn[FIRST][:, 2:5])
    assert state[FIRST][:, 2:5].abs().sum() > 0
    for name in ("actor_encoder.group.0.weight", "actor_encoder.group.0.bias"):
        assert torch.equal(state[name], drawn[name]), name
    assert not state["actor_encoder.group.2.weight"].any()
    # It acts as the saved policy (to rounding: the first layer sums the group's zeros too),
    # whatever the goal says, and values states as it did.
    old = trainer(tmp_path / "old", init_from=str(blind)).policy
    obs = obs_batch(6, seed=3)
    other = dict(obs, goal=-3.0 * obs["goal"] + 1.0)
    with torch.no_grad():
        action = grown.policy.deterministic_action(obs)[0]
        torch.testing.assert_close(action, old.deterministic_action(obs)[0], rtol=0, atol=1e-6)
        assert torch.equal(grown.policy.deterministic_action(other)[0], action)
        assert torch.equal(grown.policy.value(obs), old.value(obs))
    # Training gives the group features: the goal now moves the action.
    grown.train()
    with torch.no_grad():
        a, b = (grown.policy.deterministic_action(o)[0] for o in (obs, other))
    assert not torch.equal(a, b)
    assert load_checkpoint(tmp_path / "grown")["model_spec"]["actor_group_keys"] == ["goal"]


def test_a_group_key_the_saved_policy_never_read_starts_with_fresh_statistics(tmp_path):
    trainer(tmp_path / "blind", critic_obs_keys=["position"]).train()
    saved = load_checkpoint(tmp_path / "blind")["model"]
    assert not any(k.startswith("obs_normalizers.goal.") for k in saved)
    grown = trainer(
        tmp_path / "grown", critic_obs_keys=["position"], init_from=str(tmp_path / "blind"), **GROWN
    )
    fresh = trainer(tmp_path / "fresh", critic_obs_keys=["position"], **GROWN)
    state, drawn = grown.policy.state_dict(), fresh.policy.state_dict()
    for stat in ("mean", "var", "count"):
        name = f"obs_normalizers.goal.{stat}"
        assert torch.equal(state[name], drawn[name]), name
    assert torch.equal(
        state["obs_normalizers.position.mean"], saved["obs_normalizers.position.mean"]
    )


@pytest.mark.parametrize(
    "model, message",
    [
        ({**GROWN, "actor_group_zero_init": False}, "needs model.actor_group_zero_init: true"),
        (
            {**GROWN, "actor_obs_keys": ["position", "goal"]},
            "has an actor reading ['image', 'position']: growing it needs model.actor_obs_keys",
        ),
        ({**GROWN, "hidden_sizes": [32]}, "has a different hidden_sizes than this config's"),
        ({"hidden_sizes": [32]}, "has a different hidden_sizes than this config's policy"),
    ],
)
def test_a_policy_that_cannot_be_grown_is_refused_in_one_line(tmp_path, blind, model, message):
    with pytest.raises(CheckpointError) as info:
        trainer(tmp_path, init_from=str(blind), **model)
    text = str(info.value)
    assert text.startswith(f"model.init_from: {blind} ") and "\n" not in text
    assert message in text


def test_a_recurrent_policy_is_not_grown(tmp_path):
    """The recurrent core's input weights would need widening too: refused."""
    gru = {"recurrent": "gru", "recurrent_size": 8}
    trainer(tmp_path / "blind", **gru).train()
    with pytest.raises(CheckpointError, match=r"needs a feed-forward policy \(model.recurrent"):
        trainer(tmp_path / "grown", init_from=str(tmp_path / "blind"), **gru, **GROWN)
