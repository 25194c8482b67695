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
  EXPECT_EQ(At("{\"name\": \"caf\xc3\xa9\"}"), "ok");
  // Nesting has no limit of its own here (protobuf's parser has one).
  EXPECT_EQ(At(std::string(600, '[') + std::string(600, ']')), "ok");
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
  EXPECT_EQ(At("{\"a\": \"open"), "1:12");   // an unterminated string: the end
  EXPECT_EQ(At(""), "1:1");
}

TEST(JsonSyntaxTest, AWholeTokenInTheWrongPlaceIsReportedWhereItStarts) {
  EXPECT_EQ(At(R"({"a": 1 "b": 2})"), "1:9");      // a string
  EXPECT_EQ(At(R"({"a": "x" -12.5e3})"), "1:11");  // a number
  EXPECT_EQ(At(R"([1 -2])"), "1:4");               // a number after a number
  EXPECT_EQ(At(R"({"a": 1 false})"), "1:9");       // a literal after a number
  EXPECT_EQ(At(R"([null true])"), "1:7");          // a literal after a literal
  EXPECT_EQ(At(R"({"a" 1})"), "1:6");              // a missing colon
  EXPECT_EQ(At(R"({"a": 1]})"), "1:8");            // a mismatched bracket
}

TEST(JsonSyntaxTest, RefusesWhatRfc8259Refuses) {
  EXPECT_EQ(At(R"({"a": NaN})"), "1:7");
  EXPECT_EQ(At(R"({"a": Infinity})"), "1:7");
  EXPECT_EQ(At(R"({"a": -Infinity})"), "1:8");
  EXPECT_EQ(At(R"({"a": 1 /* note */})"), "1:9");
  EXPECT_EQ(At("{\"a\": 1} // note"), "1:10");
  EXPECT_EQ(At("{\"a\": \"tab\there\"}"), "1:11");  // control characters must be escaped
  EXPECT_EQ(At("{\"a\": \"\xff\"}"), "1:8");        // not UTF-8
  EXPECT_EQ(At(R"({"a": "\ud800"})"), "1:14");      // a lone surrogate
  EXPECT_EQ(At("\xEF\xBB\xBF{}"), "1:1");           // a byte order mark
  EXPECT_EQ(At(R"({"a": 1.})"), "1:9");
  EXPECT_EQ(At(R"({"a": .5})"), "1:7");
}

TEST(JsonSyntaxTest, ANumberBeyondADoubleIsNotASyntaxError) {
  EXPECT_EQ(At(R"({"a": 1e999})"), "ok");
  EXPECT_EQ(At(R"({"a": 1e-999})"), "ok");
}

}  // namespace
}  // namespace mtrain
