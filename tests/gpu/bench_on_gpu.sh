#!/usr/bin/env bash
# The GPU benchmark (tests/bench/gpu_vs_pytorch.py) with the engine from an unpacked bundle:
# PyTorch eager, PyTorch compiled and the engine on the same models and batches, in one run.
#
#   tests/gpu/bench_on_gpu.sh /tmp/gpu_bundle [--configs gpt2-124m,gpt-1.3b] [more flags]
set -euo pipefail
BUNDLE=${1:-/tmp/gpu_bundle}
shift || true
source "$(dirname "$0")/bundle_env.sh" "$BUNDLE"
exec python3 "$(dirname "$0")/../bench/gpu_vs_pytorch.py" --engine "$BUNDLE/bin/train" "$@"
