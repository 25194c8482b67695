#include "kernels/cpu_bf16_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mtrain::cpu {
namespace {

std::atomic<int> gemm_precision{static_cast<int>(GemmPrecision::kFp32)};

// oneDNN's C API (its C++ API reports errors by exceptions, which this project does not
// use): a failure here means a broken installation, not bad input.
void Check(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return;
  std::fprintf(stderr, "fatal: oneDNN %s failed (status %d)\n", what, static_cast<int>(status));
  std::abort();
}

dnnl_engine_t Engine() {
  // Never destroyed: thread-local primitives below may outlive any static destructor.
  static const dnnl_engine_t engine = [] {
    dnnl_engine_t created = nullptr;
    Check(dnnl_engine_create(&created, dnnl_cpu, 0), "engine_create");
    return created;
  }();
  return engine;
}

// Row-major [rows, cols] with `ld` between rows, or its transpose ([cols, rows] stored,
// viewed as [rows, cols]) when `transposed`.
dnnl_memory_desc_t Desc(int rows, int cols, dnnl_data_type_t type, bool transposed, int ld) {
  dnnl_memory_desc_t desc;
  const dnnl_dims_t dims = {rows, cols};
  const dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
  Check(dnnl_memory_desc_init_by_strides(&desc, 2, dims, type, strides), "memory_desc_init");
  return desc;
}

// One matmul primitive and its memory objects, for one shape; data handles set per call.
struct Bf16Matmul {
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  dnnl_stream_t stream = nullptr;

  Bf16Matmul(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, float beta,
             int ldc) {
    // The bf16 copies are compact: A as [m, k] (or [k, m] stored), B as [k, n] (or [n, k]).
    const dnnl_memory_desc_t a_desc = Desc(m, k, dnnl_bf16, transpose_a, transpose_a ? m : k);
    const dnnl_memory_desc_t b_desc = Desc(k, n, dnnl_bf16, transpose_b, transpose_b ? k : n);
    const dnnl_memory_desc_t c_desc = Desc(m, n, dnnl_f32, false, ldc);
    dnnl_matmul_desc_t desc;
    Check(dnnl_matmul_desc_init(&desc, &a_desc, &b_desc, nullptr, &c_desc), "matmul_desc_init");
    dnnl_primitive_attr_t attr = nullptr;
    Check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    if (alpha != 1.0f) Check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "scales");
    dnnl_post_ops_t post_ops = nullptr;
    if (beta != 0.0f) {
      Check(dnnl_post_ops_create(&post_ops), "post_ops_create");
      Check(dnnl_post_ops_append_sum(post_ops, beta), "post_ops_append_sum");
      Check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "set_post_ops");
    }
    Check(dnnl_primitive_desc_create(&pd, &desc, attr, Engine(), nullptr), "matmul pd");
    if (post_ops != nullptr) dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    Check(dnnl_primitive_create(&primitive, pd), "matmul primitive");
    Check(dnnl_memory_create(&a, &a_desc, Engine(), DNNL_MEMORY_NONE), "memory a");
    Check(dnnl_memory_create(&b, &b_desc, Engine(), DNNL_MEMORY_NONE), "memory b");
    Check(dnnl_memory_create(&c, &c_desc, Engine(), DNNL_MEMORY_NONE), "memory c");
    Check(dnnl_stream_create(&stream, Engine(), dnnl_stream_default_flags), "stream");
  }
  ~Bf16Matmul() {
    dnnl_stream_destroy(stream);
    dnnl_memory_destroy(c);
    dnnl_memory_destroy(b);
    dnnl_memory_destroy(a);
    dnnl_primitive_destroy(primitive);
    dnnl_primitive_desc_destroy(pd);
  }
  Bf16Matmul(const Bf16Matmul&) = delete;
  Bf16Matmul& operator=(const Bf16Matmul&) = delete;

  void Run(const uint16_t* a_bf16, const uint16_t* b_bf16, float* c_f32) {
    Check(dnnl_memory_set_data_handle(a, const_cast<uint16_t*>(a_bf16)), "set a");
    Check(dnnl_memory_set_data_handle(b, const_cast<uint16_t*>(b_bf16)), "set b");
    Check(dnnl_memory_set_data_handle(c, c_f32), "set c");
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    Check(dnnl_primitive_execute(primitive, stream, 3, args), "matmul execute");
    Check(dnnl_stream_wait(stream), "stream wait");
  }
};

using MatmulKey = std::tuple<bool, bool, int, int, int, float, float, int>;

// A layer's GEMMs repeat every step with the same shapes: each thread keeps the primitives
// it built (a few dozen) and its conversion buffers.
struct ThreadState {
  std::map<MatmulKey, std::unique_ptr<Bf16Matmul>> matmuls;
  std::vector<uint16_t> a, b;
};
thread_local ThreadState thread_state;

// `rows` rows of `cols` elements, `ld` apart, into a compact bf16 [rows, cols].
void ConvertRows(const float* from, int rows, int cols, int ld, uint16_t* to) {
  for (int row = 0; row < rows; ++row) {
    const float* from_row = from + static_cast<size_t>(row) * ld;
    uint16_t* to_row = to + static_cast<size_t>(row) * cols;
    for (int col = 0; col < cols; ++col) to_row[col] = RoundToBf16(from_row[col]);
  }
}

}  // namespace

uint16_t RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry
  // into the exponent is the correct rounding up (to infinity past the largest finite).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &widened, sizeof(x));
  return x;
}

absl::Status CpuBf16Support(const CpuFeatures& cpu) {
  if (BestVectorIsa(cpu) >= VectorIsa::kAvx512Bf16) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "precision: PRECISION_BF16 on the CPU engine needs a processor with AVX512_BF16 or "
      "AMX-BF16; this one (",
      cpu.model_name.empty() ? cpu.vendor : cpu.model_name, ") has ",
      VectorIsaName(BestVectorIsa(cpu)), " at best (train in PRECISION_FP32, or on a GPU)"));
}

void SetGemmPrecision(GemmPrecision precision) {
  gemm_precision.store(static_cast<int>(precision), std::memory_order_relaxed);
}

GemmPrecision CurrentGemmPrecision() {
  return static_cast<GemmPrecision>(gemm_precision.load(std::memory_order_relaxed));
}

void Bf16Gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
              int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // No products: C = beta C, as BLAS defines it.
    for (int row = 0; row < m; ++row) {
      float* c_row = c + static_cast<size_t>(row) * ldc;
      for (int col = 0; col < n; ++col) c_row[col] = beta == 0.0f ? 0.0f : beta * c_row[col];
    }
    return;
  }
  ThreadState& state = thread_state;
  state.a.resize(static_cast<size_t>(m) * k);
  state.b.resize(static_cast<size_t>(k) * n);
  // Stored layouts kept (no transposing copy): A is [m, k] or, transposed, [k, m]; B is
  // [k, n] or [n, k].
  if (transpose_a) {
    ConvertRows(a, k, m, lda, state.a.data());
  } else {
    ConvertRows(a, m, k, lda, state.a.data());
  }
  if (transpose_b) {
    ConvertRows(b, n, k, ldb, state.b.data());
  } else {
    ConvertRows(b, k, n, ldb, state.b.data());
  }
  std::unique_ptr<Bf16Matmul>& matmul =
      state.matmuls[MatmulKey{transpose_a, transpose_b, m, n, k, alpha, beta, ldc}];
  if (matmul == nullptr) {
    matmul = std::make_unique<Bf16Matmul>(transpose_a, transpose_b, m, n, k, alpha, beta, ldc);
  }
  matmul->Run(state.a.data(), state.b.data(), c);
}

std::string Bf16GemmImplementation(int m, int n, int k) {
  Bf16Matmul matmul(false, true, m, n, k, 1.0f, 0.0f, n);
  const char* name = nullptr;
  if (dnnl_primitive_desc_query(matmul.pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success ||
      name == nullptr) {
    return "unknown";
  }
  return name;
}

}  // namespace mtrain::cpu
