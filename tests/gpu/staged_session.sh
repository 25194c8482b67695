#!/usr/bin/env bash
# A short device call in stages, for when little device time is left: the changed kernels'
# checks first, then the GPT-2 124M benchmark beside PyTorch (with the fusion variants), the
# whole-model checks and layouts, the GPT 1.3B benchmark, the training runs; each stage skipped once DEADLINE seconds (default 200) are
# near. Every stage writes its output straight into $OUT (stage*.txt) and the checks' full
# logs are re-packed into $OUT/logs.tar.gz after each stage, so a call cut off by the
# device tool's limit still brings back what ran.
#
#   device run, carry build/gpu_bundle.tar.xz:  DEADLINE=200 bash tests/gpu/staged_session.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_out}
DEADLINE=${DEADLINE:-200}
mkdir -p "$OUT" /tmp/gpu_logs
tar -xJf build/gpu_bundle.tar.xz -C /tmp
BUNDLE=/tmp/gpu_bundle
source tests/gpu/bundle_env.sh "$BUNDLE" >"$OUT/stage0_env.txt" 2>&1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$BUNDLE/bin/train" | grep -E "not found|cudnn|nvrtc|cublas|nccl"
} >>"$OUT/stage0_env.txt" 2>&1

pack() { tar -czf "$OUT/logs.tar.gz" -C /tmp gpu_logs 2>/dev/null; }
# stage NAME SECONDS_NEEDED COMMAND...: runs COMMAND if SECONDS_NEEDED fit before DEADLINE,
# bounded by the time left.
stage() {
  local name=$1 need=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  if ((left < need)); then
    echo "skipped: $left s left, needs $need" >"$OUT/$name.txt"
    return
  fi
  PYTHONUNBUFFERED=1 LOG_DIR=/tmp/gpu_logs timeout "$left" "$@" >"$OUT/$name.txt" 2>&1
  echo "exit $? after $SECONDS s" >>"$OUT/$name.txt"
  pack
}
# The Llama-style layers' kernels (rms_norm, rotary, swiglu: issue 33) have never run on a
# GPU; with cuda_engine_test's Llama parity tests (stage 3) they decide whether the CUDA
# engine's refusal of MODEL_FAMILY_LLAMA (worker/engine/engine_choice.cc) can be lifted.
# BERT's kernels (bidirectional attention in the scalar attention kernels, which the causal
# attention test checks again; exact GeLU; the heads' pieces: issue 35) have never run
# either.
stage stage1_kernels 20 env CHECK_TIMEOUT=30 \
  ONLY="cuda_matmul_test|cuda_layernorm_test|cuda_adamw_test|cuda_gelu_test|cuda_rms_norm_test|cuda_rotary_test|cuda_swiglu_test|cuda_attention_test|cuda_bidirectional_attention_test|cuda_gelu_exact_test|cuda_bert_heads_test" \
  bash tests/gpu/run_on_gpu.sh "$BUNDLE"
# The 124M benchmark, with the engine once more per MTRAIN_GEMM_FUSIONS variant (none, and
# each fusion left out) to measure what each epilogue fusion gives.
stage stage2_bench 60 python3 tests/bench/gpu_vs_pytorch.py --configs gpt2-124m --steps 10 \
  --warmup 3 --engine "$BUNDLE/bin/train" --no-hand-attention \
  --fusion-variants "none|dgelu+residual|bias_grad+residual|bias_grad+dgelu"
# cuda_split_backward_test (issue 36) and cuda_bert_model_test (issue 35) decide whether the
# CUDA engine's refusals of SCHEDULE_ZB_H1 / SCHEDULE_ZB_V and of MODEL_FAMILY_BERT
# (engine_choice.cc, and spec/job_spec_validation.cc for BERT) can be lifted.
stage stage3_model 30 env CHECK_TIMEOUT=60 \
  ONLY="cuda_engine_test|cuda_split_backward_test|cuda_bert_model_test|cuda_bert_parallel_test|cuda_parity_test|cuda_training_engine_test|layernorm_bench|gpu_parallel_training_test" \
  bash tests/gpu/run_on_gpu.sh "$BUNDLE"
stage stage4_bench_1_3b 120 python3 tests/bench/gpu_vs_pytorch.py --configs gpt-1.3b --steps 10 \
  --warmup 3 --engine "$BUNDLE/bin/train" --no-hand-attention
stage stage5_layouts 30 env CHECK_TIMEOUT=90 ONLY="cuda_training_check" \
  bash tests/gpu/run_on_gpu.sh "$BUNDLE"
