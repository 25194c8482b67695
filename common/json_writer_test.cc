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

TEST(JsonStringTest, MinimalEscapingEscapesOnlyWhatJsonRequires) {
  const JsonEscaping minimal = JsonEscaping::kMinimal;
  EXPECT_EQ(JsonString("a\"b\\c", minimal), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString(std::string("\n\r\t\0\x1f", 5), minimal),
            "\"\\u000a\\u000d\\u0009\\u0000\\u001f\"");
  EXPECT_EQ(JsonString("</x>\x7f caf\xc3\xa9", minimal), "\"</x>\x7f caf\xc3\xa9\"");
  EXPECT_EQ(JsonString("a\x80z", minimal), "\"a\\ufffdz\"");
  const std::string text = "q\"b\\</\n\x01\xc3\xa9";
  EXPECT_EQ(nlohmann::json::parse(JsonString(text, minimal)).get<std::string>(), text);
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

TEST(JsonNumberTest, ShortestFloatTakesTheFewestDigitsThatReadBackAsTheFloat) {
  const JsonNumberFormat shortest = JsonNumberFormat::ShortestFloat();
  EXPECT_EQ(JsonNumber(0.1f, shortest), "0.1");  // not 0.100000001
  EXPECT_EQ(JsonNumber(0.1, shortest), "0.1");   // a double is rounded to float first
  EXPECT_EQ(JsonNumber(1e-5f, shortest), "1e-05");
  EXPECT_EQ(JsonNumber(0.0f, shortest), "0");
  EXPECT_EQ(JsonNumber(0.12345679f, shortest), "0.12345679");
  EXPECT_EQ(JsonNumber(0.104274996f, shortest), "0.104274996");  // needs all 9
  EXPECT_EQ(JsonNumber(std::nan(""), shortest), "null");
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

TEST(JsonObjectTest, OneFieldPerLineIndentsFieldsAndKeepsNestedValuesInline) {
  const std::string json =
      JsonObject(kTen, JsonLayout::kOneFieldPerLine)
          .Raw("list", JsonArray(std::vector<int>{1, 2}, [](int i) { return absl::StrCat(i); }))
          .String("name", "gpt2")
          .Null("none")
          .Number("eps", 1e-5)
          .Close();
  EXPECT_EQ(json,
            "{\n"
            "  \"list\": [1,2],\n"
            "  \"name\": \"gpt2\",\n"
            "  \"none\": null,\n"
            "  \"eps\": 1e-05\n"
            "}");
  EXPECT_TRUE(nlohmann::json::accept(json));
  EXPECT_EQ(JsonObject(kTen, JsonLayout::kOneFieldPerLine).Close(), "{}");
}

TEST(JsonObjectTest, KeysAndStringsTakeTheObjectsEscaping) {
  EXPECT_EQ(
      JsonObject(kTen, JsonLayout::kCompact, JsonEscaping::kMinimal).String("a\n<", "b\n<").Close(),
      "{\"a\\u000a<\":\"b\\u000a<\"}");
  EXPECT_EQ(JsonObject(kTen).String("a\n<", "b\n<").Close(), "{\"a\\n\\u003c\":\"b\\n\\u003c\"}");
}

TEST(JsonObjectTest, EmptyObjectsAndArraysAreValid) {
  EXPECT_EQ(JsonObject(kTen).Close(), "{}");
  EXPECT_EQ(JsonArray(std::vector<int>{}, [](int i) { return absl::StrCat(i); }), "[]");
  EXPECT_EQ(JsonObject(kTen).Int("a", int64_t{1} << 62).Close(), "{\"a\":4611686018427387904}");
  // Integers never pass through a double: 2^53 + 1 and the largest uint64 stay exact.
  EXPECT_EQ(JsonObject(kTen).Int("a", (int64_t{1} << 53) + 1).Close(), "{\"a\":9007199254740993}");
  EXPECT_EQ(
      JsonArray(std::vector<uint64_t>{0, UINT64_MAX}, [](uint64_t v) { return absl::StrCat(v); }),
      "[0,18446744073709551615]");
}

}  // namespace
}  // namespace mtrain
