#!/usr/bin/env bash
# Scaling across policy GPUs (issue 25): `bench --shards 1,2,4,...,N` on a lent multi-GPU NVIDIA H200 machine
# (nvidia-h200-x2, -x4 or -x8), one engine per GPU as a Ray actor, every engine with the same layout: the one
# `behavior1k-fast tune` picked on one GPU when its profile YAML is given, else bench's default layout.
#
# That machine has no network, and its image has no Ray. Three steps:
#   1. here, once (network): .whl/ and .gl/ as benchmarks/gpu_h200.sh says, then
#        bash benchmarks/gpu_scaling.sh --prepare
#      puts into .ray/ (git-ignored) a Ray cp312 wheel without its Java jars (the whole
#      wheel is 79 MB, over the 64 MiB one device call carries) and the jsonschema wheels Ray needs.
#   2. there, call 1, carry [".ray"]:            bash benchmarks/gpu_scaling.sh --install-ray
#      (Ray into /tmp/ray-site, which stays while the machine stays warm: make call 2 right after)
#   3. there, call 2, carry [".whl", ".gl"]:     bash benchmarks/gpu_scaling.sh [tune_profile.yaml] [bench options]
#      e.g. with the layout tune picked on the one-GPU H200 (P = 8 x E = 2, K = 2 hybrid):
#        bash benchmarks/gpu_scaling.sh benchmarks/results/tune_h200.yaml
# Results (shards_<machine>.json/.png, the log, the machine) go to $OUT (or ./behavior1k_fast_results), then are
# copied into benchmarks/results/ here.
set -uo pipefail
RAY_VERSION=2.60.0
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)

if [[ "${1:-}" == "--prepare" ]]; then
  mkdir -p .ray /tmp/ray-download || exit 1
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
    -d /tmp/ray-download "ray==$RAY_VERSION" jsonschema jsonschema-specifications referencing rpds-py || exit 1
  cp /tmp/ray-download/jsonschema*.whl /tmp/ray-download/referencing*.whl /tmp/ray-download/rpds_py*.whl .ray/ || exit 1
  # the same wheel less ray/jars (Java workers only) and their RECORD lines; entries keep their modes (+x)
  python3 - "/tmp/ray-download/ray-$RAY_VERSION-"*.whl .ray <<'EOF' || exit 1
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(os.path.join(out, os.path.basename(src)), "w",
                                                  zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        if info.filename.startswith("ray/jars/"):
            continue
        data = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(l for l in data.splitlines(True) if not l.startswith(b"ray/jars/"))
        zout.writestr(info, data)
EOF
  du -sh .ray
  exit 0
fi

if [[ "${1:-}" == "--install-ray" ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ray-site .ray/*.whl \
    || exit 1
  PYTHONPATH=/tmp/ray-site python3 -c "import ray; print('ray', ray.__version__, 'in /tmp/ray-site')"
  exit $?
fi

for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
[[ -d /tmp/ray-site/ray ]] || { echo "gpu_scaling.sh: no Ray in /tmp/ray-site: run it with --install-ray first (carry .ray)" >&2; exit 2; }
export PYTHONPATH="/tmp/site:/tmp/ray-site:$PWD" PYTHONUNBUFFERED=1 MUJOCO_GL=egl PYOPENGL_PLATFORM=egl \
  __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
OUT="${OUT:-behavior1k_fast_results}"
mkdir -p "$OUT"

TUNED=()
if [[ "${1:-}" == *.yaml || "${1:-}" == *.yml ]]; then
  [[ -f "$1" ]] || { echo "gpu_scaling.sh: tune profile $1 does not exist" >&2; exit 2; }
  TUNED=(--tuned "$1")
  shift
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU')
[[ "$GPUS" -ge 1 ]] || { echo "gpu_scaling.sh: nvidia-smi shows no GPU" >&2; exit 2; }
SHARDS=1
for ((g = 2; g < GPUS; g *= 2)); do SHARDS+=",$g"; done
[[ "$GPUS" -gt 1 ]] && SHARDS+=",$GPUS"   # G = 1, 2, 4, ... and every GPU present

{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  lscpu | grep -E 'Model name|^CPU\(s\)'
  python3 -c "import mujoco, ray, torch; print('mujoco', mujoco.__version__, 'ray', ray.__version__, 'torch', \
torch.__version__, 'cuda devices', torch.cuda.device_count())"
  echo "shards: $SHARDS; layout: ${TUNED[*]:-bench default}"
} 2>&1 | tee "$OUT/shards_machine.txt"
timeout 560 python3 -m behavior1k_fast.tools.cli bench --shards "$SHARDS" --device cuda --rounds 16 --out-dir "$OUT" \
  "${TUNED[@]}" "$@" 2>&1 | tee "$OUT/shards_h200.log"
