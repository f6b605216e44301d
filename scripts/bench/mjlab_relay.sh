#!/usr/bin/env bash
# One window of a relay: mjlab's Go1 flat velocity task trained on one GPU for a fixed wall time
# by this package (configs/mjlab_go1_flat.yaml, `train --for`) and by mjlab's own rsl_rl recipe
# (`python -m mjlab.scripts.train`), one after the other, each continuing where its last window
# stopped; then both policies held to fixed commands (scripts.bench.mjlab_probe) and compared
# (scripts.bench.mjlab_learning). Everything the next window needs, and the logs, comes back in
# OUT_DIR in at most 8 files of at most 15 MiB each (what a lent machine hands back):
#
#     ours.tar.gz[.partNN]   this package's run, packed (`embodied-ppo pack`): config, metrics,
#                            TensorBoard events, the newest intact checkpoint
#     rsl_rl.tar.gz          rsl_rl's run: its TensorBoard events, its last checkpoint and ONNX
#     window.log             every command's output; report.md: the comparison and the probes
#
#     bash scripts/bench/mjlab_relay.sh OUT_DIR [STATE_DIR]
#
# STATE_DIR holds the previous window's OUT_DIR (its archives; none: the first window).
# WINDOW (each side's wall time, as `train --for` takes it: default 4m), ENVS (4096), SEED (0),
# PROBE_ENVS (64), PROBE_SECONDS (6), PROBE_DEVICE (cuda); OURS_ARGS: more overrides of ours'
# first window (e.g. "trainer.device=cpu trainer.compile=false"), RSL_RL_ARGS: more flags of
# mjlab's train (e.g. "--gpu-ids None"): how the tests run a window on a CPU. rsl_rl runs first in a window, so its first window also compiles MuJoCo
# Warp's kernels on a cold cache (~80 s of its share): compare iterations, not windows.
# Needs a GPU and the mjlab extra (docs/performance.md, "When a GPU is lent").
set -u
out=${1:?usage: bash scripts/bench/mjlab_relay.sh OUT_DIR [STATE_DIR]}
state=${2:-}
window=${WINDOW:-4m}
read -ra ours_args <<<"${OURS_ARGS:-}"
read -ra rsl_rl_args <<<"${RSL_RL_ARGS:-}"
envs=${ENVS:-4096}
seed=${SEED:-0}
py=${PYTHON:-python3}
case $py in */*) py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") ;; esac  # a path: absolute
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -n "$state" ] && state=$(cd "$state" && pwd)
cd "$(dirname "$0")/../.."  # the repository's root
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
log="$out/window.log"
say() { echo "== [${SECONDS}s] $*" | tee -a "$log"; }  # seconds into the window

# The previous window's runs, unpacked.
mkdir -p "$work/runs" "$work/rsl"
if [ -n "$state" ] && ls "$state"/ours.tar.gz* >/dev/null 2>&1; then
    cat "$state"/ours.tar.gz* | tar -xzf - -C "$work/runs"
fi
if [ -n "$state" ] && [ -f "$state/rsl_rl.tar.gz" ]; then
    tar -xzf "$state/rsl_rl.tar.gz" -C "$work/rsl"
fi

say "rsl_rl: $window of 24 x $envs"
resume=()
[ -d "$work/rsl/logs" ] && resume=(--agent.resume True)
(cd "$work/rsl" && timeout "$window" "$py" -m mjlab.scripts.train \
    Mjlab-Velocity-Flat-Unitree-Go1 --agent.logger tensorboard --agent.max-iterations 100000 \
    --agent.save-interval 20 --agent.seed "$seed" --env.scene.num-envs "$envs" \
    "${resume[@]}" "${rsl_rl_args[@]}") >>"$log" 2>&1
echo "   rc=$? (124: the window's end)" | tee -a "$log"

say "ours: $window of 24 x $envs"
if [ -f "$work/runs/ours/config.yaml" ]; then
    "$py" -m embodied_ppo train --resume "$work/runs/ours" --for "$window" >>"$log" 2>&1
else
    "$py" -m embodied_ppo train configs/mjlab_go1_flat.yaml "env.num_envs=$envs" \
        "algorithm.minibatch_size=$((envs * 6))" "trainer.seed=$seed" \
        "trainer.run_dir=$work/runs/ours" "${ours_args[@]}" --for "$window" >>"$log" 2>&1
fi
echo "   rc=$?" | tee -a "$log"

say "probes: commanded against achieved velocity"
theirs=$(find "$work/rsl/logs" -name '*.onnx' -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -1 | cut -d' ' -f2)
mkdir -p "$work/cmp/ours" "$work/cmp/rsl_rl"
# The sides with a policy, probed in one process (mjlab loaded once), which also exports ours
# (a run directory) to ONNX as `embodied-ppo export` does.
policies=() jsons=()
if [ -f "$work/runs/ours/checkpoints/latest.pt" ]; then
    policies+=("$work/runs/ours") jsons+=("$work/cmp/probe_ours.json")
fi
if [ -n "$theirs" ] && [ -f "$theirs" ]; then
    policies+=("$theirs") jsons+=("$work/cmp/probe_rsl_rl.json")
fi
[ ${#policies[@]} -gt 0 ] && timeout 240 "$py" -m scripts.bench.mjlab_probe "${policies[@]}" \
    --task Mjlab-Velocity-Flat-Unitree-Go1 --device "${PROBE_DEVICE:-cuda}" \
    --envs "${PROBE_ENVS:-64}" --seconds "${PROBE_SECONDS:-6}" --json "${jsons[@]}" >>"$log" 2>&1

say "comparison"
cp "$work/runs/ours/metrics.jsonl" "$work/cmp/ours/"
find "$work/rsl/logs" -name 'events.out.tfevents.*' -exec cp {} "$work/cmp/rsl_rl/" \;
"$py" -m scripts.bench.mjlab_learning "$work/cmp" --envs "$envs" >"$out/report.md" 2>>"$log"
cat "$out/report.md" | tee -a "$log"

say "packing"
"$py" -m embodied_ppo pack "$work/runs/ours" "$work/ours.tar.gz" >>"$log" 2>&1
split -b 15M -d "$work/ours.tar.gz" "$out/ours.tar.gz.part"
# rsl_rl's resume reads its newest run folder's newest model_*.pt: the older ones stay behind.
if [ -d "$work/rsl/logs" ]; then
    last=$(find "$work/rsl/logs" -name 'model_*.pt' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2)
    [ -n "$last" ] && find "$work/rsl/logs" -name 'model_*.pt' ! -path "$last" -delete
    (cd "$work/rsl" && tar -czf "$out/rsl_rl.tar.gz" logs)
fi
ls -la "$out" | tee -a "$log"
rm -rf "$work"
