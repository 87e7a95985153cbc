#!/usr/bin/env bash
# The GPU numbers: ablation + scaling sweep over env processes on a lent NVIDIA H200 machine (16 cores).
#
# That machine has no network: the MuJoCo/gymnasium cp312 wheels travel in .whl/ and the EGL loader debs
# in .gl/ (both git-ignored). Made here with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 ... -d .whl mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 \
#     glfw==2.11.0 pyopengl==3.1.10 websockets gymnasium==1.4.0 farama-notifications==0.0.6
#   (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# Run there from the repo root: bash benchmarks/gpu_h200.sh [extra bench options]; results go to $OUT
# (or benchmarks/results), then are copied into benchmarks/results/ here.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 MUJOCO_GL=egl PYOPENGL_PLATFORM=egl \
  __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)'
  python3 -c "import mujoco, torch, numpy; print('mujoco', mujoco.__version__, 'torch', torch.__version__, \
'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/h200_machine.txt"
python3 -m behavior1k_fast.tools.cli validate --json "$OUT/validate_h200.json" 2>&1 | tee "$OUT/validate_h200.log"
timeout 520 python3 -m behavior1k_fast.tools.cli bench --rounds 16 --scaling 1,2,4,8,14 --trace --out-dir "$OUT" "$@" \
  2>&1 | tee "$OUT/bench_h200.log"
