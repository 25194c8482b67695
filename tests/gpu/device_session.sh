#!/usr/bin/env bash
# One device-tool call's worth of GPU work: unpack the bundle carried in build/, run every
# GPU check (run_on_gpu.sh), then the benchmark beside PyTorch (bench_on_gpu.sh), and pack
# the logs into $OUT/gpu_logs.tar.gz (the tool brings back at most 8 files).
#
#   device run, carry build/gpu_bundle.tar.xz:
#     CHECK_TIMEOUT=90 BENCH_ARGS="--configs gpt2-124m --no-compile" bash tests/gpu/device_session.sh
# SKIP_CHECKS=1 skips the checks; PROFILE_CONFIG=gpt2-124m adds a kernel-time profile
# (tests/gpu/profile_kernels.py, bounded by PROFILE_TIMEOUT seconds, default 120).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT" /tmp/gpu_logs
tar -xJf build/gpu_bundle.tar.xz -C /tmp
pack() { tar -czf "$OUT/gpu_logs.tar.gz" -C /tmp gpu_logs; cp /tmp/gpu_logs/table.txt "$OUT/" 2>/dev/null; }
trap pack EXIT
if [[ "${SKIP_CHECKS:-0}" != 1 ]]; then
  LOG_DIR=/tmp/gpu_logs bash tests/gpu/run_on_gpu.sh /tmp/gpu_bundle
fi
if [[ -n "${BENCH_ARGS:-}" ]]; then
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-300}" bash tests/gpu/bench_on_gpu.sh /tmp/gpu_bundle $BENCH_ARGS \
    2>&1 | tee /tmp/gpu_logs/bench.log
fi
if [[ -n "${PROFILE_CONFIG:-}" ]]; then
  source tests/gpu/bundle_env.sh /tmp/gpu_bundle
  # PROFILE_CONFIG may name several configs, comma-separated: one profile each.
  for config in ${PROFILE_CONFIG//,/ }; do
    PYTHONUNBUFFERED=1 timeout "${PROFILE_TIMEOUT:-120}" python3 tests/gpu/profile_kernels.py \
      --train /tmp/gpu_bundle/bin/train --config "$config" --csv "/tmp/gpu_logs/kernels_$config.csv" \
      --top 40 2>&1 | tee "/tmp/gpu_logs/profile_$config.log"
  done
fi
