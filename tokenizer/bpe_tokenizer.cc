#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <limits>
#include <queue>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tokenizer/gpt2_pretokenizer.h"
#include "tokenizer/llama3_pretokenizer.h"
#include "tokenizer/unicode_text.h"

namespace mtrain {

// Distinct pieces whose ids are kept; beyond it the cache starts over (a corpus's common
// words come back at once).
constexpr size_t kCachedPieces = size_t{1} << 18;
// Pieces longer than this merge with a heap (MergeSymbols).
constexpr size_t kHeapMergeSymbols = 64;

struct BpeTokenizer::Cache {
  absl::flat_hash_map<std::string, std::vector<int32_t>> ids;
};

namespace {

// GPT-2's printable stand-ins for bytes: '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand
// for themselves, the other 68 bytes for U+0100 onwards in byte order.
const std::array<char32_t, 256>& ByteSymbols() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The bytes a vocabulary entry's symbols stand for, or nullopt when a symbol is not one
// of the 256 (an entry that is not byte-level: its text is its bytes).
std::optional<std::string> SymbolsToBytes(absl::string_view token) {
  static const auto* inverse = [] {
    auto* m = new absl::flat_hash_map<char32_t, char>();
    for (int b = 0; b < 256; ++b) (*m)[ByteSymbols()[b]] = static_cast<char>(b);
    return m;
  }();
  std::string bytes;
  for (char32_t c : DecodeUtf8Lossy(token)) {
    const auto it = inverse->find(c);
    if (it == inverse->end()) return std::nullopt;
    bytes.push_back(it->second);
  }
  return bytes;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text, const std::string& name) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not JSON: ", e.what()));
  }
}

// {"token": id, ...}
absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> VocabFromJson(
    const nlohmann::json& vocab, const std::string& where) {
  if (!vocab.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": must be an object {token: id}"));
  }
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "[\"", it.key(), "\"]: must be an id in [0, 2^31 - 1)"));
    }
    out.emplace_back(it.key(), it.value().get<int32_t>());
  }
  return out;
}

}  // namespace

BpeTokenizer::BpeTokenizer() : cache_(std::make_unique<Cache>()) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::Clone() const {
  BpeTokenizer copy;
  copy.vocab_size_ = vocab_size_;
  copy.add_prefix_space_ = add_prefix_space_;
  copy.pretokenizer_ = pretokenizer_;
  copy.ignore_merges_ = ignore_merges_;
  copy.sp_ = sp_;
  std::copy(std::begin(byte_ids_), std::end(byte_ids_), std::begin(copy.byte_ids_));
  copy.merges_ = merges_;
  copy.token_ids_ = token_ids_;
  copy.id_bytes_ = id_bytes_;
  copy.known_ids_ = known_ids_;
  copy.added_ = added_;
  return copy;
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::Build(
    std::vector<std::pair<std::string, int32_t>> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges,
    std::vector<std::pair<std::string, int32_t>> added, bool add_prefix_space,
    const std::string& source, bool byte_level) {
  BpeTokenizer t;
  t.add_prefix_space_ = add_prefix_space;
  int32_t largest = -1;
  for (const auto& [token, id] : vocab) largest = std::max(largest, id);
  for (const auto& [content, id] : added) largest = std::max(largest, id);
  t.vocab_size_ = largest + 1;
  t.id_bytes_.assign(static_cast<size_t>(t.vocab_size_), std::string());
  std::vector<bool> used(static_cast<size_t>(t.vocab_size_), false);
  for (auto& [token, id] : vocab) {
    std::optional<std::string> bytes =
        byte_level ? SymbolsToBytes(token) : std::optional<std::string>();
    t.id_bytes_[id] = bytes.has_value() ? *bytes : token;
    used[id] = true;
    t.token_ids_[token] = id;
  }
  for (int b = 0; b < 256 && byte_level; ++b) {
    std::string symbol;
    AppendUtf8(ByteSymbols()[b], &symbol);
    const auto it = t.token_ids_.find(symbol);
    if (it == t.token_ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the vocabulary has no token for byte ", b, " (\"", symbol,
                       "\") [rule: a byte-level BPE vocabulary holds all 256 byte symbols]"));
    }
    t.byte_ids_[b] = it->second;
  }
  t.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = t.token_ids_.find(left);
    const auto r = t.token_ids_.find(right);
    const auto m = t.token_ids_.find(absl::StrCat(left, right));
    if (l == t.token_ids_.end() || r == t.token_ids_.end() || m == t.token_ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": merge ", rank + 1, " (\"", left, " ", right,
                       "\") names a token the vocabulary lacks [rule: both tokens and their "
                       "concatenation are in the vocabulary]"));
    }
    const uint64_t key =
        (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    // The first (highest-priority) occurrence of a pair wins, as in `tokenizers`.
    t.merges_.try_emplace(key, static_cast<int32_t>(rank), m->second);
  }
  for (auto& [content, id] : added) {
    if (content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": added token ", id, " is empty"));
    }
    t.id_bytes_[id] = content;
    used[id] = true;
    t.token_ids_[content] = id;
  }
  std::sort(added.begin(), added.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  t.added_ = std::move(added);
  // Ids no entry names decode as errors, not as empty text.
  t.known_ids_ = std::move(used);
  return t;
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::FromVocabAndMerges(const std::string& vocab_path,
                                                              const std::string& merges_path) {
  absl::StatusOr<std::string> vocab_text = ReadWholeFile(vocab_path, "vocabulary");
  if (!vocab_text.ok()) return vocab_text.status();
  absl::StatusOr<nlohmann::json> vocab_json = ParseJson(*vocab_text, vocab_path);
  if (!vocab_json.ok()) return vocab_json.status();
  absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> vocab =
      VocabFromJson(*vocab_json, vocab_path);
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<std::string> merges_text = ReadWholeFile(merges_path, "merges");
  if (!merges_text.ok()) return merges_text.status();
  std::vector<std::pair<std::string, std::string>> merges;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*merges_text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && absl::StartsWith(line, "#version"))) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_path, ":", line_number, ": \"", line,
                       "\" is not a merge [rule: two tokens separated by one space]"));
    }
    merges.emplace_back(std::string(parts[0]), std::string(parts[1]));
  }
  return Build(*std::move(vocab), merges, {}, /*add_prefix_space=*/false, merges_path);
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::FromHuggingFaceJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, "tokenizer");
  if (!text.ok()) return text.status();
  return ParseHuggingFaceJson(*text, path);
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::ParseHuggingFaceJson(absl::string_view json,
                                                                const std::string& name) {
  // nlohmann's accessors throw on a field of another JSON type than the one read: a
  // tokenizer.json is input, so that is an error naming the file, not a crash.
  try {
    return ParseHuggingFaceJsonFields(json, name);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": a field has another JSON type than a tokenizer.json's: ", e.what()));
  }
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::ParseHuggingFaceJsonFields(absl::string_view json,
                                                                      const std::string& name) {
  absl::StatusOr<nlohmann::json> parsed = ParseJson(json, name);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& root = *parsed;
  auto refuse = [&](const std::string& field, const std::string& rule) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", field, ": ", rule));
  };
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    return refuse("model", "missing [rule: a tokenizer.json with a BPE model]");
  }
  const nlohmann::json& model = root["model"];
  if (model.value("type", std::string()) != "BPE") {
    return refuse("model.type", "must be \"BPE\"");
  }
  for (const char* off : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(off) && !model[off].is_null() &&
        !(model[off].is_string() && model[off].get<std::string>().empty())) {
      return refuse(absl::StrCat("model.", off), "not supported [rule: null]");
    }
  }
  // SentencePiece-style (bpe_sentencepiece.cc): a normalizer, Metaspace or byte fallback.
  const nlohmann::json pre_any = root.value("pre_tokenizer", nlohmann::json());
  const bool sentencepiece =
      (model.contains("byte_fallback") && model["byte_fallback"] == true) ||
      (root.contains("normalizer") && !root["normalizer"].is_null()) ||
      (pre_any.is_object() && pre_any.value("type", std::string()) == "Metaspace");
  // Llama 3's: a piece that is a token as a whole is that token, merges or not.
  const bool ignore_merges = model.contains("ignore_merges") && model["ignore_merges"] == true;
  Pretokenizer split = Pretokenizer::kGpt2;
  bool add_prefix_space = false;
  if (!sentencepiece) {
    // The pre-tokenizer: ByteLevel with GPT-2's pattern, or a Split by GPT-2's or Llama 3's
    // pattern followed by ByteLevel without its own (Llama 3's tokenizer.json).
    const nlohmann::json pre = root.value("pre_tokenizer", nlohmann::json());
    nlohmann::json byte_level = pre;
    std::string byte_level_field = "pre_tokenizer";
    if (pre.is_object() && pre.value("type", std::string()) == "Sequence") {
      const nlohmann::json steps = pre.value("pretokenizers", nlohmann::json());
      if (!steps.is_array() || steps.size() != 2 || !steps[0].is_object() ||
          steps[0].value("type", std::string()) != "Split") {
        return refuse("pre_tokenizer.pretokenizers",
                      "not supported [rule: [Split by a pattern, ByteLevel]]");
      }
      const nlohmann::json& split_step = steps[0];
      const nlohmann::json pattern = split_step.value("pattern", nlohmann::json());
      const std::string regex =
          pattern.is_object() ? pattern.value("Regex", std::string()) : std::string();
      if (regex == kLlama3SplitPattern) {
        split = Pretokenizer::kLlama3;
      } else if (regex == kGpt2SplitPattern) {
        split = Pretokenizer::kGpt2;
      } else {
        return refuse("pre_tokenizer.pretokenizers[0].pattern",
                      "not supported [rule: {\"Regex\": GPT-2's or Llama 3's pattern}]");
      }
      if (split_step.value("behavior", std::string()) != "Isolated" ||
          (split_step.contains("invert") && split_step["invert"] == true)) {
        return refuse("pre_tokenizer.pretokenizers[0].behavior",
                      "not supported [rule: \"Isolated\", invert false]");
      }
      byte_level = steps[1];
      byte_level_field = "pre_tokenizer.pretokenizers[1]";
      if (!byte_level.is_object() || !byte_level.contains("use_regex") ||
          byte_level["use_regex"] != false) {
        return refuse(byte_level_field + ".use_regex",
                      "not supported after a Split [rule: ByteLevel with use_regex false]");
      }
    } else if (pre.is_object() && pre.contains("use_regex") && pre["use_regex"].is_boolean() &&
               !pre["use_regex"].get<bool>()) {
      return refuse("pre_tokenizer.use_regex", "not supported [rule: true]");
    }
    if (!byte_level.is_object() || byte_level.value("type", std::string()) != "ByteLevel") {
      return refuse(byte_level_field,
                    "must be {\"type\": \"ByteLevel\", ...} or a Sequence [Split, ByteLevel]");
    }
    add_prefix_space =
        byte_level.contains("add_prefix_space") && byte_level["add_prefix_space"] == true;
  }
  if (!model.contains("vocab")) return refuse("model.vocab", "missing");
  absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> vocab =
      VocabFromJson(model["vocab"], absl::StrCat(name, ": model.vocab"));
  if (!vocab.ok()) return vocab.status();
  std::vector<std::pair<std::string, std::string>> merges;
  const nlohmann::json merge_list = model.value("merges", nlohmann::json::array());
  if (!merge_list.is_array()) return refuse("model.merges", "must be an array");
  for (size_t i = 0; i < merge_list.size(); ++i) {
    const nlohmann::json& m = merge_list[i];
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        return refuse(absl::StrCat("model.merges[", i, "]"),
                      absl::StrCat("\"", s, "\" is not \"left right\""));
      }
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return refuse(absl::StrCat("model.merges[", i, "]"),
                    "must be \"left right\" or [left, right]");
    }
  }
  std::vector<std::pair<std::string, int32_t>> added;
  const nlohmann::json added_list = root.value("added_tokens", nlohmann::json::array());
  for (size_t i = 0; i < added_list.size(); ++i) {
    const nlohmann::json& a = added_list[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string()) {
      return refuse(absl::StrCat("added_tokens[", i, "]"), "must have an integer id and content");
    }
    added.emplace_back(a["content"].get<std::string>(), a["id"].get<int32_t>());
  }
  absl::StatusOr<BpeTokenizer> tokenizer =
      Build(*std::move(vocab), merges, std::move(added), add_prefix_space, name, !sentencepiece);
  if (!tokenizer.ok()) return tokenizer.status();
  tokenizer->pretokenizer_ = split;
  tokenizer->ignore_merges_ = ignore_merges;
  if (sentencepiece) RETURN_IF_ERROR(tokenizer->ConfigureSentencePiece(root, name));
  return tokenizer;
}

std::optional<int32_t> BpeTokenizer::TokenId(absl::string_view token) const {
  const auto it = token_ids_.find(token);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

void BpeTokenizer::EncodePiece(absl::string_view bytes, std::vector<int32_t>* ids) const {
  if (Recall(bytes, ids)) return;
  std::vector<int32_t> symbols;
  if (ignore_merges_) {
    std::string spelling;
    for (unsigned char b : bytes) AppendUtf8(ByteSymbols()[b], &spelling);
    if (const auto whole = token_ids_.find(spelling); whole != token_ids_.end()) {
      ids->push_back(whole->second);
      return;
    }
  }
  symbols.reserve(bytes.size());
  for (unsigned char b : bytes) symbols.push_back(byte_ids_[b]);
  MergeSymbols(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  Remember(std::string(bytes), std::move(symbols));
}

void BpeTokenizer::MergeSymbols(std::vector<int32_t>* symbols_out) const {
  std::vector<int32_t>& symbols = *symbols_out;
  // Long pieces (a SentencePiece-style segment without Metaspace splitting is a whole
  // line) take `tokenizers`' own algorithm: a heap of candidate pairs by (rank, position),
  // O(n log n); short ones the plain scan below, which merges the same pairs (the lowest
  // rank first, its occurrences left to right) and is faster at a word's length.
  if (symbols.size() > kHeapMergeSymbols) {
    MergeSymbolsWithHeap(symbols_out);
    return;
  }
  while (symbols.size() > 1) {
    // The pair of lowest rank; all its occurrences merge, left to right.
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    int32_t best_left = -1, best_right = -1, merged = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key =
          (static_cast<uint64_t>(symbols[i]) << 32) | static_cast<uint32_t>(symbols[i + 1]);
      const auto it = merges_.find(key);
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_left = symbols[i];
        best_right = symbols[i + 1];
        merged = it->second.second;
      }
    }
    if (merged < 0) break;
    size_t out = 0;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == best_left && symbols[i + 1] == best_right) {
        symbols[out++] = merged;
        ++i;
      } else {
        symbols[out++] = symbols[i];
      }
    }
    symbols.resize(out);
  }
}

void BpeTokenizer::MergeSymbolsWithHeap(std::vector<int32_t>* symbols_out) const {
  std::vector<int32_t>& symbols = *symbols_out;
  const int n = static_cast<int>(symbols.size());
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int position;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : position > o.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto rank_of = [&](int left) -> const std::pair<int32_t, int32_t>* {
    if (left < 0 || next[left] < 0) return nullptr;
    const uint64_t key =
        (static_cast<uint64_t>(symbols[left]) << 32) | static_cast<uint32_t>(symbols[next[left]]);
    const auto it = merges_.find(key);
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (int i = 0; i + 1 < n; ++i) {
    if (const auto* merge = rank_of(i)) heap.push({merge->first, i});
  }
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    // Stale when its left symbol was merged away or its pair changed since.
    if (!alive[top.position]) continue;
    const auto* merge = rank_of(top.position);
    if (merge == nullptr || merge->first != top.rank) continue;
    const int right = next[top.position];
    symbols[top.position] = merge->second;
    alive[right] = false;
    next[top.position] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.position;
    if (const auto* left_pair = rank_of(prev[top.position])) {
      heap.push({left_pair->first, prev[top.position]});
    }
    if (const auto* right_pair = rank_of(top.position))
      heap.push({right_pair->first, top.position});
  }
  size_t out = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

bool BpeTokenizer::Recall(absl::string_view piece, std::vector<int32_t>* ids) const {
  const auto hit = cache_->ids.find(piece);
  if (hit == cache_->ids.end()) return false;
  ids->insert(ids->end(), hit->second.begin(), hit->second.end());
  return true;
}

void BpeTokenizer::Remember(std::string piece, std::vector<int32_t> symbols) const {
  if (cache_->ids.size() >= kCachedPieces) cache_->ids.clear();
  cache_->ids.emplace(std::move(piece), std::move(symbols));
}

void BpeTokenizer::EncodeText(absl::string_view text, bool at_start,
                              std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (sp_.enabled) {
    EncodeSentencePieceText(text, at_start, ids);
    return;
  }
  std::u32string chars = DecodeUtf8Lossy(text);
  if (add_prefix_space_ && chars[0] != U' ') chars.insert(chars.begin(), U' ');
  std::vector<TextPiece> pieces;
  if (pretokenizer_ == Pretokenizer::kLlama3) {
    SplitLikeLlama3(chars, 0, chars.size(), &pieces);
  } else {
    SplitLikeGpt2(chars, 0, chars.size(), &pieces);
  }
  std::string bytes;
  for (const TextPiece& piece : pieces) {
    bytes.clear();
    for (size_t i = piece.begin; i < piece.end; ++i) AppendUtf8(chars[i], &bytes);
    EncodePiece(bytes, ids);
  }
}

void BpeTokenizer::Encode(absl::string_view text, std::vector<int32_t>* ids) const {
  // Added tokens are cut out verbatim first; the text between them is encoded alone. Each
  // token's next occurrence is remembered, so the text is searched once per token and
  // occurrence, not once per token for every occurrence of any of them.
  std::vector<size_t> next(added_.size());
  for (size_t t = 0; t < added_.size(); ++t) next[t] = text.find(added_[t].first);
  size_t done = 0;
  while (true) {
    size_t first = absl::string_view::npos, found = 0;
    for (size_t t = 0; t < added_.size(); ++t) {
      if (next[t] != absl::string_view::npos && next[t] < done) {
        next[t] = text.find(added_[t].first, done);  // overlapped by the last one taken
      }
      if (next[t] < first) {  // ties: the longest (added_ is longest first) wins
        first = next[t];
        found = t;
      }
    }
    if (first == absl::string_view::npos) break;
    EncodeText(text.substr(done, first - done), done == 0, ids);
    ids->push_back(added_[found].second);
    done = first + added_[found].first.size();
  }
  EncodeText(text.substr(done), done == 0, ids);
}

std::vector<int32_t> BpeTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  Encode(text, &ids);
  return ids;
}

absl::StatusOr<std::string> BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_ || !known_ids_[static_cast<size_t>(id)]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", i, " is id ", id, ", which is not in the vocabulary (", vocab_size_, " ids)"));
    }
    text += id_bytes_[static_cast<size_t>(id)];
  }
  // SentencePiece-style: the space the encoder put in front goes again (`tokenizers`' Strip
  // and Metaspace decoders).
  if (sp_.enabled && sp_.prepend != SentencePiece::Prepend::kNever && !text.empty() &&
      text[0] == ' ') {
    text.erase(0, 1);
  }
  return text;
}

}  // namespace mtrain
