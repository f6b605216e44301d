#!/usr/bin/env bash
# What only a GPU can show, in one pass of at most nine minutes (docs/performance.md, "GPU"):
#   1. the machine: GPU, driver, torch;
#   2. the CUDA tests (tests/runner/test_cuda.py and the CUDA case of test_trainer.py): the
#      compiled update under CUDA graphs against the eager one, recurrent training and resume on
#      the GPU, a GPU-trained policy deployed on the CPU;
#   3. one gradient step on the GPU, compiled (CUDA graphs) and eager, for the HalfCheetah,
#      Humanoid and Go1 network shapes;
#   4. humanoid.yaml's steady-state training steps/s with both learners on the GPU: ours beside
#      Stable-Baselines3 (same settings);
#   5. the same machine's CPU as the learner: Go1's gradient step and humanoid.yaml's training.
# Every step has its own time limit, writes its log to OUT_DIR/<step>.log and prints its tail.
#
#     bash scripts/gpu_check.sh OUT_DIR
#     STEPS="machine cuda_tests" bash scripts/gpu_check.sh OUT_DIR   # only the steps named
#
# The package and its dependencies must be importable (pip install -e ".[bench]").
set -u
out=${1:-gpu_check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."  # the repository's root: the benchmarks are its package scripts.bench
export PYTHONUNBUFFERED=1
unset MUJOCO_GL  # nothing here renders; a GPU machine may lack the EGL libraries
py=${PYTHON:-python3}

step() {
    local name=$1 limit=$2
    shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
        return 0
    fi
    local start
    start=$(date +%s)
    echo "== $name (limit ${limit} s)"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "   rc=$? in $(($(date +%s) - start)) s"
    tail -n "${TAIL:-14}" "$out/$name.log"
}

step machine 20 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; \
    $py -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, \
    torch.cuda.get_device_name(0), torch.cuda.device_count(), \"device(s)\")'; nproc"
# -n 4: the tests compile their own graphs; four at a time keep the GPU and the cores busy.
TAIL=30 step cuda_tests 90 "$py" -m pytest -q -p no:cacheprovider -o addopts= -n 4 -rs \
    tests/runner/test_cuda.py "tests/runner/test_trainer.py::test_cuda_training_matches_cpu"
# The compiled step's first update compiles for 16-19 s a shape on an H200 (cold cache).
step update_cuda 180 "$py" -m scripts.bench.update --device cuda \
    --shape go1 humanoid halfcheetah --rounds 1 --updates 5
step throughput 110 "$py" -m scripts.bench.throughput --config configs/humanoid.yaml \
    --device cuda --only ours_train sb3_train --iterations 2 --rounds 1 --sb3-threads 1
# The CPU learner on the same machine last: its first compilation (a C++ module) may not end
# inside these limits on a cold cache; the GPU's numbers above do not wait for it.
step update_cpu 60 "$py" -m scripts.bench.update --device cpu --shape go1 --rounds 1 --updates 2
step throughput_cpu 80 "$py" -m scripts.bench.throughput --config configs/humanoid.yaml \
    --device cpu --only ours_train --iterations 2 --rounds 1
