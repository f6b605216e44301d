#!/usr/bin/env bash
# mjlab's Go1 velocity task (Mjlab-Velocity-Flat-Unitree-Go1) trained twice on one GPU, one run
# after the other, for the same number of iterations of the same size: by this package
# (configs/mjlab_go1_flat.yaml) and by mjlab's own recipe (rsl_rl, `python -m mjlab.scripts.train`,
# the same network, PPO settings and 24 steps x ENVS an iteration). Each run's log, its per-iteration
# metrics (ours: metrics.jsonl; rsl_rl: its TensorBoard events) and its wall time go to OUT_DIR
# (the script fails when a side did);
# `python -m scripts.bench.mjlab_learning OUT_DIR` compares them (docs/performance.md reports it).
#
#     ITERATIONS=200 bash scripts/bench/mjlab_learning.sh OUT_DIR
#     STEPS=rsl_rl ITERATIONS=200 bash scripts/bench/mjlab_learning.sh OUT_DIR   # one side only
#
# Needs a GPU and the mjlab extra (pip install -e ".[mjlab]" torch==<the installed torch>: the
# pin keeps pip from replacing torch, docs/environments.md). The first run compiles MuJoCo
# Warp's kernels on a cold cache (~1-2 min, then cached in ~/.cache/warp), so compare the
# iterations' times, not the processes'. ENVS (4096) and SEED (0) apply to both sides.
# LIMIT: seconds each side may run (0, the default: no limit; what a side logged is kept).
# OURS_ARGS: more overrides for ours (e.g. "trainer.device=cpu trainer.compile=false");
# RSL_RL_ARGS: more flags for mjlab's train (e.g. "--gpu-ids None"): how the tests run it on a CPU.
set -u
out=${1:?usage: bash scripts/bench/mjlab_learning.sh OUT_DIR}
iterations=${ITERATIONS:-200}
envs=${ENVS:-4096}
seed=${SEED:-0}
limit=${LIMIT:-0}
read -ra ours_args <<<"${OURS_ARGS:-}"
read -ra rsl_rl_args <<<"${RSL_RL_ARGS:-}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
status=0

side() {
    local name=$1
    shift
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
        return 0
    fi
    local start
    start=$(date +%s)
    echo "== $name: $iterations iterations of 24 x $envs"
    "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "$(($(date +%s) - start))" >"$out/$name.wall_s"
    echo "   rc=$rc in $(cat "$out/$name.wall_s") s"
    [ "$rc" -eq 0 ] || status=$rc
    tail -n 4 "$out/$name.log"
}

ours() {
    timeout "$limit" "$py" -m embodied_ppo train configs/mjlab_go1_flat.yaml "env.num_envs=$envs" \
        "algorithm.minibatch_size=$((envs * 6))" "trainer.seed=$seed" \
        "trainer.total_steps=$((iterations * 24 * envs))" "trainer.checkpoint_interval=$iterations" \
        "trainer.run_dir=$work/ours" "${ours_args[@]}"
    local rc=$?
    mkdir -p "$out/ours"
    cp "$work/ours/metrics.jsonl" "$work/ours/config.yaml" "$out/ours/" 2>/dev/null
    return $rc
}

rsl_rl() {
    (cd "$work" && timeout "$limit" "$py" -m mjlab.scripts.train Mjlab-Velocity-Flat-Unitree-Go1 \
        --agent.logger tensorboard --agent.max-iterations "$iterations" \
        --agent.seed "$seed" --env.scene.num-envs "$envs" "${rsl_rl_args[@]}")
    local rc=$?
    mkdir -p "$out/rsl_rl"
    find "$work/logs" -name 'events.out.tfevents.*' -exec cp {} "$out/rsl_rl/" \; 2>/dev/null
    return $rc
}

side ours ours
side rsl_rl rsl_rl
rm -rf "$work"
exit "$status"
