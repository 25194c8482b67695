#include "spec/json_syntax.h"

#include <string>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

// "line:column" of the first error, or "ok".
std::string At(const std::string& text) {
  const std::optional<TextPosition> at = FindJsonSyntaxError(text);
  return at ? std::to_string(at->line) + ":" + std::to_string(at->column) : "ok";
}

TEST(JsonSyntaxTest, ValidTextsHaveNoError) {
  EXPECT_EQ(At(R"({"a": 1, "b": [true, false, null, -0.5e+3, "x\"\\\u00e9"], "c": {}})"), "ok");
  EXPECT_EQ(At(" [ ] \n"), "ok");
  EXPECT_EQ(At("3"), "ok");
}

TEST(JsonSyntaxTest, PointsAtTheFirstBadCharacter) {
  // A missing comma between two members, on the next line.
  EXPECT_EQ(At("{\n  \"model\": {\"num_layers\": 2}\n  \"parallel\": {}\n}\n"), "3:3");
  EXPECT_EQ(At(R"({"a": 1,})"), "1:9");      // trailing comma: the '}' cannot start a key
  EXPECT_EQ(At(R"({'a': 1})"), "1:2");       // single quotes
  EXPECT_EQ(At(R"({"a": 01})"), "1:8");      // leading zero
  EXPECT_EQ(At(R"({"a": tru})"), "1:10");    // a misspelt literal
  EXPECT_EQ(At(R"({"a": "x\q"})"), "1:10");  // a bad escape
  EXPECT_EQ(At(R"({"a": 1} x)"), "1:10");    // text after the document
  EXPECT_EQ(At("{\"a\": [1, 2"), "1:12");    // stops early: the end
  EXPECT_EQ(At(""), "1:1");
  EXPECT_EQ(At(std::string(600, '[') + std::string(600, ']')), "1:513");  // too deep
}

}  // namespace
}  // namespace mtrain
