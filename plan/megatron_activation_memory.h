// The activation memory of one transformer layer as Megatron-LM keeps it, from Korthikanti
// et al., "Reducing Activation Recomputation in Large Transformer Models" (2022), section 4:
// per layer and microbatch, with s = sequence, b = micro batch, h = hidden, a = heads,
// t = tensor-parallel ranks, in 16-bit with 1-byte dropout masks,
//   no parallelism               s b h (34 + 5 a s / h)
//   tensor parallel              s b h (10 + 24 / t + 5 a s / (h t))
//   + sequence parallel          s b h (34 / t + 5 a s / (h t))
//   selective recompute          drops the 5 a s / (h t) term (the attention core's
//                                softmax output, its dropout mask and dropout output)
//   full recompute               s b h 2 (the layer input; / t with sequence parallelism)
// The 34 is 16 half-precision elements of s b h (LayerNorm inputs 2; QKV and MLP inputs 2;
// Q, K, V 3; projection input 1; GeLU input 4 and output 4) and two dropout masks; the 5 is
// the scores' softmax and dropout outputs (2 elements) and mask. Of the 16, the 4 LayerNorm,
// QKV and MLP inputs and the two masks are replicated across the tensor group unless the
// sequence is split. `element_bytes` 4 gives the fp32 equivalent (66 and 9 in place of 34
// and 5).
//
//   const double bytes = MegatronLayerActivationBytes(shape, {.recompute = kSelective});
#ifndef MTRAIN_PLAN_MEGATRON_ACTIVATION_MEMORY_H_
#define MTRAIN_PLAN_MEGATRON_ACTIVATION_MEMORY_H_

namespace mtrain {

enum class ActivationRecompute {
  kNone,       // every activation kept
  kSelective,  // the attention core recomputed (Megatron's --recompute-granularity selective)
  kFull,       // only each layer's input kept
};

struct MegatronLayerShape {
  double seq = 0, micro_batch = 0, hidden = 0, heads = 0, tensor = 1;
};

struct MegatronActivationOptions {
  ActivationRecompute recompute = ActivationRecompute::kNone;
  bool sequence_parallel = false;
  bool dropout = true;    // masks stored (1 byte an element)
  int element_bytes = 2;  // 2 for fp16/bf16 activations, 4 for fp32
};

// Bytes one tensor-parallel rank keeps for one layer and one microbatch.
double MegatronLayerActivationBytes(const MegatronLayerShape& shape,
                                    const MegatronActivationOptions& options);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_MEGATRON_ACTIVATION_MEMORY_H_
