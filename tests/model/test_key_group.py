"""model.actor_group_keys: some of the actor's vector keys read through their own MLP."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_dict_obs import dict_config, make_policy, obs_batch

from embodied_ppo.app.deploy import load_policy
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.encoders import DictEncoder
from embodied_ppo.model.export import onnx_bytes, torchscript_bytes
from embodied_ppo.runner.preflight import check_run
from embodied_ppo.runner.trainer import Trainer

GROUP = {
    "actor_obs_keys": ["image", "position", "goal"],
    "actor_group_keys": ["position", "goal"],
    "actor_group_hidden_sizes": [8],
    "actor_group_features": 3,
    "activation": "elu",  # the group's layers use the model's activation
}


def test_the_group_goes_through_its_own_mlp_into_the_backbone():
    """The actor's backbone reads [the image's features, the MLP of (goal, position)], the
    MLP computed by hand from its weights: Linear 4 -> 8, ELU, Linear 8 -> 3, ELU; the keys in
    sorted order, each normalized first."""
    policy = make_policy(**GROUP)
    enc = policy.actor_encoder
    assert enc.vector_keys == [] and enc.group_keys == ["goal", "position"]
    assert enc.out_dim == 3 + 16  # the group's features and the image's
    obs = obs_batch(6)
    x = policy.normalize(obs)
    w1, b1, w2, b2 = (p.detach() for p in enc.group.parameters())
    assert w1.shape == (8, 4) and w2.shape == (3, 8)
    hidden = F.elu(torch.cat([x["goal"], x["position"]], dim=-1) @ w1.T + b1)
    group = F.elu(hidden @ w2.T + b2)
    expected = torch.cat([group, enc.images["image"](x["image"])], dim=-1)
    assert torch.allclose(enc(x), expected, atol=1e-6)
    # The grouped keys reach the action only through the MLP: with its last layer's output
    # pinned at zero, they no longer move the mean.
    with torch.no_grad():
        w2.zero_()
        enc.group[2].weight.zero_()
        enc.group[2].bias.fill_(-50.0)  # ELU at -1 whatever the input
    other = dict(obs, goal=obs["goal"] + 0.5, position=-obs["position"])
    assert torch.allclose(policy(obs)[0].mean, policy(other)[0].mean)


def test_without_a_group_the_policy_is_what_it_was():
    """No group: no new parameters, no new spec keys, the same initial weights (the group is
    built before the backbone, so it must not draw from the generator when absent)."""
    plain = make_policy()
    assert not any(".group." in name for name in plain.state_dict())
    assert not any(k.startswith("actor_group") for k in plain.spec.to_dict())
    grouped = make_policy(actor_group_keys=["position"], actor_group_features=2)
    assert any(".group." in name for name in grouped.state_dict())
    assert grouped.spec.to_dict()["actor_group_keys"] == ["position"]
    # Building the actor's encoder without a group draws nothing from the generator, so the
    # backbone built after it starts from the weights it always had.
    keys = plain.spec.dict_obs.keys
    torch.manual_seed(0)
    before = torch.get_rng_state()
    DictEncoder(["position", "goal"], keys, plain.spec.dict_obs.cnn)
    assert torch.equal(torch.get_rng_state(), before)


def test_the_critic_reads_the_grouped_keys_as_they_are():
    policy = make_policy(**GROUP)
    assert policy.critic_encoder.group_keys == [] and policy.critic_encoder.out_dim == 4
    assert not any(".group." in n for n in policy.critic_encoder.state_dict())


def test_a_zero_init_group_starts_silent_and_learns(tmp_path):
    """model.actor_group_zero_init: at initialization the group's features are 0 whatever the
    grouped keys say, so the mean is the same for any value of them; every other weight is the
    one the policy draws without it (the draws are the same); the last layer still gets a
    gradient, and training moves the features off 0."""
    plain = make_policy(**GROUP)
    silent = make_policy(**GROUP, actor_group_zero_init=True)
    assert silent.spec.dict_obs.actor_group.zero_init
    assert silent.spec.to_dict()["actor_group_zero_init"] is True
    last = "actor_encoder.group.2."
    for name, value in silent.state_dict().items():
        if name.startswith(last):
            assert not value.any(), name
        else:
            assert torch.equal(value, plain.state_dict()[name]), name
    assert plain.state_dict()[last + "weight"].any()  # the plain group's last layer is not 0
    obs = obs_batch(6)
    features = silent.actor_encoder.group(torch.cat([obs["goal"], obs["position"]], -1))
    assert not features.any()
    other = dict(obs, goal=obs["goal"] + 3.0, position=-2.0 * obs["position"])
    assert torch.equal(silent(obs)[0].mean, silent(other)[0].mean)
    assert not torch.equal(plain(obs)[0].mean, plain(other)[0].mean)
    silent(obs)[0].mean.square().sum().backward()
    assert silent.actor_encoder.group[2].weight.grad.abs().sum() > 0
    # Trained, the features are no longer 0: the keys now reach the action.
    trainer = Trainer(
        dict_config(**GROUP, actor_group_zero_init=True), tmp_path, progress_stream=io.StringIO()
    )
    trainer.train()
    assert load_checkpoint(tmp_path)["model_spec"]["actor_group_zero_init"] is True
    group = trainer.policy.actor_encoder.group
    with torch.no_grad():
        assert group(torch.cat([obs["goal"], obs["position"]], -1)).abs().sum() > 0


def test_a_trained_group_policy_deploys_exports_and_is_copied_whole(tmp_path):
    trainer = Trainer(dict_config(**GROUP), tmp_path, progress_stream=io.StringIO())
    trainer.train()
    spec = load_checkpoint(tmp_path)["model_spec"]
    assert spec["actor_group_keys"] == ["goal", "position"]
    assert spec["actor_group_hidden_sizes"] == [8] and spec["actor_group_features"] == 3
    obs = obs_batch(4, seed=1)
    with torch.no_grad():
        trained = trainer.policy.deterministic_action(obs)[0]
        copy = trainer.policy.actor_copy()  # what a teacher or a deployed policy runs
        assert torch.equal(copy.deterministic_action(obs)[0], trained)
    policy = load_policy(tmp_path)
    assert list(policy.metadata["observation"]["keys"]) == ["goal", "image", "position"]
    with torch.no_grad():
        eager = policy.net(obs)
    assert torch.allclose(eager, trained, atol=1e-6)
    np_obs = {k: v.numpy() for k, v in obs.items()}
    assert np.allclose(policy(np_obs), eager.numpy(), atol=1e-6)
    scripted = torch.jit.load(io.BytesIO(torchscript_bytes(policy.net)))
    assert torch.allclose(scripted(obs), eager, atol=1e-5)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(onnx_bytes(policy.net))
    (action,) = session.run(["action"], np_obs)
    assert np.allclose(action, eager.numpy(), atol=1e-5)


@pytest.mark.parametrize(
    "model, message",
    [
        ({"actor_group_keys": ["goal"]}, "model.actor_group_keys[0]: got 'goal', expected one of"),
        ({"actor_group_keys": ["image"]}, "model.actor_group_keys[0]: got 'image', expected one"),
        ({"actor_group_keys": []}, "model.actor_group_keys: got [], expected null"),
        ({"actor_group_keys": ["position", "position"]}, "position named twice"),
        ({"actor_group_hidden_sizes": [0]}, "model.actor_group_hidden_sizes[0]: got 0"),
        ({"actor_group_features": 0}, "model.actor_group_features: got 0"),
        (
            {"actor_group_zero_init": True},
            "model.actor_group_zero_init: got true without model.actor_group_keys",
        ),
    ],
)
def test_a_bad_group_is_refused_in_one_line(model, message):
    with pytest.raises(ConfigError) as info:
        check_run(dict_config(**model))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_group_on_flat_observations_is_refused():
    from conftest import tiny_config

    cfg = tiny_config("CartPole-v1", model={"actor_group_keys": ["x"]})
    with pytest.raises(ConfigError, match="model.actor_group_keys: got .* flat Box"):
        check_run(cfg)
