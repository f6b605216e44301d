"""What the mjlab backend's episode resets cost, side by side in one process: the backend as it
is, the design it replaced, and mjlab's own auto-reset loop (rsl_rl's), each stepping the same
task from the same seed with the same actions.

    ours        mjlab's auto-reset takes the terminations inside its step; the truncated envs
                are reset after it, once their final observations are read (vecenv/mjlab_resets)
    after-step  every ended env reset after the step (`reset(env_ids)`: a second forward pass,
                the sensors and every observation term of every env), on each step where any
                episode ended: the design before
    mjlab       mjlab's step with its auto-reset on, as its rsl_rl recipe runs it (a time-out's
                final observation is lost: not a design this package can train with, Rule 1)

The three step in turn, each with its own copy of torch's global generator (which mjlab draws
every random number from), so they see the same random numbers until their designs draw
differently. Reported: env steps/s of each (the clock around each env's step alone, the device
synchronized on a GPU), the ratios to ours, and per step the forward passes, observation
computes and episode ends.

    python -m scripts.bench.mjlab_resets configs/mjlab_go1_flat.yaml env.num_envs=16 \\
        algorithm.minibatch_size=96 --steps 96
    python -m scripts.bench.mjlab_resets configs/mjlab_go1_flat.yaml env.num_envs=16 \\
        algorithm.minibatch_size=96 \\
        env.max_episode_steps=20 --steps 96     # time-outs every 20 steps
"""

from __future__ import annotations

import collections
import sys
import time

from scripts.bench.lib import args as cli_args

MODULE = "scripts.bench.mjlab_resets"
NAMES = ("ours", "after-step", "mjlab")


def build_parser() -> cli_args.Parser:
    """The comparison's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    p.add_argument("--steps", type=int, default=96, help="timed steps of each (default 96)")
    p.add_argument("--action-scale", type=float, default=1.0, help="std of the random actions")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the comparison with `argv` (the process's arguments when None)."""
    return cli_args.run_main(build_parser(), compare, argv)


def after_step_envs(cfg, device):
    """The backend with the design before: every ended env reset after mjlab's step."""
    import torch

    from embodied_ppo.vecenv.device_protocol import DeviceStep
    from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv

    class AfterStep(MjlabVecEnv):
        """mjlab's auto-reset off; each step resets every ended env itself."""

        def __init__(self) -> None:
            super().__init__(cfg.env, cfg.trainer.seed, device=device)
            self.env.termination_manager.compute = self.ends._compute  # mjlab's own again
            self.env.cfg.auto_reset = False

        def step(self, action: torch.Tensor) -> DeviceStep:
            obs, reward, terminated, truncated, _ = self.env.step(action)
            obs = self._obs(obs)
            ended = terminated | truncated
            ids = ended.nonzero().squeeze(-1)
            result = DeviceStep(obs, reward.clone(), terminated.clone(), truncated.clone(), {},
                                self._ep_return, self._ep_length)  # fmt: skip
            if ids.numel():
                result.final_obs = {k: v.clone() for k, v in obs.items()}
                reset_obs, _ = self.env.reset(env_ids=ids)
                result.obs, result.ended = self._obs(reset_obs), int(ids.numel())
            return result

    return AfterStep()


def compare(args) -> None:
    """Build the three, step them in turn, print the table."""
    if args.steps < 1:
        raise cli_args.BadInput("--steps must be at least 1")
    import torch

    from embodied_ppo.config.loading import load_config
    from embodied_ppo.core.errors import UserError
    from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv
    from embodied_ppo.vecenv.mjlab_tasks import build, quietly, task_config

    try:
        cfg = load_config(args.config, args.overrides)
    except UserError as exc:
        raise cli_args.BadInput(str(exc)) from None
    if cfg.env.backend != "mjlab":
        raise cli_args.BadInput(f"{args.config}: env.backend is {cfg.env.backend!r}, not mjlab")
    device = torch.device(
        "cuda" if cfg.trainer.device != "cpu" and torch.cuda.is_available() else "cpu"
    )
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ours = MjlabVecEnv(cfg.env, cfg.trainer.seed, device=device)
    native_cfg = task_config(cfg.env, cfg.env.num_envs, ours.seed)
    native_cfg.auto_reset = True
    native = build(native_cfg, device)
    envs = {"ours": ours, "after-step": after_step_envs(cfg, device), "mjlab": native}
    counts = {name: collections.Counter() for name in NAMES}
    for name in NAMES:
        inner = envs[name].env if name != "mjlab" else native
        _count(inner.sim, "forward", counts[name], "forward passes")
        _count(inner.observation_manager, "compute", counts[name], "observation computes")
    rng = {}
    for name in NAMES:  # one reset each, from the same generator state
        torch.manual_seed(cfg.trainer.seed)
        if name == "mjlab":
            quietly(native.reset, seed=ours.seed)  # mjlab prints the seed
        else:
            envs[name].reset()
        rng[name] = torch.get_rng_state()
    gen = torch.Generator().manual_seed(1)
    n, dim = cfg.env.num_envs, ours.info.action_dim
    actions = [torch.randn(n, dim, generator=gen).to(device) * args.action_scale
               for _ in range(args.steps)]  # fmt: skip
    seconds = dict.fromkeys(NAMES, 0.0)
    for name in NAMES:
        counts[name].clear()
    for t, action in enumerate(actions):
        for name in NAMES[t % 3 :] + NAMES[: t % 3]:  # each goes first in turn
            torch.set_rng_state(rng[name])
            sync()
            start = time.perf_counter()
            out = envs[name].step(action)
            sync()
            seconds[name] += time.perf_counter() - start
            rng[name] = torch.get_rng_state()
            terminated, truncated = (
                (out[2], out[3]) if name == "mjlab" else (out.terminated, out.truncated)
            )
            counts[name]["ends"] += int((terminated | truncated).sum())
    report(cfg, device, seconds, counts, args.steps)
    for name in NAMES:
        envs[name].close()


def _count(owner, name: str, counts: collections.Counter, key: str) -> None:
    """Count the calls of `owner.name`."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        """The call, counted."""
        counts[key] += 1
        return inner(*args, **kwargs)

    setattr(owner, name, wrapper)


def report(cfg, device, seconds, counts, steps: int) -> None:
    """Print each design's rate, its ratio to ours and its work per step."""
    n = cfg.env.num_envs
    print(f"{n} envs of {cfg.env.id} on {device}, {steps} steps each, in turn:")
    print(
        "| design | env steps/s | ours / it | forward passes a step | observation computes a step | episode ends |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in NAMES:
        rate = steps * n / seconds[name]
        c = counts[name]
        print(
            f"| {name} | {rate:,.0f} | {seconds[name] / seconds['ours'] if name != 'ours' else 1:.2f} "
            f"| {c['forward passes'] / steps:.3f} | {c['observation computes'] / steps:.3f} "
            f"| {c['ends']} |"
        )


if __name__ == "__main__":
    sys.exit(main())
