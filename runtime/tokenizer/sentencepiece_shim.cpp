// libaccel-sentencepiece.so: Debian's libsentencepiece behind a small C interface, loaded by
// runtime/tokenizer/sentencepiece.cpp with dlmopen(LM_ID_NEWLM) only when a .model file is
// loaded. libsentencepiece carries its own copy of protobuf-lite (3.14) and exports it;
// Debian's libtorch loads libprotobuf.so.32 (3.21), whose symbols have the same names. Linked
// into one process scope, the two bind to each other's code: the process crashes while
// loading (libprotobuf's static initialisers call libsentencepiece's MergeFromImpl), or
// libsentencepiece's version check aborts it ("compiled against version 3.14.0 ... not
// compatible with the installed version (3.21.12)"). In a link-map namespace of its own each
// binds to its own copy. The interface passes only plain C values; memory it returns is
// freed by it (accel_spm_release: the namespace has its own malloc). Built without the
// sanitizers (their runtime lives in the main namespace).
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* err, size_t cap, const std::string& msg) {
  if (!err || cap == 0) return;
  const size_t n = std::min(cap - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* accel_spm_load(const char* path, char* err, size_t cap) {
  auto* sp = new (std::nothrow) sentencepiece::SentencePieceProcessor();
  if (!sp) {
    set_error(err, cap, "out of memory");
    return nullptr;
  }
  const auto st = sp->Load(path);
  if (!st.ok()) {
    set_error(err, cap, st.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void accel_spm_free(void* h) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

__attribute__((visibility("default"))) int accel_spm_size(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize();
}

// The piece's text (valid while the model lives) and whether it is a control symbol.
__attribute__((visibility("default"))) const char* accel_spm_piece(void* h, int id, int* control) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  *control = sp->IsControl(id) ? 1 : 0;
  return sp->IdToPiece(id).c_str();
}

// which: 0 bos, 1 eos, 2 pad, 3 unk; -1 where the model has none
__attribute__((visibility("default"))) int accel_spm_special(void* h, int which) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  switch (which) {
    case 0: return sp->bos_id();
    case 1: return sp->eos_id();
    case 2: return sp->pad_id();
    default: return sp->unk_id();
  }
}

// *ids (malloc'd, freed with accel_spm_release) and *n; 0 on success.
__attribute__((visibility("default"))) int accel_spm_encode(void* h, const char* text, size_t len, int** ids,
                                                            size_t* n, char* err, size_t cap) {
  std::vector<int> v;
  const auto st = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(std::string(text, len), &v);
  if (!st.ok()) {
    set_error(err, cap, st.ToString());
    return -1;
  }
  *ids = static_cast<int*>(std::malloc(std::max<size_t>(1, v.size()) * sizeof(int)));
  if (!*ids) {
    set_error(err, cap, "out of memory");
    return -1;
  }
  std::copy(v.begin(), v.end(), *ids);
  *n = v.size();
  return 0;
}

// *text (malloc'd, freed with accel_spm_release) and *len; 0 on success.
__attribute__((visibility("default"))) int accel_spm_decode(void* h, const int* ids, size_t n, char** text,
                                                            size_t* len, char* err, size_t cap) {
  std::string s;
  const auto st = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Decode(std::vector<int>(ids, ids + n), &s);
  if (!st.ok()) {
    set_error(err, cap, st.ToString());
    return -1;
  }
  *text = static_cast<char*>(std::malloc(s.size() + 1));
  if (!*text) {
    set_error(err, cap, "out of memory");
    return -1;
  }
  std::memcpy(*text, s.data(), s.size());
  (*text)[s.size()] = '\0';
  *len = s.size();
  return 0;
}

__attribute__((visibility("default"))) void accel_spm_release(void* p) { std::free(p); }

}  // extern "C"
