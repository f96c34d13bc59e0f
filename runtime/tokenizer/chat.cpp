// Chat formats and fine-tuning data (tokenizer.h). Each format renders a conversation as the
// family's published Jinja chat template does (the templates are in
// scripts/tokenizer_fixtures.py; tests/lm/test_tokenizer.cpp compares with what transformers'
// apply_chat_template renders with them). A template is recognised by its markers; accel does
// not interpret Jinja.
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "runtime/tokenizer/tokenizer.h"

namespace accel::tokenizer {
namespace {

using json = nlohmann::json;

// Python's str.strip() (Jinja's trim filter): Unicode whitespace and the separators \x1c-\x1f.
bool python_space(char32_t c) { return is_unicode_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

std::string trim(const std::string& s) {
  const auto [b, e] = strip_range(s, 0, s.size(), true, true, python_space);
  return s.substr(b, e - b);
}

const std::string& special_text(const Tokenizer& tok, int32_t id, const char* what, ChatFormat f) {
  ACCEL_CHECK(id >= 0, Status::InvalidArgument, "the ", chat_format_name(f), " chat format needs the tokenizer's ", what,
              " token, and tokenizer_config.json names none");
  return tok.id_to_token(id);
}

// The templates' raise_exception for roles that do not alternate user/assistant.
void check_alternating(const std::vector<Message>& m, ChatFormat f) {
  for (size_t i = 0; i < m.size(); ++i)
    ACCEL_CHECK((m[i].role == "user") == (i % 2 == 0), Status::InvalidArgument, "the ", chat_format_name(f),
                " chat format: conversation roles must alternate user/assistant/user/assistant/... (message ", i,
                " is '", m[i].role, "')");
}

std::vector<int32_t>::size_type common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Auto: return "auto";
    case ChatFormat::ChatML: return "ChatML";
    case ChatFormat::Llama3: return "Llama 3";
    case ChatFormat::Gemma: return "Gemma";
    case ChatFormat::Phi3: return "Phi-3";
    case ChatFormat::Mistral: return "Mistral";
  }
  return "?";
}

ChatFormat detect_chat_format(const Tokenizer& tok) {
  const std::string& t = tok.chat_template();
  ACCEL_CHECK(!t.empty(), Status::InvalidArgument,
              "the tokenizer has no chat_template (tokenizer_config.json): name the chat format");
  const auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|im_start|>")) return ChatFormat::ChatML;
  if (has("<|start_header_id|>")) return ChatFormat::Llama3;
  if (has("<start_of_turn>")) return ChatFormat::Gemma;
  if (has("<|assistant|>") && has("<|end|>")) return ChatFormat::Phi3;
  if (has("[INST]")) return ChatFormat::Mistral;
  fail(Status::Unsupported,
       "the tokenizer's chat_template is none of the formats accel renders (ChatML, Llama 3, Gemma, Phi-3, Mistral "
       "[INST]): name one, or render the text yourself and encode it");
}

std::string render_chat(const Tokenizer& tok, ChatFormat f, const std::vector<Message>& m, bool gen) {
  if (f == ChatFormat::Auto) f = detect_chat_format(tok);
  std::string out;
  switch (f) {
    case ChatFormat::ChatML:
      for (const auto& x : m) out += "<|im_start|>" + x.role + "\n" + x.content + "<|im_end|>\n";
      if (gen) out += "<|im_start|>assistant\n";
      break;
    case ChatFormat::Llama3:
      for (size_t i = 0; i < m.size(); ++i) {
        if (i == 0) out += special_text(tok, tok.bos_id(), "BOS", f);
        out += "<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n" + trim(m[i].content) + "<|eot_id|>";
      }
      if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::Gemma:
      out += special_text(tok, tok.bos_id(), "BOS", f);
      ACCEL_CHECK(m.empty() || m[0].role != "system", Status::InvalidArgument,
                  "the Gemma chat format: system role not supported");
      check_alternating(m, f);
      for (const auto& x : m)
        out += "<start_of_turn>" + (x.role == "assistant" ? std::string("model") : x.role) + "\n" + trim(x.content) +
               "<end_of_turn>\n";
      if (gen) out += "<start_of_turn>model\n";
      break;
    case ChatFormat::Phi3:
      for (const auto& x : m)
        if (x.role == "system" || x.role == "user" || x.role == "assistant")
          out += "<|" + x.role + "|>\n" + x.content + "<|end|>\n";
      out += gen ? std::string("<|assistant|>\n") : special_text(tok, tok.eos_id(), "EOS", f);
      break;
    case ChatFormat::Mistral: {
      out += special_text(tok, tok.bos_id(), "BOS", f);
      check_alternating(m, f);
      const std::string& eos = special_text(tok, tok.eos_id(), "EOS", f);
      for (const auto& x : m) {
        if (x.role == "user") out += "[INST] " + x.content + " [/INST]";
        else if (x.role == "assistant") out += x.content + eos;
        else fail(Status::InvalidArgument, "the Mistral chat format: only user and assistant roles are supported, got '", x.role, "'");
      }
      break;
    }
    case ChatFormat::Auto:
      break;
  }
  return out;
}

std::vector<SftExample> read_sft_jsonl(const Tokenizer& tok, const std::string& path, const SftConfig& cfg) {
  std::ifstream in(path);
  ACCEL_CHECK(in.good(), Status::IO, "cannot open '", path, "'");
  const ChatFormat detected = cfg.format;  // Auto: resolved at the first conversation
  ChatFormat format = detected;
  const TruncatePad none;
  const auto encode = [&](const std::string& s, bool special) { return tok.encode(s, special, none); };
  std::vector<SftExample> out;
  std::string line;
  for (size_t ln = 1; std::getline(in, line); ++ln) {
    const std::string where = path + ":" + std::to_string(ln);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ACCEL_CHECK(invalid_utf8_at(line) == std::string::npos, Status::Format, where, ": not valid UTF-8 at byte ",
                invalid_utf8_at(line));
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail(Status::Format, where, ": not JSON: ", e.what());
    }
    ACCEL_CHECK(j.is_object(), Status::Format, where, ": a line must be a JSON object");
    const auto text_of = [&](const json& o, const char* key) {
      ACCEL_CHECK(o.contains(key) && o[key].is_string(), Status::Format, where, ": \"", key, "\" must be a string");
      return o[key].get<std::string>();
    };
    SftExample ex;
    if (j.contains("messages")) {
      ACCEL_CHECK(j["messages"].is_array() && !j["messages"].empty(), Status::Format, where,
                  ": \"messages\" must be a non-empty array");
      std::vector<Message> msgs;
      for (const auto& m : j["messages"]) {
        ACCEL_CHECK(m.is_object(), Status::Format, where, ": each message must be an object with role and content");
        msgs.push_back({text_of(m, "role"), text_of(m, "content")});
      }
      if (format == ChatFormat::Auto) format = detect_chat_format(tok);
      std::string full;
      try {
        full = render_chat(tok, format, msgs, false);
      } catch (const Error& e) {
        throw Error(e.status(), where + ": " + e.what());
      }
      ex.ids = encode(full, false);
      ex.labels.assign(ex.ids.size(), cfg.completion_only_loss ? -100 : 0);
      if (!cfg.completion_only_loss) {
        ex.labels = ex.ids;
      } else {
        // each assistant turn: from the end of the prompt before it (the conversation so far
        // with the generation prompt) to the end of the turn (its end-of-turn token included),
        // measured as common prefixes with the whole conversation's ids
        for (size_t i = 0; i < msgs.size(); ++i) {
          if (msgs[i].role != "assistant") continue;
          const std::vector<Message> before(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(i));
          const std::vector<Message> through(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(i) + 1);
          const size_t a = common_prefix(encode(render_chat(tok, format, before, true), false), ex.ids);
          size_t b = common_prefix(encode(render_chat(tok, format, through, false), false), ex.ids);
          if (format == ChatFormat::Phi3 && i + 1 == msgs.size()) b = ex.ids.size();  // Phi-3 closes with EOS
          for (size_t k = a; k < b; ++k) ex.labels[k] = ex.ids[k];
        }
      }
    } else if (j.contains("prompt") || j.contains("completion")) {
      const std::string prompt = text_of(j, "prompt"), completion = text_of(j, "completion");
      ex.ids = encode(prompt + completion, true);
      const size_t a = common_prefix(encode(prompt, true), ex.ids);
      if (cfg.add_eos && tok.eos_id() >= 0) ex.ids.push_back(tok.eos_id());
      ex.labels = ex.ids;
      if (cfg.completion_only_loss) std::fill(ex.labels.begin(), ex.labels.begin() + static_cast<std::ptrdiff_t>(a), -100);
    } else if (j.contains("text")) {
      ex.ids = encode(text_of(j, "text"), true);
      if (cfg.add_eos && tok.eos_id() >= 0) ex.ids.push_back(tok.eos_id());
      ex.labels = ex.ids;
    } else {
      fail(Status::Format, where, ": a line needs \"messages\", \"prompt\" and \"completion\", or \"text\"");
    }
    if (!ex.ids.empty()) out.push_back(std::move(ex));
  }
  ACCEL_CHECK(!in.bad(), Status::IO, "cannot read '", path, "'");
  ACCEL_CHECK(!out.empty(), Status::InvalidArgument, "'", path, "' holds no example");
  return out;
}

}  // namespace accel::tokenizer
