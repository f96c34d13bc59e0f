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

// A batch large enough to be encoded on several threads equals the texts encoded one by one.
TEST_P(Family, LargeBatchesEqualTextsOneByOne) {
  const auto texts = corpus();
  accel_tokenizer* tok = load(kDir + "/" + GetParam());
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> many;
  for (int r = 0; r < 3; ++r) many.insert(many.end(), texts.begin(), texts.end());
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& t : many) ptrs.push_back(t.data()), lens.push_back(t.size());
  accel_encode_options o;
  accel_encode_options_init(&o, ACCEL_ENCODE_OPTIONS_VERSION);
  o.replace_invalid_utf8 = 1;
  o.padding_side = ACCEL_SIDE_LEFT;
  o.pad_to_multiple_of = 8;
  o.pad_id = 3;
  accel_tensor *ids = nullptr, *mask = nullptr;
  ASSERT_EQ(accel_tokenizer_encode_batch(tok, ptrs.data(), lens.data(), ptrs.size(), &o, &ids, &mask), ACCEL_OK)
      << accel_last_error(nullptr);
  int64_t shape[2];
  ASSERT_EQ(accel_tensor_shape(ids, shape, 2), ACCEL_OK);
  ASSERT_EQ(shape[0], static_cast<int64_t>(many.size()));
  EXPECT_EQ(shape[1] % 8, 0);
  const auto flat = values(ids), m = values(mask);
  const size_t w = static_cast<size_t>(shape[1]);
  for (size_t i = 0; i < many.size(); ++i) {
    const auto one = encode(tok, many[i], true, true);
    const size_t pad = w - one.size();
    std::vector<int64_t> row(flat.begin() + static_cast<std::ptrdiff_t>(i * w), flat.begin() + static_cast<std::ptrdiff_t>((i + 1) * w));
    std::vector<int64_t> want(pad, 3);
    want.insert(want.end(), one.begin(), one.end());
    ASSERT_EQ(row, want) << "row " << i;
    for (size_t k = 0; k < w; ++k) ASSERT_EQ(m[i * w + k], k < pad ? 0 : 1) << "row " << i << " column " << k;
  }
  accel_tokenizer_destroy(tok);
}

// Random bytes never crash the tokenizer: replaced, they encode; decoded, byte-level BPE gives
// back exactly the (replaced) text. Refused without replacement when they are not UTF-8.
TEST_P(Family, RandomBytesEncodeAndByteLevelRoundTrips) {
  accel_tokenizer* tok = load(kDir + "/" + GetParam());
  ASSERT_NE(tok, nullptr);
  const std::string fam = GetParam();
  const bool lossless = fam == "gpt2" || fam == "smollm2" || fam == "llama3";
  uint64_t x = 0x9E3779B97F4A7C15ull;
  const auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  for (int n = 0; n < 1500; ++n) {
    std::string b(next() % 40, '\0');
    for (auto& c : b) {
      const uint64_t r = next() % 10;
      c = static_cast<char>(r < 5 ? 0x20 + next() % 0x5F : r < 8 ? 0x80 + next() % 0x80 : next() % 256);
    }
    const auto ids = encode(tok, b, false, true);
    accel_tensor* out = nullptr;
    const accel_status st = accel_tokenizer_encode(tok, b.data(), b.size(), nullptr, &out);
    if (st == ACCEL_OK) accel_tensor_destroy(out);
    else EXPECT_NE(std::string(accel_last_error(nullptr)).find("UTF-8"), std::string::npos);
    if (lossless && st == ACCEL_OK) {  // valid UTF-8: decode gives it back
      ASSERT_EQ(decode(tok, ids, false), b) << "string " << n;
    }
  }
  accel_tokenizer_destroy(tok);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Family, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param); });

// Truncation counts the special tokens the template adds (Llama 3's BOS) and keeps them.
TEST(Tokenizer, TruncationKeepsTheTemplateTokens) {
  accel_tokenizer* tok = load(kDir + "/llama3");
  ASSERT_NE(tok, nullptr);
  const std::string text = "Gradient accumulation across four micro batches";
  const auto plain = encode(tok, text, false, false);
  ASSERT_GT(plain.size(), 4u);
  int64_t bos = -1;
  ASSERT_EQ(accel_tokenizer_special_id(tok, ACCEL_TOKEN_BOS, &bos), ACCEL_OK);
  ASSERT_EQ(bos, 0);
  accel_encode_options o;
  accel_encode_options_init(&o, ACCEL_ENCODE_OPTIONS_VERSION);
  o.max_length = 3;
  accel_tensor* t = nullptr;
  ASSERT_EQ(accel_tokenizer_encode(tok, text.data(), text.size(), &o, &t), ACCEL_OK);
  EXPECT_EQ(values(t), (std::vector<int64_t>{bos, plain[0], plain[1]}));
  o.truncation_side = ACCEL_SIDE_LEFT;
  ASSERT_EQ(accel_tokenizer_encode(tok, text.data(), text.size(), &o, &t), ACCEL_OK);
  EXPECT_EQ(values(t), (std::vector<int64_t>{bos, plain[plain.size() - 2], plain.back()}));
  o.max_length = 1;
  ASSERT_EQ(accel_tokenizer_encode(tok, text.data(), text.size(), &o, &t), ACCEL_OK);
  EXPECT_EQ(values(t), (std::vector<int64_t>{bos}));
  accel_tokenizer_destroy(tok);
}

// A template that adds two tokens leaves no room in max_length 1: refused, not cut.
TEST(Tokenizer, MaxLengthBelowTheTemplateIsRefused) {
  json j = read_json(kDir + "/llama3/tokenizer.json");
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                                 {{"SpecialToken", {{"id", "<|eot_id|>"}, {"type_id", 0}}}}})},
                         {"pair", json::array()},
                         {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {0}}, {"tokens", {"<|begin_of_text|>"}}}},
                                             {"<|eot_id|>", {{"id", "<|eot_id|>"}, {"ids", {4}}, {"tokens", {"<|eot_id|>"}}}}}}};
  const std::string p = testing::TempDir() + "/two_specials.json";
  std::ofstream(p) << j.dump();
  accel_tokenizer* tok = load(p);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(encode(tok, "hi", true, false).front(), 0);
  EXPECT_EQ(encode(tok, "hi", true, false).back(), 4);
  accel_encode_options o;
  accel_encode_options_init(&o, ACCEL_ENCODE_OPTIONS_VERSION);
  o.max_length = 1;
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tokenizer_encode(tok, "hi", 2, &o, &t), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(nullptr)).find("adds 2 special tokens"), std::string::npos)
      << accel_last_error(nullptr);
  accel_tokenizer_destroy(tok);
}

// The special tokens come from tokenizer_config.json, or from the SentencePiece model.
TEST(Tokenizer, SpecialTokensFromTheConfigAndTheModel) {
  const auto ids = [](const std::string& path) {
    accel_tokenizer* tok = load(path);
    std::vector<int64_t> v;
    for (auto w : {ACCEL_TOKEN_BOS, ACCEL_TOKEN_EOS, ACCEL_TOKEN_PAD, ACCEL_TOKEN_UNK}) {
      int64_t id = -2;
      EXPECT_EQ(accel_tokenizer_special_id(tok, w, &id), ACCEL_OK);
      v.push_back(id);
    }
    accel_tokenizer_destroy(tok);
    return v;
  };
  EXPECT_EQ(ids(kDir + "/qwen2"), (std::vector<int64_t>{-1, 1200, 1201, -1}));  // no BOS; <|im_end|>, <|endoftext|>
  EXPECT_EQ(ids(kDir + "/llama2/tokenizer.model"), (std::vector<int64_t>{1, 2, -1, 0}));
  EXPECT_EQ(ids(kDir + "/gemma/tokenizer.model"), (std::vector<int64_t>{2, 1, 0, 3}));
  accel_tokenizer* tok = load(kDir + "/qwen2");
  const char* text = nullptr;
  int special = -1;
  ASSERT_EQ(accel_tokenizer_id_to_token(tok, 1202, &text, &special), ACCEL_OK);
  EXPECT_STREQ(text, "<|im_start|>");
  EXPECT_EQ(special, 1);
  int64_t id = 0;
  ASSERT_EQ(accel_tokenizer_token_to_id(tok, "<|im_start|>", &id), ACCEL_OK);
  EXPECT_EQ(id, 1202);
  int64_t n = 0;
  ASSERT_EQ(accel_tokenizer_vocab_size(tok, &n), ACCEL_OK);
  EXPECT_EQ(n, 1203);
  accel_tokenizer_destroy(tok);
}

std::string apply_chat(const accel_tokenizer* tok, const json& conv, bool gen, accel_status* st,
                       accel_chat_format f = ACCEL_CHAT_AUTO) {
  std::vector<std::string> roles, contents;
  for (const auto& m : conv) roles.push_back(m["role"]), contents.push_back(m["content"]);
  std::vector<accel_chat_message> msgs;
  for (size_t i = 0; i < roles.size(); ++i) msgs.push_back({roles[i].c_str(), contents[i].c_str()});
  size_t n = 0;
  *st = accel_tokenizer_apply_chat(tok, f, msgs.data(), msgs.size(), gen, nullptr, 0, &n);
  if (*st != ACCEL_OK) return "";
  std::string out(n + 1, '\0');
  EXPECT_EQ(accel_tokenizer_apply_chat(tok, f, msgs.data(), msgs.size(), gen, out.data(), out.size(), &n), ACCEL_OK);
  out.resize(n);
  return out;
}

// The chat formats render what transformers' apply_chat_template renders with each family's
// template (the text and its ids), and refuse what the template refuses.
TEST(Tokenizer, ChatFormatsRenderAsTransformersTemplates) {
  const json convs = read_json(kDir + "/conversations.json");
  size_t checked = 0;
  for (const char* fam : {"qwen2", "smollm2", "llama3", "gemma", "phi3", "mistral"}) {
    accel_tokenizer* tok = load(kDir + "/" + fam);
    ASSERT_NE(tok, nullptr);
    const json exp = read_json(kDir + "/" + fam + "/expected.json");
    for (const auto& c : exp["chat"]) {
      accel_status st;
      const std::string text = apply_chat(tok, convs[c["conversation"].get<size_t>()], c["add_generation_prompt"], &st);
      if (c.contains("error")) {
        EXPECT_EQ(st, ACCEL_ERR_INVALID_ARGUMENT) << fam << " conversation " << c["conversation"];
        continue;
      }
      ASSERT_EQ(st, ACCEL_OK) << fam << ": " << accel_last_error(nullptr);
      EXPECT_EQ(text, c["text"].get<std::string>()) << fam << " conversation " << c["conversation"];
      EXPECT_EQ(encode(tok, text, false, false), ids_of(c["ids"])) << fam;
      ++checked;
    }
    accel_tokenizer_destroy(tok);
  }
  EXPECT_GE(checked, 28u);
  // gpt2's tokenizer has no chat_template: AUTO is refused, a named format renders
  accel_tokenizer* tok = load(kDir + "/gpt2");
  accel_status st;
  apply_chat(tok, convs[0], false, &st);
  EXPECT_EQ(st, ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(nullptr)).find("chat_template"), std::string::npos);
  EXPECT_EQ(apply_chat(tok, convs[0], true, &st, ACCEL_CHAT_CHATML).substr(0, 17), "<|im_start|>user\n");
  accel_tokenizer_destroy(tok);
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name, const std::string& text) : path(testing::TempDir() + "/" + name) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

struct Loaded {
  std::vector<std::vector<int64_t>> ids, labels, mask;
};

// Every batch of one epoch, rows in order (no shuffling), each cut to its mask.
Loaded load_all(accel_context* ctx, accel_dataloader* dl) {
  Loaded out;
  for (;;) {
    accel_tensor *x = nullptr, *y = nullptr, *m = nullptr;
    EXPECT_EQ(accel_dataloader_next(ctx, dl, &x, &y), ACCEL_OK) << accel_last_error(ctx);
    if (!x) break;
    EXPECT_EQ(accel_dataloader_attention_mask(ctx, dl, &m), ACCEL_OK) << accel_last_error(ctx);
    int64_t shape[2];
    accel_tensor_shape(x, shape, 2);
    const auto xi = values(x), yi = values(y), mi = values(m);
    for (int64_t r = 0; r < shape[0]; ++r) {
      const auto row = [&](const std::vector<int64_t>& v) {
        return std::vector<int64_t>(v.begin() + r * shape[1], v.begin() + (r + 1) * shape[1]);
      };
      out.ids.push_back(row(xi));
      out.labels.push_back(row(yi));
      out.mask.push_back(row(mi));
    }
  }
  return out;
}

accel_context* cpu_context() {
  accel_options o;
  accel_options_init(&o, ACCEL_OPTIONS_VERSION);
  o.device = ACCEL_DEVICE_CPU;
  o.num_threads = 1;
  accel_context* ctx = nullptr;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_OK) << accel_last_error(nullptr);
  return ctx;
}

// Fine-tuning data: chat lines carry labels on the assistant turns only (each turn's text and
// its end-of-turn token), prompt/completion lines on the completion, text lines everywhere;
// padding on either side with the mask, truncation and packing.
TEST(Tokenizer, FineTuningBatchesMaskThePrompts) {
  const json convs = read_json(kDir + "/conversations.json");
  std::string jsonl;
  jsonl += json({{"messages", convs[0]}}).dump() + "\n\n";
  jsonl += json({{"messages", convs[2]}}).dump() + "\n";
  jsonl += json({{"prompt", "Question: what is 2 + 2?\nAnswer:"}, {"completion", " 4"}}).dump() + "\n";
  jsonl += json({{"text", "Plain text trains on every token."}}).dump() + "\n";
  const TempFile file("sft.jsonl", jsonl);
  accel_context* ctx = cpu_context();
  accel_tokenizer* tok = load(kDir + "/qwen2");
  accel_dataloader_options lo;
  accel_dataloader_options_init(&lo, ACCEL_DATALOADER_OPTIONS_VERSION);
  lo.batch_size = 2;
  lo.shuffle = 0;
  for (const accel_side side : {ACCEL_SIDE_RIGHT, ACCEL_SIDE_LEFT}) {
    accel_sft_options so;
    accel_sft_options_init(&so, ACCEL_SFT_OPTIONS_VERSION);
    so.padding_side = side;
    accel_dataloader* dl = nullptr;
    ASSERT_EQ(accel_sft_dataloader_create(ctx, tok, file.path.c_str(), &so, &lo, &dl), ACCEL_OK) << accel_last_error(ctx);
    const Loaded b = load_all(ctx, dl);
    ASSERT_EQ(b.ids.size(), 4u);
    // conversation 0: the labels are the assistant's answer and its <|im_end|>\n
    const auto unmasked = [&](size_t r) {
      std::vector<int64_t> v;
      for (size_t k = 0; k < b.labels[r].size(); ++k)
        if (b.labels[r][k] != -100) v.push_back(b.labels[r][k]);
      return v;
    };
    EXPECT_EQ(decode(tok, unmasked(0), false), convs[0][1]["content"].get<std::string>() + "<|im_end|>\n");
    EXPECT_EQ(decode(tok, unmasked(1), false), convs[2][1]["content"].get<std::string>() + "<|im_end|>\n");
    EXPECT_EQ(decode(tok, unmasked(2), false), " 4<|im_end|>");  // the completion and EOS (<|im_end|>)
    const auto real = [&](size_t r) {
      std::vector<int64_t> v;
      for (size_t k = 0; k < b.ids[r].size(); ++k)
        if (b.mask[r][k]) v.push_back(b.ids[r][k]);
      return v;
    };
    EXPECT_EQ(unmasked(3), real(3));  // text: every token
    // the ids are the rendered conversation's; padding is where the mask says, labels -100 there
    accel_status st;
    EXPECT_EQ(real(0), encode(tok, apply_chat(tok, convs[0], false, &st), false, false));
    for (size_t r = 0; r < 4; ++r)
      for (size_t k = 0; k < b.ids[r].size(); ++k) {
        if (!b.mask[r][k]) {
          EXPECT_EQ(b.labels[r][k], -100);
        }
        const bool pad_zone = side == ACCEL_SIDE_RIGHT ? k >= real(r).size() : k < b.ids[r].size() - real(r).size();
        EXPECT_EQ(b.mask[r][k], pad_zone ? 0 : 1) << "row " << r << " column " << k;
        if (pad_zone) {
          EXPECT_EQ(b.ids[r][k], 1201);  // Qwen's padding token <|endoftext|>
        }
      }
    accel_dataloader_destroy(dl);
  }
  {  // completion_only_loss off: every real token; max_length cuts; packing makes full blocks
    accel_sft_options so;
    accel_sft_options_init(&so, ACCEL_SFT_OPTIONS_VERSION);
    so.completion_only_loss = 0;
    so.max_length = 8;
    accel_dataloader* dl = nullptr;
    ASSERT_EQ(accel_sft_dataloader_create(ctx, tok, file.path.c_str(), &so, &lo, &dl), ACCEL_OK);
    const Loaded b = load_all(ctx, dl);
    for (size_t r = 0; r < b.ids.size(); ++r) {
      EXPECT_LE(b.ids[r].size(), 8u);
      for (size_t k = 0; k < b.ids[r].size(); ++k) EXPECT_EQ(b.labels[r][k], b.mask[r][k] ? b.ids[r][k] : -100);
    }
    accel_dataloader_destroy(dl);
    so.packing = 1;
    ASSERT_EQ(accel_sft_dataloader_create(ctx, tok, file.path.c_str(), &so, &lo, &dl), ACCEL_OK);
    const Loaded p = load_all(ctx, dl);
    size_t total = 0;
    for (size_t r = 0; r < p.ids.size(); ++r) {
      size_t n = 0;
      for (auto m : p.mask[r]) n += static_cast<size_t>(m);
      if (r + 1 < p.ids.size()) {
        EXPECT_EQ(n, 8u) << "block " << r;
      }
      total += n;
    }
    EXPECT_GT(total, 40u);  // every token of the four examples, in blocks of 8
    accel_dataloader_destroy(dl);
  }
  {  // errors name the file and line
    const TempFile bad("bad.jsonl", "{\"text\": \"ok\"}\n{\"messages\": 3}\n");
    accel_sft_options so;
    accel_sft_options_init(&so, ACCEL_SFT_OPTIONS_VERSION);
    accel_dataloader* dl = nullptr;
    EXPECT_EQ(accel_sft_dataloader_create(ctx, tok, bad.path.c_str(), &so, &lo, &dl), ACCEL_ERR_FORMAT);
    EXPECT_NE(std::string(accel_last_error(ctx)).find("bad.jsonl:2"), std::string::npos) << accel_last_error(ctx);
    accel_tokenizer* gemma = load(kDir + "/gemma");
    const TempFile sys("sys.jsonl", json({{"messages", convs[1]}}).dump() + "\n");
    EXPECT_EQ(accel_sft_dataloader_create(ctx, gemma, sys.path.c_str(), &so, &lo, &dl), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(accel_last_error(ctx)).find("sys.jsonl:1"), std::string::npos) << accel_last_error(ctx);
    EXPECT_NE(std::string(accel_last_error(ctx)).find("system role"), std::string::npos) << accel_last_error(ctx);
    accel_tokenizer_destroy(gemma);
  }
  accel_tokenizer_destroy(tok);
  accel_destroy(ctx);
}

}  // namespace
