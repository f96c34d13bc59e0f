// Hugging Face tokenizer.json, as the `tokenizers` library runs it (its pipeline, in order):
// added tokens split off the raw text -> normalizer on each remaining piece -> normalized
// added tokens split off -> pre-tokenizer -> BPE model on each word -> post-processor; and
// decode: ids -> tokens -> decoder. Regular expressions are PCRE2's (UTF and Unicode
// properties), Unicode normalization utf8proc's. Only what the families accel loads publish
// is implemented; anything else in a file is refused by name (ACCEL_ERR_UNSUPPORTED).
#include "runtime/tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace accel::tokenizer {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// UTF-8

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one.
size_t utf8_len_at(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const size_t n = s.size() - i;
  if (c >= 0xC2 && c <= 0xDF) return (n >= 2 && (b(i + 1) & 0xC0) == 0x80) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 3) return 0;
    const unsigned char c1 = b(i + 1);
    if ((c1 & 0xC0) != 0x80 || (c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F)) return 0;
    return (b(i + 2) & 0xC0) == 0x80 ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 4) return 0;
    const unsigned char c1 = b(i + 1);
    if ((c1 & 0xC0) != 0x80 || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) return 0;
    return ((b(i + 2) & 0xC0) == 0x80 && (b(i + 3) & 0xC0) == 0x80) ? 4 : 0;
  }
  return 0;
}

// The length of the maximal prefix of an invalid sequence at s[i] that could start a valid
// one (Unicode's "maximal subpart", what Python's decoder replaces with one U+FFFD), >= 1.
size_t invalid_run_at(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t want = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) want = 2;
  else if (c >= 0xE0 && c <= 0xEF) { want = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
  else if (c >= 0xF0 && c <= 0xF4) { want = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
  else return 1;
  size_t k = 1;
  for (; k < want && i + k < s.size(); ++k) {
    const unsigned char ck = b(i + k);
    if (k == 1 ? (ck < lo || ck > hi) : (ck & 0xC0) != 0x80) break;
  }
  return k;
}

char32_t decode_at(std::string_view s, size_t i, size_t* len) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  *len = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? static_cast<char32_t>(cp) : 0xFFFD;
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Rust's char::is_whitespace: Unicode's White_Space property.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
// Rust's char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}
// The start of the code point that ends at s[i - 1] (i > 0).
size_t prev_char_start(std::string_view s, size_t i) {
  size_t k = i - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

bool is_alphanumeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || is_numeric(c);
}

// ---------------------------------------------------------------------------------------
// Patterns: a literal string or a PCRE2 regular expression (tokenizers' Split, Replace).

struct Regex {
  pcre2_code* code = nullptr;
  explicit Regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                         &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(Status::Format, "the regular expression '", pattern, "' does not compile at offset ", off, ": ",
           reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, matching interprets
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;

  static Pattern from_json(const json& j, const char* where) {
    Pattern p;
    ACCEL_CHECK(j.is_object(), Status::Format, where, ": pattern is not an object");
    if (j.contains("String")) {
      p.literal = j["String"].get<std::string>();
    } else if (j.contains("Regex")) {
      p.regex = std::make_shared<Regex>(j["Regex"].get<std::string>());
    } else {
      fail(Status::Format, where, ": pattern is neither String nor Regex");
    }
    return p;
  }

  // The non-overlapping matches, left to right, as [begin, end) byte ranges.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const {
    std::vector<std::pair<size_t, size_t>> out;
    if (!regex) {
      if (literal.empty()) return out;
      for (size_t at = s.find(literal); at != std::string_view::npos; at = s.find(literal, at + literal.size()))
        out.emplace_back(at, at + literal.size());
      return out;
    }
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    ACCEL_CHECK(md != nullptr, Status::OutOfMemory, "cannot allocate PCRE2 match data");
    size_t at = 0;
    while (at <= s.size()) {
      const int rc = pcre2_match(regex->code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at,
                                 PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(md);
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail(Status::Internal, "PCRE2 matching failed: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = ov[1];
      if (e > b) {
        out.emplace_back(b, e);
        at = e;
      } else {  // an empty match: step over one character
        if (b >= s.size()) break;
        size_t n = 1;
        decode_at(s, b, &n);
        at = b + n;
      }
    }
    pcre2_match_data_free(md);
    return out;
  }
};

// A predicate over characters (tokenizers' char patterns: Digits, WhitespaceSplit).
template <class Pred>
std::vector<std::pair<size_t, size_t>> find_chars(std::string_view s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const char32_t c = decode_at(s, i, &n);
    if (pred(c)) out.emplace_back(i, i + n);
    i += n;
  }
  return out;
}

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const std::string& name) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  fail(Status::Format, "Split: unknown behavior '", name, "'");
}

// tokenizers' NormalizedString::split: the pieces of s by its matches under `behavior`
// (empty pieces dropped), as byte ranges.
std::vector<std::pair<size_t, size_t>> split_ranges(std::string_view s,
                                                    const std::vector<std::pair<size_t, size_t>>& matches,
                                                    Behavior behavior, bool invert) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> all;
  size_t prev = 0;
  for (const auto& m : matches) {
    if (m.first > prev) all.push_back({{prev, m.first}, false});
    all.push_back({m, true});
    prev = m.second;
  }
  if (prev < s.size() || all.empty()) all.push_back({{prev, s.size()}, false});
  if (invert)
    for (auto& a : all) a.second = !a.second;
  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Removed:
      for (const auto& a : all)
        if (!a.second) out.push_back(a.first);
      break;
    case Behavior::Isolated:
      for (const auto& a : all) out.push_back(a.first);
      break;
    case Behavior::MergedWithPrevious:
      for (const auto& a : all) {
        if (a.second && !previous_match && !out.empty()) out.back().second = a.first.second;
        else out.push_back(a.first);
        previous_match = a.second;
      }
      break;
    case Behavior::MergedWithNext:
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (it->second && !previous_match && !out.empty()) out.back().first = it->first.first;
        else out.push_back(it->first);
        previous_match = it->second;
      }
      std::reverse(out.begin(), out.end());
      break;
    case Behavior::Contiguous:
      for (const auto& a : all) {
        if (a.second == previous_match && !out.empty()) out.back().second = a.first.second;
        else out.push_back(a.first);
        previous_match = a.second;
      }
      break;
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& r) { return r.first >= r.second; }), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------
// Normalizers

std::string utf8proc_map_string(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                              &out, static_cast<utf8proc_option_t>(options));
  ACCEL_CHECK(n >= 0, Status::InvalidArgument, "Unicode normalization failed: ", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  free(out);
  return r;
}

struct Normalizer {
  enum Kind { NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip } kind;
  std::string text;  // Prepend's prefix, Replace's content
  Pattern pattern;
  bool left = false, right = false;

  void apply(std::string& s) const {
    switch (kind) {
      case NFC: s = utf8proc_map_string(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE); break;
      case NFD: s = utf8proc_map_string(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
      case NFKC: s = utf8proc_map_string(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case NFKD: s = utf8proc_map_string(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case Lowercase: {
        std::string out;
        for (size_t i = 0; i < s.size();) {
          size_t n = 1;
          const char32_t c = decode_at(s, i, &n);
          append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
          i += n;
        }
        s = std::move(out);
        break;
      }
      case Prepend:
        if (!s.empty()) s.insert(0, text);
        break;
      case Replace: {
        const auto m = pattern.find_all(s);
        if (m.empty()) break;
        std::string out;
        size_t prev = 0;
        for (const auto& r : m) {
          out.append(s, prev, r.first - prev);
          out += text;
          prev = r.second;
        }
        out.append(s, prev, std::string::npos);
        s = std::move(out);
        break;
      }
      case Strip: {
        const auto [b, e] = strip_range(s, 0, s.size(), left, right, is_whitespace);
        s = s.substr(b, e - b);
        break;
      }
    }
  }
};

void parse_normalizer(const json& j, std::vector<Normalizer>& out) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  Normalizer n{};
  if (type == "Sequence") {
    for (const auto& k : j.at("normalizers")) parse_normalizer(k, out);
    return;
  } else if (type == "NFC") {
    n.kind = Normalizer::NFC;
  } else if (type == "NFD") {
    n.kind = Normalizer::NFD;
  } else if (type == "NFKC") {
    n.kind = Normalizer::NFKC;
  } else if (type == "NFKD") {
    n.kind = Normalizer::NFKD;
  } else if (type == "Lowercase") {
    n.kind = Normalizer::Lowercase;
  } else if (type == "Prepend") {
    n.kind = Normalizer::Prepend;
    n.text = j.at("prepend").get<std::string>();
  } else if (type == "Replace") {
    n.kind = Normalizer::Replace;
    n.pattern = Pattern::from_json(j.at("pattern"), "Replace normalizer");
    n.text = j.at("content").get<std::string>();
  } else if (type == "Strip") {
    n.kind = Normalizer::Strip;
    n.left = j.value("strip_left", true);
    n.right = j.value("strip_right", true);
  } else {
    fail(Status::Unsupported, "the normalizer '", type,
         "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip)");
  }
  out.push_back(std::move(n));
}

// ---------------------------------------------------------------------------------------
// Byte-level: GPT-2's map of the 256 bytes to printable characters.

struct ByteMap {
  std::string to_char[256];                   // byte -> its character, UTF-8
  std::unordered_map<char32_t, uint8_t> back;  // character -> byte
  ByteMap() {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::vector<int> cs = bs;
    int n = 0;
    for (int b = 0; b < 256; ++b)
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
        bs.push_back(b);
        cs.push_back(256 + n++);
      }
    for (size_t i = 0; i < bs.size(); ++i) {
      append_utf8(to_char[bs[i]], static_cast<char32_t>(cs[i]));
      back[static_cast<char32_t>(cs[i])] = static_cast<uint8_t>(bs[i]);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// ---------------------------------------------------------------------------------------
// Pre-tokenizers

struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the input (Metaspace's prepend_scheme "first")
};

struct PreTokenizer {
  enum Kind { ByteLevel, Split, Digits, Metaspace, WhitespaceSplit, Whitespace } kind;
  bool add_prefix_space = false, use_regex = true, individual_digits = false, invert = false, split = true;
  Pattern pattern;
  Behavior behavior = Behavior::Isolated;
  std::string replacement;
  enum Prepend { Always, Never, First } prepend = Always;

  static void split_by(std::vector<Piece>& pieces, const std::function<std::vector<std::pair<size_t, size_t>>(std::string_view)>& ranges) {
    std::vector<Piece> out;
    for (auto& p : pieces) {
      for (const auto& r : ranges(p.text)) out.push_back({p.text.substr(r.first, r.second - r.first), p.at_start && r.first == 0});
    }
    pieces = std::move(out);
  }

  void apply(std::vector<Piece>& pieces) const {
    switch (kind) {
      case ByteLevel: {
        static const Pattern gpt2 = [] {
          Pattern p;
          p.regex = std::make_shared<Regex>(kGpt2Regex);
          return p;
        }();
        if (add_prefix_space)
          for (auto& p : pieces)
            if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
        if (use_regex)
          split_by(pieces, [&](std::string_view s) { return split_ranges(s, gpt2.find_all(s), Behavior::Isolated, false); });
        const auto& m = byte_map();
        for (auto& p : pieces) {
          std::string mapped;
          mapped.reserve(p.text.size() * 2);
          for (unsigned char c : p.text) mapped += m.to_char[c];
          p.text = std::move(mapped);
        }
        break;
      }
      case Split:
        split_by(pieces, [&](std::string_view s) { return split_ranges(s, pattern.find_all(s), behavior, invert); });
        break;
      case Digits:
        split_by(pieces, [&](std::string_view s) {
          return split_ranges(s, find_chars(s, is_numeric), individual_digits ? Behavior::Isolated : Behavior::Contiguous,
                              false);
        });
        break;
      case WhitespaceSplit:
        split_by(pieces, [&](std::string_view s) { return split_ranges(s, find_chars(s, is_whitespace), Behavior::Removed, false); });
        break;
      case Whitespace:
        split_by(pieces, [&](std::string_view s) { return split_ranges(s, pattern.find_all(s), Behavior::Removed, true); });
        break;
      case Metaspace:
        for (auto& p : pieces) {
          std::string out;
          for (char c : p.text) {
            if (c == ' ') out += replacement;
            else out += c;
          }
          const bool starts = out.compare(0, replacement.size(), replacement) == 0;
          if (!starts && (prepend == Always || (prepend == First && p.at_start))) out.insert(0, replacement);
          p.text = std::move(out);
        }
        if (split)
          split_by(pieces, [&](std::string_view s) {
            std::vector<std::pair<size_t, size_t>> m;
            for (size_t at = s.find(replacement); at != std::string_view::npos; at = s.find(replacement, at + replacement.size()))
              m.emplace_back(at, at + replacement.size());
            return split_ranges(s, m, Behavior::MergedWithNext, false);
          });
        break;
    }
  }
};

PreTokenizer::Prepend prepend_of(const json& j) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PreTokenizer::Always;
    if (s == "never") return PreTokenizer::Never;
    if (s == "first") return PreTokenizer::First;
    fail(Status::Format, "Metaspace: unknown prepend_scheme '", s, "'");
  }
  return j.value("add_prefix_space", true) ? PreTokenizer::Always : PreTokenizer::Never;
}

void parse_pre_tokenizer(const json& j, std::vector<PreTokenizer>& out) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  PreTokenizer p{};
  if (type == "Sequence") {
    for (const auto& k : j.at("pretokenizers")) parse_pre_tokenizer(k, out);
    return;
  } else if (type == "ByteLevel") {
    p.kind = PreTokenizer::ByteLevel;
    p.add_prefix_space = j.value("add_prefix_space", true);
    p.use_regex = j.value("use_regex", true);
  } else if (type == "Split") {
    p.kind = PreTokenizer::Split;
    p.pattern = Pattern::from_json(j.at("pattern"), "Split pre-tokenizer");
    p.behavior = behavior_of(j.at("behavior").get<std::string>());
    p.invert = j.value("invert", false);
  } else if (type == "Digits") {
    p.kind = PreTokenizer::Digits;
    p.individual_digits = j.value("individual_digits", false);
  } else if (type == "Metaspace") {
    p.kind = PreTokenizer::Metaspace;
    p.replacement = j.contains("replacement") ? j["replacement"].get<std::string>() : std::string("\xE2\x96\x81");
    p.prepend = prepend_of(j);
    p.split = j.value("split", true);
  } else if (type == "WhitespaceSplit") {
    p.kind = PreTokenizer::WhitespaceSplit;
  } else if (type == "Whitespace") {
    p.kind = PreTokenizer::Whitespace;
    p.pattern.regex = std::make_shared<Regex>("\\w+|[^\\w\\s]+");
  } else {
    fail(Status::Unsupported, "the pre-tokenizer '", type,
         "' is not supported (supported: Sequence, ByteLevel, Split, Digits, Metaspace, WhitespaceSplit, Whitespace)");
  }
  out.push_back(std::move(p));
}

// ---------------------------------------------------------------------------------------
// Decoders (on the list of token strings, as tokenizers' decode_chain)

struct Decoder {
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  Pattern pattern;
  std::string text;       // Replace's content, Strip's content, Metaspace's replacement
  size_t start = 0, stop = 0;
  PreTokenizer::Prepend prepend = PreTokenizer::Always;

  void apply(std::vector<std::string>& toks) const {
    switch (kind) {
      case ByteLevel: {
        const auto& m = byte_map();
        std::string bytes;
        for (const auto& t : toks) {
          std::string mine;
          bool all = true;
          for (size_t i = 0; i < t.size();) {
            size_t n = 1;
            const char32_t c = decode_at(t, i, &n);
            const auto it = m.back.find(c);
            if (it == m.back.end()) {
              all = false;
              break;
            }
            mine += static_cast<char>(it->second);
            i += n;
          }
          bytes += all ? mine : t;
        }
        toks.assign(1, replace_invalid_utf8(bytes));
        break;
      }
      case Replace:
        for (auto& t : toks) {
          Normalizer r{Normalizer::Replace, text, pattern};
          r.apply(t);
        }
        break;
      case ByteFallback: {
        std::vector<std::string> out;
        std::string pending;
        size_t pending_n = 0;
        const auto flush = [&] {
          if (pending_n == 0) return;
          if (invalid_utf8_at(pending) == std::string::npos) out.push_back(pending);
          else
            for (size_t i = 0; i < pending_n; ++i) out.emplace_back("\xEF\xBF\xBD");
          pending.clear();
          pending_n = 0;
        };
        for (auto& t : toks) {
          int byte = -1;
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
              std::isxdigit(static_cast<unsigned char>(t[4])))
            byte = std::stoi(t.substr(3, 2), nullptr, 16);
          if (byte >= 0) {
            pending += static_cast<char>(byte);
            ++pending_n;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        toks = std::move(out);
        break;
      }
      case Fuse: {
        std::string all;
        for (const auto& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case Strip:
        for (auto& t : toks) {
          // up to `start` leading and `stop` trailing copies of the content character
          size_t b = 0, e = t.size();
          for (size_t k = 0; k < start && t.compare(b, text.size(), text) == 0 && b < e; ++k) b += text.size();
          for (size_t k = 0; k < stop && e >= b + text.size() && t.compare(e - text.size(), text.size(), text) == 0; ++k)
            e -= text.size();
          t = t.substr(b, e - b);
        }
        break;
      case Metaspace:
        for (size_t i = 0; i < toks.size(); ++i) {
          std::string out;
          const std::string& t = toks[i];
          for (size_t k = 0; k < t.size();) {
            if (t.compare(k, text.size(), text) == 0) {
              if (!(i == 0 && prepend != PreTokenizer::Never)) out += ' ';
              k += text.size();
            } else {
              out += t[k++];
            }
          }
          toks[i] = std::move(out);
        }
        break;
    }
  }
};

void parse_decoder(const json& j, std::vector<Decoder>& out) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  Decoder d{};
  if (type == "Sequence") {
    for (const auto& k : j.at("decoders")) parse_decoder(k, out);
    return;
  } else if (type == "ByteLevel") {
    d.kind = Decoder::ByteLevel;
  } else if (type == "Replace") {
    d.kind = Decoder::Replace;
    d.pattern = Pattern::from_json(j.at("pattern"), "Replace decoder");
    d.text = j.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    d.kind = Decoder::ByteFallback;
  } else if (type == "Fuse") {
    d.kind = Decoder::Fuse;
  } else if (type == "Strip") {
    d.kind = Decoder::Strip;
    d.text = j.at("content").get<std::string>();
    d.start = j.value("start", 0);
    d.stop = j.value("stop", 0);
  } else if (type == "Metaspace") {
    d.kind = Decoder::Metaspace;
    d.text = j.contains("replacement") ? j["replacement"].get<std::string>() : std::string("\xE2\x96\x81");
    d.prepend = prepend_of(j);
  } else {
    fail(Status::Unsupported, "the decoder '", type,
         "' is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
  }
  out.push_back(std::move(d));
}

// ---------------------------------------------------------------------------------------
// The BPE model

struct Bpe {
  std::unordered_map<std::string, int32_t> vocab;
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id)
  std::optional<int32_t> unk;
  std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  int32_t byte_ids[256];  // <0xXX> ids, -1 where missing

  mutable std::shared_mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr size_t kCacheWords = 20000, kCacheWordBytes = 256;

  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  void tokenize(const std::string& word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges) {
      const auto it = vocab.find(word);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = word.size() <= kCacheWordBytes;
    if (cacheable) {
      std::shared_lock<std::shared_mutex> lock(cache_mu);
      const auto it = cache.find(word);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      std::unique_lock<std::shared_mutex> lock(cache_mu);
      if (cache.size() < kCacheWords) cache.emplace(word, std::move(ids));
    }
  }

  std::vector<int32_t> merge_word(const std::string& word) const {
    struct Sym {
      int32_t id;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    int32_t pending_unk = -1;  // an unknown character's id not pushed yet (fuse_unk joins the next)
    const auto push = [&](int32_t id) {
      const int n = static_cast<int>(syms.size());
      syms.push_back({id, n - 1, n + 1, true});
    };
    std::string piece;
    for (size_t i = 0; i < word.size();) {
      size_t n = 1;
      decode_at(word, i, &n);
      piece.assign(word, i, n);
      const bool first = i == 0, last = i + n == word.size();
      if (!first) piece.insert(0, prefix);
      if (last) piece += suffix;
      const auto it = vocab.find(piece);
      if (it != vocab.end()) {
        if (pending_unk >= 0) push(pending_unk), pending_unk = -1;
        push(it->second);
      } else {
        bool bytes = byte_fallback;
        for (size_t k = 0; bytes && k < n; ++k) bytes = byte_ids[static_cast<unsigned char>(word[i + k])] >= 0;
        if (bytes) {
          if (pending_unk >= 0) push(pending_unk), pending_unk = -1;
          for (size_t k = 0; k < n; ++k) push(byte_ids[static_cast<unsigned char>(word[i + k])]);
        } else if (unk) {
          if (pending_unk >= 0 && !fuse_unk) push(pending_unk);
          pending_unk = *unk;
        }
      }
      i += n;
    }
    if (pending_unk >= 0) push(pending_unk);
    if (syms.empty()) return {};
    syms.back().next = -1;
    // Merge the pair of lowest rank, the leftmost among equals, until none is left (tokenizers'
    // Word::merge_all, with a queue of candidate pairs checked when taken).
    struct Cand {
      int32_t rank;
      int pos;
      int32_t id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
    const auto consider = [&](int pos) {
      const int nx = syms[pos].next;
      if (nx < 0) return;
      const auto it = merges.find(key(syms[pos].id, syms[nx].id));
      if (it != merges.end()) q.push({it->second.rank, pos, it->second.id});
    };
    for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);
    while (!q.empty()) {
      const Cand c = q.top();
      q.pop();
      Sym& s = syms[c.pos];
      if (!s.alive || s.next < 0) continue;
      const auto it = merges.find(key(s.id, syms[s.next].id));
      if (it == merges.end() || it->second.id != c.id) continue;
      Sym& right = syms[s.next];
      right.alive = false;
      s.id = c.id;
      s.next = right.next;
      if (s.next >= 0) syms[s.next].prev = c.pos;
      if (s.prev >= 0) consider(s.prev);
      consider(c.pos);
    }
    std::vector<int32_t> ids;
    for (int i = 0; i >= 0 && i < static_cast<int>(syms.size()); i = syms[i].next) ids.push_back(syms[i].id);
    return ids;
  }
};

// ---------------------------------------------------------------------------------------
// Added tokens

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized, special;
};

struct Matcher {
  // by first byte, longest first
  std::vector<std::pair<std::string, const AddedToken*>> by_byte[256];
  bool empty() const {
    for (const auto& b : by_byte)
      if (!b.empty()) return false;
    return true;
  }
  void add(const std::string& content, const AddedToken* t) {
    if (content.empty()) return;
    auto& v = by_byte[static_cast<unsigned char>(content[0])];
    v.emplace_back(content, t);
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  struct Hit {
    size_t begin, end;
    const AddedToken* token;
  };
  // tokenizers' AddedVocabulary::split_with_indices: leftmost-longest matches, then
  // single_word, lstrip and rstrip.
  std::vector<Hit> find(std::string_view s) const {
    std::vector<Hit> raw;
    for (size_t i = 0; i < s.size();) {
      const auto& cands = by_byte[static_cast<unsigned char>(s[i])];
      bool hit = false;
      for (const auto& c : cands)
        if (s.compare(i, c.first.size(), c.first) == 0) {
          raw.push_back({i, i + c.first.size(), c.second});
          i += c.first.size();
          hit = true;
          break;
        }
      if (!hit) ++i;
    }
    std::vector<Hit> out;
    size_t start_offset = 0;
    for (Hit h : raw) {
      const AddedToken& t = *h.token;
      if (t.single_word) {
        bool word_before = false, word_after = false;
        if (h.begin > 0) {
          size_t n = 1;
          word_before = is_alphanumeric(decode_at(s, prev_char_start(s, h.begin), &n));
        }
        if (h.end < s.size()) {
          size_t n = 1;
          word_after = is_alphanumeric(decode_at(s, h.end, &n));
        }
        if (word_before || word_after) continue;
      }
      // the whitespace before (lstrip) and after (rstrip) the token becomes part of it
      if (t.lstrip) h.begin = std::max(strip_range(s, 0, h.begin, false, true, is_whitespace).second, start_offset);
      if (t.rstrip) h.end = strip_range(s, h.end, s.size(), true, false, is_whitespace).first;
      out.push_back(h);
      start_offset = h.end;
    }
    return out;
  }
};

// ---------------------------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ACCEL_CHECK(f.good(), Status::IO, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  ACCEL_CHECK(!f.bad(), Status::IO, "cannot read '", path, "'");
  return ss.str();
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const std::string& file, const std::string& dir) {
    path_ = file;
    json j;
    try {
      j = json::parse(read_file(file));
    } catch (const json::exception& e) {
      fail(Status::Format, "'", file, "' is not JSON: ", e.what());
    }
    try {
      load(j);
    } catch (const json::exception& e) {
      fail(Status::Format, "'", file, "' is not a tokenizer.json: ", e.what());
    } catch (const Error& e) {
      throw Error(e.status(), "'" + file + "': " + e.what());
    }
    if (!dir.empty()) read_config(dir);
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::vector<std::string> toks;
    toks.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      ACCEL_CHECK(id >= 0 && id < vocab_size() && (!tokens_[id].empty() || is_special(id)), Status::InvalidArgument,
                  "ids[", i, "] = ", id, " is no token of this tokenizer (vocab_size ", vocab_size(), ")");
      if (skip_special && special_[id]) continue;
      toks.push_back(tokens_[id]);
    }
    for (const auto& d : decoders_) d.apply(toks);
    std::string out;
    for (const auto& t : toks) out += t;
    return out;
  }

 protected:
  std::vector<int32_t> encode_plain(std::string_view text) const override {
    std::vector<int32_t> ids;
    // 1. the added tokens that are not normalized, on the raw text
    size_t prev = 0;
    const auto hits = raw_matcher_.find(text);
    for (const auto& h : hits) {
      if (h.begin > prev) encode_piece(text.substr(prev, h.begin - prev), prev == 0, ids);
      ids.push_back(h.token->id);
      prev = h.end;
    }
    if (prev < text.size()) encode_piece(text.substr(prev), prev == 0, ids);  // (an empty text has no piece)
    return ids;
  }
  void add_special_tokens(std::vector<int32_t>& ids) const override {
    if (!has_template_) return;
    std::vector<int32_t> out;
    out.reserve(ids.size() + template_specials_);
    for (const auto& item : template_)
      if (item.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), item.ids.begin(), item.ids.end());
    ids = std::move(out);
  }
  size_t num_special_tokens_added() const override { return template_specials_; }

 private:
  void encode_piece(std::string_view raw, bool at_start, std::vector<int32_t>& ids) const {
    // 2. the normalizer, then the normalized added tokens
    std::string s(raw);
    for (const auto& n : normalizers_) n.apply(s);
    std::vector<Piece> pieces;
    if (norm_matcher_.empty()) {
      pieces.push_back({std::move(s), at_start});
      run(pieces, ids);
      return;
    }
    size_t prev = 0;
    for (const auto& h : norm_matcher_.find(s)) {
      if (h.begin > prev) {
        pieces.assign(1, {s.substr(prev, h.begin - prev), at_start && prev == 0});
        run(pieces, ids);
      }
      ids.push_back(h.token->id);
      prev = h.end;
    }
    if (prev < s.size()) {
      pieces.assign(1, {s.substr(prev), at_start && prev == 0});
      run(pieces, ids);
    }
  }
  // 3. the pre-tokenizer, 4. the model
  void run(std::vector<Piece>& pieces, std::vector<int32_t>& ids) const {
    for (const auto& p : pre_) p.apply(pieces);
    for (const auto& p : pieces) bpe_.tokenize(p.text, ids);
  }

  void load(const json& j) {
    const json& model = j.at("model");
    const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
    ACCEL_CHECK(type == "BPE", Status::Unsupported, "the model type '", type,
                "' is not supported (tokenizer.json models: BPE; SentencePiece Unigram models load from a .model file)");
    kind_ = "tokenizer.json (BPE)";
    int32_t max_id = -1;
    for (const auto& [tok, id] : model.at("vocab").items()) {
      const int32_t i = id.get<int32_t>();
      ACCEL_CHECK(i >= 0, Status::Format, "vocab: '", tok, "' has a negative id");
      bpe_.vocab[tok] = i;
      max_id = std::max(max_id, i);
    }
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken t{a.at("id").get<int32_t>(), a.at("content").get<std::string>(), a.value("single_word", false),
                   a.value("lstrip", false),   a.value("rstrip", false),             a.value("normalized", true),
                   a.value("special", false)};
      ACCEL_CHECK(t.id >= 0, Status::Format, "added_tokens: '", t.content, "' has a negative id");
      max_id = std::max(max_id, t.id);
      added_.push_back(std::move(t));
    }
    tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
    special_.assign(tokens_.size(), false);
    for (const auto& [tok, id] : bpe_.vocab) tokens_[id] = tok;
    for (const auto& t : added_) {
      tokens_[t.id] = t.content;
      special_[t.id] = t.special;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto it = bpe_.vocab.find(model["unk_token"].get<std::string>());
      if (it != bpe_.vocab.end()) bpe_.unk = it->second;
    }
    const auto str = [&](const char* k) { return model.contains(k) && model[k].is_string() ? model[k].get<std::string>() : std::string(); };
    bpe_.prefix = str("continuing_subword_prefix");
    bpe_.suffix = str("end_of_word_suffix");
    bpe_.fuse_unk = model.value("fuse_unk", false);
    bpe_.byte_fallback = model.value("byte_fallback", false);
    bpe_.ignore_merges = model.value("ignore_merges", false);
    ACCEL_CHECK(!model.contains("dropout") || model["dropout"].is_null() || model["dropout"].get<double>() == 0.0,
                Status::Unsupported, "BPE dropout is not supported (it samples: encoding would not be deterministic)");
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = bpe_.vocab.find(name);
      bpe_.byte_ids[b] = it == bpe_.vocab.end() ? -1 : it->second;
    }
    int32_t rank = 0;
    for (const auto& m : model.at("merges")) {
      std::string a, b;
      if (m.is_array()) {
        ACCEL_CHECK(m.size() == 2, Status::Format, "merges[", rank, "] is not a pair");
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        ACCEL_CHECK(sp != std::string::npos, Status::Format, "merges[", rank, "] '", s, "' is not two tokens");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      }
      const auto ia = bpe_.vocab.find(a), ib = bpe_.vocab.find(b);
      const std::string merged = a + b.substr(std::min(b.size(), bpe_.prefix.size()));
      const auto im = bpe_.vocab.find(merged);
      ACCEL_CHECK(ia != bpe_.vocab.end() && ib != bpe_.vocab.end(), Status::Format, "merges[", rank, "]: '",
                  ia == bpe_.vocab.end() ? a : b, "' is not in the vocabulary");
      ACCEL_CHECK(im != bpe_.vocab.end(), Status::Format, "merges[", rank, "]: the merged token '", merged,
                  "' is not in the vocabulary");
      bpe_.merges.emplace(Bpe::key(ia->second, ib->second), Bpe::Merge{rank, im->second});
      ++rank;
    }
    parse_normalizer(j.value("normalizer", json()), normalizers_);
    parse_pre_tokenizer(j.value("pre_tokenizer", json()), pre_);
    parse_decoder(j.value("decoder", json()), decoders_);
    parse_post_processor(j.value("post_processor", json()));
    // the matchers: normalized added tokens are matched in their normalized form
    for (const auto& t : added_) {
      if (t.normalized && !normalizers_.empty()) {
        std::string c = t.content;
        for (const auto& n : normalizers_) n.apply(c);
        norm_matcher_.add(c, &t);
      } else {
        raw_matcher_.add(t.content, &t);
      }
    }
    if (bpe_.unk) unk_ = *bpe_.unk;
    index_tokens();
  }

  void parse_post_processor(const json& j) {
    if (j.is_null()) return;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
      for (const auto& k : j.at("processors")) parse_post_processor(k);
      return;
    }
    if (type == "ByteLevel") return;  // offsets only
    if (type == "TemplateProcessing") {
      ACCEL_CHECK(!has_template_, Status::Unsupported, "more than one TemplateProcessing post-processor");
      has_template_ = true;
      const json& specials = j.value("special_tokens", json::object());
      for (const auto& item : j.at("single")) {
        if (item.contains("Sequence")) {
          ACCEL_CHECK(item["Sequence"].value("id", "A") == "A", Status::Format, "post_processor: single names sequence B");
          template_.push_back({true, {}});
        } else if (item.contains("SpecialToken")) {
          const std::string name = item["SpecialToken"].at("id").get<std::string>();
          ACCEL_CHECK(specials.contains(name), Status::Format, "post_processor: the special token '", name,
                      "' has no entry in special_tokens");
          Item it{false, {}};
          for (const auto& id : specials[name].at("ids")) it.ids.push_back(id.get<int32_t>());
          template_specials_ += it.ids.size();
          template_.push_back(std::move(it));
        } else {
          fail(Status::Format, "post_processor: an item of single is neither Sequence nor SpecialToken");
        }
      }
      return;
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      ACCEL_CHECK(!has_template_, Status::Unsupported, "more than one post-processor that adds tokens");
      has_template_ = true;
      const auto cls = j.at("cls"), sep = j.at("sep");
      template_.push_back({false, {cls.at(1).get<int32_t>()}});
      template_.push_back({true, {}});
      template_.push_back({false, {sep.at(1).get<int32_t>()}});
      template_specials_ = 2;
      return;
    }
    fail(Status::Unsupported, "the post-processor '", type,
         "' is not supported (supported: Sequence, ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing)");
  }

  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  Bpe bpe_;
  std::vector<AddedToken> added_;
  Matcher raw_matcher_, norm_matcher_;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_;
  std::vector<Decoder> decoders_;
  std::vector<Item> template_;
  bool has_template_ = false;
  size_t template_specials_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------

bool is_unicode_whitespace(char32_t c) { return is_whitespace(c); }

std::pair<size_t, size_t> strip_range(std::string_view s, size_t b, size_t e, bool left, bool right,
                                      bool (*strip)(char32_t)) {
  size_t n = 1;
  if (left)
    while (b < e && strip(decode_at(s, b, &n))) b += n;
  if (right)
    while (e > b) {
      const size_t k = prev_char_start(s, e);
      if (k < b || !strip(decode_at(s, k, &n))) break;
      e = k;
    }
  return {b, e};
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len_at(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len_at(s, i);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_run_at(s, i);
    }
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, const TruncatePad& tp) const {
  std::vector<int32_t> ids = encode_plain(text);
  if (tp.max_length > 0) {
    const size_t added = add_special ? num_special_tokens_added() : 0;
    ACCEL_CHECK(static_cast<size_t>(tp.max_length) >= added, Status::InvalidArgument, "max_length ", tp.max_length,
                " leaves no room: the tokenizer adds ", added, " special tokens");
    const size_t keep = static_cast<size_t>(tp.max_length) - added;
    if (ids.size() > keep) {
      if (tp.truncate_left) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
      else ids.resize(keep);
    }
  }
  if (add_special) add_special_tokens(ids);
  return ids;
}

void Tokenizer::index_tokens() {
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].empty()) ids_.emplace(tokens_[i], static_cast<int32_t>(i));  // the first id of a text
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

Batch Tokenizer::encode_batch(const std::vector<std::string_view>& texts, bool add_special, const TruncatePad& tp,
                              int threads) const {
  std::vector<std::vector<int32_t>> rows(texts.size());
  const size_t n = texts.size();
  const size_t workers = std::max<size_t>(1, std::min<size_t>(threads > 0 ? static_cast<size_t>(threads) : 1, n / 16));
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) rows[i] = encode(texts[i], add_special, tp);
  } else {
    // contiguous slices, one per thread; the first error wins and is rethrown here
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> errors(workers);
    for (size_t w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        try {
          for (size_t i = n * w / workers; i < n * (w + 1) / workers; ++i) rows[i] = encode(texts[i], add_special, tp);
        } catch (...) {
          errors[w] = std::current_exception();
        }
      });
    for (auto& t : pool) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  if (tp.pad_to_max_length && tp.max_length > 0) width = std::max(width, static_cast<size_t>(tp.max_length));
  if (tp.pad_to_multiple_of > 0 && width % static_cast<size_t>(tp.pad_to_multiple_of) != 0)
    width += static_cast<size_t>(tp.pad_to_multiple_of) - width % static_cast<size_t>(tp.pad_to_multiple_of);
  Batch b;
  b.rows = static_cast<int64_t>(n);
  b.cols = static_cast<int64_t>(width);
  const int32_t pad = batch_pad_id(tp);
  b.ids.assign(n * width, pad);
  b.mask.assign(n * width, 0);
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * width + (tp.pad_left ? width - rows[i].size() : 0);
    std::copy(rows[i].begin(), rows[i].end(), b.ids.begin() + static_cast<std::ptrdiff_t>(off));
    std::fill_n(b.mask.begin() + static_cast<std::ptrdiff_t>(off), rows[i].size(), 1);
  }
  return b;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  ACCEL_CHECK(id >= 0 && id < vocab_size(), Status::InvalidArgument, "id ", id, " is outside [0, ", vocab_size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
}

int32_t Tokenizer::batch_pad_id(const TruncatePad& tp) const {
  if (tp.pad_id >= 0) return static_cast<int32_t>(tp.pad_id);
  return pad_ >= 0 ? pad_ : 0;
}

void Tokenizer::read_config(const std::string& dir) {
  const auto token_of = [&](const json& v) -> int32_t {
    std::string name;
    if (v.is_string()) name = v.get<std::string>();
    else if (v.is_object() && v.contains("content")) name = v["content"].get<std::string>();
    else return -1;
    const auto id = token_to_id(name);
    return id ? *id : -1;
  };
  for (const char* file : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const std::string p = (fs::path(dir) / file).string();
    if (!fs::is_regular_file(p)) continue;
    json j;
    try {
      j = json::parse(read_file(p));
    } catch (const json::exception& e) {
      fail(Status::Format, "'", p, "' is not JSON: ", e.what());
    }
    ACCEL_CHECK(j.is_object(), Status::Format, "'", p, "' is not a JSON object");
    if (j.contains("bos_token")) bos_ = token_of(j["bos_token"]);
    if (j.contains("eos_token")) eos_ = token_of(j["eos_token"]);
    if (j.contains("pad_token")) pad_ = token_of(j["pad_token"]);
    if (j.contains("unk_token")) {
      const int32_t u = token_of(j["unk_token"]);
      if (u >= 0) unk_ = u;
    }
    if (j.contains("chat_template") && j["chat_template"].is_string()) chat_template_ = j["chat_template"].get<std::string>();
    if (j.contains("chat_template") && j["chat_template"].is_array())  // named templates: the default one
      for (const auto& t : j["chat_template"])
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
          chat_template_ = t["template"].get<std::string>();
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) add_bos_ = j["add_bos_token"].get<bool>();
    if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) add_eos_ = j["add_eos_token"].get<bool>();
  }
}

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& file, const std::string& dir);  // sentencepiece.cpp

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  ACCEL_CHECK(!ec && fs::exists(st), Status::IO, "'", path, "' does not exist");
  if (fs::is_directory(st)) {
    const fs::path d(path);
    if (fs::is_regular_file(d / "tokenizer.json")) return std::make_unique<HfTokenizer>((d / "tokenizer.json").string(), path);
    if (fs::is_regular_file(d / "tokenizer.model")) return load_sentencepiece((d / "tokenizer.model").string(), path);
    fail(Status::IO, "the directory '", path, "' holds neither tokenizer.json nor tokenizer.model");
  }
  ACCEL_CHECK(fs::is_regular_file(st), Status::IO, "'", path, "' is not a regular file");
  const std::string dir = fs::path(path).parent_path().string();
  if (path.size() >= 6 && path.compare(path.size() - 6, 6, ".model") == 0) return load_sentencepiece(path, dir);
  // a tokenizer.json reads its directory's tokenizer_config.json only under its usual name
  return std::make_unique<HfTokenizer>(path, fs::path(path).filename() == "tokenizer.json" ? (dir.empty() ? "." : dir) : "");
}

}  // namespace accel::tokenizer
