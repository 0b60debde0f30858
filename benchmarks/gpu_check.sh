#!/usr/bin/env bash
# The one GPU check: run once on a machine with one NVIDIA GPU (budget: <= 9 minutes), from the repository root,
# after the README's set-up plus the CUDA torch wheel (README, "GPUs"):
#
#   make install                   # the README set-up (CPU torch pin, the kit with its extras, the corpora)
#   .venv/bin/python -m pip install --force-reinstall --index-url https://download.pytorch.org/whl/cu128 torch==2.13.0
#                                  # ^ the one extra command: the CUDA build of the same torch (cu128: pick the CUDA
#                                  #   tag your driver supports, see pytorch.org "Get started")
#   bash benchmarks/gpu_check.sh   # prints one summary table; files in runs/gpu_check/
#
# Steps: (1) tests/test_kernels.py natively (compiled Triton kernels, TRITON_INTERPRET unset), (2) benchmarks/gpu_check.py:
# SR-codec kernel GB/s vs HBM peak, grouped expert GEMM vs the torch path at 64 experts, MXFP8 vs bf16 expert matmul,
# and short gpu-small (150 steps) and gpu (30 steps) baseline / two_site / eight_cell runs with tokens/s, MFU and the full
# preset's projected time against its budget. Without a GPU it stops at once with
# exit code 2 and says why. Kernel-test failures are reported in the table (and make the exit code 1), not hidden.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
OUT="${GPU_CHECK_OUT:-runs/gpu_check}"
STEPS="${GPU_CHECK_STEPS:-150}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WANDB_MODE=disabled
unset TRITON_INTERPRET

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: FAILED: no CUDA GPU is visible to torch ($("$PY" -c 'import torch; print("torch", torch.__version__, "built for CUDA", torch.version.cuda)')). Run it on a machine with an NVIDIA GPU after installing the CUDA torch wheel (README, GPUs)." >&2
    exit 2
fi
mkdir -p "$OUT"
start=$(date +%s)
echo "gpu_check: (1/2) kernel tests, natively on the GPU"
kernels_rc=0
"$PY" -m pytest -q -p no:cacheprovider tests/test_kernels.py --junitxml="$OUT/kernel_tests.xml" >"$OUT/kernel_tests.txt" 2>&1 || kernels_rc=$?
tail -n 1 "$OUT/kernel_tests.txt"
echo "gpu_check: (2/2) kernel benchmarks and gpu-small runs ($STEPS steps each)"
"$PY" benchmarks/gpu_check.py --out "$OUT" --kernel-tests-xml "$OUT/kernel_tests.xml" --steps "$STEPS" | tee "$OUT/summary.txt"
echo "gpu_check: $(( $(date +%s) - start )) s in all; table in $OUT/summary.txt, figures in $OUT/summary.json"
[ "$kernels_rc" -eq 0 ] || { echo "gpu_check: kernel tests FAILED (see $OUT/kernel_tests.txt)" >&2; exit 1; }
