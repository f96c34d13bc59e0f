// Tokenizers (issue 36; docs/lm.md, "Tokenizers"): Hugging Face tokenizer.json files (BPE,
// byte-level or with byte fallback, with the normalizers, pre-tokenizers, post-processors and
// decoders the Llama, Qwen, Mistral, Gemma, Phi, SmolLM and GPT-2 families publish) and
// SentencePiece models (Debian's libsentencepiece). Torch-free: the C ABI's accel_tokenizer_*
// are thin over this.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <unordered_map>
#include <vector>

namespace accel::tokenizer {

// A padded batch: rows x cols ids and the attention mask (1: a token, 0: padding), row-major.
struct Batch {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> ids, mask;
};

struct TruncatePad {
  int64_t max_length = 0;        // 0: none; counts the special tokens added
  bool truncate_left = false;    // drop from the start instead of the end
  bool pad_left = false;         // padding before the tokens (batches)
  bool pad_to_max_length = false;  // pad every row to max_length instead of the longest
  int64_t pad_to_multiple_of = 0;
  int64_t pad_id = -1;           // -1: the tokenizer's pad token, else 0
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A tokenizer.json, a SentencePiece .model, or a directory holding one of them (with
  // tokenizer_config.json and special_tokens_map.json, when present, for the special tokens
  // and add_bos_token/add_eos_token). Throws Error (IO, Format, Unsupported).
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  // `text` must be valid UTF-8 (see valid_utf8 / replace_invalid_utf8).
  std::vector<int32_t> encode(std::string_view text, bool add_special, const TruncatePad& tp) const;
  // Each text encoded (in `threads` threads when there are many), truncated, and padded to
  // the longest (or max_length, or a multiple) on the chosen side.
  Batch encode_batch(const std::vector<std::string_view>& texts, bool add_special, const TruncatePad& tp,
                     int threads) const;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string& id_to_token(int32_t id) const;  // id in [0, vocab_size)
  bool is_special(int32_t id) const;
  // -1 where the tokenizer has none
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  const std::string& kind() const { return kind_; }  // "tokenizer.json (BPE)", "SentencePiece (BPE)"

  // The pad id a batch uses (tp.pad_id, else the pad token, else 0).
  int32_t batch_pad_id(const TruncatePad& tp) const;
  // tokenizer_config.json's chat_template ("" when it has none).
  const std::string& chat_template() const { return chat_template_; }

 protected:
  // The tokens of `text` without special tokens added; then the template's added tokens.
  virtual std::vector<int32_t> encode_plain(std::string_view text) const = 0;
  virtual void add_special_tokens(std::vector<int32_t>& ids) const = 0;
  virtual size_t num_special_tokens_added() const = 0;
  void read_config(const std::string& dir);  // tokenizer_config.json, special_tokens_map.json
  void index_tokens();                       // after tokens_ is filled

  std::vector<std::string> tokens_;  // id -> token text (may be empty for holes)
  std::vector<bool> special_;        // id -> special
  std::unordered_map<std::string, int32_t> ids_;  // token text -> id
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
  std::optional<bool> add_bos_, add_eos_;  // tokenizer_config.json's, when it says
  std::string kind_;
  std::string path_;
  std::string chat_template_;
};

// ---------------------------------------------------------------------------------------
// Chat formats and fine-tuning data (chat.cpp)

// The chat templates accel renders natively, each exactly as the family's published Jinja
// template renders (tests/fixtures/tokenizers: transformers' apply_chat_template).
enum class ChatFormat { Auto = 0, ChatML = 1, Llama3 = 2, Gemma = 3, Phi3 = 4, Mistral = 5 };
const char* chat_format_name(ChatFormat f);

struct Message {
  std::string role, content;
};

// The format tokenizer_config.json's chat_template is (by its markers), or Unsupported /
// InvalidArgument naming what is missing.
ChatFormat detect_chat_format(const Tokenizer& tok);
// The conversation as the template renders it (InvalidArgument where the template raises:
// Gemma's system role, roles that do not alternate...). Encode it without special tokens.
std::string render_chat(const Tokenizer& tok, ChatFormat format, const std::vector<Message>& messages,
                        bool add_generation_prompt);

// A fine-tuning example: its ids and labels (-100 where the loss is masked).
struct SftExample {
  std::vector<int32_t> ids, labels;
};
struct SftConfig {
  ChatFormat format = ChatFormat::Auto;
  bool completion_only_loss = true;  // labels only on the completion / the assistant's turns
  bool add_eos = true;               // text and prompt/completion examples end with EOS
};
// Reads a JSONL file: each line {"messages": [{"role", "content"}...]} (rendered with the chat
// format; with completion_only_loss the assistant turns alone, their end-of-turn token
// included, carry labels), {"prompt", "completion"} (labels on the completion), or {"text"}.
// Throws IO, or InvalidArgument / Format naming the file and line.
std::vector<SftExample> read_sft_jsonl(const Tokenizer& tok, const std::string& path, const SftConfig& cfg);

// Rust's char::is_whitespace (Unicode's White_Space), as Hugging Face's components use it.
bool is_unicode_whitespace(char32_t c);
// [b, e) of valid UTF-8 `s` without the characters `strip` holds at its start (left) and at
// its end (right).
std::pair<size_t, size_t> strip_range(std::string_view s, size_t b, size_t e, bool left, bool right,
                                      bool (*strip)(char32_t));

// The byte offset of the first byte that is not part of valid UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or npos.
size_t invalid_utf8_at(std::string_view s);
// `s` with each maximal invalid subsequence replaced by U+FFFD, as Python's
// bytes.decode("utf-8", "replace") does.
std::string replace_invalid_utf8(std::string_view s);

}  // namespace accel::tokenizer
