#!/usr/bin/env bash
# Everything the Triton work leaves to a GPU, in one command (plan ~20 min on one H100):
#   benchmarks/gpu_checks.sh [OUT_DIR]      (PYTHON=... to choose the interpreter; default python3)
# Needs a CUDA build of torch, triton and transformers importable by $PYTHON and this package on
# its path (pip install -e . or PYTHONPATH=.). Writes to OUT_DIR (default benchmarks/results):
#   gpu_tests.txt        pytest -m gpu (real sizes) and the interpreter's grid run natively on CUDA
#   kernel_static.json   registers / spills of every autotune config, as compiled on that machine
#   scan_gpu.json        the issue-4 benchmark: plain vs scan vs scan_fused vs eager, 4K..128K
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${1:-benchmarks/results}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
status=0
"$PY" -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
    | tee "$OUT_DIR/gpu_tests.txt" || exit 1
"$PY" -m pytest -q -m gpu tests/test_triton_gpu.py 2>&1 | tee -a "$OUT_DIR/gpu_tests.txt" || status=1
"$PY" -m pytest -q -p no:cacheprovider tests/triton_interp_cases.py 2>&1 | tee -a "$OUT_DIR/gpu_tests.txt" || status=1
"$PY" benchmarks/kernel_static.py --out "$OUT_DIR/kernel_static.json" || status=1
"$PY" benchmarks/scan_gpu.py --out "$OUT_DIR/scan_gpu.json" || status=1
exit $status
