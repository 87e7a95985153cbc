#!/usr/bin/env bash
# The GPU numbers on a lent NVIDIA H200 machine (16 cores): validate, the bench (ablation, lookahead, fair peers at
# a process budget, repeats) and the time to a trained policy, in two parts that each fit one 10-minute call.
#
# That machine has no network: the MuJoCo/gymnasium cp312 wheels travel in .whl/ and the EGL loader debs
# in .gl/ (both git-ignored). Made here with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 ... -d .whl mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 \
#     glfw==2.11.0 pyopengl==3.1.10 websockets gymnasium==1.4.0 farama-notifications==0.0.6 \
#     torchrl==0.14.1 tensordict==0.14.3 pyvers==0.2.3 hoptorch==0.1.4 orjson importlib_metadata zipp cloudpickle \
#     nvidia-ml-py
#   (the last lines: time_to_train's TorchRL peers, the `peers` extra, and its GPU busy time from NVML;
#   orjson is a manylinux_2_17 wheel)
#   (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# Run there from the repo root: bash benchmarks/gpu_h200.sh bench|train; results go to $OUT (or
# ./behavior1k_fast_results), then are copied into benchmarks/results/ here.
#   bench: validate, then bench at a process budget of 8 (16 envs: P = 8 x E = 2) with default and BEHAVIOR-like costs
#   train: time_to_train in the balanced regime (T_model = T_env; samples to target and seconds per sample of
#     K = 1 and process K = 2, each serial and collect-while-train, the double buffer and TorchRL's
#     collectors), then bench at a budget of 16
#   train-balanced, train-env-bound, train-model-bound FIRST COUNT [PEERS [LAYOUTS]]: issue 42's judge, seeds FIRST ..
#     FIRST + COUNT - 1 of every compared row (each trains its own seeds), at the fourth pass's model sizes; the
#     calls' JSON merged with train-judge --merge (see the case below for the timings that fit one call)
#   train-corrections FIRST COUNT: the lag corrections over k1_skip+overlap against serial k1_skip (balanced)
#   train-corrections-env-bound FIRST COUNT [PEERS]: none against decoupled over process_k2+overlap (and PEERS'
#     collect-while-train rows, default none) in env-bound, where lag 0.8 cost `none` 1.63x the serial samples on
#     the H100; a seed of the three rows takes about 90 s there
#   train-oom: the model-bound TorchRL rows alone with every process's GPU memory logged (who holds it at the OOM)
#   train-leads: time_to_train --lead-sweep (samples to target against the lookahead lead d, 3 seeds)
#   budgets: bench at a process budget of 8 and then 16, each given the time to finish (complete JSON + PNG)
#   rollout: bench at a process budget of 8 with rollouts of 12 chunks and Chrome traces (the lookahead
#     row's rounds broken down, `critical_path` in the JSON)
#   tune: tune --exhaustive at a process budget of 8 (16 envs; the 36 best predicted of the 45 feasible layouts
#     run once each, the pick checked against them)
#   train3: time_to_train with 3 seeds (balanced regime)
set -uo pipefail
usage="usage: gpu_h200.sh bench|train|train-balanced|train-env-bound|train-model-bound|train-corrections|train-corrections-env-bound [FIRST COUNT [PEERS [LAYOUTS]]]|train-oom|train-leads|budgets|rollout|tune|train3"
part="${1:?$usage}"
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
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -o -E 'H100|H200' | tr A-Z a-z)
# time_to_train's layout on this machine: 8 x 2 envs, N = 8, 100 iterations at most, the bench's 224 px camera
# (the forward grows with the batch there), the engine layouts that decide the goals (each also +overlap), the
# policy on the GPU. A 10-minute call fits one regime with 2 seeds and the TorchRL rows: balanced 410 s,
# env-bound 264 s; model-bound (a 2.57 B model) not even 1 seed with --layouts k1_skip (cut at 470 s after
# its first training run; TorchRL's multi-process collectors run out of GPU memory there). The JSON is
# rewritten after each piece, so a call cut short keeps what it measured (time_to_train.py --plot draws it).
ttt="--processes 8 --envs 16 --iterations 100 --resolution 224 --layouts k1_skip,process_k2 --device cuda"
case "$part" in
  bench)
    timeout 70 $cli validate --json "$OUT/validate_h200.json" 2>&1 | tail -n 12
    timeout 250 $cli bench --max-processes 8 --out-dir "$OUT" --tag h200-p8 2>&1 | grep -v 'run/s' | tee "$OUT/bench_h200-p8.log"
    timeout 250 $cli bench --max-processes 8 --behavior-like --out-dir "$OUT" --tag h200-p8-behavior-like 2>&1 \
      | grep -v 'run/s' | tee "$OUT/bench_h200-p8-behavior-like.log" ;;
  train)
    timeout 380 python3 benchmarks/time_to_train.py $ttt --regime balanced --seeds 1 --out-dir "$OUT" --tag h200 2>&1 \
      | tail -n 30 | tee "$OUT/time_to_train_h200.log"
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
  train-balanced|train-env-bound|train-model-bound|train-corrections|train-corrections-env-bound)
    # issue 42: every compared row trains its own seeds; a call runs seeds FIRST .. FIRST + COUNT - 1 (arguments 2
    # and 3) of the regime's rows at the model size the fourth pass calibrated (fixed, so that the calls' runs
    # can be merged), PEERS (argument 4; default: the two double buffers; TorchRL's torchrl_sync, torchrl_async,
    # torchrl_batched and torchrl_parallel train their own seeds too) and the engine LAYOUTS (argument 5, or none: only the peers train). A run takes about 55 s balanced, 25 s
    # env-bound on the H200 (fourth pass), so one 560 s call holds 8 balanced or 18 env-bound runs. Joined
    # after with: python3 -m behavior1k_fast.tools.cli train-judge --merge <the calls' JSON> --record --tag
    # h200-<regime>-5seeds
    # the correction parts train no peer unless asked (a correction row per lagging peer)
    first="${2:-0}" count="${3:-2}" peers="${4:-double_buffer_peer,double_buffer_thread}" extra=""
    case "$part" in
      train-balanced) regime=balanced size="--model-width 2048 --model-depth 12" layouts=k1_skip ;;
      train-corrections) regime=balanced size="--model-width 2048 --model-depth 12" layouts=k1_skip \
        peers="${4:-none}" extra="--corrections none,decoupled,first_epoch,dual_clip,current_values" ;;
      train-env-bound) regime=env-bound size="--model-width 64 --model-depth 1" layouts=k1_skip,process_k2 ;;
      train-corrections-env-bound) regime=env-bound size="--model-width 64 --model-depth 1" layouts=process_k2 \
        peers="${4:-none}" extra="--corrections none,decoupled" ;;
      train-model-bound) regime=model-bound size="--model-width 2048 --model-depth 51" layouts=k1_skip ;;
    esac
    layouts="${5:-$layouts}"
    names="${4:-default}${5:+-$5}"
    tag="${gpu:-gpu}-${part#train-}-s$first-${names//,/-}"  # no "+": a file so named does not come back from the lent machine
    timeout 560 python3 benchmarks/time_to_train.py $ttt --layouts "$layouts" --regime "$regime" $size \
      --seeds "$count" --first-seed "$first" --peers "$peers" $extra --out-dir "$OUT" --tag "$tag" \
      2>&1 | tail -n 40 | tee "$OUT/time_to_train_$tag.log" ;;
  train-oom)
    # issue 42: who holds the GPU's memory when TorchRL's multi-process collectors run out of it in the model-bound
    # regime (fourth pass: 8 workers held 8.6-8.9 GiB each when the trainer process asked for more): every process's
    # GPU memory every 2 s beside the TorchRL rows alone, with the full error in the log.
    ( while true; do date +%s; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
        ps -eo pid,rss,args | grep -E "python3" | grep -v grep | cut -c1-160; echo ---; sleep 2; done ) \
      > "$OUT/gpu_memory_${gpu:-gpu}-model-bound.log" 2>&1 &
    timeout 540 python3 benchmarks/time_to_train.py $ttt --layouts none --regime model-bound \
      --model-width 2048 --model-depth 51 --seeds 1 --peers torchrl_sync,torchrl_async --out-dir "$OUT" \
      --tag "${gpu:-gpu}-model-bound-oom" > "$OUT/time_to_train_${gpu:-gpu}-model-bound-oom.log" 2>&1
    kill %1
    grep -n -i -E "out of memory|Tried to allocate|Process .* has" "$OUT/time_to_train_${gpu:-gpu}-model-bound-oom.log" \
      | cut -c1-600 ;;
  train-leads)
    timeout 560 python3 benchmarks/time_to_train.py $ttt --lead-sweep --regime balanced --seeds 3 --out-dir "$OUT" \
      --tag h200 2>&1 | tail -n 30 | tee "$OUT/time_to_train_lead_sweep_h200.log" ;;
  train3)
    timeout 560 python3 benchmarks/time_to_train.py $ttt --regime balanced --seeds 3 --out-dir "$OUT" --tag h200-3seeds \
      2>&1 | tail -n 30 | tee "$OUT/time_to_train_h200-3seeds.log" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
ls -la "$OUT"
