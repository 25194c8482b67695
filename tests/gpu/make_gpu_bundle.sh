#!/usr/bin/env bash
# Packs binaries for the GPU test machine (which has no Bazel and no Debian packages):
# each binary plus every shared library it needs that is not part of glibc, into
# build/gpu_bundle.tar.xz. CUDA runtime is linked statically; cuBLAS/NCCL come from the
# GPU machine's own CUDA (PyTorch's wheels), so they are left out.
#
#   tests/gpu/make_gpu_bundle.sh [extra bazel targets...]
#   # on the GPU machine:
#   tar -xJf build/gpu_bundle.tar.xz -C /tmp && tests/gpu/run_on_gpu.sh /tmp/gpu_bundle
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGETS=(//kernels:cuda_device_query_test //worker/parallel:nccl_communicator_test
         //kernels/cuda:gelu_test //kernels/cuda:layernorm_test //kernels/cuda:adamw_test
         //kernels/cuda:grad_scale_test //kernels/cuda:cross_entropy_test //kernels/cuda:matmul_test
         //kernels/cuda:attention_test //kernels/cuda:attention_decode_test //kernels/cuda:dropout_test //kernels/cuda:embedding_test
         //kernels/cuda:elementwise_test //kernels/cuda:overwrite_mode_test
         //kernels/cuda:rms_norm_test //kernels/cuda:rotary_test //kernels/cuda:swiglu_test
         //kernels/cuda:bidirectional_attention_test //kernels/cuda:gelu_exact_test //kernels/cuda:bert_heads_test
         //worker/engine/cuda:cuda_engine_test //worker/engine/cuda:cuda_training_engine_test
         //worker/engine/cuda:cuda_split_backward_test //worker/engine/cuda:cuda_bert_model_test
         //worker/engine/cuda:cuda_bert_parallel_test
         //worker/engine/cuda:overlapped_all_reduce_test //tests/parity:cuda_parity_test
         //worker/engine/cuda:cuda_device_probe_test
         //tests:gpu_parallel_training_test //worker:launch
         //kernels/cuda:attention_bench //kernels/cuda:layernorm_bench
         //worker //worker:train "$@")
bazel build "${TARGETS[@]}" >/dev/null
BIN=$(bazel info bazel-bin 2>/dev/null)
OUT=build/gpu_bundle
rm -rf "$OUT" && mkdir -p "$OUT/bin" "$OUT/lib/cxx" "$OUT/data"

for target in "${TARGETS[@]}"; do
  path=${target#//}
  [[ "$path" == *:* ]] || path="$path:${path##*/}"
  binary="$BIN/${path/://}"
  cp "$binary" "$OUT/bin/"
  # Libraries resolved by the loader here, minus glibc's own and CUDA's big libraries.
  ldd "$binary" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*) ;;
      libcublas*|libnccl*|libcudart*|libcudnn*|libnvrtc*) ;;
      # Debian 12's C++ runtime needs glibc 2.36: run_on_gpu.sh uses it only where the
      # machine's glibc is that new, and the machine's own C++ runtime otherwise.
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$OUT/lib/cxx/" ;;
      *) cp -L "$lib" "$OUT/lib/" ;;
    esac
  done
done
cp tests/data/shakespeare.txt tests/data/eval_text.txt tests/parity/gpu_parity_reference.safetensors "$OUT/data/"
tar -cJf build/gpu_bundle.tar.xz -C build gpu_bundle
du -h build/gpu_bundle.tar.xz
