"""The run's first rollout, evaluated again once the observation normalizers have seen it.

The first rollout of a run meets empty observation statistics: they are merged right after it,
and its log-probabilities, values (and recurrent states) are computed again under the policy as
it is then, so the update's old log-probs are those of the normalized policy (whose first ratio
is exactly 1).
"""

from __future__ import annotations

import numpy as np
import torch

from embodied_ppo.core.obs import map_obs
from embodied_ppo.env.spaces import Obs
from embodied_ppo.runner.acting import VALUE_BATCH_ROWS, Acting
from embodied_ppo.runner.staging import Staging


def reevaluate(
    st: Staging,
    acting: Acting,
    steps: int,
    before: tuple[torch.Tensor, np.ndarray] | None,
    finals: list[tuple[int, np.ndarray, Obs]],
    forward_micro_batch: int | None = None,
) -> torch.Tensor | None:
    """Recompute the staged log-probs, values (and recurrent states) of the rollout's first
    `steps` steps and the values of its truncated episodes' final observations, under the
    policy `acting` runs.

    Args:
        before: a recurrent policy's states and episode starts before the rollout's first step.
        finals: (step, env rows, final observations) of every truncation.
        forward_micro_batch: at most this many rows per forward pass.

    Returns:
        A recurrent policy's states after the last step (None for other policies).
    """
    policy, device = acting.policy, acting.device
    with torch.no_grad():
        if before is not None and policy.state_size:
            cuts: dict[int, list[tuple[np.ndarray, Obs]]] = {}
            for t, cut, final in finals:
                cuts.setdefault(t, []).append((cut, final))
            state, starts = before[0].clone(), before[1]
            for t in range(steps):
                keep = torch.from_numpy(~starts).to(device, torch.float32)
                state = state * keep[:, None]
                st.states[t] = state.cpu().numpy()
                x = acting.tensors(map_obs(lambda a, t=t: a[t], st.obs))
                dist, value, state = policy.step(x, state)
                action = torch.from_numpy(st.actions[t]).to(device)
                st.logprobs[t] = dist.log_prob(action).cpu().numpy()
                st.values[t] = value.cpu().numpy()
                for cut, final in cuts.get(t, []):
                    reached = state[torch.from_numpy(cut).to(device)]
                    st.final_values[t, cut] = acting.recurrent_values(final, reached)
                starts = st.ends[t]
            return state
        rows = steps * st.num_envs
        chunk = min(forward_micro_batch or VALUE_BATCH_ROWS, VALUE_BATCH_ROWS)
        obs = st.flat(st.obs, steps)
        actions = st.actions[:steps].reshape(rows, *st.actions.shape[2:])
        logprobs, values = st.logprobs.reshape(-1), st.values.reshape(-1)
        for i in range(0, rows, chunk):
            rows_i = slice(i, i + chunk)
            part = acting.tensors(map_obs(lambda a, r=rows_i: a[r], obs))
            act = torch.from_numpy(actions[rows_i]).to(device)
            logprob, _, value, _ = policy.evaluate(part, act)
            logprobs[rows_i] = logprob.cpu().numpy()
            if not acting.late_values:  # else computed with the other late values
                values[rows_i] = value.cpu().numpy()
        for t, cut, final in finals:
            st.final_values[t, cut] = acting.values(final)
    return None
