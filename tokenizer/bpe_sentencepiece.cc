// BpeTokenizer's SentencePiece-style mode (bpe_tokenizer.h): the tokenizer.json of Llama 2
// and Mistral, whose BPE runs over characters with spaces spelled U+2581 ("▁") and falls
// back to one <0xNN> token per UTF-8 byte for a character the vocabulary lacks. As
// HuggingFace `tokenizers` computes it (tests/tokenizer_parity_test checks every id):
//   1. each segment between added tokens gets a "▁" in front (Prepend, Metaspace
//      "always"; "first": only the segment at the start of the text), and its spaces
//      become "▁";
//   2. with Metaspace split, pieces start at each "▁"; otherwise the segment is one piece;
//   3. a piece's characters become symbols (a vocabulary entry, else its bytes' <0xNN>
//      tokens with byte fallback, else <unk>, runs of which fuse_unk makes one);
//   4. symbols merge by rank as in byte-level BPE (MergeSymbols).
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace mtrain {
namespace {

constexpr char32_t kSpaceMark = 0x2581;  // "▁"
constexpr char kSpaceMarkUtf8[] = "\xE2\x96\x81";
constexpr size_t kCachedPieceBytes = 256;

bool IsObjectOfType(const nlohmann::json& j, const char* type) {
  return j.is_object() && j.contains("type") && j["type"] == type;
}

// A field's value if it has the type asked for, else `otherwise` (absent, null or another
// type: nlohmann's value() would throw on those).
template <typename T>
T FieldOr(const nlohmann::json& j, const char* key, T otherwise) {
  if (!j.is_object() || !j.contains(key)) return otherwise;
  const nlohmann::json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean() ? v.get<bool>() : otherwise;
  } else {
    return v.is_string() ? v.get<std::string>() : otherwise;
  }
}

}  // namespace

absl::Status BpeTokenizer::ConfigureSentencePiece(const nlohmann::json& root,
                                                  const std::string& name) {
  auto refuse = [&](const std::string& field, const std::string& rule) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", field, ": ", rule));
  };
  const nlohmann::json normalizer =
      root.contains("normalizer") ? root["normalizer"] : nlohmann::json();
  const nlohmann::json pre =
      root.contains("pre_tokenizer") ? root["pre_tokenizer"] : nlohmann::json();
  sp_.enabled = true;
  if (!normalizer.is_null()) {
    // Llama 2's: Sequence [Prepend "▁", Replace " " -> "▁"], no pre-tokenizer.
    const nlohmann::json steps = normalizer.is_object() && normalizer.contains("normalizers")
                                     ? normalizer["normalizers"]
                                     : nlohmann::json();
    const bool llama2 = IsObjectOfType(normalizer, "Sequence") && steps.is_array() &&
                        steps.size() == 2 && IsObjectOfType(steps[0], "Prepend") &&
                        FieldOr<std::string>(steps[0], "prepend", "") == kSpaceMarkUtf8 &&
                        IsObjectOfType(steps[1], "Replace") && steps[1].contains("pattern") &&
                        FieldOr<std::string>(steps[1]["pattern"], "String", "") == " " &&
                        FieldOr<std::string>(steps[1], "content", "") == kSpaceMarkUtf8;
    if (!llama2) {
      return refuse("normalizer",
                    "not supported [rule: null, or Sequence [Prepend \"▁\", Replace \" \" -> "
                    "\"▁\"]]");
    }
    if (!pre.is_null()) {
      return refuse("pre_tokenizer", "not supported with that normalizer [rule: null]");
    }
    sp_.prepend = SentencePiece::Prepend::kAlways;
    sp_.split = false;
    sp_.metaspace = false;
  } else {
    if (!IsObjectOfType(pre, "Metaspace") ||
        FieldOr<std::string>(pre, "replacement", kSpaceMarkUtf8) != kSpaceMarkUtf8) {
      return refuse("pre_tokenizer",
                    "not supported [rule: ByteLevel, a Sequence [Split, ByteLevel], or "
                    "Metaspace with replacement \"▁\"]");
    }
    const std::string scheme = FieldOr<std::string>(pre, "prepend_scheme", "always");
    if (scheme == "always") {
      sp_.prepend = SentencePiece::Prepend::kAlways;
    } else if (scheme == "first") {
      sp_.prepend = SentencePiece::Prepend::kFirst;
    } else if (scheme == "never") {
      sp_.prepend = SentencePiece::Prepend::kNever;
    } else {
      return refuse("pre_tokenizer.prepend_scheme", "must be always, first or never");
    }
    sp_.split = FieldOr(pre, "split", true);
    sp_.metaspace = true;
  }
  const nlohmann::json& model = root["model"];
  sp_.byte_fallback = FieldOr(model, "byte_fallback", false);
  sp_.fuse_unk = FieldOr(model, "fuse_unk", false);
  const nlohmann::json unk = model.contains("unk_token") ? model["unk_token"] : nlohmann::json();
  if (unk.is_string()) {
    const std::optional<int32_t> id = TokenId(unk.get<std::string>());
    if (!id.has_value()) {
      return refuse("model.unk_token",
                    absl::StrCat("\"", unk.get<std::string>(), "\" is not in the vocabulary"));
    }
    sp_.unk_id = *id;
  }
  if (sp_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      const std::string token = absl::StrFormat("<0x%02X>", b);
      const std::optional<int32_t> id = TokenId(token);
      if (!id.has_value()) {
        return refuse("model.byte_fallback",
                      absl::StrCat("the vocabulary has no ", token,
                                   " [rule: byte fallback needs all 256 byte tokens]"));
      }
      sp_.byte_token_ids[b] = *id;
      id_bytes_[static_cast<size_t>(*id)] = std::string(1, static_cast<char>(b));
    }
  }
  // Decoding: "▁" is a space (the byte tokens above are their bytes).
  for (auto& [token, id] : token_ids_) {
    if (sp_.byte_fallback && token.size() == 6 && token.rfind("<0x", 0) == 0) continue;
    std::string text;
    for (char32_t c : DecodeUtf8Lossy(token)) AppendUtf8(c == kSpaceMark ? U' ' : c, &text);
    id_bytes_[static_cast<size_t>(id)] = text;
  }
  for (const auto& [content, id] : added_) id_bytes_[static_cast<size_t>(id)] = content;
  return absl::OkStatus();
}

void BpeTokenizer::EncodeSentencePieceText(absl::string_view text, bool at_start,
                                           std::vector<int32_t>* ids) const {
  std::u32string chars = DecodeUtf8Lossy(text);
  if (chars.empty()) return;
  for (char32_t& c : chars) {
    if (c == U' ') c = kSpaceMark;
  }
  const bool prepend = sp_.prepend == SentencePiece::Prepend::kAlways ||
                       (sp_.prepend == SentencePiece::Prepend::kFirst && at_start);
  // The Prepend normalizer prepends to any segment; Metaspace only where no "▁" is first.
  if (prepend && !(sp_.metaspace && chars[0] == kSpaceMark)) {
    chars.insert(chars.begin(), kSpaceMark);
  }
  if (!sp_.split) {
    EncodeSentencePiecePiece(chars, 0, chars.size(), ids);
    return;
  }
  size_t begin = 0;
  for (size_t i = 1; i <= chars.size(); ++i) {
    if (i == chars.size() || chars[i] == kSpaceMark) {
      EncodeSentencePiecePiece(chars, begin, i, ids);
      begin = i;
    }
  }
}

void BpeTokenizer::EncodeSentencePiecePiece(const std::u32string& chars, size_t begin, size_t end,
                                            std::vector<int32_t>* ids) const {
  if (begin >= end) return;
  std::string piece;
  for (size_t i = begin; i < end; ++i) AppendUtf8(chars[i], &piece);
  // Without Metaspace splitting a piece is a whole segment (a line, a file): only word-sized
  // pieces repeat, so only they are cached.
  const bool cached = piece.size() <= kCachedPieceBytes;
  if (cached && Recall(piece, ids)) return;
  std::vector<int32_t> symbols;
  const auto whole = ignore_merges_ ? token_ids_.find(piece) : token_ids_.end();
  if (whole != token_ids_.end()) {
    symbols.push_back(whole->second);
  } else {
    std::string character;
    for (size_t i = begin; i < end; ++i) {
      character.clear();
      AppendUtf8(chars[i], &character);
      if (const auto it = token_ids_.find(character); it != token_ids_.end()) {
        symbols.push_back(it->second);
      } else if (sp_.byte_fallback) {
        for (unsigned char b : character) symbols.push_back(sp_.byte_token_ids[b]);
      } else if (sp_.unk_id >= 0) {
        if (!(sp_.fuse_unk && !symbols.empty() && symbols.back() == sp_.unk_id)) {
          symbols.push_back(sp_.unk_id);
        }
      }
    }
    MergeSymbols(&symbols);
  }
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  if (cached) Remember(std::move(piece), std::move(symbols));
}

}  // namespace mtrain
