"""The rollout contract: host and device collection share the buffer, the noise and the episode
bookkeeping. A device env's collector is driven here on the CPU, through a tensor twin of a host
vector env, and fills the buffer the host collector fills from the same envs and noise."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import tiny_config
from toy_envs import register_dict

from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.build import collector_settings, make_buffer, make_collector, policy_spec
from embodied_ppo.runner.collector import Collector
from embodied_ppo.runner.device_collector import DeviceCollector
from embodied_ppo.runner.noise import HostNoise
from embodied_ppo.vecenv.device_protocol import DeviceStep
from embodied_ppo.vecenv.gym_backend import GymnasiumVecEnv

CPU = torch.device("cpu")


class TensorTwin:
    """A host vector env behind the device protocol: tensors on the CPU in and out, the
    episodes that ended as (N,) tensors, as a batched simulator on a GPU reports them."""

    on_device = True

    def __init__(self, host: GymnasiumVecEnv) -> None:
        self.host, self.num_envs, self.info, self.device = host, host.num_envs, host.info, CPU

    @staticmethod
    def _tensors(obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(np.array(v)) for k, v in obs.items()}

    def reset(self, seeds=None):
        return self._tensors(self.host.reset(seeds))

    def step(self, action: torch.Tensor) -> DeviceStep:
        res = self.host.step(action.numpy())
        episode_return = torch.zeros(self.num_envs)
        episode_length = torch.zeros(self.num_envs, dtype=torch.int64)
        for env, ret, length in zip(
            res.episode_envs, res.episode_returns, res.episode_lengths, strict=True
        ):
            episode_return[env], episode_length[env] = ret, length
        cut = np.flatnonzero(res.truncated & ~res.terminated)
        return DeviceStep(
            obs=self._tensors(res.obs),
            reward=torch.from_numpy(res.reward.copy()),
            terminated=torch.from_numpy(res.terminated.copy()),
            truncated=torch.from_numpy(res.truncated.copy()),
            final_obs=self._tensors({k: v[cut] for k, v in res.final_obs.items()}),
            final_ids=torch.from_numpy(cut) if cut.size else None,
            episode_return=episode_return,
            episode_length=episode_length,
            ended=len(res.episode_envs),
        )

    def get_state(self):
        return self.host.get_state()

    def set_state(self, state):
        return self.host.set_state(state)

    def set_steps(self, steps: int) -> None:
        self.host.set_steps(steps)

    def close(self) -> None:
        self.host.close()


class AsTensors:
    """A noise source of the host's draws, handed over as tensors."""

    def __init__(self, source: HostNoise) -> None:
        self.source = source

    def draw(self, steps: int, seed: int | None) -> torch.Tensor:
        return torch.from_numpy(self.source.draw(steps, seed))


def dict_config():
    # Vector keys of the Dict task (no image), episodes cut at 5 steps: truncations inside a
    # rollout of 12 steps, every one bootstrapped.
    return tiny_config(
        register_dict(),
        env={
            "num_envs": 3,
            "max_episode_steps": 5,
            "wrappers": [
                {"name": "FilterObservation", "kwargs": {"filter_keys": ["position", "goal"]}}
            ],
        },
        algorithm={"rollout_steps": 12, "minibatch_size": 12},
    )


def collectors(cfg):
    """(host collector, device collector) of twin envs, twin policies, one noise."""
    torch.manual_seed(0)
    host_envs = GymnasiumVecEnv(cfg.env, cfg.trainer.seed)
    device_envs = TensorTwin(GymnasiumVecEnv(cfg.env, cfg.trainer.seed))
    policy = ActorCritic(policy_spec(cfg, host_envs.info))
    made = []
    for envs, inference in ((host_envs, "device"), (device_envs, "device")):
        twin = copy.deepcopy(policy)
        settings = collector_settings(
            cfg, envs, twin, CPU, env_offset=0, world=1, reduce=None, notes=None
        )
        settings = type(settings)(**{**settings.__dict__, "inference": inference})
        scaler = RewardScaler(cfg.env.num_envs, cfg.algorithm.gamma, True, 10.0)
        buffer = make_buffer(cfg, envs.info, twin, CPU)
        made.append(make_collector(envs, twin, buffer, scaler, settings))
    host, device = made
    device.noise = AsTensors(host.noise)
    return host, device


def test_each_kind_of_env_gets_its_collector():
    host, device = collectors(dict_config())
    assert type(host) is Collector and type(device) is DeviceCollector
    assert host.envs.on_device is False and device.envs.on_device is True
    host.envs.close()
    device.envs.close()


def test_host_and_device_collection_fill_the_same_buffer():
    host, device = collectors(dict_config())
    for c in (host, device):
        c.start()
    for iteration in range(2):  # the warm-up, a rollout, and one continuing from it
        stats = [c.collect(noise_seed=7 + iteration) for c in (host, device)]
        h, d = host.buffer, device.buffer
        assert int(h.truncated.sum()) >= 3  # every env's episode was cut in the rollout
        for key in h.obs:
            assert torch.equal(h.obs[key], d.obs[key]), key
        for name in ("actions", "logprobs", "values", "terminated", "ends", "mask"):
            assert torch.equal(getattr(h, name), getattr(d, name)), name
        assert torch.equal(h.truncated, d.truncated)
        # V(final_obs) of the truncations (each kind values those rows alone) and the rewards
        # scaled by twin scalers.
        for name in ("next_values", "rewards"):
            torch.testing.assert_close(getattr(h, name), getattr(d, name), rtol=0, atol=1e-6)
        # Returns: float64 on the host, float32 tensors from a device env.
        assert stats[1].episode_returns == pytest.approx(stats[0].episode_returns, rel=1e-6)
        assert stats[0].episode_lengths == stats[1].episode_lengths
        assert stats[0].steps == stats[1].steps == 36
        for c in (host, device):
            c.merge_obs_statistics()
        statistics = dict(device.policy.named_buffers())  # the normalizers' (Dict: per key)
        assert statistics and any("count" in name for name in statistics)
        for name, value in host.policy.named_buffers():
            assert torch.equal(value, statistics[name]), name
    # A snapshot of envs that cannot be captured (the wrapper holds a function): both kinds say
    # why and start the same fresh episodes from the seeds given.
    saved = host.state()
    reasons = [c.restore(saved, [11, 12, 13], 24) for c in (host, device)]
    assert reasons[0] == reasons[1] == saved.envs["not_captured"] is not None
    for key in saved.obs:
        assert torch.equal(torch.from_numpy(host.obs[key]), device.obs[key]), key
        assert not torch.equal(device.obs[key], saved.obs[key]), key
    host.envs.close()
    device.envs.close()
