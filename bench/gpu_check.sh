#!/usr/bin/env bash
# Throughput of the transformers Qwen2.5-VL backend on a GPU: a Qwen2.5-VL-7B-shaped model with random bf16
# weights, images/s at batch 2 and 16, sdpa and (when flash-attn imports) flash_attention_2. About 2-4 minutes on
# an H200; the whole script is capped at 8. Results: stdout and $OUT/gpu_check.json (else bench/out/).
#
# The GPU image has torch and transformers but not medeval's pure-Python needs, and it cannot download. Fetch
# their wheels once here (repository root, network to PyPI), then carry the .whl folder to the GPU machine:
#   bash bench/gpu_check.sh --fetch-wheels      # here: writes .whl/ (git-ignored)
#   bash bench/gpu_check.sh                     # there, with .whl carried
# Extra arguments go to bench/gpu_check.py (e.g. --max-new-tokens 512 --batches 2 16 32).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}"
  echo "gpu_check: wheels are in .whl/; carry .whl to the GPU machine and run bash bench/gpu_check.sh there."
  exit 0
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA GPU is visible (or torch is missing), so nothing was measured; run this on a GPU machine."
  exit 2
fi
if ! "$PYTHON" -c 'import pydantic' 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu_check: pydantic is missing; run 'bash bench/gpu_check.sh --fetch-wheels' on a"
    echo "machine with PyPI access and carry the .whl folder here."
    exit 2
  fi
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec timeout 480 "$PYTHON" bench/gpu_check.py --shape 7b --device cuda:0 "$@"
