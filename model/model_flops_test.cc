#include "model/model_flops.h"

#include "gtest/gtest.h"
#include "spec/resolved_spec_for_test.h"

namespace mtrain {
namespace {

TEST(TransformerConfigTest, Gpt2FromTheSpec) {
  const TransformerConfig c = TransformerConfigOf(ResolvedSpecForTest(
      R"({"model": {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "seq_length": 32,
                    "vocab_size": 300}, "parallel": {"tensor": 2}})"));
  EXPECT_EQ(c.family, ArchitectureFamily::kGpt2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.ffn_hidden, 256);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.padded_vocab, 512);  // a multiple of 128 x 2
  EXPECT_TRUE(c.tied_output);
  EXPECT_FALSE(c.gated_mlp);
}

// The per-matrix count equals Megatron's closed form for GPT-2:
// B = 4, s = 32, l = 2, h = 64, V = 256: 72 B s l h^2 (1 + 32/384 + 256/1536) = 94,371,840;
// full recomputation adds 24 B s l h^2 (1 + s/6h) = 27,262,976.
TEST(ModelFlopsTest, Gpt2IsMegatronsFormula) {
  const TransformerConfig c = TransformerConfigOf(ResolvedSpecForTest(
      R"({"model": {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "seq_length": 32,
                    "vocab_size": 256}})"));
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(c, 4), 94371840.0);
  EXPECT_DOUBLE_EQ(RecomputeFlopsPerStep(c, 4, 1.0, false), 27262976.0);
  // Selective: the attention core's two products, 4 B s^2 h a layer.
  EXPECT_DOUBLE_EQ(RecomputeFlopsPerStep(c, 4, 0.0, true), 4.0 * 4 * 32 * 32 * 64 * 2);
  EXPECT_DOUBLE_EQ(RecomputeFlopsPerStep(c, 4, 0.0, false), 0.0);
}

// What a family changes is priced from its fields: fewer key-value heads shrink the K and
// V projections, a gated MLP has three matrices, the output layer counts the padded
// vocabulary.
TEST(ModelFlopsTest, FieldsAFamilyChangesArePriced) {
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden = 64;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 16;
  c.ffn_hidden = 256;
  c.seq_length = 8;
  c.padded_vocab = 128;
  const double mha = ModelFlopsPerStep(c, 1);
  c.num_kv_heads = 2;  // K and V projections half as wide: 2 x 2 h (32) fewer a token
  EXPECT_DOUBLE_EQ(mha - ModelFlopsPerStep(c, 1), 3.0 * 8 * 2 * 64 * 64);
  c.num_kv_heads = 4;
  c.gated_mlp = true;  // one more h x f matrix
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(c, 1) - mha, 3.0 * 8 * 2 * 64 * 256);
  c.gated_mlp = false;
  c.padded_vocab = 256;
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(c, 1) - mha, 3.0 * 8 * 2 * 64 * 128);
  c.padded_vocab = 128;
  c.family = ArchitectureFamily::kBert;  // the masked-LM head's h x h transform
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(c, 1) - mha, 3.0 * 8 * 2 * 64 * 64);
}

}  // namespace
}  // namespace mtrain
