// Tokenizers (accel.h, "Tokenizers"): thin over runtime/tokenizer/.
#include <thread>

#include "capi/internal.h"

using namespace accel::capi;
namespace tk = accel::tokenizer;

namespace {

tk::TruncatePad truncate_pad(const accel_encode_options& o) {
  ACCEL_CHECK(o.max_length >= 0, Status::InvalidArgument, "max_length ", o.max_length, " is negative");
  ACCEL_CHECK(o.pad_to_multiple_of >= 0, Status::InvalidArgument, "pad_to_multiple_of ", o.pad_to_multiple_of,
              " is negative");
  ACCEL_CHECK(o.pad_id >= -1, Status::InvalidArgument, "pad_id ", o.pad_id, " is below -1 (-1: the tokenizer's)");
  const int ts = raw(o.truncation_side), ps = raw(o.padding_side);
  ACCEL_CHECK(ts == ACCEL_SIDE_RIGHT || ts == ACCEL_SIDE_LEFT, Status::InvalidArgument, "truncation_side ", ts,
              " is neither ACCEL_SIDE_RIGHT nor ACCEL_SIDE_LEFT");
  ACCEL_CHECK(ps == ACCEL_SIDE_RIGHT || ps == ACCEL_SIDE_LEFT, Status::InvalidArgument, "padding_side ", ps,
              " is neither ACCEL_SIDE_RIGHT nor ACCEL_SIDE_LEFT");
  tk::TruncatePad tp;
  tp.max_length = o.max_length;
  tp.truncate_left = ts == ACCEL_SIDE_LEFT;
  tp.pad_left = ps == ACCEL_SIDE_LEFT;
  tp.pad_to_max_length = o.pad_to_max_length != 0;
  tp.pad_to_multiple_of = o.pad_to_multiple_of;
  tp.pad_id = o.pad_id;
  return tp;
}

// The text as UTF-8: checked, or with invalid sequences replaced (into `keep`).
std::string_view utf8_text(const char* text, size_t length, bool replace, std::string& keep, const char* what) {
  ACCEL_CHECK(text != nullptr || length == 0, Status::InvalidArgument, what, " is NULL");
  const std::string_view s(text ? text : "", length);
  const size_t bad = tk::invalid_utf8_at(s);
  if (bad == std::string_view::npos) return s;
  ACCEL_CHECK(replace, Status::InvalidArgument, what, " is not valid UTF-8 at byte ", bad,
              " (set replace_invalid_utf8 to replace invalid sequences with U+FFFD)");
  keep = tk::replace_invalid_utf8(s);
  return keep;
}

// decode's and apply_chat's output: the length always; the text and its NUL into buf when
// it fits; buf NULL with capacity 0 asks for the size only.
void copy_text(const std::string& text, char* buf, size_t capacity, size_t* out_length) {
  *out_length = text.size();
  if (buf == nullptr && capacity == 0) return;
  ACCEL_CHECK(buf != nullptr, Status::InvalidArgument, "buf is NULL with capacity ", capacity);
  ACCEL_CHECK(capacity > text.size(), Status::InvalidArgument, "buf holds ", capacity, " bytes; the text needs ",
              text.size() + 1, " with its NUL (*out_length says how long it is)");
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
}

}  // namespace

extern "C" {

accel_status accel_tokenizer_load(const char* path, accel_tokenizer** out) {
  return guard(nullptr, "accel_tokenizer_load", [&] {
    NEED(path);
    NEED(out);
    ACCEL_CHECK(*path != '\0', Status::InvalidArgument, "path is empty");
    auto impl = tk::Tokenizer::load(path);
    *out = new accel_tokenizer{std::move(impl)};
  });
}

void accel_tokenizer_destroy(accel_tokenizer* tokenizer) { delete tokenizer; }

accel_status accel_tokenizer_vocab_size(const accel_tokenizer* tokenizer, int64_t* out) {
  return guard(nullptr, "accel_tokenizer_vocab_size", [&] {
    NEED(tokenizer);
    NEED(out);
    *out = tokenizer->impl->vocab_size();
  });
}

accel_status accel_tokenizer_special_id(const accel_tokenizer* tokenizer, accel_special_token which, int64_t* out) {
  return guard(nullptr, "accel_tokenizer_special_id", [&] {
    NEED(tokenizer);
    NEED(out);
    const auto& t = *tokenizer->impl;
    switch (raw(which)) {
      case ACCEL_TOKEN_BOS: *out = t.bos_id(); break;
      case ACCEL_TOKEN_EOS: *out = t.eos_id(); break;
      case ACCEL_TOKEN_PAD: *out = t.pad_id(); break;
      case ACCEL_TOKEN_UNK: *out = t.unk_id(); break;
      default:
        accel::fail(Status::InvalidArgument, "which ", raw(which), " is no accel_special_token");
    }
  });
}

accel_status accel_tokenizer_token_to_id(const accel_tokenizer* tokenizer, const char* token, int64_t* out) {
  return guard(nullptr, "accel_tokenizer_token_to_id", [&] {
    NEED(tokenizer);
    NEED(token);
    NEED(out);
    const auto id = tokenizer->impl->token_to_id(token);
    *out = id ? *id : -1;
  });
}

accel_status accel_tokenizer_id_to_token(const accel_tokenizer* tokenizer, int64_t id, const char** out,
                                         int* out_special) {
  return guard(nullptr, "accel_tokenizer_id_to_token", [&] {
    NEED(tokenizer);
    NEED(out);
    const auto& t = *tokenizer->impl;
    ACCEL_CHECK(id >= 0 && id < t.vocab_size(), Status::InvalidArgument, "id ", id, " is outside [0, ", t.vocab_size(),
                ")");
    *out = t.id_to_token(static_cast<int32_t>(id)).c_str();
    if (out_special) *out_special = t.is_special(static_cast<int32_t>(id)) ? 1 : 0;
  });
}

accel_status accel_encode_options_init(accel_encode_options* opts, uint32_t version) {
  return guard(nullptr, "accel_encode_options_init", [&] { init_options(opts, version); });
}

accel_status accel_tokenizer_encode(const accel_tokenizer* tokenizer, const char* text, size_t length,
                                    const accel_encode_options* opts, accel_tensor** out) {
  return guard(nullptr, "accel_tokenizer_encode", [&] {
    NEED(tokenizer);
    NEED(out);
    const accel_encode_options o = read_options(opts);
    const tk::TruncatePad tp = truncate_pad(o);
    std::string keep;
    const std::string_view s = utf8_text(text, length, o.replace_invalid_utf8 != 0, keep, "text");
    const std::vector<int32_t> ids = tokenizer->impl->encode(s, o.add_special_tokens != 0, tp);
    torch::Tensor t = torch::empty({static_cast<int64_t>(ids.size())}, torch::kInt64);
    std::copy(ids.begin(), ids.end(), t.data_ptr<int64_t>());
    *out = wrap(std::move(t));
  });
}

accel_status accel_tokenizer_encode_batch(const accel_tokenizer* tokenizer, const char* const* texts,
                                          const size_t* lengths, size_t count, const accel_encode_options* opts,
                                          accel_tensor** out_ids, accel_tensor** out_mask) {
  return guard(nullptr, "accel_tokenizer_encode_batch", [&] {
    NEED(tokenizer);
    NEED(texts);
    NEED(out_ids);
    ACCEL_CHECK(count >= 1, Status::InvalidArgument, "count is 0 (a batch holds at least one text)");
    const accel_encode_options o = read_options(opts);
    const tk::TruncatePad tp = truncate_pad(o);
    ACCEL_CHECK(!o.pad_to_max_length || o.max_length > 0, Status::InvalidArgument,
                "pad_to_max_length needs max_length > 0");
    const auto& t = *tokenizer->impl;
    ACCEL_CHECK(o.pad_id < t.vocab_size(), Status::InvalidArgument, "pad_id ", o.pad_id, " is outside the vocabulary (",
                t.vocab_size(), " ids)");
    std::vector<std::string> keep(count);
    std::vector<std::string_view> views(count);
    for (size_t i = 0; i < count; ++i) {
      const std::string what = "texts[" + std::to_string(i) + "]";
      const char* p = texts[i];
      ACCEL_CHECK(p != nullptr || (lengths && lengths[i] == 0), Status::InvalidArgument, what, " is NULL");
      views[i] = utf8_text(p, lengths ? lengths[i] : std::strlen(p), o.replace_invalid_utf8 != 0, keep[i], what.c_str());
    }
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const tk::Batch b = t.encode_batch(views, o.add_special_tokens != 0, tp, threads);
    torch::Tensor ids = torch::from_blob(const_cast<int64_t*>(b.ids.data()), {b.rows, b.cols}, torch::kInt64).clone();
    torch::Tensor mask = torch::from_blob(const_cast<int64_t*>(b.mask.data()), {b.rows, b.cols}, torch::kInt64).clone();
    *out_ids = wrap(std::move(ids));
    if (out_mask) *out_mask = wrap(std::move(mask));
  });
}

accel_status accel_tokenizer_decode(const accel_tokenizer* tokenizer, const int64_t* ids, size_t count,
                                    int skip_special_tokens, char* buf, size_t capacity, size_t* out_length) {
  return guard(nullptr, "accel_tokenizer_decode", [&] {
    NEED(tokenizer);
    NEED(out_length);
    ACCEL_CHECK(ids != nullptr || count == 0, Status::InvalidArgument, "ids is NULL");
    const auto& t = *tokenizer->impl;
    std::vector<int32_t> v(count);
    for (size_t i = 0; i < count; ++i) {
      ACCEL_CHECK(ids[i] >= 0 && ids[i] < t.vocab_size(), Status::InvalidArgument, "ids[", i, "] = ", ids[i],
                  " is outside [0, ", t.vocab_size(), ")");
      v[i] = static_cast<int32_t>(ids[i]);
    }
    const std::string text = t.decode(v, skip_special_tokens != 0);
    copy_text(text, buf, capacity, out_length);
  });
}

accel_status accel_tokenizer_apply_chat(const accel_tokenizer* tokenizer, accel_chat_format format,
                                        const accel_chat_message* messages, size_t count, int add_generation_prompt,
                                        char* buf, size_t capacity, size_t* out_length) {
  return guard(nullptr, "accel_tokenizer_apply_chat", [&] {
    NEED(tokenizer);
    NEED(out_length);
    ACCEL_CHECK(messages != nullptr || count == 0, Status::InvalidArgument, "messages is NULL");
    const int f = raw(format);
    ACCEL_CHECK(f >= ACCEL_CHAT_AUTO && f <= ACCEL_CHAT_MISTRAL, Status::InvalidArgument, "format ", f,
                " is no accel_chat_format");
    std::vector<tk::Message> msgs;
    for (size_t i = 0; i < count; ++i) {
      ACCEL_CHECK(messages[i].role != nullptr, Status::InvalidArgument, "messages[", i, "].role is NULL");
      ACCEL_CHECK(messages[i].content != nullptr, Status::InvalidArgument, "messages[", i, "].content is NULL");
      std::string keep;
      const std::string what = "messages[" + std::to_string(i) + "]";
      utf8_text(messages[i].role, std::strlen(messages[i].role), false, keep, (what + ".role").c_str());
      utf8_text(messages[i].content, std::strlen(messages[i].content), false, keep, (what + ".content").c_str());
      msgs.push_back({messages[i].role, messages[i].content});
    }
    const std::string text =
        tk::render_chat(*tokenizer->impl, static_cast<tk::ChatFormat>(f), msgs, add_generation_prompt != 0);
    copy_text(text, buf, capacity, out_length);
  });
}

}  // extern "C"
