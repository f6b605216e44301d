"""Mirror symmetry (`algorithm.symmetry`): the declared mirror, the augmented minibatch and the
mirror loss, against batches and losses built by hand; the theory of augmentation on a symmetric
task; micro-batches (docs/design.md, rule 3) and recurrent policies."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from mirror_envs import PENDULUM_MIRROR, SidesEnv

from embodied_ppo.algo.advantages import Estimator, Trajectories, compute_advantages
from embodied_ppo.algo.minibatch_loss import MinibatchLoss
from embodied_ppo.algo.mirror import Mirror, MirrorError
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.symmetry import behaviour_fields
from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.auxiliary import SymmetryConfig
from embodied_ppo.config.schema import AlgorithmConfig, OptimConfig
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.encoders import CNNSpec
from embodied_ppo.model.spec import DictObsSpec, ObsKeySpec, PolicySpec, RecurrentSpec

SIDES = SidesEnv.metadata["mirror"]
SHAPES = {"left": (2,), "right": (2,), "shared": (3,)}


def sides_policy(seed: int = 0, recurrent: RecurrentSpec | None = None) -> ActorCritic:
    """A policy of SidesEnv's spaces, its normalizers holding statistics."""
    torch.manual_seed(seed)
    keys = {k: ObsKeySpec(s, "vector") for k, s in SHAPES.items()}
    names = tuple(sorted(keys))
    spec = PolicySpec(
        obs_dim=0,
        action_kind="gaussian",
        action_dim=4,
        action_low=(-1.0,) * 4,
        action_high=(1.0,) * 4,
        hidden_sizes=(16,),
        share_backbone=False,
        log_std_init=-0.5,
        dict_obs=DictObsSpec(keys, names, names, CNNSpec([8], 8)),
        recurrent=recurrent,
    )
    policy = ActorCritic(spec)
    for k, norm in policy.obs_normalizers.items():
        norm.update(torch.randn(64, *SHAPES[k]) * 2.0 + 0.5)
    return policy


def hand_mirror(obs: dict, actions: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """SidesEnv's mirror written out: the sides swap, the shared part's first entry and the
    first action of each side change sign, the sides' actions swap."""
    mirrored = {
        "left": obs["right"],
        "right": obs["left"],
        "shared": obs["shared"] * torch.tensor([-1.0, 1.0, 1.0]),
    }
    return mirrored, hand_mirror_actions(actions)


def hand_mirror_actions(a: torch.Tensor) -> torch.Tensor:
    """SidesEnv's action mirror written out: the sides' actions swap, the first of each side
    changes sign."""
    return torch.stack([-a[:, 2], a[:, 3], -a[:, 0], a[:, 1]], dim=1)


def sides_batch(policy: ActorCritic, n: int, seed: int = 1) -> dict:
    """A batch of `n` rows whose ratios and value errors take every branch of the loss."""
    g = torch.Generator().manual_seed(seed)
    obs = {k: torch.randn(n, *s, generator=g) * 2.0 for k, s in SHAPES.items()}
    actions = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        logprob, _, value, _ = policy.evaluate(obs, actions)
    return {
        "obs": obs,
        "actions": actions,
        "logprobs": logprob + 0.3 * torch.randn(n, generator=g),
        "values": value + 0.3 * torch.randn(n, generator=g),
        "advantages": torch.randn(n, generator=g),
        "returns": value + torch.randn(n, generator=g),
        "mask": torch.ones(n),
    }


ALGO = AlgorithmConfig(entropy_bonus=0.01, clip_ratio_c=3.0, value_clip=0.2, huber_delta=1.0)


def test_a_declaration_that_is_not_a_mirror_of_the_spaces_is_refused_naming_the_entry():
    ok = Mirror.from_declaration(SIDES, SHAPES, 4)
    assert isinstance(ok.observation, dict)
    cases = [
        ({"observation": {"perm": [0, 1]}, "action": {}}, 3, "observation.perm: 2 entries"),
        ({"observation": {"perm": [1, 2, 0]}, "action": {}}, 3, "not an involution"),
        (
            {"observation": {"perm": [0, 2, 1], "negate": [1]}, "action": {}},
            3,
            "changes the sign of entry",
        ),
        ({"observation": {"negate": [3]}, "action": {}}, 3, "outside 0..2"),
        ({"observation": {}}, 3, "'action': missing"),
        ({"observation": {}, "action": {"perm": [0, 0]}}, 3, "not a permutation"),
    ]
    for declaration, size, message in cases:
        with pytest.raises(MirrorError, match=message):
            Mirror.from_declaration(declaration, size, 2)
    bad_shape = copy.deepcopy(SIDES)
    bad_shape["observation"]["shared"] = {"source": "left"}
    with pytest.raises(MirrorError, match=r"observation\['shared'\].source: 'left' has shape"):
        Mirror.from_declaration(bad_shape, SHAPES, 4)
    missing = copy.deepcopy(SIDES)
    del missing["observation"]["shared"]
    with pytest.raises(MirrorError, match=r"observation\['shared'\]: missing"):
        Mirror.from_declaration(missing, SHAPES, 4)
    with pytest.raises(MirrorError, match="only permutes actions"):
        Mirror.from_declaration({"observation": {}, "action": {"negate": [0]}}, 3, 2, True)


def test_a_mirrored_minibatch_is_the_hand_built_mirror_of_a_known_batch():
    """The mirrored observations and actions are the hand-built ones; the mirrored samples' old
    values are the behaviour critic's on them; their old log-probabilities are the collected
    rows' own (a mirrored sample was drawn by the mirrored behaviour policy, whose density at
    M a on M s is pi_old(a | s)); and the augmented minibatch's loss is the plain loss of the
    batch followed by its hand-built mirror, the same advantages, returns and old
    log-probabilities, as one minibatch of twice the rows. The policy is not symmetric, so
    pi_old(M a | M s), the other candidate, gives another loss. approx_kl, what the adaptive
    learning rate reads, is the collected rows' alone."""
    policy = sides_policy()
    mirror = Mirror.from_declaration(SIDES, SHAPES, 4)
    n = 6
    batch = sides_batch(policy, n)
    obs, actions = batch["obs"], batch["actions"]
    hand_obs, hand_actions = hand_mirror(obs, actions)
    for k in SHAPES:
        assert torch.equal(mirror.obs(obs)[k], hand_obs[k])
    assert torch.equal(mirror.actions(actions), hand_actions)

    fields = behaviour_fields(policy, mirror, batch, n)
    assert set(fields) == {"mirror_values"}
    with torch.no_grad():
        mirrored_logprob, _, value, _ = policy.evaluate(hand_obs, hand_actions)
    torch.testing.assert_close(fields["mirror_values"], value, rtol=0, atol=1e-6)

    algo = replace(ALGO, symmetry=SymmetryConfig(augment=True))
    params, buffers = dict(policy.named_parameters()), dict(policy.named_buffers())
    names = ("logprobs", "values", "advantages", "returns")
    mb = (obs, actions, *(batch[f] for f in names), value)
    weights = torch.full((n,), 1.0 / n)
    loss, metrics = MinibatchLoss(policy, algo, mirror=mirror)(params, buffers, mb, weights)
    plain = MinibatchLoss(policy, ALGO)

    def doubled(mirrored_old_logprobs: torch.Tensor) -> tuple:
        return (
            {k: torch.cat([obs[k], hand_obs[k]]) for k in SHAPES},
            torch.cat([actions, hand_actions]),
            torch.cat([batch["logprobs"], mirrored_old_logprobs]),
            torch.cat([batch["values"], value]),
            torch.cat([batch["advantages"], batch["advantages"]]),
            torch.cat([batch["returns"], batch["returns"]]),
        )

    half = torch.full((2 * n,), 0.5 / n)
    ref, ref_metrics = plain(params, buffers, doubled(batch["logprobs"]), half)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    other, _ = plain(params, buffers, doubled(mirrored_logprob), half)
    assert abs(float((other - ref).detach())) > 1e-3  # the two candidates differ on this policy
    ours = dict(zip(MinibatchLoss(policy, algo, mirror=mirror).names, metrics, strict=True))
    for name, value_ in zip(plain.names, ref_metrics, strict=True):
        if name != "approx_kl":
            torch.testing.assert_close(ours[name], value_, rtol=1e-6, atol=1e-7)
    _, collected = plain(params, buffers, (obs, actions, *(batch[f] for f in names)), weights)
    kl = plain.names.index("approx_kl")
    torch.testing.assert_close(ours["approx_kl"], collected[kl], rtol=1e-6, atol=1e-8)
    assert abs(float(ref_metrics[kl] - collected[kl])) > 1e-4  # the mirrored rows' ratios differ
    assert 0 < float(ours["clipfrac"]) < 1  # the clipped branches are taken


def test_the_mirror_loss_and_its_gradient_are_the_hand_computed_ones():
    """mirror_loss = sum_i w_i mean_a (mu(M s_i) - M mu(s_i))^2, the original's mean a fixed
    target; without augmentation the PPO terms are the batch's alone, so the loss is the plain
    loss + coef * mirror_loss, and so is its gradient."""
    policy = sides_policy(seed=3)
    mirror = Mirror.from_declaration(SIDES, SHAPES, 4)
    n, coef = 5, 0.7
    batch = sides_batch(policy, n, seed=4)
    fields = behaviour_fields(policy, mirror, batch, n)
    weights = torch.rand(n, generator=torch.Generator().manual_seed(5))
    algo = replace(ALGO, symmetry=SymmetryConfig(mirror_loss_coef=coef))
    params, buffers = dict(policy.named_parameters()), dict(policy.named_buffers())
    names = ("obs", "actions", "logprobs", "values", "advantages", "returns")
    mb = tuple(batch[f] for f in names)
    sym = MinibatchLoss(policy, algo, mirror=mirror)
    loss, metrics = sym(params, buffers, (*mb, fields["mirror_values"]), weights)
    grads = torch.autograd.grad(loss, list(params.values()))

    def hand(detach: bool) -> torch.Tensor:
        hand_obs, _ = hand_mirror(batch["obs"], batch["actions"])
        mean = policy(batch["obs"])[0].mean
        mirrored_mean = policy(hand_obs)[0].mean
        _, target = hand_mirror(batch["obs"], mean)
        target = target.detach() if detach else target
        return ((mirrored_mean - target).square().mean(dim=1) * weights).sum()

    plain_loss, _ = MinibatchLoss(policy, ALGO)(params, buffers, mb, weights)
    mirror_loss = hand(detach=True)
    measured = float(metrics[sym.names.index("mirror_loss")])
    assert measured == pytest.approx(float(mirror_loss.detach()))
    assert measured > 1e-4  # an asymmetric policy
    torch.testing.assert_close(loss, plain_loss + coef * mirror_loss)
    expected = torch.autograd.grad(
        plain_loss + coef * mirror_loss, list(params.values()), retain_graph=True
    )
    for ours, ref in zip(grads, expected, strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)
    # The target is fixed: through it the gradient would differ.
    both = torch.autograd.grad(plain_loss + coef * hand(detach=False), list(params.values()))
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, both, strict=True))


def test_the_mirror_loss_alone_runs_only_the_actor_on_the_mirrors():
    """Without augmentation the mirrored rows' values weigh nothing, so the critic runs on the
    batch's rows alone and the actor on the rows and their mirrors; with augmentation both run
    on all of them. The actor alone (`critic=False`) is the whole forward's distribution."""
    policy = sides_policy(seed=3)
    mirror = Mirror.from_declaration(SIDES, SHAPES, 4)
    n = 5
    batch = sides_batch(policy, n, seed=4)
    fields = behaviour_fields(policy, mirror, batch, n)
    names = ("obs", "actions", "logprobs", "values", "advantages", "returns")
    mb = (*(batch[f] for f in names), fields["mirror_values"])
    params, buffers = dict(policy.named_parameters()), dict(policy.named_buffers())
    rows = {"actor": [], "critic": []}
    for part in rows:
        backbone = getattr(policy, f"{part}_backbone")
        backbone.register_forward_hook(lambda m, i, o, part=part: rows[part].append(len(i[0])))
    for augment, critic_rows in ((False, [n]), (True, [2 * n])):
        rows["actor"].clear(), rows["critic"].clear()
        algo = replace(ALGO, symmetry=SymmetryConfig(augment=augment, mirror_loss_coef=0.5))
        MinibatchLoss(policy, algo, mirror=mirror)(params, buffers, mb, torch.ones(n) / n)
        assert rows["critic"] == critic_rows
        assert sum(rows["actor"]) == 2 * n
    rows["actor"].clear(), rows["critic"].clear()
    actor_alone, value = policy(batch["obs"], critic=False)
    assert rows["critic"] == [] and value.numel() == 0
    torch.testing.assert_close(actor_alone.mean, policy(batch["obs"])[0].mean, rtol=0, atol=0)
    # A recurrent policy's actor alone runs its own core from its part of the state.
    recurrent = sides_policy(seed=3, recurrent=RecurrentSpec("gru", 8, 1))
    L, B = 3, 2
    seq = {k: torch.randn(L, B, *shape) for k, shape in SHAPES.items()}
    state, starts = torch.randn(B, recurrent.state_size), torch.zeros(L, B)
    starts[1, 0] = 1.0
    cores = []
    recurrent.critic_rnn.register_forward_hook(lambda m, i, o: cores.append("critic"))
    actor_alone, value = recurrent(seq, state, starts, critic=False)
    assert cores == [] and value.numel() == 0
    whole = recurrent(seq, state, starts)[0]
    assert cores == ["critic"]
    torch.testing.assert_close(actor_alone.mean, whole.mean, rtol=0, atol=0)
    torch.testing.assert_close(actor_alone.std, whole.std, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"takes \(obs, state, starts\)"):
        recurrent(batch["obs"], critic=False)


def _run_update(policy, batch, mirror, algo, num_steps, optim=OptimConfig(lr=3e-3)):  # noqa: B008
    upd = PPOUpdate(
        policy, torch.Generator().manual_seed(1), UpdateSettings(algo, optim, mirror=mirror)
    )
    metrics = upd.update(batch, num_steps)
    return {k: v.clone() for k, v in policy.state_dict().items()}, metrics


@pytest.mark.parametrize("augment", [True, False], ids=["augmented", "mirror-loss-alone"])
@pytest.mark.parametrize("micro", [3, 8])
def test_micro_batches_do_not_change_a_symmetric_update(micro, augment):
    mirror = Mirror.from_declaration(SIDES, SHAPES, 4)
    sym = SymmetryConfig(augment=augment, mirror_loss_coef=0.5)
    algo = replace(ALGO, symmetry=sym, minibatch_size=16, update_epochs=2)
    results = []
    for m in (None, micro):
        policy = sides_policy(seed=7)
        batch = sides_batch(policy, 48, seed=8)
        batch |= behaviour_fields(policy, mirror, batch, 48)
        results.append(_run_update(policy, batch, mirror, replace(algo, micro_batch_size=m), 8))
    (p0, m0), (p1, m1) = results
    for k in p0:
        torch.testing.assert_close(p0[k], p1[k], rtol=1e-5, atol=1e-6)
    for k in m0:
        assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6), k
    assert m0["mirror_loss"] > 0


def recurrent_batch(policy: ActorCritic, T: int, N: int, seed: int = 11) -> dict:
    """A rollout of T steps of N envs with episode starts, collected as the collector does:
    each step's state stored before it (zeroed where an episode starts), the action sampled,
    its log-probability and value those of the policy that took it."""
    g = torch.Generator().manual_seed(seed)
    obs = {k: torch.randn(T, N, *s, generator=g) for k, s in SHAPES.items()}
    starts = (torch.rand(T, N, generator=g) < 0.15).float()
    starts[0] = 1.0
    state = policy.initial_state(N)
    fields = {name: [] for name in ("actions", "logprobs", "values", "states")}
    with torch.no_grad():
        for t in range(T):
            state = state * (1.0 - starts[t]).unsqueeze(1)
            fields["states"].append(state)
            dist, value, state = policy.step({k: v[t] for k, v in obs.items()}, state)
            action = dist.sample(torch.randn(N, 4, generator=g))
            fields["actions"].append(action)
            fields["logprobs"].append(dist.log_prob(action))
            fields["values"].append(value)
    out = {k: torch.stack(v).reshape(T * N, *torch.stack(v).shape[2:]) for k, v in fields.items()}
    return out | {
        "obs": {k: v.reshape(T * N, *v.shape[2:]) for k, v in obs.items()},
        "advantages": torch.randn(T * N, generator=g),
        "returns": torch.randn(T * N, generator=g),
        "mask": torch.ones(T * N),
        "starts": starts.reshape(T * N),
    }


@pytest.mark.parametrize("augment", [True, False], ids=["augmented", "mirror-loss-alone"])
def test_a_recurrent_policys_mirrored_chunks_run_from_the_mirrored_trajectories_states(augment):
    """The mirrored chunks run from the states the behaviour policy reaches along the mirrored
    trajectories: at the update's first step the mirror loss and the mirrored samples' values
    are those of the policy stepped by hand along each env's mirrored observations (from a zero
    state, zeroed where episodes start), the collected rows' ratios are 1 (approx_kl 0); and
    splitting the minibatches into micro-batches of whole chunks changes nothing. Without
    augmentation the critic's core runs on the collected chunks alone, and the loss is the
    plain loss of the batch plus the weighted mirror loss."""
    T, N, L = 8, 4, 4
    mirror = Mirror.from_declaration(SIDES, SHAPES, 4)
    gru = RecurrentSpec("gru", 8, 1)
    algo = replace(
        ALGO,
        symmetry=SymmetryConfig(augment=augment, mirror_loss_coef=0.3),
        rollout_steps=T,
        sequence_length=L,
        minibatch_size=T * N,
        update_epochs=1,
    )
    policy = sides_policy(seed=9, recurrent=gru)
    batch = recurrent_batch(policy, T, N)
    batch |= behaviour_fields(policy, mirror, batch, T)
    # By hand: the policy along each env's original and mirrored observations.
    steps = lambda x: x.reshape(T, N, *x.shape[1:])  # noqa: E731
    obs, starts = {k: steps(v) for k, v in batch["obs"].items()}, steps(batch["starts"])
    means, mirrored_means, mirrored_values = [], [], []
    state, mirrored_state = policy.initial_state(N), policy.initial_state(N)
    with torch.no_grad():
        for t in range(T):
            keep = (1.0 - starts[t]).unsqueeze(1)
            o = {k: v[t] for k, v in obs.items()}
            dist, _, state = policy.step(o, state * keep)
            hand_obs, _ = hand_mirror(o, torch.zeros(0, 4))
            mdist, mvalue, mirrored_state = policy.step(hand_obs, mirrored_state * keep)
            means.append(dist.mean)
            mirrored_means.append(mdist.mean)
            mirrored_values.append(mvalue)
    target = hand_mirror_actions(torch.cat(means))
    hand_loss = float((torch.cat(mirrored_means) - target).square().mean())
    torch.testing.assert_close(
        batch["mirror_values"], torch.cat(mirrored_values), rtol=1e-6, atol=1e-6
    )

    loss = MinibatchLoss(policy, algo, mirror=mirror)
    params, buffers = dict(policy.named_parameters()), dict(policy.named_buffers())
    fields = ("obs", "actions", "logprobs", "values", "advantages", "returns", "states", "starts")
    # Rows of every env's whole rollout as one chunk per L steps: env-major chunks.
    order = torch.arange(T * N).reshape(T, N).T.reshape(-1)
    mb = tuple(
        {k: v[order] for k, v in batch[f].items()}
        if isinstance(batch[f], dict)
        else batch[f][order]
        for f in (*fields, "mirror_values", "mirror_states")
    )
    critic_steps = []
    hook = policy.critic_rnn.register_forward_hook(
        lambda m, i, o: critic_steps.append(i[0].shape[:2].numel())
    )
    weights = torch.full((T * N,), 1.0 / (T * N))
    total, metrics = loss(params, buffers, mb, weights)
    hook.remove()
    named = dict(zip(loss.names, metrics.tolist(), strict=True))
    assert abs(named["approx_kl"]) < 1e-6
    assert named["mirror_loss"] == pytest.approx(hand_loss, rel=1e-5)
    assert named["mirror_loss"] > 1e-6  # an asymmetric policy
    assert critic_steps == [(2 if augment else 1) * T * N]
    if not augment:
        plain, _ = MinibatchLoss(policy, algo)(params, buffers, mb[:8], weights)  # no mirror
        assert float(total.detach()) == pytest.approx(
            float(plain.detach()) + 0.3 * hand_loss, rel=1e-5
        )

    results = []
    for micro in (None, L):
        p = sides_policy(seed=9, recurrent=gru)
        results.append(
            _run_update(
                p, batch, mirror, replace(algo, micro_batch_size=micro, minibatch_size=8), T
            )
        )
    (p0, m0), (p1, m1) = results
    for k in p0:
        torch.testing.assert_close(p0[k], p1[k], rtol=1e-5, atol=1e-6)
    assert m1["mirror_loss"] == pytest.approx(m0["mirror_loss"], rel=1e-4)


# ------------------------------------------------------------------ the theory, on a task
def symmetric_pendulum_policy() -> ActorCritic:
    """A Pendulum policy that is mirror-symmetric by construction: the actor's mean is an odd
    function of (sin, rate) alone (its first layer ignores cos, no biases, tanh), so
    mu(M s) = -mu(s), with a state-independent std; the critic reads cos alone, so V(M s) = V(s)."""
    torch.manual_seed(0)
    spec = PolicySpec(
        obs_dim=3,
        action_kind="gaussian",
        action_dim=1,
        action_low=(-2.0,),
        action_high=(2.0,),
        hidden_sizes=(16, 16),
        share_backbone=False,
        log_std_init=-0.3,
        normalize_obs=False,
    )
    policy = ActorCritic(spec)
    with torch.no_grad():
        policy.actor_backbone[0].weight[:, 0] = 0.0
        for module in (*policy.actor_backbone, policy.action_head):
            if isinstance(module, torch.nn.Linear):
                module.bias.zero_()
                module.weight.mul_(3.0)  # means far enough from 0 to clip ratios
        policy.critic_backbone[0].weight[:, 1:] = 0.0
    return policy


def pendulum_rollout(policy: ActorCritic, pairs: int, T: int) -> dict:
    """T steps of 2 x `pairs` Pendulums: env i + pairs starts as the mirror of env i (angle and
    rate negated) and acts with the negated sampling noise, so each step of it is the mirror
    of env i's; advantages by GAE (normalized), as a batch of rows t * N + n."""
    envs = [PendulumEnv() for _ in range(2 * pairs)]
    for i in range(pairs):
        envs[i].reset(seed=i)
        envs[i + pairs].reset(seed=i)
        envs[i + pairs].state = -envs[i].state
    obs = np.stack([e._get_obs() for e in envs])
    rows = {k: [] for k in ("obs", "actions", "logprobs", "values", "rewards")}
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for _ in range(T):
            o = torch.as_tensor(obs, dtype=torch.float32)
            dist, value = policy(o)
            eps = torch.randn(pairs, 1, generator=g)
            action = dist.sample(torch.cat([eps, -eps]))
            rewards = []
            for e, a in zip(envs, action.numpy(), strict=True):
                _, r, *_ = e.step(a)
                rewards.append(r)
            for k, v in (("obs", o), ("actions", action), ("logprobs", dist.log_prob(action))):
                rows[k].append(v)
            rows["values"].append(value)
            rows["rewards"].append(torch.tensor(rewards, dtype=torch.float32))
            obs = np.stack([e._get_obs() for e in envs])
        last = policy.value(torch.as_tensor(obs, dtype=torch.float32))
    values, rewards = torch.stack(rows["values"]), torch.stack(rows["rewards"])
    next_values = torch.cat([values[1:], last[None]])
    zeros = torch.zeros_like(values)
    trajectories = Trajectories(rewards, values, next_values, zeros, zeros, torch.ones_like(values))
    adv, ret = compute_advantages(trajectories, Estimator("gae", 0.99, 0.95))
    batch = {k: torch.stack(rows[k]).reshape(T * 2 * pairs, -1) for k in ("obs", "actions")}
    batch |= {k: torch.stack(rows[k]).reshape(-1) for k in ("logprobs", "values")}
    return batch | {
        "advantages": adv.reshape(-1),
        "returns": ret.reshape(-1),
        "mask": torch.ones(adv.numel()),
    }


def test_augmentation_with_a_symmetric_policy_on_a_symmetric_task_leaves_the_update_unchanged():
    """Pendulum is symmetric: theta -> -theta maps its dynamics and reward onto themselves. Let
    the policy be symmetric too: pi(M a | M s) = pi(a | s) and V(M s) = V(s). Then the mirror of
    a trajectory is a trajectory exactly as likely, with the same rewards, values, advantages and
    returns. Collect envs in mirrored pairs (env i + P starts as env i's mirror and draws the
    negated noise): each row then has its mirror in the batch, with the same advantage and
    return, and the old log-probability augmentation gives row i's mirror (row i's own) and the
    value it computes there are those stored for its partner. So the augmented minibatch (the batch, then each
    row's mirror) holds every row of the batch exactly twice: with token-mean aggregation, the
    loss, its gradient at every parameter, and so the whole update, are those without
    augmentation (a minibatch of the whole batch, so no shuffle splits a pair). On a batch that
    lacks the mirrors (the first envs alone), augmentation adds samples not in it, and the
    update changes."""
    T, pairs = 8, 2
    base = symmetric_pendulum_policy()
    batch = pendulum_rollout(base, pairs, T)
    N = 2 * pairs
    step = lambda x: x.reshape(T, N, *x.shape[1:])  # noqa: E731
    mine, partner = (lambda x: step(x)[:, :pairs]), (lambda x: step(x)[:, pairs:])
    # The rollout is closed under the mirror, as the argument says.
    torch.testing.assert_close(
        partner(batch["obs"]), mine(batch["obs"]) * torch.tensor([1.0, -1.0, -1.0])
    )
    torch.testing.assert_close(partner(batch["actions"]), -mine(batch["actions"]))
    for key in ("logprobs", "values", "advantages", "returns"):
        torch.testing.assert_close(partner(batch[key]), mine(batch[key]), rtol=1e-5, atol=1e-5)

    mirror = Mirror.from_declaration(PENDULUM_MIRROR, 3, 1)
    algo = replace(ALGO, minibatch_size=T * N, update_epochs=3, value_clip=0.2)
    augmented = replace(algo, symmetry=SymmetryConfig(augment=True))

    # The gradients the symmetry makes 0 (the actor's biases, its cos column) come out as
    # rounding, 1e-11 to 1e-9: Adam divides each entry by its own scale, and with a tiny
    # epsilon would turn that rounding into steps as large as the others, in either run. An
    # epsilon of 1e-3 (the other entries: 1e-3 to 0.5) keeps rounding what it is.
    optim = OptimConfig(lr=2e-2, adam_eps=1e-3)

    def both(b: dict, rows: int) -> tuple:
        plain = _run_update(
            copy.deepcopy(base), b, None, replace(algo, minibatch_size=rows), T, optim
        )
        policy = copy.deepcopy(base)
        b = b | behaviour_fields(policy, mirror, b, T)
        aug = replace(augmented, minibatch_size=rows)
        return plain, _run_update(policy, b, mirror, aug, T, optim)

    (p_plain, m_plain), (p_aug, m_aug) = both(batch, T * N)
    for k in p_plain:
        torch.testing.assert_close(p_aug[k], p_plain[k], rtol=1e-5, atol=1e-6)
    for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "value_clipfrac"):
        assert m_aug[k] == pytest.approx(m_plain[k], rel=1e-4, abs=1e-6), k
    assert m_plain["clipfrac"] > 0  # the update moved the policy past the clip range
    # Half the envs (rows t * N + n, n < pairs): the mirrors are new samples.
    half = {
        k: (
            {kk: mine(vv).reshape(T * pairs, *vv.shape[1:]) for kk, vv in v.items()}
            if isinstance(v, dict)
            else mine(v).reshape(T * pairs, *v.shape[1:])
        )
        for k, v in batch.items()
    }
    (q_plain, _), (q_aug, _) = both(half, T * pairs)
    assert max(float((q_plain[k] - q_aug[k]).abs().max()) for k in q_plain) > 1e-3


def test_augmentation_makes_an_asymmetric_policy_more_symmetric():
    """The mirrored samples are importance-weighted against the mirrored behaviour policy that
    drew them, so augmentation pulls the policy toward its mirror: on Pendulum, a policy whose
    mean is offset by a bias (mu(M s) = -mu(s) + 2b) comes out of one augmented update with its
    asymmetry (mean of (mu(M s) + mu(s))^2 over the batch) lower than it went in, and lower than
    after the same update without augmentation. Weighted against pi_old(M a | M s) instead, the
    mirrored samples would carry no pull toward the mirror and this update would leave the
    policy less symmetric than it found it."""
    T, pairs = 32, 4
    base = symmetric_pendulum_policy()
    with torch.no_grad():
        base.action_head.bias.fill_(0.5)
    batch = pendulum_rollout(base, pairs, T)
    mirror = Mirror.from_declaration(PENDULUM_MIRROR, 3, 1)

    def asymmetry(policy: ActorCritic) -> float:
        with torch.no_grad():
            mean, mirrored = policy(batch["obs"])[0].mean, policy(mirror.obs(batch["obs"]))[0].mean
        return float((mirrored + mean).square().mean())

    after = {}
    for augment in (False, True):
        policy = copy.deepcopy(base)
        algo = replace(
            ALGO, minibatch_size=64, update_epochs=5, symmetry=SymmetryConfig(augment=augment)
        )
        b = batch | behaviour_fields(policy, mirror, batch, T)
        _run_update(policy, b, mirror, algo, T)
        after[augment] = asymmetry(policy)
    before = asymmetry(base)
    assert before == pytest.approx(1.0, rel=1e-3)  # (2b)^2
    assert after[True] < 0.9 * before
    assert after[True] < after[False] - 0.1
