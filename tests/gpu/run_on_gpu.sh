#!/usr/bin/env bash
# Runs the GPU checks from an unpacked bundle (see make_gpu_bundle.sh) and prints a short
# table last. CUDA libraries come from the machine: /usr/local/cuda if present, else the
# NVIDIA wheels PyTorch installed. Each check's full output goes to $LOG_DIR/<check>.log
# (default /tmp/gpu_logs; on the device tool, LOG_DIR=$OUT brings them back even when the
# command runs out of time), and the table so far to $LOG_DIR/table.txt after each check.
# CHECK_TIMEOUT (seconds, default 300) bounds each check; ONLY (a regex of check names)
# picks some.
set -uo pipefail
BUNDLE=${1:-/tmp/gpu_bundle}
source "$(dirname "$0")/bundle_env.sh" "$BUNDLE"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

LOG_DIR=${LOG_DIR:-/tmp/gpu_logs}
export PYTHONUNBUFFERED=1  # a check cut off by CHECK_TIMEOUT still leaves its lines
mkdir -p "$LOG_DIR"
results=()
table() {
  printf '%-28s %8s  %s\n' CHECK SECONDS RESULT
  for row in "${results[@]}"; do
    IFS='|' read -r name seconds result <<<"$row"
    printf '%-28s %8s  %s\n' "$name" "$seconds" "$result"
  done
}
check() {
  local name=$1
  shift
  # ONLY="a|b|c": run just these checks (a short device call), in this file's order.
  if [[ -n "${ONLY:-}" && ! "$name" =~ ^(${ONLY})$ ]]; then return; fi
  local log="$LOG_DIR/$name.log" result=FAIL start=$SECONDS
  # A hung check (a deadlocked collective, say) must not eat the device time of the rest.
  timeout "${CHECK_TIMEOUT:-300}" "$@" >"$log" 2>&1
  local status=$?
  if ((status == 0)); then result=PASS; elif ((status == 124)); then result="FAIL (timed out)"; fi
  # A gtest binary that skipped tests (no usable GPU) says so: a skip is not a pass.
  local skipped
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?,.*/\1/p' "$log" | tail -1)
  [[ -n "$skipped" && "$skipped" != 0 ]] && result="$result ($skipped skipped)"
  results+=("$name|$((SECONDS - start))|$result")
  tail -12 "$log"
  table >"$LOG_DIR/table.txt"
}
check cuda_device_query_test "$BUNDLE/bin/cuda_device_query_test"
check nccl_communicator_test "$BUNDLE/bin/nccl_communicator_test"
# CUDA kernels against the CPU implementations (each prints its measured errors).
# rms_norm, rotary and swiglu: the Llama-style layers' kernels (issue 33);
# bidirectional_attention, gelu_exact and bert_heads: BERT's (issue 35).
for kernel in gelu layernorm adamw grad_scale cross_entropy matmul attention attention_decode dropout embedding \
    elementwise overwrite_mode rms_norm rotary swiglu bidirectional_attention gelu_exact bert_heads; do
  check "cuda_${kernel}_test" "$BUNDLE/bin/${kernel}_test"
done
# The whole model on the GPU against the CPU model (fp32, dropout, recompute, bf16) and
# AdamW steps following the CPU engine.
check cuda_engine_test "$BUNDLE/bin/cuda_engine_test"
check cuda_split_backward_test "$BUNDLE/bin/cuda_split_backward_test"
check cuda_bert_model_test "$BUNDLE/bin/cuda_bert_model_test"
check cuda_bert_parallel_test "$BUNDLE/bin/cuda_bert_parallel_test"
# The CUDA training engine's steps against the CPU engine (including an FFN of 3 h with
# norm epsilon 1e-3).
check cuda_training_engine_test "$BUNDLE/bin/cuda_training_engine_test"
check overlapped_all_reduce_test "$BUNDLE/bin/overlapped_all_reduce_test"
# The whole model against PyTorch's numbers (fp32 logits, loss, gradients, 5 AdamW steps;
# bf16 within its precision), from tests/parity/gpu_parity_reference.safetensors.
check cuda_parity_test "$BUNDLE/bin/cuda_parity_test"
# (2,1,1), (1,2,1), (2,2,1), (1,1,2)+ZeRO-1, (2,2,2), (1,2,2)+ZeRO-1 and (1,2,2)
# interleaved (two chunks per rank) against (1,1,1), fp32.
check gpu_parallel_training_test env MTRAIN_BIN_DIR="$BUNDLE/bin" "$BUNDLE/bin/gpu_parallel_training_test"
# Whole training runs with `train`: CUDA vs CPU, d=2 on one GPU vs d=1, bf16 vs fp32.
check cuda_training_check python3 "$(dirname "$0")/cuda_training_check.py" --train "$BUNDLE/bin/train"
# Attention speed (ms, TFLOP/s): the hand-written tensor-core kernels and cuDNN's fused
# attention at GPT-2 124M's, GPT 1.3B's and a grouped-query shape.
check attention_bench "$BUNDLE/bin/attention_bench"
# LayerNorm forward and backward (bf16) in GB/s against the card's copy bandwidth.
check layernorm_bench "$BUNDLE/bin/layernorm_bench"
# The planner's GPU measurement (GEMM rates, copy bandwidth, free memory), and the worker
# reporting it on its start line ("measured N TFLOP/s bf16 GEMM ...").
check cuda_device_probe_test "$BUNDLE/bin/cuda_device_probe_test"
check worker_measures_gpu bash -c "timeout 20 $BUNDLE/bin/worker --device=cuda --coordinator=127.0.0.1:1 2>&1 | grep -m1 'TFLOP/s bf16 GEMM'"
# The worker's start line says "device: cuda, N x NAME (sm_XY ...)"; an error also contains
# "device: cuda..." (e.g. "no CUDA device: cudaError..."), hence the comma.
check worker_detects_gpu bash -c "timeout 10 $BUNDLE/bin/worker --device=cuda --coordinator=127.0.0.1:1 2>&1 | grep -m1 'starting: device: cuda, '"

echo
table
