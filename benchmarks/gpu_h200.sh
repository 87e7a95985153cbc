#!/usr/bin/env bash
# The GPU numbers on a lent NVIDIA H200 machine (16 cores): validate, the bench (ablation, lookahead, fair peers at
# a process budget, repeats) and the time to a trained policy, in two parts that each fit one 10-minute call.
#
# That machine has no network: the MuJoCo/gymnasium cp312 wheels travel in .whl/ and the EGL loader debs
# in .gl/ (both git-ignored). Made here with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 ... -d .whl mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 \
#     glfw==2.11.0 pyopengl==3.1.10 websockets gymnasium==1.4.0 farama-notifications==0.0.6
#   (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# Run there from the repo root: bash benchmarks/gpu_h200.sh bench|train; results go to $OUT (or
# ./behavior1k_fast_results), then are copied into benchmarks/results/ here.
#   bench: validate, then bench at a process budget of 8 (16 envs: P = 8 x E = 2) with default and BEHAVIOR-like costs
#   train: time_to_train (samples to target and seconds per sample on this machine), then bench at a budget of 16
#   budgets: bench at a process budget of 8 and then 16, each given the time to finish (complete JSON + PNG)
#   rollout: bench at a process budget of 8 with rollouts of 12 chunks and Chrome traces (the lookahead
#     row's rounds broken down, `critical_path` in the JSON)
#   tune: tune --exhaustive at a process budget of 8 (16 envs; the 36 best predicted of the 45 feasible layouts
#     run once each, the pick checked against them)
#   train3: time_to_train with 3 seeds
set -uo pipefail
part="${1:?usage: gpu_h200.sh bench|train|budgets|rollout|tune|train3}"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 MUJOCO_GL=egl PYOPENGL_PLATFORM=egl \
  __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
OUT="${OUT:-behavior1k_fast_results}"
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)'
  python3 -c "import mujoco, torch, numpy; print('mujoco', mujoco.__version__, 'torch', torch.__version__, \
'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/h200_machine_$part.txt"
cli="python3 -m behavior1k_fast.tools.cli"
case "$part" in
  bench)
    timeout 70 $cli validate --json "$OUT/validate_h200.json" 2>&1 | tail -n 12
    timeout 250 $cli bench --max-processes 8 --out-dir "$OUT" --tag h200-p8 2>&1 | grep -v 'run/s' | tee "$OUT/bench_h200-p8.log"
    timeout 250 $cli bench --max-processes 8 --behavior-like --out-dir "$OUT" --tag h200-p8-behavior-like 2>&1 \
      | grep -v 'run/s' | tee "$OUT/bench_h200-p8-behavior-like.log" ;;
  train)
    timeout 380 python3 benchmarks/time_to_train.py --processes 8 --envs 16 --seeds 2 --iterations 100 --device cuda \
      --out-dir "$OUT" --tag h200 2>&1 | tail -n 30 | tee "$OUT/time_to_train_h200.log"
    timeout 190 $cli bench --max-processes 16 --repeats 2 --out-dir "$OUT" --tag h200-p16 2>&1 | grep -v 'run/s' \
      | tee "$OUT/bench_h200-p16.log" ;;
  budgets)
    timeout 330 $cli bench --max-processes 8 --out-dir "$OUT" --tag h200-p8 2>&1 | tail -n 40 > "$OUT/bench_h200-p8.log"
    timeout 230 $cli bench --max-processes 16 --repeats 1 --out-dir "$OUT" --tag h200-p16 2>&1 | tail -n 40 \
      > "$OUT/bench_h200-p16.log"
    tail -n 25 "$OUT"/bench_h200-p*.log ;;
  rollout)
    timeout 540 $cli bench --max-processes 8 --rounds 12 --trace --out-dir "$OUT" --tag h200-p8-r12 2>&1 \
      | tail -n 45 > "$OUT/bench_h200-p8-r12.log"
    tail -n 30 "$OUT/bench_h200-p8-r12.log" ;;
  tune)
    timeout 560 $cli tune --envs 16 --max-processes 8 --pipeline-stages 1,2,4 --exhaustive --max-layouts 36 --repeats 1 --out-dir "$OUT" --tag h200-p8 \
      2>&1 | tail -n 60 > "$OUT/tune_h200-p8.log"
    tail -n 30 "$OUT/tune_h200-p8.log" ;;
  train3)
    timeout 560 python3 benchmarks/time_to_train.py --processes 8 --envs 16 --seeds 3 --iterations 100 --device cuda \
      --out-dir "$OUT" --tag h200-3seeds 2>&1 | tail -n 30 | tee "$OUT/time_to_train_h200-3seeds.log" ;;
  *) echo "usage: gpu_h200.sh bench|train|budgets|rollout|tune|train3" >&2; exit 2 ;;
esac
ls -la "$OUT"
