// Misuse cases: tokenizers (files that are not tokenizers, or use what this version lacks;
// text that is not UTF-8; ids outside the vocabulary; buffers too small).
#include "common.h"

namespace misuse {

namespace {

const std::string kFixtures = ACCEL_TOKENIZER_FIXTURES;

accel_tokenizer* load_fixture(const std::string& family = "llama3") {
  accel_tokenizer* t = nullptr;
  ok(accel_tokenizer_load((kFixtures + "/" + family).c_str(), &t), "accel_tokenizer_load");
  return t;
}

// tests/fixtures/tokenizers/gpt2/tokenizer.json edited by `edit`, written to tokenizer.json here.
void edited_gpt2(const std::function<void(json&)>& edit) {
  json j = json::parse(read_file(kFixtures + "/gpt2/tokenizer.json"));
  edit(j);
  write_file("tokenizer.json", j.dump());
}

}  // namespace

void chat_and_sft();

void tokenizers() {
  const std::string ld = "accel_tokenizer_load";
  auto load = [](const char* path, bool null_out = false) {
    return [=](Env& e) {
      return with_out<accel_tokenizer*>(e, [&](auto* out) { return R(accel_tokenizer_load(path, null_out ? nullptr : out)); });
    };
  };
  null_case(ld, "path", load(nullptr));
  null_case(ld, "out", load("tokenizer.json", true));
  add(ld, "path=\"\"", ARG, {"path", "empty"}, load(""));
  add(ld, "a missing file", IO, {"none.json", "does not exist"}, load("none.json"));
  add(ld, "a directory with neither file", IO, {"mydir", "neither tokenizer.json nor tokenizer.model"}, [load](Env& e) {
    fs::create_directory("mydir");
    return load("mydir")(e);
  });
  add(ld, "a text file", FORMAT, {"tokenizer.json", "not JSON"}, [load](Env& e) {
    write_file("tokenizer.json", kNotes);
    return load("tokenizer.json")(e);
  });
  add(ld, "JSON without a model", FORMAT, {"tokenizer.json", "model"}, [load](Env& e) {
    write_file("tokenizer.json", "{\"version\": \"1.0\"}");
    return load("tokenizer.json")(e);
  });
  add(ld, "a Unigram model", UNSUPPORTED, {"Unigram", "BPE"}, [load](Env& e) {
    edited_gpt2([](json& j) { j["model"]["type"] = "Unigram"; });
    return load("tokenizer.json")(e);
  });
  add(ld, "an unknown normalizer", UNSUPPORTED, {"BertNormalizer", "normalizer"}, [load](Env& e) {
    edited_gpt2([](json& j) { j["normalizer"] = {{"type", "BertNormalizer"}}; });
    return load("tokenizer.json")(e);
  });
  add(ld, "an unknown pre-tokenizer", UNSUPPORTED, {"UnicodeScripts", "pre-tokenizer"}, [load](Env& e) {
    edited_gpt2([](json& j) { j["pre_tokenizer"] = {{"type", "UnicodeScripts"}}; });
    return load("tokenizer.json")(e);
  });
  add(ld, "an unknown decoder", UNSUPPORTED, {"WordPiece", "decoder"}, [load](Env& e) {
    edited_gpt2([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; });
    return load("tokenizer.json")(e);
  });
  add(ld, "BPE dropout", UNSUPPORTED, {"dropout"}, [load](Env& e) {
    edited_gpt2([](json& j) { j["model"]["dropout"] = 0.1; });
    return load("tokenizer.json")(e);
  });
  add(ld, "a merge of a token not in the vocabulary", FORMAT, {"merges[0]", "not in the vocabulary"}, [load](Env& e) {
    edited_gpt2([](json& j) { j["model"]["merges"][0] = json::array({"zzz_not_a_token", "a"}); });
    return load("tokenizer.json")(e);
  });
  add(ld, "a regular expression that does not compile", FORMAT, {"regular expression", "(?<"}, [load](Env& e) {
    edited_gpt2([](json& j) {
      j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(?<"}}}, {"behavior", "Isolated"}, {"invert", false}};
    });
    return load("tokenizer.json")(e);
  });
  add(ld, "a .model that is not SentencePiece", FORMAT, {"tokenizer.model", "not a SentencePiece model"}, [load](Env& e) {
    write_file("tokenizer.model", kNotes);
    return load("tokenizer.model")(e);
  });
  destroy_null("accel_tokenizer_destroy", [] { accel_tokenizer_destroy(nullptr); });

  getter<accel_tokenizer, int64_t>("accel_tokenizer_vocab_size", "tokenizer", accel_tokenizer_vocab_size,
                                   [](Env&) { return load_fixture(); });

  const std::string sid = "accel_tokenizer_special_id";
  null_case(sid, "tokenizer", [](Env& e) {
    return with_out<int64_t>(e, [&](auto* out) { return R(accel_tokenizer_special_id(nullptr, ACCEL_TOKEN_BOS, out)); });
  });
  null_case(sid, "out", [](Env&) { return R(accel_tokenizer_special_id(load_fixture(), ACCEL_TOKEN_BOS, nullptr)); });
  for (int w : {42, -1, 4})
    add(sid, "which=" + str(w), ARG, {"which", str(w)}, [w](Env& e) {
      accel_tokenizer* t = load_fixture();
      return with_out<int64_t>(e, [&](auto* out) { return R(accel_tokenizer_special_id(t, raw<accel_special_token>(w), out)); });
    });

  const std::string t2i = "accel_tokenizer_token_to_id";
  null_case(t2i, "tokenizer", [](Env& e) {
    return with_out<int64_t>(e, [&](auto* out) { return R(accel_tokenizer_token_to_id(nullptr, "a", out)); });
  });
  null_case(t2i, "token", [](Env& e) {
    accel_tokenizer* t = load_fixture();
    return with_out<int64_t>(e, [&](auto* out) { return R(accel_tokenizer_token_to_id(t, nullptr, out)); });
  });
  null_case(t2i, "out", [](Env&) { return R(accel_tokenizer_token_to_id(load_fixture(), "a", nullptr)); });
  add(t2i, "a token not in the vocabulary is -1", OK, {}, [](Env& e) {
    int64_t id = 7;
    R r(accel_tokenizer_token_to_id(load_fixture(), "no such token", &id));
    e.expect(id == -1, "id = " + str(id));
    return r;
  });

  const std::string i2t = "accel_tokenizer_id_to_token";
  null_case(i2t, "tokenizer", [](Env& e) {
    return with_out<const char*>(e, [&](auto* out) { return R(accel_tokenizer_id_to_token(nullptr, 0, out, nullptr)); });
  });
  null_case(i2t, "out", [](Env&) { return R(accel_tokenizer_id_to_token(load_fixture(), 0, nullptr, nullptr)); });
  for (int64_t id : {int64_t{-1}, int64_t{1205}, int64_t{1} << 40})
    add(i2t, "id=" + str(id), ARG, {"id", str(id)}, [id](Env& e) {
      accel_tokenizer* t = load_fixture();
      return with_out<const char*>(e, [&](auto* out) { return R(accel_tokenizer_id_to_token(t, id, out, nullptr)); });
    });

  options_init<accel_encode_options>("accel_encode_options_init", accel_encode_options_init, ACCEL_ENCODE_OPTIONS_VERSION);

  const std::string enc = "accel_tokenizer_encode";
  const std::string text = "hello world";
  null_case(enc, "tokenizer", [text](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_tokenizer_encode(nullptr, text.data(), text.size(), nullptr, out)); });
  });
  null_case(enc, "out", [text](Env&) { return R(accel_tokenizer_encode(load_fixture(), text.data(), text.size(), nullptr, nullptr)); });
  null_case(enc, "text", [](Env& e) {
    accel_tokenizer* t = load_fixture();
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_tokenizer_encode(t, nullptr, 3, nullptr, out)); });
  });
  struct Invalid {
    const char* name;
    std::string bytes;
    size_t at;  // the offset the message names
  };
  const Invalid invalid[] = {{"a stray byte", "abc\xff", 3}, {"a bad continuation", "ab\xc3\x28", 2},
                             {"a surrogate", "abc\xed\xa0\x80", 3}};
  for (const auto& iv : invalid)
    add(enc, std::string("invalid UTF-8: ") + iv.name, ARG, {"text", "UTF-8", "byte " + str(iv.at)}, [bad = iv.bytes](Env& e) {
      accel_tokenizer* t = load_fixture();
      return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_tokenizer_encode(t, bad.data(), bad.size(), nullptr, out)); });
    });
  const auto eo = target<accel_encode_options>(
      enc, "opts",
      [] {
        accel_encode_options o = ACCEL_ENCODE_OPTIONS_INIT;
        return o;
      },
      [text](Env& e, const accel_encode_options& o) {
        accel_tokenizer* t = load_fixture();
        return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_tokenizer_encode(t, text.data(), text.size(), &o, out)); });
      });
  eo.versions();
  eo.field<int64_t>("max_length", &accel_encode_options::max_length, {-1, -100});
  eo.field<int64_t>("pad_to_multiple_of", &accel_encode_options::pad_to_multiple_of, {-8});
  eo.field<int64_t>("pad_id", &accel_encode_options::pad_id, {-2});
  eo.enums("truncation_side", &accel_encode_options::truncation_side);
  eo.enums("padding_side", &accel_encode_options::padding_side);

  const std::string bat = "accel_tokenizer_encode_batch";
  static const char* const kTexts[] = {"one", "two three", "four"};
  auto batch = [](const char* const* texts, size_t count, const accel_encode_options* o) {
    return [=](Env& e) {
      accel_tokenizer* t = load_fixture();
      return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_tokenizer_encode_batch(t, texts, nullptr, count, o, out, nullptr)); });
    };
  };
  null_case(bat, "tokenizer", [](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_tokenizer_encode_batch(nullptr, kTexts, nullptr, 3, nullptr, out, nullptr)); });
  });
  null_case(bat, "texts", batch(nullptr, 3, nullptr));
  null_case(bat, "out_ids", [](Env&) { return R(accel_tokenizer_encode_batch(load_fixture(), kTexts, nullptr, 3, nullptr, nullptr, nullptr)); });
  add(bat, "count=0", ARG, {"count"}, batch(kTexts, 0, nullptr));
  add(bat, "texts[1]=NULL", ARG, {"texts[1] is NULL"}, [batch](Env& e) {
    static const char* const texts[] = {"one", nullptr, "two"};
    return batch(texts, 3, nullptr)(e);
  });
  add(bat, "texts[2] is not UTF-8", ARG, {"texts[2]", "UTF-8", "byte 1"}, [batch](Env& e) {
    static const char* const texts[] = {"one", "two", "a\xff"};
    return batch(texts, 3, nullptr)(e);
  });
  add(bat, "pad_to_max_length without max_length", ARG, {"pad_to_max_length", "max_length"}, [batch](Env& e) {
    static accel_encode_options o = ACCEL_ENCODE_OPTIONS_INIT;
    o.pad_to_max_length = 1;
    return batch(kTexts, 3, &o)(e);
  });
  add(bat, "pad_id outside the vocabulary", ARG, {"pad_id", "99999"}, [batch](Env& e) {
    static accel_encode_options o = ACCEL_ENCODE_OPTIONS_INIT;
    o.pad_id = 99999;
    return batch(kTexts, 3, &o)(e);
  });

  const std::string dec = "accel_tokenizer_decode";
  static const int64_t kIds[] = {10, 11, 12};
  null_case(dec, "tokenizer", [](Env& e) {
    return with_out<size_t>(e, [&](auto* out) { return R(accel_tokenizer_decode(nullptr, kIds, 3, 0, nullptr, 0, out)); });
  });
  null_case(dec, "out_length", [](Env&) { return R(accel_tokenizer_decode(load_fixture(), kIds, 3, 0, nullptr, 0, nullptr)); });
  null_case(dec, "ids", [](Env& e) {
    accel_tokenizer* t = load_fixture();
    return with_out<size_t>(e, [&](auto* out) { return R(accel_tokenizer_decode(t, nullptr, 3, 0, nullptr, 0, out)); });
  });
  for (int64_t id : {int64_t{-1}, int64_t{1205}})
    add(dec, "ids[1]=" + str(id), ARG, {"ids[1]", str(id)}, [id](Env& e) {
      accel_tokenizer* t = load_fixture();
      const int64_t ids[] = {10, id, 12};
      return with_out<size_t>(e, [&](auto* out) { return R(accel_tokenizer_decode(t, ids, 3, 0, nullptr, 0, out)); });
    });
  add(dec, "a buffer too small", ARG, {"buf", "needs"}, [](Env& e) {
    accel_tokenizer* t = load_fixture();
    char buf[2];
    fill(buf);
    size_t n = 0;
    R r(accel_tokenizer_decode(t, kIds, 3, 0, buf, sizeof buf, &n));
    e.untouched(buf, "buf");
    e.expect(n > 1, "*out_length = " + str(n) + " does not say the length needed");
    return r;
  });
  add(dec, "buf=NULL with a capacity", ARG, {"buf is NULL"}, [](Env&) {
    size_t n = 0;
    return R(accel_tokenizer_decode(load_fixture(), kIds, 3, 0, nullptr, 16, &n));
  });
  chat_and_sft();
}

void chat_and_sft() {
  const std::string ac = "accel_tokenizer_apply_chat";
  static const accel_chat_message kChat[] = {{"user", "hi"}, {"assistant", "hello"}};
  // the format travels as an int and becomes the enum only as the call's argument (UBSan's
  // enum check refuses to load 42 from an accel_chat_format object)
  auto apply = [](accel_tokenizer* t, int f, const accel_chat_message* m, size_t n) {
    return [=](Env& e) {
      return with_out<size_t>(e, [&](auto* out) {
        return R(accel_tokenizer_apply_chat(t ? t : load_fixture("qwen2"), raw<accel_chat_format>(f), m, n, 0, nullptr, 0, out));
      });
    };
  };
  null_case(ac, "tokenizer", [](Env& e) {
    return with_out<size_t>(e, [&](auto* out) { return R(accel_tokenizer_apply_chat(nullptr, ACCEL_CHAT_AUTO, kChat, 2, 0, nullptr, 0, out)); });
  });
  null_case(ac, "out_length", [](Env&) {
    return R(accel_tokenizer_apply_chat(load_fixture("qwen2"), ACCEL_CHAT_AUTO, kChat, 2, 0, nullptr, 0, nullptr));
  });
  null_case(ac, "messages", apply(nullptr, ACCEL_CHAT_AUTO, nullptr, 2));
  add(ac, "messages[1].role=NULL", ARG, {"messages[1].role is NULL"}, [apply](Env& e) {
    static const accel_chat_message m[] = {{"user", "hi"}, {nullptr, "x"}};
    return apply(nullptr, ACCEL_CHAT_AUTO, m, 2)(e);
  });
  add(ac, "messages[0].content=NULL", ARG, {"messages[0].content is NULL"}, [apply](Env& e) {
    static const accel_chat_message m[] = {{"user", nullptr}};
    return apply(nullptr, ACCEL_CHAT_AUTO, m, 1)(e);
  });
  add(ac, "content not UTF-8", ARG, {"messages[0].content", "UTF-8"}, [apply](Env& e) {
    static const accel_chat_message m[] = {{"user", "a\xff"}};
    return apply(nullptr, ACCEL_CHAT_AUTO, m, 1)(e);
  });
  for (int f : {6, -1, 42})
    add(ac, "format=" + str(f), ARG, {"format", str(f)}, [apply, f](Env& e) { return apply(nullptr, f, kChat, 2)(e); });
  add(ac, "AUTO without a chat_template", ARG, {"chat_template"}, [apply](Env& e) {
    return apply(load_fixture("gpt2"), ACCEL_CHAT_AUTO, kChat, 2)(e);
  });
  add(ac, "a chat_template of no known format", UNSUPPORTED, {"chat_template", "none of the formats"}, [apply](Env& e) {
    fs::create_directory("tok");
    fs::copy(kFixtures + "/qwen2/tokenizer.json", "tok/tokenizer.json");
    write_file("tok/tokenizer_config.json", "{\"chat_template\": \"{{ messages }}\"}");
    accel_tokenizer* t = nullptr;
    ok(accel_tokenizer_load("tok", &t), "accel_tokenizer_load");
    return apply(t, ACCEL_CHAT_AUTO, kChat, 2)(e);
  });
  add(ac, "Gemma: a system role", ARG, {"system role"}, [apply](Env& e) {
    static const accel_chat_message m[] = {{"system", "be brief"}, {"user", "hi"}};
    return apply(load_fixture("gemma"), ACCEL_CHAT_AUTO, m, 2)(e);
  });
  add(ac, "Mistral: roles that do not alternate", ARG, {"alternate", "message 1"}, [apply](Env& e) {
    static const accel_chat_message m[] = {{"user", "a"}, {"user", "b"}};
    return apply(load_fixture("mistral"), ACCEL_CHAT_AUTO, m, 2)(e);
  });
  add(ac, "Llama 3 on a tokenizer without BOS", ARG, {"BOS"}, [apply](Env& e) {
    return apply(load_fixture("qwen2"), ACCEL_CHAT_LLAMA3, kChat, 2)(e);
  });
  add(ac, "a buffer too small", ARG, {"buf", "needs"}, [](Env& e) {
    char buf[4];
    fill(buf);
    size_t n = 0;
    R r(accel_tokenizer_apply_chat(load_fixture("qwen2"), ACCEL_CHAT_AUTO, kChat, 2, 0, buf, sizeof buf, &n));
    e.untouched(buf, "buf");
    return r;
  });

  options_init<accel_sft_options>("accel_sft_options_init", accel_sft_options_init, ACCEL_SFT_OPTIONS_VERSION);
  const std::string sd = "accel_sft_dataloader_create";
  auto sft = [](const char* path, std::function<void(accel_sft_options&)> edit, bool null_tok = false,
                bool null_lo = false, bool null_out = false, bool null_ctx = false) {
    return [=](Env& e) {
      if (!fs::exists("sft.jsonl")) write_file("sft.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
      accel_sft_options so = ACCEL_SFT_OPTIONS_INIT;
      edit(so);
      accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
      accel_tokenizer* t = null_tok ? nullptr : load_fixture("qwen2");
      accel_context* c = null_ctx ? nullptr : e.a.ctx;
      return with_out<accel_dataloader*>(e, [&](auto* out) {
        return R(accel_sft_dataloader_create(c, t, path, &so, null_lo ? nullptr : &lo, null_out ? nullptr : out), c);
      });
    };
  };
  const auto keep = [](accel_sft_options&) {};
  null_case(sd, "ctx", sft("sft.jsonl", keep, false, false, false, true));
  null_case(sd, "tokenizer", sft("sft.jsonl", keep, true));
  null_case(sd, "path", sft(nullptr, keep));
  null_case(sd, "loader_opts", sft("sft.jsonl", keep, false, true));
  null_case(sd, "out", sft("sft.jsonl", keep, false, false, true));
  add(sd, "a missing file", IO, {"none.jsonl"}, sft("none.jsonl", keep));
  add(sd, "path=\"\"", ARG, {"path", "empty"}, sft("", keep));
  add(sd, "a line that is not JSON", FORMAT, {"bad.jsonl:2", "not JSON"}, [sft, keep](Env& e) {
    write_file("bad.jsonl", "{\"text\": \"a\"}\n{oops\n");
    return sft("bad.jsonl", keep)(e);
  });
  add(sd, "a line of none of the shapes", FORMAT, {"bad.jsonl:1", "messages"}, [sft, keep](Env& e) {
    write_file("bad.jsonl", "{\"input\": \"a\"}\n");
    return sft("bad.jsonl", keep)(e);
  });
  add(sd, "a content that is not a string", FORMAT, {"bad.jsonl:1", "content"}, [sft, keep](Env& e) {
    write_file("bad.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n");
    return sft("bad.jsonl", keep)(e);
  });
  add(sd, "a line that is not UTF-8", FORMAT, {"bad.jsonl:1", "UTF-8"}, [sft, keep](Env& e) {
    write_file("bad.jsonl", "{\"text\": \"a\xff\"}\n");
    return sft("bad.jsonl", keep)(e);
  });
  add(sd, "an empty file", ARG, {"empty.jsonl", "no example"}, [sft, keep](Env& e) {
    write_file("empty.jsonl", "\n\n");
    return sft("empty.jsonl", keep)(e);
  });
  add(sd, "max_length=-1", ARG, {"max_length", "-1"}, sft("sft.jsonl", [](accel_sft_options& o) { o.max_length = -1; }));
  add(sd, "packing without max_length", ARG, {"packing", "max_length"}, sft("sft.jsonl", [](accel_sft_options& o) { o.packing = 1; }));
  add(sd, "pad_to_multiple_of=-2", ARG, {"pad_to_multiple_of", "-2"}, sft("sft.jsonl", [](accel_sft_options& o) { o.pad_to_multiple_of = -2; }));
  add(sd, "pad_id=-2", ARG, {"pad_id", "-2"}, sft("sft.jsonl", [](accel_sft_options& o) { o.pad_id = -2; }));
  add(sd, "pad_id outside the vocabulary", ARG, {"pad_id", "5000"}, sft("sft.jsonl", [](accel_sft_options& o) { o.pad_id = 5000; }));
  for (int f : {6, -1})
    add(sd, "chat_format=" + str(f), ARG, {"chat_format", str(f)}, sft("sft.jsonl", [f](accel_sft_options& o) { set_raw(o.chat_format, f); }));
  for (int side : {2, -1})
    add(sd, "padding_side=" + str(side), ARG, {"padding_side", str(side)}, sft("sft.jsonl", [side](accel_sft_options& o) { set_raw(o.padding_side, side); }));
  add(sd, "opts.version=0", ARG, {"version", "0"}, sft("sft.jsonl", [](accel_sft_options& o) { o.version = 0; }));
}

}  // namespace misuse
