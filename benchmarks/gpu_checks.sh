#!/usr/bin/env bash
# Everything the Triton work leaves to a GPU, in stages meant to fit a 10-minute command each (not yet timed):
#   benchmarks/gpu_checks.sh [STAGE ...]      (default: all ten, in order)
#     tests    pytest -m gpu (real sizes) and the interpreter's grid run natively on CUDA -> gpu_tests.txt
#     received attention received's Triton column pass natively on CUDA (test_received.py's triton cases,
#              every score modifier against the float64 definition)                    -> received_tests.txt
#     static   registers / spills of every autotune config, as compiled there          -> kernel_static.json
#     short    the issue-4 benchmark at 4K..32K (plain, scan, scan_fused, eager, kernel; the kernel rows
#              time attention_received too)                                            -> scan_gpu.json
#     long     the same at 64K and 128K, merged into scan_gpu.json (--append)
#     overhead the scan's time beyond the plain forward at 4K and 16K: blocking calls and launches per
#              sample (scan_overhead_gpu.py)                                           -> scan_overhead_gpu.json
#     sweep    the fused and entropy-only kernels config by config against sdpa at 4K, 16K, 32K
#              (fused_sweep_gpu.py; BASELINE=FILE times an earlier copy of triton_entropy.py too)
#                                                                                      -> fused_sweep_gpu.json
#     context  --context-parallel on every GPU (2 or more; skipped with one): SmolLM2 at 128K (CONTEXT_LEN),
#              1 GPU against all, time and each rank's peak GPU memory beside the model -> context_parallel_gpu.json
#     train    the monitor's gradient and route tests on CUDA (-m "gpu or not gpu"), the CUDA training
#              route's against sdpa's gradients on every family (test_train_route_cuda.py) -> train_tests.txt
#              and a training step unmonitored / monitored (every step, every 10th), SmolLM2 2K and 4K and a
#              4-layer Llama at 1K, the routes that ran in each row's `paths` (TRAIN_SIZES) -> train_gpu.json
#     decode   the decode step's split-key launch: its cases natively on CUDA, the gpu ones against the row
#              kernel at a 16K and 32K cache (triton_decode_interp_cases.py)           -> decode_tests.txt
#              and one decode step recorded / plain at 4K, 16K, 32K of cache, the kernel's split counts
#              against the row kernel and sdpa (decode_gpu.py; issue 69 item 5)       -> decode_gpu.json
# OUT_DIR (default benchmarks/results) receives the files; PYTHON chooses the interpreter (default python3),
# which needs a CUDA build of torch, triton and transformers and this package on its path
# (pip install -e . or PYTHONPATH=.).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-benchmarks/results}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
"$PY" -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" || exit 1
stages=("$@")
[ $# -gt 0 ] || stages=(tests received static short long overhead sweep context train decode)
status=0
for s in "${stages[@]}"; do
  case $s in
    tests)
      "$PY" -m pytest -q -m gpu tests/kernels/test_triton_gpu.py 2>&1 | tee "$OUT_DIR/gpu_tests.txt" || status=1
      "$PY" -m pytest -q -p no:cacheprovider tests/triton_interp_cases.py tests/kernels/test_kernels.py \
        tests/kernels/test_kernels_extras.py tests/kernels/test_kernels_alibi.py -k triton \
        2>&1 | tee -a "$OUT_DIR/gpu_tests.txt" || status=1 ;;
    received)
      "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_received.py -k "triton and not under_the_interpreter" \
        2>&1 | tee "$OUT_DIR/received_tests.txt" || status=1 ;;
    static) "$PY" benchmarks/kernel_static.py --out "$OUT_DIR/kernel_static.json" || status=1 ;;
    short) "$PY" benchmarks/scan_gpu.py --lengths 4096 8192 16384 32768 --out "$OUT_DIR/scan_gpu.json" || status=1 ;;
    long) "$PY" benchmarks/scan_gpu.py --lengths 65536 131072 --out "$OUT_DIR/scan_gpu.json" --append || status=1 ;;
    overhead) "$PY" benchmarks/scan_overhead_gpu.py --out "$OUT_DIR/scan_overhead_gpu.json" || status=1 ;;
    sweep)
      "$PY" benchmarks/fused_sweep_gpu.py ${BASELINE:+--baseline "$BASELINE"} --out "$OUT_DIR/fused_sweep_gpu.json" \
        || status=1 ;;
    context)
      gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())")
      if [ "$gpus" -lt 2 ]; then
        echo "context: skipped, $gpus GPU (--context-parallel needs 2 or more)"
      else
        "$PY" benchmarks/context_parallel_cpu.py --device cuda --processes "$gpus" --len "${CONTEXT_LEN:-131072}" \
          --out "$OUT_DIR/context_parallel_gpu.json" || status=1
      fi ;;
    train)
      "$PY" -m pytest -q -p no:cacheprovider -m "gpu or not gpu" tests/kernels/test_train_route.py \
        tests/kernels/test_train_route_cuda.py tests/triton_train_interp_cases.py tests/monitor/test_monitor.py \
        2>&1 | tee "$OUT_DIR/train_tests.txt" || status=1
      # shellcheck disable=SC2086  # TRAIN_SIZES is a list of MODEL:LEN words
      "$PY" benchmarks/train_cpu.py --device cuda --sizes ${TRAIN_SIZES:-smollm2:2048 smollm2:4096 llama4:1024} \
        --out "$OUT_DIR/train_gpu.json" || status=1 ;;
    decode)
      "$PY" -m pytest -q -p no:cacheprovider -m "gpu or not gpu" tests/triton_decode_interp_cases.py \
        tests/kernels/test_decode_split.py -k "not under_the_interpreter" 2>&1 | tee "$OUT_DIR/decode_tests.txt" || status=1
      "$PY" benchmarks/decode_gpu.py --out "$OUT_DIR/decode_gpu.json" || status=1 ;;
    *) echo "unknown stage '$s': choose from tests received static short long overhead sweep context train decode" >&2
       exit 2 ;;
  esac
done
exit $status
