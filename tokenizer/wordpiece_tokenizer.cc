#include "tokenizer/wordpiece_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tokenizer/unicode_text.h"

namespace mtrain {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ToUtf8(std::u32string_view text) {
  std::string out;
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

constexpr const char* kSpecialTokens[] = {"[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"};

}  // namespace

absl::StatusOr<WordPieceTokenizer> WordPieceTokenizer::Build(
    std::vector<std::string> tokens, std::vector<std::string> added, BertNormalizerOptions options,
    std::string unk_token, std::string prefix, int max_word_characters, const std::string& source) {
  WordPieceTokenizer t;
  t.options_ = options;
  t.prefix_ = std::move(prefix);
  t.max_word_characters_ = max_word_characters;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!t.ids_.emplace(tokens[id], static_cast<int32_t>(id)).second) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": token \"", tokens[id],
                                                     "\" appears twice (ids ", t.ids_[tokens[id]],
                                                     " and ", id, ") [rule: each token once]"));
    }
  }
  t.tokens_ = std::move(tokens);
  auto id_of = [&](const std::string& token) -> absl::StatusOr<int32_t> {
    auto it = t.ids_.find(token);
    if (it == t.ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the vocabulary has no ", token, " [rule: BERT's special tokens ",
                       "[UNK] [CLS] [SEP] [MASK] [PAD] are entries]"));
    }
    return it->second;
  };
  absl::StatusOr<int32_t> unk = id_of(unk_token);
  if (!unk.ok()) return unk.status();
  t.unk_id_ = *unk;
  for (const char* special : {"[CLS]", "[SEP]", "[MASK]", "[PAD]"}) {
    absl::StatusOr<int32_t> id = id_of(special);
    if (!id.ok()) return id.status();
    if (std::string(special) == "[CLS]") t.cls_id_ = *id;
    if (std::string(special) == "[SEP]") t.sep_id_ = *id;
    if (std::string(special) == "[MASK]") t.mask_id_ = *id;
    if (std::string(special) == "[PAD]") t.pad_id_ = *id;
  }
  for (std::string& token : added) {
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": an empty added token"));
    }
    if (!t.ids_.contains(token)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": added token \"", token, "\" is not in the vocabulary [rule: an entry]"));
    }
  }
  // Longest first: at one position the longest added token wins, as `tokenizers` matches.
  std::sort(added.begin(), added.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  added.erase(std::unique(added.begin(), added.end()), added.end());
  t.added_ = std::move(added);
  return t;
}

absl::StatusOr<WordPieceTokenizer> WordPieceTokenizer::FromVocabTxt(
    const std::string& path, const BertNormalizerOptions& options) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, "vocab.txt");
  if (!text.ok()) return text.status();
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    tokens.emplace_back(line);
  }
  // A final newline ends the last line rather than starting an empty entry.
  if (!tokens.empty() && tokens.back().empty()) tokens.pop_back();
  std::vector<std::string> added(std::begin(kSpecialTokens), std::end(kSpecialTokens));
  return Build(std::move(tokens), std::move(added), options, "[UNK]", "##", 100, path);
}

absl::StatusOr<WordPieceTokenizer> WordPieceTokenizer::FromHuggingFaceJson(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, "tokenizer.json");
  if (!text.ok()) return text.status();
  return ParseHuggingFaceJson(*text, path);
}

absl::StatusOr<WordPieceTokenizer> WordPieceTokenizer::ParseHuggingFaceJson(
    absl::string_view json, const std::string& name) {
  auto refuse = [&](const std::string& field, const std::string& rule) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", field, ": ", rule));
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not JSON: ", e.what()));
  }
  // nlohmann's accessors throw on a field of another JSON type: input, so an error naming
  // the file, not a crash.
  try {
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
      return refuse("model", "missing [rule: a tokenizer.json with a WordPiece model]");
    }
    const nlohmann::json& model = root["model"];
    if (model.value("type", std::string()) != "WordPiece") {
      return refuse("model.type", "must be \"WordPiece\"");
    }
    if (!model.contains("vocab") || !model["vocab"].is_object()) {
      return refuse("model.vocab", "missing [rule: an object {token: id}]");
    }
    std::vector<std::string> tokens(model["vocab"].size());
    for (const auto& [token, id] : model["vocab"].items()) {
      const int64_t value = id.get<int64_t>();
      if (value < 0 || value >= static_cast<int64_t>(tokens.size()) || !tokens[value].empty()) {
        return refuse("model.vocab", absl::StrCat("id ", value, " of \"", token,
                                                  "\" [rule: ids 0..size-1, each once]"));
      }
      tokens[value] = token;
    }
    BertNormalizerOptions options;
    const nlohmann::json normalizer = root.value("normalizer", nlohmann::json());
    if (normalizer.is_null()) {
      options = {false, false, false, false};
    } else if (normalizer.value("type", std::string()) == "BertNormalizer") {
      options.clean_text = normalizer.value("clean_text", true);
      options.handle_chinese_chars = normalizer.value("handle_chinese_chars", true);
      options.lowercase = normalizer.value("lowercase", true);
      if (normalizer.contains("strip_accents") && !normalizer["strip_accents"].is_null()) {
        options.strip_accents = normalizer["strip_accents"].get<bool>();
      }
    } else {
      return refuse("normalizer.type", "not supported [rule: BertNormalizer or null]");
    }
    const nlohmann::json pre = root.value("pre_tokenizer", nlohmann::json());
    if (pre.value("type", std::string()) != "BertPreTokenizer") {
      return refuse("pre_tokenizer.type", "not supported [rule: BertPreTokenizer]");
    }
    std::vector<std::string> added;
    for (const nlohmann::json& token : root.value("added_tokens", nlohmann::json::array())) {
      const std::string content = token.value("content", std::string());
      for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
        if (token.value(flag, false)) {
          return refuse(absl::StrCat("added_tokens \"", content, "\".", flag),
                        "not supported [rule: false]");
        }
      }
      if (token.value("normalized", false) && !token.value("special", false)) {
        return refuse(absl::StrCat("added_tokens \"", content, "\".normalized"),
                      "not supported [rule: false, or a special token]");
      }
      added.push_back(content);
    }
    const std::string prefix = model.value("continuing_subword_prefix", std::string("##"));
    const int max_chars = model.value("max_input_chars_per_word", 100);
    if (max_chars <= 0) return refuse("model.max_input_chars_per_word", "must be > 0");
    return Build(std::move(tokens), std::move(added), options,
                 model.value("unk_token", std::string("[UNK]")), prefix, max_chars, name);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": a field has another JSON type than a tokenizer.json's: ", e.what()));
  }
}

std::optional<int32_t> WordPieceTokenizer::TokenId(absl::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void WordPieceTokenizer::EncodeWord(const std::u32string& word, std::vector<int32_t>* ids) const {
  if (static_cast<int>(word.size()) > max_word_characters_) {
    ids->push_back(unk_id_);
    return;
  }
  const size_t before = ids->size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    // The longest entry from `start` (with the prefix after the word's first piece).
    size_t end = word.size();
    int32_t found = -1;
    for (; end > start; --end) {
      piece = start > 0 ? prefix_ : std::string();
      piece += ToUtf8(std::u32string_view(word).substr(start, end - start));
      auto it = ids_.find(piece);
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // a part no entry covers: the whole word is unknown
      ids->resize(before);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

void WordPieceTokenizer::EncodeSegment(absl::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  const std::u32string normalized = BertNormalize(DecodeUtf8Lossy(text), options_);
  for (const std::u32string& word : BertPreTokenize(normalized)) EncodeWord(word, ids);
}

void WordPieceTokenizer::Encode(absl::string_view text, std::vector<int32_t>* ids) const {
  // Added (special) tokens are cut out of the raw text first, leftmost then longest.
  size_t segment = 0;
  for (size_t at = 0; at < text.size();) {
    const std::string* match = nullptr;
    for (const std::string& token : added_) {
      if (text.compare(at, token.size(), token) == 0) {
        match = &token;
        break;
      }
    }
    if (match == nullptr) {
      ++at;
      continue;
    }
    EncodeSegment(text.substr(segment, at - segment), ids);
    ids->push_back(ids_.at(*match));
    at += match->size();
    segment = at;
  }
  EncodeSegment(text.substr(segment), ids);
}

std::vector<int32_t> WordPieceTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  Encode(text, &ids);
  return ids;
}

absl::StatusOr<std::string> WordPieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "id ", ids[i], " at position ", i, " is outside the vocabulary [0, ", vocab_size(), ")"));
    }
    std::string token = tokens_[ids[i]];
    if (i > 0) {
      if (absl::StartsWith(token, prefix_)) {
        token = token.substr(prefix_.size());
      } else {
        token = " " + token;
      }
    }
    // `tokenizers`' cleanup, token by token.
    text += absl::StrReplaceAll(token, {{" .", "."},
                                        {" ?", "?"},
                                        {" !", "!"},
                                        {" ,", ","},
                                        {" ' ", "'"},
                                        {" n't", "n't"},
                                        {" 'm", "'m"},
                                        {" do not", " don't"},
                                        {" 's", "'s"},
                                        {" 've", "'ve"},
                                        {" 're", "'re"}});
  }
  return text;
}

std::vector<bool> WordPieceTokenizer::ContinuesWord() const {
  std::vector<bool> continues(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    continues[id] = absl::StartsWith(tokens_[id], prefix_);
  }
  return continues;
}

}  // namespace mtrain
