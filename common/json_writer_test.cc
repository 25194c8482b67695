#include "common/json_writer.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mtrain {
namespace {

constexpr JsonNumberFormat kTen = JsonNumberFormat::Significant(10);

TEST(JsonStringTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("line\nnext\ttab\r"), "\"line\\nnext\\ttab\\r\"");
  EXPECT_EQ(JsonString(std::string("nul\0bell\x07", 9)), "\"nul\\u0000bell\\u0007\"");
  // A message can never close a <script> block.
  EXPECT_EQ(JsonString("</script>"), "\"\\u003c/script>\"");
}

TEST(JsonStringTest, KeepsUtf8AndReplacesWhatIsNot) {
  EXPECT_EQ(JsonString("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate.
  EXPECT_EQ(JsonString("a\x80z"), "\"a\\ufffdz\"");
  EXPECT_EQ(JsonString("a\xe2\x82"), "\"a\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonString("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonString("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
}

TEST(JsonStringTest, AStrictParserReadsBackWhatWasWritten) {
  const std::string text = std::string("q\"b\\s/c\x01\x1f<\n\xc3\xa9", 14);
  EXPECT_EQ(nlohmann::json::parse(JsonString(text)).get<std::string>(), text);
  EXPECT_EQ(nlohmann::json::parse(JsonString("x\xff\xfe y")).get<std::string>(),
            "x\xef\xbf\xbd\xef\xbf\xbd y");
}

TEST(JsonNumberTest, WritesFiniteNumbersAndNullOtherwise) {
  EXPECT_EQ(JsonNumber(2.5, kTen), "2.5");
  EXPECT_EQ(JsonNumber(5.545177444, kTen), "5.545177444");
  EXPECT_EQ(JsonNumber(-0.0, kTen), "-0");
  EXPECT_EQ(JsonNumber(1e300, kTen), "1e+300");
  for (const JsonNumberFormat format : {kTen, JsonNumberFormat::Fixed(6)}) {
    EXPECT_EQ(JsonNumber(std::nan(""), format), "null");
    EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity(), format), "null");
    EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity(), format), "null");
  }
}

TEST(JsonNumberTest, KeepsTheCallersPrecision) {
  const double value = 0.1234567890123;
  EXPECT_EQ(JsonNumber(value, JsonNumberFormat::Significant(9)), "0.123456789");
  EXPECT_EQ(JsonNumber(value, JsonNumberFormat::Significant(10)), "0.123456789");
  EXPECT_EQ(JsonNumber(3.14159265358979, JsonNumberFormat::Significant(9)), "3.14159265");
  EXPECT_EQ(JsonNumber(3.14159265358979, JsonNumberFormat::Significant(10)), "3.141592654");
  EXPECT_EQ(JsonNumber(6e-05, JsonNumberFormat::Significant(9)), "6e-05");
  EXPECT_EQ(JsonNumber(0.25, JsonNumberFormat::Fixed(6)), "0.250000");
  EXPECT_EQ(JsonNumber(1e-9, JsonNumberFormat::Fixed(6)), "0.000000");
}

TEST(JsonObjectTest, WritesFieldsInOrderWithoutSpaces) {
  const std::string json =
      JsonObject(kTen)
          .Int("step", -3)
          .Number("loss", 5.25)
          .Number("nan", std::nan(""))
          .String("name", "a\"b")
          .Bool("alive", true)
          .Bool("dead", false)
          .Null("none")
          .Raw("nested", JsonObject(kTen).Int("x", 1).Close())
          .Raw("list", JsonArray(std::vector<int>{1, 2}, [](int i) { return absl::StrCat(i); }))
          .Close();
  EXPECT_EQ(json,
            "{\"step\":-3,\"loss\":5.25,\"nan\":null,\"name\":\"a\\\"b\",\"alive\":true,"
            "\"dead\":false,\"none\":null,\"nested\":{\"x\":1},\"list\":[1,2]}");
  EXPECT_TRUE(nlohmann::json::accept(json));
}

TEST(JsonObjectTest, EmptyObjectsAndArraysAreValid) {
  EXPECT_EQ(JsonObject(kTen).Close(), "{}");
  EXPECT_EQ(JsonArray(std::vector<int>{}, [](int i) { return absl::StrCat(i); }), "[]");
  EXPECT_EQ(JsonObject(kTen).Int("a", int64_t{1} << 62).Close(), "{\"a\":4611686018427387904}");
}

}  // namespace
}  // namespace mtrain
