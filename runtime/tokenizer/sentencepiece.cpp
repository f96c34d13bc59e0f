// SentencePiece models (.model files: Llama 2, Mistral v0.1, Gemma, T5...) through Debian's
// libsentencepiece: ids exactly as SentencePiece's own Encode gives them (special tokens in
// the text are text, as in SentencePiece), with the BOS and EOS a tokenizer_config.json asks
// for (Llama's default: BOS, no EOS) when special tokens are added. libsentencepiece is
// reached through libaccel-sentencepiece.so (sentencepiece_shim.cpp says why), opened on the
// first .model in a link-map namespace of its own, from beside this library or the loader's path.
#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include "base/files.h"
#include "base/status.h"
#include "runtime/tokenizer/tokenizer.h"

namespace accel::tokenizer {
namespace {

struct SpmApi {
  void* (*load)(const char*, char*, size_t);
  void (*free_model)(void*);
  int (*size)(void*);
  const char* (*piece)(void*, int, int*);
  int (*special)(void*, int);
  int (*encode)(void*, const char*, size_t, int**, size_t*, char*, size_t);
  int (*decode)(void*, const int*, size_t, char**, size_t*, char*, size_t);
  void (*release)(void*);
};

const SpmApi& spm_api() {
  static std::mutex mu;
  static SpmApi api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lk(mu);
  if (loaded) return api;
  std::vector<std::string> tried;
  const std::string dir = files::own_directory();
  if (!dir.empty()) tried.push_back(dir + "/libaccel-sentencepiece.so");
  tried.push_back("libaccel-sentencepiece.so");
  // A link-map namespace of its own (dlmopen): libsentencepiece, its protobuf and their
  // libstdc++ bind only to each other, whatever this process has loaded (RTLD_DEEPBIND would
  // too, but the sanitizers' runtimes refuse it). Opened once per process.
  void* h = nullptr;
  std::string errors;
  for (const auto& p : tried) {
    h = dlmopen(LM_ID_NEWLM, p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) break;
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : p);
  }
  ACCEL_CHECK(h != nullptr, Status::Unsupported, "SentencePiece models need libaccel-sentencepiece.so (", errors,
              "), built where libsentencepiece-dev is installed");
  const auto need = [&](auto& slot, const char* name) {
    void* f = dlsym(h, name);
    ACCEL_CHECK(f != nullptr, Status::Unsupported, "libaccel-sentencepiece.so lacks ", name, " (another version?)");
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(f);
  };
  need(api.load, "accel_spm_load");
  need(api.free_model, "accel_spm_free");
  need(api.size, "accel_spm_size");
  need(api.piece, "accel_spm_piece");
  need(api.special, "accel_spm_special");
  need(api.encode, "accel_spm_encode");
  need(api.decode, "accel_spm_decode");
  need(api.release, "accel_spm_release");
  loaded = true;
  return api;
}

class SpmTokenizer final : public Tokenizer {
 public:
  SpmTokenizer(const std::string& file, const std::string& dir) : api_(spm_api()) {
    path_ = file;
    char err[512] = "";
    model_ = api_.load(file.c_str(), err, sizeof err);
    ACCEL_CHECK(model_ != nullptr, Status::Format, "'", file, "' is not a SentencePiece model: ", err);
    const int n = api_.size(model_);
    tokens_.resize(static_cast<size_t>(n));
    special_.assign(static_cast<size_t>(n), false);
    for (int i = 0; i < n; ++i) {
      int control = 0;
      tokens_[static_cast<size_t>(i)] = api_.piece(model_, i, &control);
      special_[static_cast<size_t>(i)] = control != 0;
    }
    kind_ = "SentencePiece";
    bos_ = api_.special(model_, 0);
    eos_ = api_.special(model_, 1);
    pad_ = api_.special(model_, 2);
    unk_ = api_.special(model_, 3);
    index_tokens();
    if (!dir.empty()) read_config(dir);
  }
  ~SpmTokenizer() override { api_.free_model(model_); }
  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    // SentencePiece drops control tokens (BOS, EOS, padding) when it decodes; without
    // skip_special they are written as their text, between the decoded runs around them.
    std::string out;
    std::vector<int> run;
    const auto flush = [&] {
      if (run.empty()) return;
      char* text = nullptr;
      size_t len = 0;
      char err[512] = "";
      ACCEL_CHECK(api_.decode(model_, run.data(), run.size(), &text, &len, err, sizeof err) == 0,
                  Status::InvalidArgument, "SentencePiece cannot decode: ", err);
      out.append(text, len);
      api_.release(text);
      run.clear();
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      ACCEL_CHECK(id >= 0 && id < vocab_size(), Status::InvalidArgument, "ids[", i, "] = ", id,
                  " is no token of this tokenizer (vocab_size ", vocab_size(), ")");
      if (special_[static_cast<size_t>(id)]) {
        flush();
        if (!skip_special) out += tokens_[static_cast<size_t>(id)];
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

 protected:
  std::vector<int32_t> encode_plain(std::string_view text) const override {
    int* ids = nullptr;
    size_t n = 0;
    char err[512] = "";
    ACCEL_CHECK(api_.encode(model_, text.data(), text.size(), &ids, &n, err, sizeof err) == 0, Status::InvalidArgument,
                "SentencePiece cannot encode: ", err);
    std::vector<int32_t> out(ids, ids + n);
    api_.release(ids);
    return out;
  }
  void add_special_tokens(std::vector<int32_t>& ids) const override {
    if (add_bos()) ids.insert(ids.begin(), bos_);
    if (add_eos()) ids.push_back(eos_);
  }
  size_t num_special_tokens_added() const override { return (add_bos() ? 1 : 0) + (add_eos() ? 1 : 0); }

 private:
  bool add_bos() const { return bos_ >= 0 && add_bos_.value_or(true); }
  bool add_eos() const { return eos_ >= 0 && add_eos_.value_or(false); }
  const SpmApi& api_;
  void* model_ = nullptr;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& file, const std::string& dir) {
  return std::make_unique<SpmTokenizer>(file, dir);
}

}  // namespace accel::tokenizer
