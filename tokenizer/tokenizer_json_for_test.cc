#include "tokenizer/tokenizer_json_for_test.h"

#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

bool Printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

std::string ByteSymbolForTest(int b) {
  int next = 256;
  for (int x = 0; x < b; ++x) next += Printable(x) ? 0 : 1;
  const int cp = Printable(b) ? b : next;
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string TokenizerJsonForTest(const std::vector<std::pair<std::string, std::string>>& merges,
                                 const std::vector<std::pair<std::string, int32_t>>& added) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&vocab, b > 0 ? ", " : "", JsonString(ByteSymbolForTest(b)), ": ", b);
  }
  std::string merge_list;
  int next = 256;
  for (const auto& [left, right] : merges) {
    absl::StrAppend(&vocab, ", ", JsonString(left + right), ": ", next++);
    absl::StrAppend(&merge_list, merge_list.empty() ? "" : ", ", JsonString(left + " " + right));
  }
  std::string added_list;
  for (const auto& [content, id] : added) {
    absl::StrAppend(&added_list, added_list.empty() ? "" : ", ", R"({"id": )", id,
                    R"(, "content": )", JsonString(content), R"(, "special": true})");
  }
  return absl::StrCat(R"({"version": "1.0", "added_tokens": [)", added_list,
                      R"(], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel",
      "add_prefix_space": false, "use_regex": true}, "model": {"type": "BPE", "vocab": {)",
                      vocab, "}, \"merges\": [", merge_list, "]}}");
}

std::string SmallEnglishTokenizerJsonForTest() {
  const std::string space = ByteSymbolForTest(' ');
  return TokenizerJsonForTest({{"t", "h"},
                               {"h", "e"},
                               {"i", "n"},
                               {"e", "r"},
                               {"a", "n"},
                               {space, "t"},
                               {"o", "u"},
                               {"th", "e"},
                               {space, "a"},
                               {"r", "e"},
                               {space, "the"},
                               {"o", "r"}},
                              {{"<|endoftext|>", 268}});
}

}  // namespace mtrain
