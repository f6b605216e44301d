"""The update: minibatch coverage, the compiled step, clipping, skipped steps, lr rules."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import subprocess
import sys

import ppo_reference
import pytest
import torch
from conftest import tiny_config
from support import ROOT, make_update, random_batch, spec

from embodied_ppo.algo.minibatches import minibatch_indices
from embodied_ppo.algo.schedules import adapt_learning_rate, kl_target, learning_rate
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.update import NonFiniteError, PPOUpdate
from embodied_ppo.config.schema import AlgorithmConfig, OptimConfig
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.trainer import Trainer


def updater(policy, algo=None, optim=None, compile=False, reference=None):
    optim = optim or OptimConfig()
    algo = algo or AlgorithmConfig(minibatch_size=16)
    settings = UpdateSettings(algo, optim, compile=compile)
    return PPOUpdate(policy, torch.Generator(), settings, reference)


def adam_of(upd, policy):
    """Adam's state of each of the policy's parameters, by name, as a checkpoint keeps it."""
    names = [n for n, _ in policy.named_parameters()]
    return dict(zip(names, upd.optimizer_state()["state"].values(), strict=True))


def test_every_transition_visited_once_per_epoch():
    g = torch.Generator().manual_seed(0)
    batches = list(minibatch_indices(60, 12, g, torch.device("cpu")))
    assert len(batches) == 5 and all(b.numel() == 12 for b in batches)
    assert sorted(torch.cat(batches).tolist()) == list(range(60))
    again = torch.cat(list(minibatch_indices(60, 12, g, torch.device("cpu"))))
    assert not torch.equal(torch.cat(batches), again)  # reshuffled each epoch


def test_metrics_present():
    _, m = make_update("gaussian")
    for key in (
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clipfrac",
        "dual_clipfrac",
        "value_clipfrac",
        "grad_norm",
        "std",
    ):
        assert key in m
    assert m["num_gradient_steps"] == 3 * 48 / 16


def operating_batch(policy, n=48, seed=0):
    """A batch at the policy as it stands, with every branch of the loss taken by some rows:
    ratios from 0.22 to 4.5 (inside the clip range, past either side of it, and past the dual
    clip's 3 with negative advantages), values moved from the old ones by less and more than
    value_clip, and returns within and beyond huber_delta of the values."""
    g = torch.Generator().manual_seed(seed)
    obs, actions = torch.randn(n, 5, generator=g), torch.randn(n, 3, generator=g)
    dist, values = ppo_reference.distribution(policy, obs)
    with torch.no_grad():
        logprobs = dist.log_prob(actions)
    shift = torch.linspace(-1.5, 1.5, n)[torch.randperm(n, generator=g)]  # log old - log new
    return {
        "obs": obs,
        "actions": actions,
        "logprobs": (logprobs + shift).detach(),
        "values": (values + 0.4 * torch.randn(n, generator=g)).detach(),
        "advantages": torch.randn(n, generator=g),
        "returns": (values + 8.0 * torch.randn(n, generator=g)).detach(),
        "mask": torch.ones(n),
    }


@pytest.mark.parametrize(
    "state_dependent, compile",
    [
        (False, False),
        (True, False),
        (True, True),
    ],  # compiled = eager: test_compiled_update_matches_eager
    ids=["std-eager", "state-dependent-std-eager", "state-dependent-std-compiled"],
)
def test_the_update_is_the_autograd_update(state_dependent, compile):
    """Two updates of one full-batch step each equal two steps of plain autograd and
    torch.optim.Adam on the loss written out by hand (tests/ppo_reference.py): Adam's moments
    (the clipped gradients) and the parameters after each step. With a state-dependent std the
    head's log-std is inside its bounds, where the straight-through clamp passes gradient 1."""
    torch.manual_seed(0)
    policy = ActorCritic(spec("gaussian", state_dependent_std=state_dependent))
    policy.obs_normalizer.update(torch.randn(100, 5) * 3)
    batch = operating_batch(policy)
    rollout = {k: v.unsqueeze(1) for k, v in batch.items()}  # (T, N) = (48, 1)
    terms = ppo_reference.Terms(dual_clip=3.0, entropy_bonus=0.01)  # the rest: the defaults
    reference = ppo_reference.AdamReference(policy, ppo_reference.Steps(lr=1e-3))
    algo = AlgorithmConfig(minibatch_size=48, update_epochs=1, clip_ratio_c=3.0, entropy_bonus=0.01)
    upd = updater(policy, algo, OptimConfig(lr=1e-3), compile=compile)
    for step in range(2):
        m = reference.step(rollout, terms)
        if step == 0:  # every branch of the loss is taken
            assert 0.3 < m["clipfrac"] < 0.9 and m["dual_clipfrac"] > 0
            assert 0.2 < m["value_clipfrac"] < 0.9
            err = (batch["returns"] - reference_values(policy, batch)).abs()
            assert (err > 10.0).any() and (err < 10.0).any()
        metrics = upd.update(batch, 48)
        for key, value in m.items():
            assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (step, key)
        adam = adam_of(upd, policy)
        for name, (exp_avg, exp_avg_sq) in reference.moments().items():
            state = adam[name]
            assert torch.allclose(state["exp_avg"], exp_avg, atol=1e-7, rtol=1e-5), (step, name)
            assert torch.allclose(state["exp_avg_sq"], exp_avg_sq, atol=1e-10, rtol=1e-4), name
        assert ppo_reference.max_difference(policy, reference.policy) < 1e-6, step


def reference_values(policy, batch):
    with torch.no_grad():
        return ppo_reference.distribution(policy, batch["obs"])[1]


def test_grad_clipping_limits_the_step():
    # Adam's first moment after one step is (1 - beta1) x the clipped gradient.
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    upd = updater(policy, AlgorithmConfig(minibatch_size=48, update_epochs=1),
                       OptimConfig(max_grad_norm=0.01))  # fmt: skip
    m = upd.update(random_batch(), 8)
    assert m["grad_norm"] > 0.1  # reported before clipping
    moments = torch.cat([s["exp_avg"].reshape(-1) for s in adam_of(upd, policy).values()])
    assert moments.norm().item() == pytest.approx(0.1 * 0.01, rel=1e-3)


def test_non_finite_loss_never_reaches_the_weights():
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    before = copy.deepcopy(policy.state_dict())
    upd = updater(policy)
    batch = random_batch()
    batch["returns"][3] = float("nan")
    with pytest.raises(NonFiniteError, match="value_loss"):
        upd.update(batch, 8)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(int(s["step"]) == 0 for s in adam_of(upd, policy).values())


@pytest.mark.parametrize("compile", [False, True])
def test_deferred_non_finite_check_skips_the_steps_without_a_sync(monkeypatch, compile):
    # The accelerator path: flagged steps change nothing; the error comes at the end.
    monkeypatch.setattr(PPOUpdate, "_checks_each_step", lambda self, device: False)
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    before = copy.deepcopy(policy.state_dict())
    upd = updater(policy, compile=compile)
    upd.update(random_batch(), 8)  # a good update first: Adam has moments to keep
    after_good = copy.deepcopy(policy.state_dict())
    moments = adam_of(upd, policy)  # copies
    assert not all(torch.equal(v, before[k]) for k, v in after_good.items())
    batch = random_batch()
    batch["returns"][:] = float("nan")  # every minibatch is poisoned
    with pytest.raises(NonFiniteError, match="epoch 0, minibatch 0"):
        upd.update(batch, 8)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, after_good[k]), k
    for name, state in adam_of(upd, policy).items():  # moments and step counts untouched
        for key, value in state.items():
            assert torch.equal(value, moments[name][key]), (name, key)


@pytest.mark.parametrize("compile", [False, True])
def test_early_stop_drops_the_step_that_trips_it(compile):
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    batch = random_batch()
    with torch.no_grad():
        batch["logprobs"], _, batch["values"], _ = policy.evaluate(batch["obs"], batch["actions"])
    upd = updater(policy, AlgorithmConfig(minibatch_size=16, early_stop_kl=1e-9),
                       OptimConfig(lr=1e-2), compile=compile)  # fmt: skip
    m = upd.update(batch, 8)
    # The first minibatch has ratio 1 (kl 0): it steps; the next one exceeds the threshold.
    assert m["num_gradient_steps"] == 1 and m["early_stopped"] == 1.0
    assert all(int(s["step"]) == 1 for s in adam_of(upd, policy).values())


def test_a_repeated_update_skips_the_guards_and_computes_the_same(monkeypatch):
    # The second update with a batch signature calls the compiled graphs without Dynamo's
    # guards; it computes what guarded calls compute. A batch of another dtype (a signature not
    # seen whole) runs with every guard: the float32 graphs never see float64 inputs.
    stances = []
    set_stance = torch.compiler.set_stance

    def spy(*args, **kw):
        stances.append(kw.get("skip_guard_eval_unsafe", False))
        return set_stance(*args, **kw)

    monkeypatch.setattr(torch.compiler, "set_stance", spy)
    batches = [random_batch(seed=0), random_batch(seed=1), random_batch(seed=2)]
    for field in ("advantages", "returns"):
        batches[2][field] = batches[2][field].double()

    def train(trusting):
        torch.manual_seed(0)
        policy = ActorCritic(spec())
        upd = updater(policy, compile=True)
        if not trusting:
            monkeypatch.setattr(upd.step, "calls", lambda signature: contextlib.nullcontext())
        states = []
        for batch in batches:
            upd.update(batch, 8)
            states.append(copy.deepcopy(policy.state_dict()))
        return states

    guarded = train(trusting=False)
    assert stances == []
    trusted = train(trusting=True)
    assert stances == [True]  # the second update only
    for ours, ref in zip(trusted, guarded, strict=True):
        for k, v in ours.items():
            assert torch.equal(v, ref[k]), k


def test_compiled_update_matches_eager():
    eager, m_eager = make_update("gaussian", None)
    compiled, m = make_update("gaussian", None, compile=True)
    for k, v in eager.state_dict().items():
        assert torch.allclose(v, compiled.state_dict()[k], atol=1e-5), k
    for key in m_eager:
        assert m[key] == pytest.approx(m_eager[key], rel=1e-4, abs=1e-6), key


def test_without_a_compiler_training_runs_eagerly_with_one_note(tmp_path):
    # No C++ compiler on the PATH and an empty compile cache: the command trains anyway, says
    # so in one line, and computes what trainer.compile=false computes.
    from conftest import TINY

    from embodied_ppo.io.checkpoint import load_checkpoint

    def train(run: str, *extra: str) -> str:
        env = {
            **os.environ,
            "PATH": str(tmp_path / "bin"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONWARNINGS": "ignore",
        }
        tiny = [o for o in TINY if not o.startswith("trainer.compile")]
        args = ["configs/cartpole.yaml", *tiny, f"trainer.run_dir={tmp_path / run}", *extra]
        out = subprocess.run(
            [sys.executable, "-m", "embodied_ppo", "train", *args],
            capture_output=True, text=True, cwd=ROOT, env=env,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout

    (tmp_path / "bin").mkdir()
    out = train("compiled", "trainer.compile=true")
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "trainer.compile: the update could not be compiled" in notes[0]
    assert "No working C++ compiler" in notes[0] and "runs eagerly" in notes[0]
    assert "note:" not in train("eager", "trainer.compile=false")
    a, b = load_checkpoint(tmp_path / "compiled"), load_checkpoint(tmp_path / "eager")
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k


@pytest.mark.parametrize("state_dependent", [False, True], ids=["std", "state-dependent-std"])
def test_the_eager_gradient_is_torch_func_grads_to_the_bit(state_dependent):
    """Eager, the step takes its gradient through autograd; compiled, through torch.func.grad
    (which torch.compile traces). On a batch that takes every branch of the loss the two give
    the same gradient and metrics, bit for bit."""
    torch.manual_seed(0)
    policy = ActorCritic(spec("gaussian", state_dependent_std=state_dependent))
    policy.obs_normalizer.update(torch.randn(100, 5) * 3)
    batch = operating_batch(policy)
    upd = updater(policy, AlgorithmConfig(minibatch_size=48, clip_ratio_c=3.0, entropy_bonus=0.01))
    step = upd.step
    assert step.grad_fn == step._autograd  # the eager step's own
    names = ("obs", "actions", "logprobs", "values", "advantages", "returns")
    mb = tuple(batch[k] for k in names)  # MinibatchLoss's order
    buffers = {n: b.detach() for n, b in policy.named_buffers()}
    weights = torch.full((48,), 1.0 / 48)
    step.pull()
    reference = torch.func.grad(step._loss, has_aux=True)
    want = reference(step.flat, buffers, mb, weights)
    got = step._autograd(step.flat, buffers, mb, weights)
    assert got[0].abs().sum() > 0 and not got[0].requires_grad and not got[1].requires_grad
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_an_eager_run_leaves_torchs_compiler_stack_unimported(tmp_path):
    """torch.func.grad imports torch._dynamo on its first call (~0.9 s of every run's start);
    the eager step does without it."""
    from conftest import TINY

    args = ["configs/cartpole.yaml", *TINY, f"trainer.run_dir={tmp_path / 'run'}"]
    code = (
        "import sys; from embodied_ppo.app.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('dynamo' if 'torch._dynamo' in sys.modules else 'none')"
    )
    out = subprocess.run([sys.executable, "-c", code, "train", *args],
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trainer.compile=false" in " ".join(TINY)
    assert out.stdout.splitlines()[-1] == "none", out.stdout[-500:]


def weights_only_round_trip(state):
    """`state` written and read back as a checkpoint is (torch.load, weights_only=True)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_optimizer_state_survives_a_checkpoint_round_trip():
    # Saved after one update and loaded into an update whose own Adam went elsewhere (another
    # batch, another learning rate): the next update is the uninterrupted one's, bit for bit.
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    adaptive = OptimConfig(schedule="adaptive", desired_kl=1e-4)  # the rate moves and is kept
    upd = updater(policy, optim=adaptive)
    upd.update(random_batch(), 8)
    saved = weights_only_round_trip(
        {"model": policy.state_dict(), "optimizer": upd.optimizer_state()}
    )
    upd.update(random_batch(seed=1), 8)

    other = ActorCritic(spec())
    upd2 = updater(other, optim=adaptive)
    upd2.update(random_batch(seed=2), 8)
    other.load_state_dict(saved["model"])
    upd2.load_optimizer_state(saved["optimizer"])
    assert upd2.lr == saved["optimizer"]["param_groups"][0]["lr"] != adaptive.lr
    upd2.update(random_batch(seed=1), 8)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, other.state_dict()[k]), k
    assert upd2.lr == upd.lr
    for a, b in zip(adam_of(upd, policy).values(), adam_of(upd2, other).values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_optimizer_state_is_torch_adams_both_ways():
    # Checkpoints keep Adam's state in torch.optim.Adam's form: a state torch's Adam wrote
    # loads into the update, the update's loads into torch's Adam, and from either the next
    # Adam step on the same gradient gives the same parameters as torch's own.
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    optim = OptimConfig(lr=3e-3, adam_eps=1e-5, max_grad_norm=None)
    torch_adam = torch.optim.Adam(policy.parameters(), lr=optim.lr, eps=optim.adam_eps)
    for seed in range(3):  # a history of torch's own
        g = torch.Generator().manual_seed(seed)
        for p in policy.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        torch_adam.step()
    upd = updater(policy, optim=optim)
    upd.load_optimizer_state(weights_only_round_trip(torch_adam.state_dict()))
    ours = upd.optimizer_state()
    for i, state in torch_adam.state_dict()["state"].items():
        assert all(torch.equal(state[k].cpu(), ours["state"][i][k]) for k in state), i

    grads = [
        torch.randn(p.shape, generator=torch.Generator().manual_seed(9))
        for p in policy.parameters()
    ]
    twin = copy.deepcopy(policy)
    torch_twin = torch.optim.Adam(twin.parameters(), lr=optim.lr, eps=optim.adam_eps)
    torch_twin.load_state_dict(weights_only_round_trip(upd.optimizer_state()))
    for p, g in zip(twin.parameters(), grads, strict=True):
        p.grad = g.clone()
    torch_twin.step()
    step = upd.step  # one Adam step of the update's own on the same gradient
    step.pull()
    step.learning_rate()
    zero = torch.zeros(())
    step.apply(torch.cat([g.reshape(-1) for g in grads]), zero, zero)
    step.push()
    for (name, a), b in zip(policy.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


def test_the_update_writes_the_policys_parameters_in_place_and_keeps_its_own():
    # The gradient step works on a flat copy it owns; the policy's parameters keep their own
    # storage (nothing rebinds them) and hold the update's result when it returns.
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    storage = {n: p.data_ptr() for n, p in policy.named_parameters()}
    before = copy.deepcopy(policy.state_dict())
    upd = updater(policy)
    upd.update(random_batch(), 8)
    flat = upd.step.flat
    start, end = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
    for name, p in policy.named_parameters():
        assert p.data_ptr() == storage[name] and not start <= p.data_ptr() < end, name
    assert not all(torch.equal(p, before[n]) for n, p in policy.named_parameters())
    assert torch.equal(flat, torch.cat([p.detach().reshape(-1) for p in policy.parameters()]))
    # What changes the policy between updates (loaded weights) is what the next one starts
    # from: it continues as an update built on those weights with the same Adam state does.
    policy.load_state_dict(before)
    twin = copy.deepcopy(policy)
    fresh = updater(twin)
    fresh.load_optimizer_state(upd.optimizer_state())
    fresh.generator.set_state(upd.generator.get_state())  # the same minibatches
    upd.update(random_batch(seed=1), 8)
    fresh.update(random_batch(seed=1), 8)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, twin.state_dict()[k]), k


def test_learning_rate_schedules():
    assert learning_rate(OptimConfig(lr=1.0), 0.5) == 1.0
    lin = OptimConfig(lr=1.0, schedule="linear")
    assert [learning_rate(lin, p) for p in (0.0, 0.25, 0.5, 0.75)] == [1.0, 0.75, 0.5, 0.25]
    ada = OptimConfig(lr=1e-3, schedule="adaptive")
    assert learning_rate(ada, 0.9, current=4e-3) == 4e-3


def test_adaptive_learning_rate_thresholds():
    o = OptimConfig(lr=1e-3, schedule="adaptive", desired_kl=0.01, lr_min=1e-5, lr_max=1e-2)

    def adapt(lr, kl):
        target = torch.tensor(o.desired_kl)
        return adapt_learning_rate(
            torch.tensor(lr, dtype=torch.float64), torch.tensor(kl), target, o
        )

    assert adapt(1e-3, 0.021).item() == pytest.approx(1e-3 / 1.5)  # kl > 2 x desired
    assert adapt(1e-3, 0.019).item() == pytest.approx(1e-3)  # in between: unchanged
    assert adapt(1e-3, 0.0051).item() == pytest.approx(1e-3)
    assert adapt(1e-3, 0.0049).item() == pytest.approx(1.5e-3)  # kl < desired / 2
    assert adapt(9e-3, 0.0).item() == pytest.approx(1e-2)  # clamped at lr_max
    assert adapt(1.2e-5, 1.0).item() == pytest.approx(1e-5)  # clamped at lr_min


def test_the_kl_target_moves_linearly_to_desired_kl_final():
    fixed = OptimConfig(schedule="adaptive", desired_kl=0.04)
    assert [kl_target(fixed, s, 100) for s in (0, 50, 100)] == [0.04] * 3
    moving = OptimConfig(schedule="adaptive", desired_kl=0.04, desired_kl_final=0.01)
    got = [kl_target(moving, s, 100) for s in (0, 25, 50, 100, 130)]
    # by hand: 0.04 - 0.03 x the fraction of the run done, held at 0.01 past its end
    assert got == pytest.approx([0.04, 0.0325, 0.025, 0.01, 0.01], abs=1e-15)


def test_a_float32_target_tensor_decides_as_the_python_float_did():
    """The target now comes as a float32 tensor (it may change from update to update without a
    recompilation); the rule's comparisons must decide exactly as with the Python float, also
    for the approx_kl values next to the thresholds."""
    for desired in (0.01, 0.04, 0.003, 0.0725):
        o = OptimConfig(lr=1e-3, schedule="adaptive", desired_kl=desired, lr_min=1e-6)
        edges = torch.tensor([2.0 * desired, 0.5 * desired], dtype=torch.float32)
        kl = torch.cat(
            [torch.nextafter(edges, edges * 2), edges, torch.nextafter(edges, edges * 0)]
        )
        kl = torch.cat(
            [kl, torch.rand(1000, generator=torch.Generator().manual_seed(0)) * 3 * desired]
        )
        lr = torch.full_like(kl, 1e-3)
        old_rule = torch.where(kl > 2.0 * desired, lr / 1.5, lr)
        old_rule = torch.where(kl < 0.5 * desired, old_rule * 1.5, old_rule).clamp(1e-6, 1e-2)
        new_rule = adapt_learning_rate(lr, kl, torch.tensor(desired, dtype=torch.float32), o)
        assert torch.equal(new_rule, old_rule), desired


@pytest.mark.parametrize("compile", [False, True])
def test_the_gradient_step_aims_at_the_kl_target_it_is_given(compile):
    """An approx_kl of 0.03 is above 2 x 0.01 (the rate falls) and inside [0.02, 0.08] for a
    target of 0.04 (the rate stays): the step reads the target set for its update."""
    policy = ActorCritic(spec())
    optim = OptimConfig(lr=1e-3, schedule="adaptive", desired_kl=0.01, desired_kl_final=0.04)
    upd = updater(policy, optim=optim, compile=compile)
    grad = torch.zeros(sum(p.numel() for p in policy.parameters()))
    rates = []
    for target in (0.01, 0.04):
        upd.set_lr(1e-3)
        upd.set_kl_target(target)
        step = upd.step
        step.pull()
        lr = step.learning_rate()
        step.apply(grad, torch.zeros(()), torch.tensor(0.03))
        rates.append(float(lr))
    assert rates == pytest.approx([1e-3 / 1.5, 1e-3])


def test_a_run_aims_each_update_at_the_kl_target_of_its_step(tmp_path, monkeypatch):
    """4 iterations of 32 steps from desired_kl 0.04 to desired_kl_final 0.01 over 128 steps:
    each update aims at 0.04 - 0.03 x (steps done / 128), by hand."""
    from embodied_ppo.algo.gradient_step import GradientStep

    seen = []
    fill = GradientStep.learning_rate

    def spy(self):
        seen.append(self.kl_target)
        return fill(self)

    monkeypatch.setattr(GradientStep, "learning_rate", spy)
    optim = {"schedule": "adaptive", "desired_kl": 0.04, "desired_kl_final": 0.01}
    Trainer(tiny_config(optim=optim), tmp_path, progress_stream=io.StringIO()).train()
    assert seen == pytest.approx([0.04, 0.0325, 0.025, 0.0175], abs=1e-15)


def test_update_reduces_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    batch = random_batch()
    with torch.no_grad():
        v0 = policy.value(batch["obs"])
    err0 = (batch["returns"] - v0).square().mean()
    algo = AlgorithmConfig(minibatch_size=48, update_epochs=300, value_clip=None)
    upd = updater(policy, algo, OptimConfig(lr=3e-3))
    upd.update(batch, 8)
    with torch.no_grad():
        err1 = (batch["returns"] - policy.value(batch["obs"])).square().mean()
    assert err1 < 0.5 * err0


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("start, bound", [(2.5, 2.0), (-14.7, -5.0)])
def test_the_log_std_parameter_is_held_inside_its_range(compile, start, bound):
    """Past the forward pass's clamp the log-std would get no gradient and stay (above) or lose
    the action noise in float32 (below): each step puts it back at the bound, where its gradient
    acts again."""
    torch.manual_seed(0)
    policy = ActorCritic(spec("gaussian"))
    with torch.no_grad():
        policy.log_std.fill_(start)
    before = policy.log_std.detach().clone()
    upd = updater(policy, AlgorithmConfig(minibatch_size=16, update_epochs=1), compile=compile)
    upd.update(random_batch(), 8)
    after = policy.log_std.detach()
    assert not torch.equal(after, before)
    assert (after >= -5.0).all() and (after <= 2.0).all()
    assert torch.allclose(after, torch.full_like(after, bound), atol=0.01)  # Adam's steps are small


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("start, bound", [(2.5, 2.0), (-14.7, -5.0)])
def test_a_state_dependent_std_head_past_its_bound_still_learns(compile, start, bound):
    """The head's output is clamped forward, but its gradient passes the clamp: a head pushed
    past a bound moves (on its own gradient) instead of staying there with none."""
    torch.manual_seed(0)
    policy = ActorCritic(spec("gaussian", state_dependent_std=True))
    obs = torch.randn(8, 5)
    with torch.no_grad():
        policy.log_std_head.weight.zero_()
        policy.log_std_head.bias.fill_(start)
        assert torch.equal(policy(obs)[0].log_std, torch.full((8, 3), bound))  # clamped forward
    dist, _ = policy(obs)
    dist.log_std.sum().backward()
    assert torch.equal(policy.log_std_head.bias.grad, torch.full((3,), 8.0))  # straight through
    policy.zero_grad()
    before = policy.log_std_head.bias.detach().clone()
    # The entropy bonus reaches the head even where every ratio is clipped.
    algo = AlgorithmConfig(minibatch_size=16, update_epochs=1, entropy_bonus=0.01)
    upd = updater(policy, algo, compile=compile)
    upd.update(random_batch(), 8)
    assert not torch.equal(policy.log_std_head.bias.detach(), before)


def test_action_noise_survives_in_float32_at_the_log_std_floor():
    """A policy whose log-std parameter went far below the floor (-14.7) and whose mean is large
    (17) still samples actions that differ from the mean, and the log-probability recomputed
    from the stored action is the one the noise gives."""
    torch.manual_seed(0)
    policy = ActorCritic(spec("gaussian"))
    with torch.no_grad():
        policy.log_std.fill_(-14.7)
        policy.action_head.bias.fill_(17.0)
    obs = torch.randn(256, 5)
    noise = torch.randn(256, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        action, logprob, _ = policy.act(obs, noise)
        mean = policy.act(obs, deterministic=True)[0]
    assert (action != mean).all()
    dist, _ = policy(obs)
    expected = (-0.5 * noise.square() - dist.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    assert torch.allclose(logprob, expected, atol=1e-2)


def test_the_cpu_compiler_probe_thread_imports_nothing():
    # Two threads importing torch's compiler stack at once can meet each other's
    # half-initialized modules: the probe's imports happen before its thread starts.
    code = """
import sys, threading
import torch
seen = []

class Spy:  # consulted for every module not imported yet, by whichever thread imports it
    def find_spec(self, name, path=None, target=None):
        seen.append((threading.current_thread().name, name))
        return None

sys.meta_path.insert(0, Spy())
import embodied_ppo.algo.compiler as gs
gs.probe_cpu_compiler()
assert gs._PROBE is not None
gs._await_probe()
print([name for thread, name in seen if thread == "embodied-ppo-isa-probe"])
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout[-2000:]


def test_the_cpu_compiler_probe_runs_beside_the_build_and_the_first_compiled_call_waits(
    tmp_path, monkeypatch
):
    import threading
    import time

    from torch._inductor import cpu_vec_isa

    import embodied_ppo.algo.compiler as gs

    done: list[str] = []
    real_probe = cpu_vec_isa.pick_vec_isa

    def slow_probe():  # returns the real answer: what reads it while patched gets a real ISA
        time.sleep(2.0)
        done.append(threading.current_thread().name)
        return real_probe()

    monkeypatch.setattr(cpu_vec_isa, "pick_vec_isa", slow_probe)
    monkeypatch.setattr(gs, "_PROBE", None)
    cfg = tiny_config("Pendulum-v1", trainer={"compile": True})
    trainer = Trainer(cfg, tmp_path)
    assert done == []  # the build did not wait for it
    probe = gs._PROBE
    assert probe is not None and probe.name == "embodied-ppo-isa-probe"
    gs.probe_cpu_compiler()
    assert gs._PROBE is probe  # once per process
    step = trainer.updater.step
    assert step.compiled
    monkeypatch.setattr(step, "_step", lambda *args: "stepped")
    assert step._guarded(2) == "stepped"
    assert done == ["embodied-ppo-isa-probe"] and not probe.is_alive()


def test_an_older_torch_compile_without_the_newer_options_still_compiles(monkeypatch):
    # torch.compile took isolate_recompiles and recompile_limit from 2.12 on, set_stance its
    # skip_guard_eval_unsafe from 2.7: with a torch that has neither, the update compiles with
    # what it has and computes the same.
    real_compile, real_stance = torch.compile, torch.compiler.set_stance
    seen = []

    def old_compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,
                    options=None, disable=False):  # fmt: skip
        seen.append(model)
        return real_compile(model, fullgraph=fullgraph, dynamic=dynamic, mode=mode,
                            options=options)  # fmt: skip

    def old_stance(stance="default", *, force_backend=None):
        raise AssertionError("the update asked for a stance this torch lacks")

    monkeypatch.setattr(torch, "compile", old_compile)
    monkeypatch.setattr(torch.compiler, "set_stance", old_stance)
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    upd = updater(policy, compile=True)
    assert upd.step.compiled and len(seen) == 3
    monkeypatch.setattr(torch, "compile", real_compile)
    monkeypatch.setattr(torch.compiler, "set_stance", real_stance)
    torch.manual_seed(0)
    eager_policy = ActorCritic(spec())
    eager = updater(eager_policy, compile=False)
    for seed in (0, 1):  # the second update trusts its signature (the stance, where there is one)
        upd.update(random_batch(seed=seed), 8)
        eager.update(random_batch(seed=seed), 8)
    assert upd.step.compiled  # not fallen back to eager
    for k, v in eager_policy.state_dict().items():
        assert torch.allclose(v, policy.state_dict()[k], atol=1e-5), k


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_step_compiles_with_arguments_torch_accepts_on_each_device(device):
    # torch.compile takes a mode or options, never both (a RuntimeError at the call): on a GPU
    # the CUDA graphs of mode="reduce-overhead" come as its options. torch.compile checks its
    # arguments when called, so no GPU is needed to see them accepted.
    from embodied_ppo.algo.compiler import step_compile_kwargs

    kwargs = step_compile_kwargs(torch.device(device))
    assert "mode" not in kwargs
    assert kwargs["options"].get("triton.cudagraphs", False) is (device == "cuda")
    compiled = torch.compile(lambda x: x + 1, **kwargs)
    if device == "cpu":
        assert torch.equal(compiled(torch.zeros(3)), torch.ones(3))


def test_adam_in_its_graph_safe_form_computes_the_same(monkeypatch):
    # On a GPU the compiled step runs Adam with capturable=True (torch's adam() will not be
    # traced there otherwise); inside a graph the form runs on the CPU too, so its numbers can
    # be checked here against the eager update's.
    import embodied_ppo.algo.gradient_step as gs

    seen = set()  # a set: the graph guards on it, and it stops changing after the first call
    real = gs.adam_step

    def spy(*args, **kwargs):
        seen.add(kwargs["capturable"])
        return real(*args, **kwargs)

    monkeypatch.setattr(gs.GradientStep, "capturable", property(lambda self: True))
    monkeypatch.setattr(gs, "adam_step", spy)
    compiled, m = make_update("gaussian", None, compile=True)
    assert seen == {True}  # traced in the graph-safe form, never fallen back to eager
    monkeypatch.undo()
    eager, m_eager = make_update("gaussian", None)
    for k, v in eager.state_dict().items():
        assert torch.allclose(v, compiled.state_dict()[k], atol=1e-5), k
    for key in m_eager:
        assert m[key] == pytest.approx(m_eager[key], rel=1e-4, abs=1e-6), key
