#include "model/transformer_config.h"

#include "gtest/gtest.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

TEST(TransformerConfigTest, ASpecWithoutArchitectureFieldsIsGpt2) {
  JobSpec spec;
  spec.mutable_model()->set_hidden_size(96);
  spec.mutable_model()->set_num_heads(4);
  spec.mutable_model()->set_vocab_size(300);
  spec.mutable_parallel()->set_tensor(2);
  // Read with and without the defaults applied: the same configuration.
  const TransformerConfig bare = TransformerConfigOf(spec);
  ApplyJobSpecDefaults(&spec);
  const TransformerConfig config = TransformerConfigOf(spec);
  for (const TransformerConfig& c : {bare, config}) {
    EXPECT_EQ(c.family, ArchitectureFamily::kGpt2);
    EXPECT_EQ(c.num_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 24);
    EXPECT_EQ(c.ffn_hidden, 384);
    EXPECT_EQ(c.padded_vocab, 512);  // a multiple of 128 x 2
    EXPECT_EQ(c.normalization, NormKind::kLayerNorm);
    EXPECT_FLOAT_EQ(static_cast<float>(c.norm_epsilon), 1e-5f);
    EXPECT_EQ(c.activation, ActivationKind::kTanhGelu);
    EXPECT_EQ(c.positions, Positions::kLearned);
    EXPECT_TRUE(c.biases);
    EXPECT_TRUE(c.tied_output);
    EXPECT_FALSE(c.gated_mlp);
  }
}

TEST(TransformerConfigTest, ReadsEveryArchitectureField) {
  JobSpec spec;
  ModelSpec& m = *spec.mutable_model();
  m.set_family(MODEL_FAMILY_LLAMA);
  m.set_hidden_size(256);
  m.set_num_heads(8);
  m.set_num_kv_heads(2);
  m.set_rope_theta(500000);
  m.set_norm_epsilon(1e-6f);
  ApplyJobSpecDefaults(&spec);
  const TransformerConfig c = TransformerConfigOf(spec);
  EXPECT_EQ(c.family, ArchitectureFamily::kLlama);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.kv_width(), 64);
  EXPECT_EQ(c.query_width(), 256);
  EXPECT_EQ(c.ffn_hidden, 768);  // 8 x 256 / 3 = 682, up to a multiple of 256
  EXPECT_EQ(c.normalization, NormKind::kRmsNorm);
  EXPECT_FLOAT_EQ(static_cast<float>(c.norm_epsilon), 1e-6f);
  EXPECT_EQ(c.activation, ActivationKind::kSwiGlu);
  EXPECT_TRUE(c.gated_mlp);
  EXPECT_EQ(c.positions, Positions::kRotary);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000);
  EXPECT_FALSE(c.biases);
  EXPECT_FALSE(c.tied_output);
}

}  // namespace
}  // namespace mtrain
