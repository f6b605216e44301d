"""The actor-critic module: normalizer -> backbone(s) -> Gaussian or categorical head + value head.

Everything a deployed policy needs (normalizer statistics, action bounds, architecture) lives in
this module or in its `spec` (a PolicySpec, which rebuilds it). Imports torch only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn

from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN
from embodied_ppo.core.types import JSONValue
from embodied_ppo.model.distributions import Categorical, DiagGaussian, Distribution
from embodied_ppo.model.encoders import DictEncoder
from embodied_ppo.model.history import make_core
from embodied_ppo.model.networks import init_linear, mlp
from embodied_ppo.model.normalizer import ObsNormalizer
from embodied_ppo.model.spec import PolicySpec

Obs = torch.Tensor | dict[str, torch.Tensor]


class ActorCritic(nn.Module):
    """Shared-backbone (or separate) MLP actor-critic, on flat or Dict observations.

    Flat observations (B, obs_dim) go through the observation normalizer into the MLP. Dict
    observations (a tensor per key) go through one normalizer per vector key and a CNN per image
    key (channels-last uint8, scaled inside), concatenated into the MLP; the actor reads
    `actor_keys`, a separate critic `critic_keys` (which may include privileged state).

    The actor is wired here once: training's distributions and the deployed policy's
    `deterministic_action` run the same parts in the same order (`model.inference` wraps an
    actor-only copy of this module, `model.snapshot` is checked against it).

    Args:
        spec: the architecture (a PolicySpec, or its checkpoint dict).
        critic: build the critic's parts too (False: an actor-only copy, for deployment).
    """

    def __init__(self, spec: PolicySpec | Mapping[str, JSONValue], critic: bool = True) -> None:
        super().__init__()
        self.spec = spec = PolicySpec.coerce(spec)
        self.has_critic = critic
        obs_dim, act_dim = spec.obs_dim, spec.action_dim
        hidden, act = list(spec.hidden_sizes), spec.activation
        ortho = spec.init == "orthogonal"
        self.is_gaussian = spec.is_gaussian
        self.state_dependent_std = spec.state_dependent_std and self.is_gaussian
        self.share_backbone = spec.share_backbone
        separate_critic = critic and not self.share_backbone

        self.dict_obs = spec.dict_obs is not None
        if spec.dict_obs is not None:
            keys, cnn = spec.dict_obs.keys, spec.dict_obs.cnn
            self.actor_keys = list(spec.dict_obs.actor_keys)
            self.critic_keys = list(spec.dict_obs.critic_keys) if critic else []
            # One normalizer per vector key, shared by actor and critic (the same statistics).
            read = set(self.actor_keys) | set(self.critic_keys)
            self.obs_normalizers = nn.ModuleDict(
                {
                    k: ObsNormalizer(v.shape, enabled=spec.normalize_obs, clip=spec.clip_obs)
                    for k, v in keys.items()
                    if v.kind == "vector" and k in read
                }
            )
            group = spec.dict_obs.actor_group
            self.actor_encoder = DictEncoder(
                self.actor_keys, keys, cnn, group, activation=act, orthogonal=ortho
            )
            self.critic_encoder = (
                DictEncoder(self.critic_keys, keys, cnn) if separate_critic else None
            )
            actor_in = self.actor_encoder.out_dim
            critic_in = actor_in if self.critic_encoder is None else self.critic_encoder.out_dim
        else:
            self.obs_normalizer = ObsNormalizer(
                (obs_dim,), enabled=spec.normalize_obs, clip=spec.clip_obs
            )
            actor_in = critic_in = obs_dim
        # An optional recurrent core between the inputs and the MLP (the actor's, and a separate
        # critic's own: an LSTM, a GRU or an observation history); its state is one flat tensor
        # per env: [actor | critic].
        r = spec.recurrent
        self.recurrent = None if r is None else r.kind
        self.actor_rnn = self.critic_rnn = None
        if r is not None:
            self.actor_rnn = make_core(r, actor_in)
            if separate_critic:
                self.critic_rnn = make_core(r, critic_in)
            actor_in = self.actor_rnn.out_dim
            critic_in = actor_in if self.critic_rnn is None else self.critic_rnn.out_dim
        self.actor_backbone = mlp(actor_in, hidden, act, ortho)
        # With a shared backbone the critic reads the actor's features.
        self.critic_backbone = mlp(critic_in, hidden, act, ortho) if separate_critic else None
        feat = hidden[-1]
        self.action_head = nn.Linear(feat, act_dim)
        self.value_head = nn.Linear(feat, 1) if critic else None
        if ortho:
            init_linear(self.action_head, 0.01)
            if self.value_head is not None:
                init_linear(self.value_head, 1.0)
        if self.is_gaussian:
            if self.state_dependent_std:
                self.log_std_head = init_linear(nn.Linear(feat, act_dim), 0.01, spec.log_std_init)
            else:
                self.log_std = nn.Parameter(torch.full((act_dim,), float(spec.log_std_init)))
            low = torch.as_tensor(spec.action_low, dtype=torch.float32)
            high = torch.as_tensor(spec.action_high, dtype=torch.float32)
        else:
            low, high = torch.zeros(0), torch.zeros(0)  # (two tensors: a trace shares none)
        # Action bounds travel with the module (used by the deployed policy to clip).
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)

    def actor_copy(self) -> ActorCritic:
        """A frozen copy of the actor's parts alone (normalizers, encoder, core, backbone,
        head, std, bounds): what a deployed policy runs, with this module's weights."""
        actor = ActorCritic(self.spec, critic=False)
        own = self.state_dict()
        actor.load_state_dict({k: own[k].detach().clone() for k in actor.state_dict()})
        actor.requires_grad_(False)
        return actor.eval()

    def normalize(self, obs: Obs) -> Obs:
        """The observation as the encoders read it (vector keys normalized and clipped)."""
        if not self.dict_obs:
            return self.obs_normalizer(obs)
        return {
            k: self.obs_normalizers[k](v) if k in self.obs_normalizers else v
            for k, v in obs.items()
        }

    def update_obs_statistics(
        self, obs: Obs, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> None:
        """Merge the rows of a batch of raw observations into the normalizers' statistics."""
        if not self.dict_obs:
            if self.obs_normalizer.enabled:
                self.obs_normalizer.update(obs, reduce)
            return
        for k, norm in self.obs_normalizers.items():
            if norm.enabled:
                norm.update(obs[k], reduce)

    def needs_obs_statistics(self) -> bool:
        """Whether the policy normalizes observations but its normalizers have seen no data."""
        norms = [self.obs_normalizer] if not self.dict_obs else list(self.obs_normalizers.values())
        enabled = [n for n in norms if n.enabled]
        return bool(enabled) and all(n.count.item() == 0 for n in enabled)

    def _inputs(self, obs: Obs, critic: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the actor's and a separate critic's networks read (B, in): the normalized
        observation, or the encoded Dict observation (`critic` False: the actor's alone)."""
        x = self.normalize(obs)
        if not self.dict_obs:
            return x, x
        separate = critic and self.critic_encoder is not None
        return self.actor_encoder(x), self.critic_encoder(x) if separate else None

    def _features(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        actor_in, critic_in = self._inputs(obs)
        actor = self.actor_backbone(actor_in)
        if self.critic_backbone is None:
            return actor, actor
        return actor, self.critic_backbone(critic_in)

    def _critic_features(self, obs: Obs) -> torch.Tensor:
        """The critic's features alone (a separate critic runs without the actor)."""
        if self.actor_rnn is not None:
            raise ValueError("a recurrent policy's value needs its state: see step()")
        if self.critic_backbone is None:
            return self._features(obs)[1]
        x = self.normalize(obs)
        if self.dict_obs:
            x = self.critic_encoder(x)
        return self.critic_backbone(x)

    # ------------------------------------------------------------------ recurrent policies
    @property
    def state_size(self) -> int:
        """Size of the recurrent state of one env (0 without a recurrent core)."""
        if self.actor_rnn is None:
            return 0
        return self.actor_rnn.state_size + (
            0 if self.critic_rnn is None else self.critic_rnn.state_size
        )

    def initial_state(self, batch: int, device: torch.device | None = None) -> torch.Tensor:
        """The recurrent state at an episode's start: zeros (batch, state_size)."""
        return torch.zeros(batch, self.state_size, device=device or self.action_low.device)

    def _recurrent_features(
        self, obs: Obs, state: torch.Tensor, starts: torch.Tensor, critic: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(actor features, critic features) (L*B, H) and the state after the last step, for
        time-major observations (L, B, ...), the state before the first step (B, S) and the
        episode starts (L, B). `critic` False: the actor's core alone runs (no critic features,
        and the actor's part of the state)."""
        L, B = starts.shape
        flat = obs.reshape(L * B, *obs.shape[2:]) if isinstance(obs, torch.Tensor) else {
            k: v.reshape(L * B, *v.shape[2:]) for k, v in obs.items()
        }  # fmt: skip
        actor_in, critic_in = self._inputs(flat, critic)
        n = self.actor_rnn.state_size
        actor_seq, actor_state = self.actor_rnn(actor_in.reshape(L, B, -1), state[:, :n], starts)
        actor = self.actor_backbone(actor_seq).reshape(L * B, -1)
        if not critic:
            return actor, None, actor_state
        if self.critic_rnn is None:
            return actor, actor, actor_state
        critic_seq, critic_state = self.critic_rnn(
            critic_in.reshape(L, B, -1), state[:, n:], starts
        )
        critic = self.critic_backbone(critic_seq).reshape(L * B, -1)
        return actor, critic, torch.cat([actor_state, critic_state], dim=-1)

    def step(
        self, obs: Obs, state: torch.Tensor
    ) -> tuple[Distribution, torch.Tensor, torch.Tensor]:
        """One step of a recurrent policy: (distribution, value (B,), new state) for raw
        observations (B, ...) and the state before them (B, S) (zeros at an episode's start)."""
        actor_in, critic_in = self._inputs(obs)
        n = self.actor_rnn.state_size
        actor_h, actor_state = self.actor_rnn.step(actor_in, state[:, :n])
        actor = self.actor_backbone(actor_h)
        if self.critic_rnn is None:
            critic, new_state = actor, actor_state
        else:
            critic_h, critic_state = self.critic_rnn.step(critic_in, state[:, n:])
            critic = self.critic_backbone(critic_h)
            new_state = torch.cat([actor_state, critic_state], dim=1)
        return self._dist(actor), self.value_head(critic).squeeze(-1), new_state

    def _dist(self, actor_feat: torch.Tensor) -> Distribution:
        out = self.action_head(actor_feat)
        if not self.is_gaussian:
            return Categorical(out)
        if self.state_dependent_std:
            # Clamped forward, straight through backward: the gradient reaches the head
            # unchanged (1 per unit) inside the bounds and beyond them, so a head pushed past a
            # bound still gets the gradient that brings it back (the log-std parameter is put
            # back at the bound by the gradient step instead). The clamp's value carries no
            # gradient of its own; `raw - raw.detach()` is exactly 0 forward and carries it.
            raw = self.log_std_head(actor_feat)
            log_std = raw.clamp(LOG_STD_MIN, LOG_STD_MAX).detach() + (raw - raw.detach())
        else:
            log_std = self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        return DiagGaussian(out, log_std)

    def forward(
        self,
        obs: Obs,
        state: torch.Tensor | None = None,
        starts: torch.Tensor | None = None,
        *,
        critic: bool = True,
    ) -> tuple[Distribution, torch.Tensor]:
        """Action distribution and value (B,) for a batch of raw observations (B, ...).

        A recurrent policy takes sequences: time-major observations (L, B, ...), the state
        before their first step (B, S) and the episode starts (L, B); its outputs are over the
        L x B steps, flattened time-major.

        `critic` False: the actor alone runs (a recurrent policy's actor core from its part of
        `state`), and the value is an empty (0,) tensor; the update's mirror loss reads only the
        actor on the mirrored rows.
        """
        if self.actor_rnn is not None:
            if state is None or starts is None:
                raise ValueError("a recurrent policy takes (obs, state, starts): see step()")
            actor, features, _ = self._recurrent_features(obs, state, starts, critic)
        elif not critic:
            actor_in, _ = self._inputs(obs, critic=False)
            actor, features = self.actor_backbone(actor_in), None
        else:
            actor, features = self._features(obs)
        if features is None:
            return self._dist(actor), actor.new_zeros(0)
        return self._dist(actor), self.value_head(features).squeeze(-1)

    def sample_noise(
        self, batch: int, device: torch.device, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Noise for `act`, drawn for a whole batch at once so chunking never changes samples."""
        dist_cls = DiagGaussian if self.is_gaussian else Categorical
        return dist_cls.noise(batch, self.spec.action_dim, device, generator)

    def act(
        self, obs: Obs, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (from `noise`, see `sample_noise`) or take the mode; returns (action, log_prob, value)."""
        dist, value = self(obs)
        action = dist.mode() if deterministic else dist.sample(noise)
        return action, dist.log_prob(action), value

    def evaluate(
        self, obs: Obs, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Distribution]:
        """Log-prob and entropy of `action`, value, and the distribution, for the update."""
        dist, value = self(obs)
        return dist.log_prob(action), dist.entropy(), value, dist

    def value(self, obs: Obs) -> torch.Tensor:
        """State value (B,) only."""
        return self.value_head(self._critic_features(obs)).squeeze(-1)

    # ------------------------------------------------------------------ the deployed actor
    @property
    def actor_state_size(self) -> int:
        """Size of the actor's own recurrent state (what a deployed policy carries; 0: none)."""
        return 0 if self.actor_rnn is None else self.actor_rnn.state_size

    def deterministic_action(
        self, obs: Obs, state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The deployed action for raw observations (B, ...): the Gaussian mean clipped to the
        action bounds, or the most likely category; and a recurrent actor's new state, given
        its state before (B, actor_state_size) (zeros at an episode's start)."""
        actor_in, _ = self._inputs(obs, critic=False)
        new_state = None
        if self.actor_rnn is not None:
            actor_in, new_state = self.actor_rnn.step(actor_in, state)
        out = self.action_head(self.actor_backbone(actor_in))  # (B, A) means or logits
        if self.is_gaussian:
            return torch.maximum(torch.minimum(out, self.action_high), self.action_low), new_state
        return out.argmax(dim=-1), new_state
