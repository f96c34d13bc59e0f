// Tokenizers through the C ABI against Hugging Face `tokenizers` and SentencePiece
// (tests/fixtures/tokenizers, made by scripts/lm_fixtures --tokenizers): every family's
// tokenizer.json gives the same ids for every string of a multilingual corpus, with and
// without special tokens, the same decoded text, and the same padded, truncated batches; the
// SentencePiece .model files give SentencePiece's ids. Then what bad input gets.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "accel/accel.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = ACCEL_TOKENIZER_FIXTURES;
const char* kFamilies[] = {"gpt2", "smollm2", "llama3", "qwen2", "llama2", "mistral", "phi3", "gemma"};

json read_json(const std::string& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << p;
  return json::parse(f);
}

// The corpus as bytes (a "hex" entry is not UTF-8).
std::vector<std::string> corpus() {
  std::vector<std::string> out;
  for (const auto& e : read_json(kDir + "/corpus.json")) {
    if (e.contains("text")) {
      out.push_back(e["text"].get<std::string>());
    } else {
      const std::string h = e["hex"].get<std::string>();
      std::string b;
      for (size_t i = 0; i + 1 < h.size(); i += 2) b += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
      out.push_back(b);
    }
  }
  return out;
}

std::vector<int64_t> values(accel_tensor* t) {
  int64_t n = 0;
  EXPECT_EQ(accel_tensor_numel(t, &n), ACCEL_OK);
  std::vector<int64_t> v(static_cast<size_t>(n));
  EXPECT_EQ(accel_tensor_copy_to_host(t, v.data(), v.size() * sizeof(int64_t)), ACCEL_OK);
  accel_tensor_destroy(t);
  return v;
}

std::vector<int64_t> encode(const accel_tokenizer* tok, const std::string& s, bool add_special, bool replace) {
  accel_encode_options o;
  accel_encode_options_init(&o, ACCEL_ENCODE_OPTIONS_VERSION);
  o.add_special_tokens = add_special;
  o.replace_invalid_utf8 = replace;
  accel_tensor* t = nullptr;
  const accel_status st = accel_tokenizer_encode(tok, s.data(), s.size(), &o, &t);
  EXPECT_EQ(st, ACCEL_OK) << accel_last_error(nullptr);
  return st == ACCEL_OK ? values(t) : std::vector<int64_t>{};
}

std::string decode(const accel_tokenizer* tok, const std::vector<int64_t>& ids, bool skip) {
  size_t n = 0;
  EXPECT_EQ(accel_tokenizer_decode(tok, ids.data(), ids.size(), skip, nullptr, 0, &n), ACCEL_OK)
      << accel_last_error(nullptr);
  std::string s(n + 1, '\0');
  EXPECT_EQ(accel_tokenizer_decode(tok, ids.data(), ids.size(), skip, s.data(), s.size(), &n), ACCEL_OK);
  s.resize(n);
  return s;
}

std::vector<int64_t> ids_of(const json& j) { return j.get<std::vector<int64_t>>(); }

std::string show(const std::vector<int64_t>& v) {
  std::string s;
  for (auto x : v) s += std::to_string(x) + " ";
  return s;
}

accel_tokenizer* load(const std::string& path) {
  accel_tokenizer* t = nullptr;
  EXPECT_EQ(accel_tokenizer_load(path.c_str(), &t), ACCEL_OK) << accel_last_error(nullptr);
  return t;
}

class Family : public ::testing::TestWithParam<const char*> {};

TEST_P(Family, IdsAndTextEqualHuggingFaceTokenizers) {
  const std::string dir = kDir + "/" + GetParam();
  const json exp = read_json(dir + "/expected.json");
  const auto texts = corpus();
  accel_tokenizer* tok = load(dir);
  ASSERT_NE(tok, nullptr);
  size_t tokens = 0, differing = 0, shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const bool valid = exp["add_special"][i].is_array() && i < texts.size();
    ASSERT_TRUE(valid);
    const bool replace = true;  // valid UTF-8 is unchanged by it; the others are replaced as Python's decode
    const auto add = encode(tok, texts[i], true, replace), plain = encode(tok, texts[i], false, replace);
    const auto want_add = ids_of(exp["add_special"][i]), want_plain = ids_of(exp["plain"][i]);
    tokens += want_add.size();
    const std::string d = decode(tok, want_add, false), ds = decode(tok, want_add, true);
    const bool same = add == want_add && plain == want_plain && d == exp["decode"][i].get<std::string>() &&
                      ds == exp["decode_skip"][i].get<std::string>();
    if (!same) {
      ++differing;
      if (shown++ < 5)
        ADD_FAILURE() << GetParam() << " string " << i << " '" << texts[i] << "'\n  accel " << show(add) << "\n  hf    "
                      << show(want_add) << "\n  plain accel " << show(plain) << "\n  plain hf    " << show(want_plain)
                      << "\n  decode accel '" << d << "'\n  decode hf    '" << exp["decode"][i].get<std::string>()
                      << "'\n  skip accel '" << ds << "'\n  skip hf    '" << exp["decode_skip"][i].get<std::string>() << "'";
    }
  }
  std::printf("%s: %zu strings, %zu tokens, %zu differing\n", GetParam(), texts.size(), tokens, differing);
  EXPECT_EQ(differing, 0u);

  // Batches: truncation and padding on each side, as tokenizers' enable_truncation/enable_padding.
  const json& batch = exp["batch"];
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (int i : batch["texts"].get<std::vector<int>>()) {
    ptrs.push_back(texts[static_cast<size_t>(i)].data());
    lens.push_back(texts[static_cast<size_t>(i)].size());
  }
  for (const auto& c : batch["cases"]) {
    accel_encode_options o;
    accel_encode_options_init(&o, ACCEL_ENCODE_OPTIONS_VERSION);
    o.max_length = batch["max_length"].get<int64_t>();
    o.padding_side = c["padding_side"] == "left" ? ACCEL_SIDE_LEFT : ACCEL_SIDE_RIGHT;
    o.truncation_side = c["truncation_side"] == "left" ? ACCEL_SIDE_LEFT : ACCEL_SIDE_RIGHT;
    o.pad_id = batch["pad_id"].get<int64_t>();
    accel_tensor *ids = nullptr, *mask = nullptr;
    ASSERT_EQ(accel_tokenizer_encode_batch(tok, ptrs.data(), lens.data(), ptrs.size(), &o, &ids, &mask), ACCEL_OK)
        << accel_last_error(nullptr);
    std::vector<int64_t> want_ids, want_mask;
    for (const auto& r : c["ids"]) for (auto x : r) want_ids.push_back(x.get<int64_t>());
    for (const auto& r : c["mask"]) for (auto x : r) want_mask.push_back(x.get<int64_t>());
    EXPECT_EQ(values(ids), want_ids) << "padding " << c["padding_side"] << ", truncation " << c["truncation_side"];
    EXPECT_EQ(values(mask), want_mask) << "padding " << c["padding_side"] << ", truncation " << c["truncation_side"];
  }
  accel_tokenizer_destroy(tok);

  // The SentencePiece model beside it gives SentencePiece's own ids and text.
  if (fs::exists(dir + "/tokenizer.model")) {
    accel_tokenizer* sp = load(dir + "/tokenizer.model");
    ASSERT_NE(sp, nullptr);
    size_t sp_differing = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto got = encode(sp, texts[i], false, true);
      const auto want = ids_of(exp["sentencepiece"]["ids"][i]);
      const std::string d = decode(sp, want, true);
      if (got != want || d != exp["sentencepiece"]["decode"][i].get<std::string>()) {
        if (sp_differing++ < 5)
          ADD_FAILURE() << GetParam() << ".model string " << i << "\n  accel " << show(got) << "\n  spm   " << show(want)
                        << "\n  decode '" << d << "' spm '" << exp["sentencepiece"]["decode"][i].get<std::string>() << "'";
      }
    }
    std::printf("%s/tokenizer.model: %zu strings, %zu differing from SentencePiece\n", GetParam(), texts.size(),
                sp_differing);
    EXPECT_EQ(sp_differing, 0u);
    accel_tokenizer_destroy(sp);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Family, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
