"""Recurrent policies (model.recurrent: lstm | gru | history): the core, the state through
collection and the update, sequence chunks, micro-batches, resume, export and the config
checks."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import ppo_reference
import pytest
import torch
from conftest import tiny_config
from support import spec
from torch import nn

from embodied_ppo.algo.minibatches import sequence_chunks
from embodied_ppo.app.deploy import load_policy
from embodied_ppo.app.export import export_policy
from embodied_ppo.config.checks import check_config
from embodied_ppo.core.errors import UserError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.history import HistoryCore
from embodied_ppo.model.recurrent import RecurrentCore
from embodied_ppo.runner.trainer import Trainer

CARTPOLE = "EmbodiedPPO/CartPoleNoVel-v1"
PENDULUM = "EmbodiedPPO/PendulumNoVel-v1"


def recurrent_config(env_id=PENDULUM, kind="lstm", model=None, algorithm=None, **blocks):
    """2 envs x 16 steps, a small recurrent core (an observation history of 3 steps); episodes
    of 10 steps so that they end inside a rollout (and inside a sequence chunk)."""
    core = {"history_length": 3} if kind == "history" else {"recurrent_size": 8}
    return tiny_config(
        env_id,
        env={"max_episode_steps": 10, **blocks.pop("env", {})},
        model={"recurrent": kind, **core, "hidden_sizes": [16], **(model or {})},
        algorithm={"minibatch_size": 16, **(algorithm or {})},
        **blocks,
    )


def train(cfg, run_dir):
    trainer = Trainer(cfg, run_dir, progress_stream=io.StringIO())
    trainer.train()
    return trainer


# ---------------------------------------------------------------------------------- the core
@pytest.mark.parametrize("kind, reference", [("lstm", nn.LSTM), ("gru", nn.GRU)])
def test_the_core_computes_what_torch_lstm_and_gru_compute(kind, reference):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 5, 7, layers=2)
    ref = reference(5, 7, num_layers=2)
    with torch.no_grad():  # the same parameters, same layout
        for i, cell in enumerate(core.cells):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).copy_(getattr(ref, f"{name}_l{i}"))
    x = torch.randn(6, 3, 5)
    out, state = core(x, torch.zeros(3, core.state_size), torch.zeros(6, 3))
    ref_out, ref_state = ref(x)
    assert torch.allclose(out, ref_out, atol=1e-6)
    # The flat state holds each layer's (h, c) (LSTM) or h (GRU), layer by layer.
    if kind == "lstm":
        h, c = ref_state
        expected = torch.cat([torch.cat([h[i], c[i]], dim=1) for i in range(2)], dim=1)
    else:
        expected = torch.cat([ref_state[i] for i in range(2)], dim=1)
    assert torch.allclose(state, expected, atol=1e-6)
    # One step at a time gives the same outputs.
    s = torch.zeros(3, core.state_size)
    for t in range(6):
        h, s = core.step(x[t], s)
        assert torch.allclose(h, out[t], atol=1e-6)


@pytest.mark.parametrize("init", ["torch_default", "orthogonal"])
def test_recurrent_cores_are_orthogonal_under_either_model_init(init):
    """model.init chooses the MLPs' and heads' initialization; both cores (actor's and
    critic's) keep orthogonal weights and zero biases (configuration.md says so)."""
    policy = ActorCritic(
        spec(
            init=init, share_backbone=False, recurrent="lstm", recurrent_size=8, recurrent_layers=1
        )
    )
    for core in (policy.actor_rnn, policy.critic_rnn):
        cell = core.cells[0]
        assert torch.allclose(cell.weight_hh.T @ cell.weight_hh, torch.eye(8), atol=1e-5)
        assert not cell.bias_ih.any() and not cell.bias_hh.any()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_an_episode_start_zeroes_the_state_before_its_step(kind):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 4, 6, layers=1)
    x = torch.randn(8, 2, 4)
    state = torch.randn(2, core.state_size)
    starts = torch.zeros(8, 2)
    starts[5, 0] = 1.0  # env 0 starts an episode at step 5
    out, _ = core(x, state, starts)
    # From step 5 on, env 0 is what a fresh state gives on steps 5..7: nothing carried over.
    fresh, _ = core(x[5:, :1], torch.zeros(1, core.state_size), torch.zeros(3, 1))
    assert torch.allclose(out[5:, 0], fresh[:, 0], atol=1e-6)
    # Before it, and for env 1 throughout, the given state is carried.
    carried, _ = core(x[:, 1:], state[1:], torch.zeros(8, 1))
    assert torch.allclose(out[:, 1], carried[:, 0], atol=1e-6)
    assert not torch.allclose(out[5:, 0], core(x[:, :1], state[:1], torch.zeros(8, 1))[0][5:, 0])


def test_a_history_is_the_last_inputs_side_by_side_zeros_before_an_episode_start():
    core = HistoryCore(in_dim=2, length=3)
    x = torch.arange(1.0, 13.0).reshape(6, 1, 2)  # steps 0..5 of one env, inputs 2t+1, 2t+2
    state = torch.full((1, 4), -1.0)  # the two inputs before step 0 (an episode going on)
    starts = torch.zeros(6, 1)
    starts[3] = 1.0  # an episode starts at step 3
    out, last = core(x, state, starts)
    rows = [list(map(float, out[t, 0])) for t in range(6)]
    assert rows[0] == [-1, -1, -1, -1, 1, 2]
    assert rows[2] == [1, 2, 3, 4, 5, 6]
    assert rows[3] == [0, 0, 0, 0, 7, 8]  # nothing of the episode before
    assert rows[5] == [7, 8, 9, 10, 11, 12]
    assert torch.equal(last, out[5, :, 2:])
    step_out, step_state = core.step(x[5], out[4, :, 2:])
    assert torch.equal(step_out, out[5]) and torch.equal(step_state, last)


# ------------------------------------------------------------------------- sequence chunks
@pytest.mark.parametrize("T, N, L", [(16, 3, 4), (16, 3, 16), (10, 2, 4), (7, 5, 3), (5, 1, 5)])
def test_sequence_chunks_visit_every_step_once_in_time_order(T, N, L):
    order, valid = sequence_chunks(T, N, L, torch.Generator().manual_seed(0), torch.device("cpu"))
    C = -(-T // L)
    assert order.shape == (C * N * L,)
    weight = torch.ones_like(order, dtype=torch.float32) if valid is None else valid
    assert (valid is None) == (T % L == 0)
    visited = order[weight > 0].sort().values
    assert torch.equal(visited, torch.arange(T * N))  # every step exactly once
    for chunk, w in zip(order.reshape(-1, L), weight.reshape(-1, L), strict=True):
        env, t = chunk % N, chunk // N
        assert (env == env[0]).all()  # one env per chunk
        real = t[w > 0]
        assert torch.equal(real, torch.arange(real[0], real[0] + len(real)))  # consecutive
        assert real[0] % L == 0  # chunks start at multiples of L
        assert (t[w == 0] == T - 1).all()  # the padding repeats the last step, weight 0


# --------------------------------------------------------------------- collection and update
@pytest.mark.parametrize("kind", ["lstm", "gru", "history"])
@pytest.mark.parametrize("share", [True, False])
def test_the_update_replays_what_collection_computed(tmp_path, kind, share):
    """Replaying each env's rollout through the sequence forward, from the first stored state
    and with the stored episode starts, gives the log-probs and values collection stored: the
    states were reset exactly where episodes started, and nothing else differs."""
    cfg = recurrent_config(kind=kind, model={"share_backbone": share}, trainer={"total_steps": 32})
    trainer = Trainer(cfg, tmp_path / "run", progress_stream=io.StringIO())
    trainer._collect()
    buf = trainer.buffer
    T, N = buf.starts.shape
    # The warm-up's 16 steps went before: every env is 6 steps into an episode, its state kept.
    assert not buf.starts[0].any() and (buf.states[0].abs().sum(-1) > 0).all()
    assert 0 < buf.starts[1:].sum() < (T - 1) * N  # episodes of 10 steps end inside 16 steps
    # The stored state before an episode's first step is never carried into it; elsewhere it is
    # the state the previous step produced (not zeros).
    assert buf.states[1:][buf.starts[1:] == 0].abs().sum(-1).min() > 0
    policy = trainer.policy
    with torch.no_grad():
        dist, values = policy(buf.obs, buf.states[0], buf.starts)
        logprobs = dist.log_prob(buf.actions.reshape(T * N, *buf.actions.shape[2:]))
    assert torch.allclose(logprobs.reshape(T, N), buf.logprobs, atol=1e-5)
    assert torch.allclose(values.reshape(T, N), buf.values, atol=1e-5)
    # Zeroing the state at the wrong steps would not replay: the starts matter.
    with torch.no_grad():
        wrong, _ = policy(buf.obs, buf.states[0], torch.zeros_like(buf.starts))
        wrong = wrong.log_prob(buf.actions.reshape(T * N, *buf.actions.shape[2:]))
    assert not torch.allclose(wrong.reshape(T, N), buf.logprobs, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_chunked_sequences_start_from_the_stored_states(tmp_path, kind):
    """Each chunk of `sequence_length` steps starts from the state stored before its first
    step and reproduces the collected log-probs, as the whole-rollout sequence does."""
    cfg = recurrent_config(kind=kind, algorithm={"sequence_length": 4}, trainer={"total_steps": 32})
    trainer = Trainer(cfg, tmp_path / "run", progress_stream=io.StringIO())
    trainer._collect()
    buf, policy = trainer.buffer, trainer.policy
    T, N = buf.starts.shape
    for t0 in range(0, T, 4):
        with torch.no_grad():
            dist, values = policy(buf.obs[t0 : t0 + 4], buf.states[t0], buf.starts[t0 : t0 + 4])
        lp = dist.log_prob(buf.actions[t0 : t0 + 4].reshape(4 * N, -1))
        assert torch.allclose(lp.reshape(4, N), buf.logprobs[t0 : t0 + 4], atol=1e-5)
        assert torch.allclose(values.reshape(4, N), buf.values[t0 : t0 + 4], atol=1e-5)


def _params(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


@pytest.mark.parametrize("compile", [False, True])
def test_micro_batches_do_not_change_a_recurrent_update(tmp_path, compile):
    algo = {"sequence_length": 4, "minibatch_size": 8, "update_epochs": 2}
    base = {"algorithm": algo, "trainer": {"total_steps": 64, "compile": compile}}
    ref = train(recurrent_config(**base), tmp_path / "ref")
    other = train(
        recurrent_config(
            algorithm={**algo, "micro_batch_size": 4},
            trainer={"total_steps": 64, "compile": compile},
        ),
        tmp_path / "micro",
    )
    for k, v in _params(ref).items():
        assert torch.allclose(v, _params(other)[k], atol=1e-5), k


def chunked_gradient(seen, length, state="stored", padding=False, cut=True):
    """The gradient of the captured update's loss with the policy run over chunks of `length`
    steps of each env, written out by hand: each chunk from the state stored before its first
    step (`state` "zeros": from zeros instead), its real steps only (`padding`: and the padded
    last chunk's repeats of the last step, weighted like steps); `cut` False runs each env's
    whole rollout as one sequence instead (the gradient crosses the chunk boundaries)."""
    r = seen.rollout
    T, N = r["mask"].shape
    policy = copy.deepcopy(seen.policy)
    for p in policy.parameters():
        p.data = p.data.clone()
    L = length if cut else T
    columns = []  # per env: (log-prob, entropy, value, rows) of its steps, time order
    for n in range(N):
        parts = []
        for t0 in range(0, T, L):
            t = torch.arange(t0, t0 + L).clamp(max=T - 1)
            if not padding:
                t = t[: T - t0]
            state0 = r["states"][t0, n : n + 1]
            if state == "zeros":
                state0 = torch.zeros_like(state0)
            obs, starts = r["obs"][t, n : n + 1], r["starts"][t, n : n + 1]
            dist, value = ppo_reference.distribution(policy, obs, state0, starts)
            parts.append((dist.log_prob(r["actions"][t, n]), dist.entropy(), value, t))
        columns.append([torch.cat(x) for x in zip(*parts, strict=True)])
    # Per-step tensors (S, N), S >= T where padding repeats steps; the rollout's fields likewise.
    logprob, entropy, value, rows = (torch.stack(x, dim=1) for x in zip(*columns, strict=True))
    rollout = {k: r[k].gather(0, rows) for k in ("logprobs", "values", "advantages", "returns")}
    rollout["mask"] = torch.ones_like(rollout["logprobs"])
    loss, _ = ppo_reference.loss_terms(logprob, entropy, value, rollout, ppo_reference.Terms())
    loss.backward()
    return ppo_reference.flat_grad(policy)


def test_padded_chunks_train_like_the_same_steps_unpadded(tmp_path):
    """sequence_length 6 does not divide 16 steps: each env's last chunk is 4 steps and 2 of
    padding. The update's one step (all 6 chunks) has the gradient of the 32 real steps alone,
    each chunk run from the state stored before its first step, written out by hand: not the
    gradient with the padding weighed, from zero states, or through the chunk boundaries."""
    cfg = recurrent_config(
        CARTPOLE,
        algorithm={"sequence_length": 6, "minibatch_size": 36, "update_epochs": 1},
        trainer={"total_steps": 32},
    )
    trainer = Trainer(cfg, tmp_path / "run", progress_stream=io.StringIO())
    seen = ppo_reference.capture(trainer, grads=True)
    trainer.train()
    r = seen.rollout
    assert trainer.global_step == 32 and len(seen.grads) == 1
    # The operating point: chunks start mid-episode with a carried state, and episodes start
    # inside chunks.
    assert (r["states"][[0, 6, 12]].abs().sum(-1) > 0).all()
    assert r["starts"][1:].sum() > 0
    expected = chunked_gradient(seen, 6)
    assert torch.allclose(seen.grads[0], expected, atol=1e-6, rtol=1e-4)
    for wrong in (
        chunked_gradient(seen, 6, padding=True),
        chunked_gradient(seen, 6, state="zeros"),
        chunked_gradient(seen, 6, cut=False),
    ):
        assert (wrong - seen.grads[0]).abs().max() > 1e-4


@pytest.mark.parametrize("kind", ["lstm", "gru", "history"])
def test_a_recurrent_run_resumes_bitwise(tmp_path, kind):
    cfg = recurrent_config(
        kind=kind,
        model={"share_backbone": False},
        trainer={"total_steps": 128, "checkpoint_interval": 1},
    )
    straight = train(cfg, tmp_path / "straight")
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_64.pt")
    resumed = Trainer(cfg, tmp_path / "resumed", resume=state, progress_stream=io.StringIO())
    assert resumed.resume_note is None
    # The states of the envs mid-episode came back with them.
    assert torch.count_nonzero(resumed.collector.rnn_state) > 0
    resumed.train()
    for k, v in _params(straight).items():
        assert torch.equal(v, _params(resumed)[k]), k
    assert torch.equal(straight.collector.rnn_state, resumed.collector.rnn_state)


# ------------------------------------------------------------------------------ export
def _rollout(policy_fn, obs_seq, starts, state0):
    """Actions of a step function (obs, state) -> (action, state) over a (T, B, ...) sequence,
    the state reset to zeros where an episode starts."""
    state, actions = state0, []
    for obs, start in zip(obs_seq, starts, strict=True):
        state = torch.where(start.bool().unsqueeze(-1), torch.zeros_like(state), state)
        action, state = policy_fn(obs, state)
        actions.append(action)
    return torch.stack(actions)


@pytest.mark.parametrize("kind", ["lstm", "gru", "history"])
@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_exported_recurrent_policies_act_like_the_trained_one(tmp_path, kind, fmt):
    layers = {} if kind == "history" else {"recurrent_layers": 2}
    cfg = recurrent_config(kind=kind, model={"share_backbone": False, **layers})
    trainer = train(cfg, tmp_path / "run")
    policy = trainer.policy
    torch.manual_seed(1)
    T, B = 12, 3
    obs = torch.randn(T, B, 2)
    starts = torch.zeros(T, B)
    starts[0] = 1.0
    starts[5, 1] = starts[8, 0] = 1.0  # episodes end mid-sequence

    def eager(o, s):
        n = policy.actor_rnn.state_size
        full = torch.cat([s, torch.zeros(B, policy.state_size - n)], dim=1)
        dist, _, new = policy.step(o, full)
        low, high = policy.action_low, policy.action_high
        return dist.mode().clamp(low, high), new[:, :n]

    n = policy.actor_rnn.state_size
    with torch.no_grad():
        expected = _rollout(eager, obs, starts, torch.zeros(B, n))
    path, meta_path, meta = export_policy(tmp_path / "run", fmt, tmp_path / f"policy.{fmt}")
    assert meta["recurrent"]["state_shape"] == [n] and meta["state_input"] == "state"
    if fmt == "torchscript":
        net = torch.jit.load(str(path))
        got = _rollout(lambda o, s: net(o, s), obs, starts, torch.zeros(B, n))
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def run(o, s):
            a, new = sess.run(["action", "state_out"], {"obs": o.numpy(), "state": s.numpy()})
            return torch.from_numpy(a), torch.from_numpy(new)

        got = _rollout(run, obs, starts, torch.zeros(B, n))
    assert torch.allclose(got, expected, atol=1e-5)
    # load_policy: numpy in, numpy out, state None at an episode's start.
    loaded = load_policy(tmp_path / "run")
    assert loaded.recurrent and loaded.state_size == n
    state = None
    for t in range(T):
        action, state = loaded(obs[t, 0].numpy(), None if starts[t, 0] else state)
        assert np.allclose(action, expected[t, 0].numpy(), atol=1e-5)


def test_a_recurrent_policy_refuses_a_missing_or_misshapen_state(tmp_path):
    from embodied_ppo.core.errors import ObservationError

    train(recurrent_config(), tmp_path / "run")
    loaded = load_policy(tmp_path / "run")
    with pytest.raises(ObservationError, match=r"state: expected shape \(16,\)"):
        loaded(np.zeros(2, dtype=np.float32), np.zeros(3, dtype=np.float32))
    memoryless = tiny_config("Pendulum-v1")
    train(memoryless, tmp_path / "plain")
    with pytest.raises(ObservationError, match="not recurrent"):
        load_policy(tmp_path / "plain")(np.zeros(3, dtype=np.float32), np.zeros(4))


# ----------------------------------------------------------------------------- the config
@pytest.mark.parametrize(
    "model, algorithm, fragment",
    [
        ({}, {"sequence_length": 4}, "algorithm.sequence_length: got 4, but it applies to"),
        ({"recurrent": "lstm", "recurrent_size": 0}, {}, "model.recurrent_size: got 0"),
        ({"recurrent": "lstm"}, {"sequence_length": 17}, "algorithm.sequence_length"),
        ({"recurrent": "lstm"}, {"sequence_length": 4, "minibatch_size": 6}, "minibatch_size"),
        ({"recurrent": "gru"}, {"recompute_old_logprobs": True}, "recompute_old_logprobs"),
        ({"recurrent": "lstm"}, {"recompute_advantages": True}, "recompute_advantages"),
        ({"recurrent": "gru"}, {"loss_agg_func": "seq-mean-token-sum"}, "loss_agg_func"),
        ({"recurrent": "history", "history_length": 1}, {}, "model.history_length: got 1"),
        ({"recurrent": "history", "recurrent_layers": 2}, {}, "model.recurrent_layers: got 2"),
    ],
)
def test_recurrent_settings_are_checked_with_one_line(model, algorithm, fragment):
    with pytest.raises(UserError) as err:
        check_config(
            tiny_config(
                "Pendulum-v1",
                model={"hidden_sizes": [16], **model},
                algorithm={"minibatch_size": 16, **algorithm},
            )
        )
    message = str(err.value)
    assert fragment in message and "\n" not in message


def test_an_unknown_core_is_refused():
    with pytest.raises(UserError, match="model.recurrent"):
        check_config(tiny_config("Pendulum-v1", model={"recurrent": "transformer"}))


# -------------------------------------------------------------------------- evaluation
def test_evaluation_resets_the_state_at_every_episode(tmp_path):
    """Evaluation during training and the eval command run the recurrent policy with its state
    carried through each episode and zeroed at the next: the returns are those of a loop over
    load_policy with state None at each episode's start."""
    import gymnasium as gym

    import embodied_ppo
    from embodied_ppo.runner.episodes import eval_seeds

    cfg = recurrent_config(trainer={"total_steps": 64, "eval_interval": 2, "eval_episodes": 2})
    trainer = train(cfg, tmp_path / "run")
    logged = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/episodic_return" in row for row in logged)
    summary = embodied_ppo.evaluate(tmp_path / "run", episodes=3, seed=7)
    policy = load_policy(tmp_path / "run")
    expected = []
    for episode_seed in eval_seeds(7, 3):
        env = gym.make(PENDULUM, max_episode_steps=10)
        obs, _ = env.reset(seed=episode_seed)
        state, total, done = None, 0.0, False
        while not done:
            action, state = policy(obs, state)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        expected.append(total)
    assert summary["returns"] == pytest.approx(expected, abs=1e-4)
    assert trainer.global_step == 64


@pytest.mark.parametrize("share", [True, False])
def test_a_truncated_episode_is_bootstrapped_under_the_state_that_reached_its_end(tmp_path, share):
    """Rule 1 with memory: at a time-limit cut the bootstrap value is V(final observation)
    computed with the state after the episode's last step, not a zeroed state. The counting
    env's observations are known ([t, 1]), so the final observation of a 5-step episode is
    [5, 1]."""
    from toy_envs import register

    cfg = recurrent_config(
        register(),
        env={"max_episode_steps": 5, "normalize_obs": False},
        model={"share_backbone": share},
        trainer={"total_steps": 32},
    )
    trainer = Trainer(cfg, tmp_path / "run", progress_stream=io.StringIO())
    trainer._collect()
    buf, policy = trainer.buffer, trainer.policy
    T, N = buf.starts.shape
    assert int(buf.truncated.sum()) == N * (T // 5)  # cuts at steps 4, 9, 14 of every env
    state = buf.states[0]
    final = torch.tensor([[5.0, 1.0]] * N)
    checked = 0
    with torch.no_grad():
        for t in range(T):
            state = torch.where(buf.starts[t].bool().unsqueeze(-1), 0.0, state)
            _, _, state = policy.step(buf.obs[t], state)
            for n in torch.nonzero(buf.truncated[t]).flatten().tolist():
                expected = policy.step(final[n : n + 1], state[n : n + 1])[1]
                zeroed = policy.step(final[n : n + 1], torch.zeros_like(state[n : n + 1]))[1]
                assert buf.final_values[t, n].item() == pytest.approx(expected.item(), abs=1e-5)
                assert abs(expected.item() - zeroed.item()) > 1e-4  # the state matters here
                checked += 1
    assert checked == N * (T // 5)


# ---------------------------------------------------------------------------------- learning
def cue_return(tmp_path, recurrent):
    """The mean return at the end of training on the cue task: the answer, due 4 steps later,
    is shown only at an episode's first step, so a memoryless policy stays at chance (0.5)."""
    from toy_envs import register_cue

    cfg = tiny_config(
        register_cue(),
        env={"num_envs": 8, "normalize_obs": False, "normalize_reward": False},
        model={"recurrent": recurrent, "hidden_sizes": [32]}
        | ({"history_length": 4} if recurrent == "history" else {"recurrent_size": 16}),
        algorithm={
            "rollout_steps": 16, "minibatch_size": 32, "update_epochs": 8,
            "gamma": 0.99, "gae_lambda": 0.95, "sequence_length": 8 if recurrent else None,
        },
        optim={"lr": 3e-3},
        trainer={"total_steps": 12_288, "seed": 0},
    )  # fmt: skip
    return train(cfg, tmp_path / str(recurrent)).mean_recent_return()


@pytest.mark.parametrize("kind", ["lstm", "gru", "history"])
def test_a_recurrent_policy_learns_to_remember_the_cue(tmp_path, kind):
    """A recurrent core remembers the cue (a history of 4 steps holds it until the answer)."""
    assert cue_return(tmp_path, kind) > 0.8  # 1.0 for every kind at seed 0


def test_a_memoryless_policy_cannot_learn_the_cue(tmp_path):
    """The control of the test above, with the same budget and settings: without a memory the
    policy stays at chance, so the recurrent ones' 1.0 is their memory's doing."""
    assert cue_return(tmp_path, None) < 0.65


def test_update_threads_are_chosen_by_the_sequences_of_a_minibatch(tmp_path, monkeypatch):
    from embodied_ppo.runner import trainer as trainer_module

    asked = []

    def spy(device, policy, rows, sequence_length=1):
        asked.append((rows, sequence_length))
        return 1

    monkeypatch.setattr(trainer_module, "update_threads", spy)
    configs = [
        recurrent_config(algorithm={"sequence_length": 4}),
        recurrent_config(),  # chunks of whole rollouts (16 steps)
        tiny_config(PENDULUM, algorithm={"minibatch_size": 16}),  # no recurrent core
    ]
    for i, cfg in enumerate(configs):
        Trainer(cfg, tmp_path / str(i), progress_stream=io.StringIO()).envs.close()
    assert asked == [(16, 4), (16, 16), (16, 1)]
