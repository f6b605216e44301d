"""Dict and image observations: encoders, uint8 storage, the privileged critic, export."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from conftest import tiny_config
from toy_envs import register_dict

from embodied_ppo.app.deploy import load_policy
from embodied_ppo.app.export import export_policy
from embodied_ppo.config.schema import with_values
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.encoders import CNNSpec, ImageEncoder, SpatialSoftmax, cnn_output_size
from embodied_ppo.model.export import onnx_bytes, torchscript_bytes
from embodied_ppo.model.inference import inference_net
from embodied_ppo.runner.preflight import check_run
from embodied_ppo.runner.trainer import Trainer


def dict_config(**model):
    return tiny_config(
        register_dict(),
        env={"num_envs": 2},
        model={
            "share_backbone": False,
            "actor_obs_keys": ["image", "position"],
            "critic_obs_keys": ["position", "goal"],
            "cnn_channels": [4, 8],
            "cnn_features": 16,
            **model,
        },
        algorithm={"rollout_steps": 20, "minibatch_size": 20, "update_epochs": 2},
        trainer={"total_steps": 80},
    )


def make_policy(**model) -> ActorCritic:
    from embodied_ppo.runner.build import policy_spec

    cfg = dict_config(**model)
    torch.manual_seed(0)
    return ActorCritic(policy_spec(cfg, check_run(cfg)))


def obs_batch(n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "image": torch.randint(0, 256, (n, 32, 32, 3), generator=g, dtype=torch.uint8),
        "position": torch.rand(n, 2, generator=g) * 2 - 1,
        "goal": torch.rand(n, 2, generator=g) * 2 - 1,
    }


def test_cnn_takes_channels_last_uint8_and_scales_inside():
    enc = ImageEncoder((32, 32, 3), CNNSpec([4, 8], 16))
    image = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8)
    out = enc(image)
    assert out.shape == (3, 16)
    # The same pixels as floats in [0, 1], channels first, through the same layers.
    x = image.permute(0, 3, 1, 2).float() / 255.0
    expected = torch.relu(enc.out(enc.convs(x).flatten(1)))
    assert torch.allclose(out, expected)
    assert cnn_output_size((32, 32, 3), CNNSpec([4, 8], 16)) == 2 * 2
    assert cnn_output_size((16, 16, 3), CNNSpec([4, 8], 16)) == 0


def test_cnn_kernels_and_strides_are_the_configured_ones():
    cnn = CNNSpec([4, 8, 8], 16, kernels=[4, 3, 3], strides=[2, 2, 1])
    enc = ImageEncoder((32, 32, 3), cnn)
    convs = [m for m in enc.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.kernel_size, c.stride) for c in convs] == [
        ((4, 4), (2, 2)),
        ((3, 3), (2, 2)),
        ((3, 3), (1, 1)),
    ]
    # 32 -> 15 -> 7 -> 5 positions a side
    assert cnn.output_hw((32, 32, 3)) == (5, 5) and enc.out.in_features == 5 * 5 * 8
    # Without kernels and strides: 8/4, 4/2, then 3/1.
    assert CNNSpec([4, 4, 4, 4], 8).layers == [(8, 4), (4, 2), (3, 1), (3, 1)]
    with pytest.raises(ValueError, match="3 layers needs 3 kernels"):
        CNNSpec([4, 8, 8], 16, kernels=[3, 3])


def test_spatial_softmax_gives_where_each_channel_fires():
    soft = SpatialSoftmax(5, 7)  # rows, columns
    maps = torch.zeros(2, 3, 5, 7)
    maps[0, 0, 4, 0] = 50.0  # bottom left: x -1, y +1
    maps[0, 1, 2, 3] = 50.0  # centre
    maps[0, 2, 0, 5:7] = 50.0  # two top-right positions: between them
    maps[1, 0] = 0.0  # a flat map: the centre of the image
    out = soft(maps).reshape(2, 3, 2)  # (x, y) per channel
    assert torch.allclose(out[0, 0], torch.tensor([-1.0, 1.0]), atol=1e-4)
    assert torch.allclose(out[0, 1], torch.tensor([0.0, 0.0]), atol=1e-4)
    assert torch.allclose(out[0, 2], torch.tensor([(2 / 3 + 1) / 2, -1.0]), atol=1e-4)
    assert torch.allclose(out[1, 0], torch.zeros(2), atol=1e-6)
    # The temperature is learned: a lower one sharpens the same map towards its peak.
    maps = torch.zeros(1, 1, 5, 7)
    maps[0, 0, 2, 6], maps[0, 0, 2, 0] = 2.0, 1.0
    with torch.no_grad():
        warm = soft(maps)[0, 0].item()
        soft.log_temperature.fill_(-3.0)
        cold = soft(maps)[0, 0].item()
    assert 0 < warm < cold and cold == pytest.approx(1.0, abs=1e-4)


def test_a_spatial_softmax_encoder_follows_a_bright_spot():
    torch.manual_seed(0)
    enc = ImageEncoder(
        (16, 16, 1), CNNSpec([1], 4, kernels=[1], strides=[1], head="spatial_softmax")
    )
    with torch.no_grad():  # one 1x1 convolution that passes the brightness through
        enc.convs[0].weight.fill_(20.0)
        enc.convs[0].bias.zero_()
    assert isinstance(enc.head, SpatialSoftmax) and len(enc.convs) == 1  # no ReLU before it
    image = torch.zeros(2, 16, 16, 1, dtype=torch.uint8)
    image[0, 3, 12] = 255  # row 3, column 12
    image[1, 12, 3] = 255
    keypoints = enc.head(enc.convs(image.permute(0, 3, 1, 2).float() / 255.0))
    step = 2 / 15
    assert torch.allclose(keypoints[0], torch.tensor([-1 + 12 * step, -1 + 3 * step]), atol=1e-3)
    assert torch.allclose(keypoints[1], torch.tensor([-1 + 3 * step, -1 + 12 * step]), atol=1e-3)
    assert enc(image).shape == (2, 4)


def test_a_cnn_too_deep_for_the_images_is_refused():
    with pytest.raises(
        ConfigError, match="model.cnn_channels: 4 layers .* shrink the 'image' image"
    ):
        make_policy(cnn_channels=[4, 4, 4, 4])
    with pytest.raises(ConfigError, match=r"kernels \[9, 9\], strides \[4, 4\]\) shrink"):
        make_policy(cnn_channels=[4, 4], cnn_kernels=[9, 9], cnn_strides=[4, 4])


def test_dict_policy_acts_and_values_from_its_keys():
    policy = make_policy()
    obs = obs_batch()
    dist, value = policy(obs)
    assert dist.mean.shape == (5, 2) and value.shape == (5,)
    assert torch.allclose(policy.value(obs), value)
    # Vector keys are normalized, images are not: only vector keys have normalizers.
    assert sorted(policy.obs_normalizers) == ["goal", "position"]


def test_the_actor_never_reads_a_privileged_key():
    policy = make_policy()
    obs = obs_batch()
    other = dict(obs, goal=obs["goal"] + 100.0)  # only the critic's key changes
    assert torch.equal(policy(obs)[0].mean, policy(other)[0].mean)
    assert not torch.allclose(policy.value(obs), policy.value(other))
    del other["goal"]
    with pytest.raises(KeyError):
        policy.value(other)  # the critic does read it
    net = inference_net(policy)  # the deployed actor does not need it
    assert "goal" not in net.core.actor.state_dict().get("obs_normalizers", {})
    assert not any("goal" in name for name in net.state_dict())
    assert net.keys == ["image", "position"]
    assert torch.equal(net(obs), net({k: obs[k] for k in net.keys}))


def test_shared_networks_read_the_same_keys():
    with pytest.raises(ConfigError, match="model.critic_obs_keys: .* needs its own network"):
        make_policy(share_backbone=True)
    policy = make_policy(share_backbone=True, actor_obs_keys=None, critic_obs_keys=None)
    assert policy.actor_keys == policy.critic_keys == ["goal", "image", "position"]


def test_training_stores_images_as_uint8_and_updates_vector_normalizers(tmp_path):
    trainer = Trainer(dict_config(), tmp_path, progress_stream=io.StringIO())
    buf = trainer.buffer
    assert buf.obs["image"].dtype == torch.uint8 and buf.obs["image"].shape == (20, 2, 32, 32, 3)
    assert buf.obs["position"].dtype == torch.float32
    before = {k: n.count.item() for k, n in trainer.policy.obs_normalizers.items()}
    summary = trainer.train()
    assert before == {k: 0.0 for k in before}  # the warm-up (40 rows), then 80 trained on
    assert all(n.count.item() == 40 + 80 for n in trainer.policy.obs_normalizers.values())
    assert buf.obs["image"].float().std() > 0
    # The env reports is_success: the rate is the share of the iteration's episodes whose last
    # step ended within 0.2 of the goal, counted by hand from each one's last observation and
    # (clipped) action, as DictEnv moves.
    t, n = buf.ends.nonzero(as_tuple=True)
    action = buf.actions[t, n].clamp(-1.0, 1.0)
    position = (buf.obs["position"][t, n] + 0.2 * action).clamp(-1.0, 1.0)
    flags = ((position - buf.obs["goal"][t, n]).norm(dim=-1) < 0.2).float()
    assert len(flags) == 2 and 0.0 < flags.mean() < 1.0  # one episode each way
    assert summary["charts/success_rate"] == pytest.approx(flags.mean().item())
    assert trainer.collector.acting.host is False  # the numpy snapshot has no CNN: torch inference


KEYPOINTS = {"cnn_kernels": [4, 3], "cnn_strides": [2, 1], "cnn_head": "spatial_softmax"}


@pytest.mark.parametrize("cnn", [{}, KEYPOINTS], ids=["flatten", "spatial_softmax"])
def test_compiled_training_on_dict_observations_matches_eager(tmp_path, cnn):
    eager = Trainer(dict_config(**cnn), tmp_path / "e", progress_stream=io.StringIO())
    eager.train()
    cfg = dict_config(**cnn)
    cfg = with_values(cfg, trainer__compile=True)
    compiled = Trainer(cfg, tmp_path / "c", progress_stream=io.StringIO())
    compiled.train()
    for k, v in eager.policy.state_dict().items():
        assert torch.allclose(v, compiled.policy.state_dict()[k], atol=1e-4), k


@pytest.mark.parametrize("cnn", [{}, KEYPOINTS], ids=["flatten", "spatial_softmax"])
def test_dict_policy_export_equals_eager_and_loads(tmp_path, cnn):
    trainer = Trainer(dict_config(**cnn), tmp_path, progress_stream=io.StringIO())
    trainer.train()
    policy = load_policy(tmp_path)
    assert list(policy.metadata["observation"]["keys"]) == ["image", "position"]
    obs = obs_batch(4, seed=1)
    with torch.no_grad():
        eager = policy.net(obs)
    # numpy in, numpy out; a single observation too
    np_obs = {k: v.numpy() for k, v in obs.items()}
    assert np.allclose(policy(np_obs), eager.numpy(), atol=1e-6)
    assert np.allclose(policy({k: v[0] for k, v in np_obs.items()}), eager[0].numpy(), atol=1e-6)
    scripted = torch.jit.load(io.BytesIO(torchscript_bytes(policy.net)))
    assert torch.allclose(scripted(obs), eager, atol=1e-5)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(onnx_bytes(policy.net))
    assert [i.name for i in session.get_inputs()] == ["image", "position"]
    (action,) = session.run(["action"], {"image": np_obs["image"], "position": np_obs["position"]})
    assert np.allclose(action, eager.numpy(), atol=1e-5)
    path, meta_path, meta = export_policy(tmp_path, "onnx", tmp_path / "p.onnx")
    assert meta["input_names"] == ["image", "position"] and path.is_file()


def test_a_wrong_observation_for_a_dict_policy_is_named(tmp_path):
    from embodied_ppo.core.errors import ObservationError

    Trainer(dict_config(), tmp_path, progress_stream=io.StringIO()).train()
    policy = load_policy(tmp_path)
    obs = {k: v.numpy() for k, v in obs_batch(2).items()}
    with pytest.raises(ObservationError, match="missing key"):
        policy({"image": obs["image"]})
    with pytest.raises(ObservationError, match="image key 'image' expected uint8"):
        policy(dict(obs, image=obs["image"].astype(np.float32)))
    with pytest.raises(ObservationError, match="key 'position' expected shape"):
        policy(dict(obs, position=np.zeros((2, 3), np.float32)))


def test_eval_reports_the_success_rate(tmp_path):
    """Evaluated where success is within 1.0 of the goal (so that both outcomes happen), the
    success rate is the share of the episodes whose last step the env reported a success, as a
    plain gymnasium loop with the deployed policy counts them."""
    import gymnasium as gym

    from embodied_ppo.app.evaluate import evaluate_command

    Trainer(dict_config(), tmp_path, progress_stream=io.StringIO()).train()
    out = io.StringIO()
    kwargs = ["env.kwargs.success_distance=1.0"]
    summary = evaluate_command(str(tmp_path), episodes=6, out=out, overrides=kwargs)
    policy = load_policy(tmp_path)
    env = gym.make(register_dict(), success_distance=1.0)
    flags = []
    for seed in summary["episode_seeds"]:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        flags.append(info["is_success"])
    env.close()
    assert 0 < sum(flags) < len(flags)  # both outcomes
    assert summary["successes"] == flags
    assert summary["success_rate"] == pytest.approx(sum(flags) / 6)
    assert f"success rate {sum(flags) / 6:.0%}" in out.getvalue()
    assert load_checkpoint(tmp_path)["model_spec"]["critic_keys"] == ["goal", "position"]
