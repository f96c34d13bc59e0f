// Text helpers every floor shares: sizes read and written the way users type them, JSON string
// escaping, errno's text. Torch-free. parse_bytes throws accel::Error (base/status.h); the
// others never throw but for std::bad_alloc.
#pragma once

#include <cstdint>
#include <string>

namespace accel::text {

// "64MiB", "1.5 GiB", "80GB", "1000000" -> bytes (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB;
// K, M, G as KiB, MiB, GiB). Anything else, zero, or more than 16 EiB throws
// Error(InvalidArgument) naming `what` and the text.
uint64_t parse_bytes(const std::string& text, const char* what = "size");

// 1536 -> "1.50 KiB"; below 1 KiB "N bytes".
std::string format_bytes(uint64_t bytes);

// The inside of a JSON string: quote and backslash escaped, control characters as \u00XX.
std::string json_escape(const std::string& s);

// strerror(e), thread-safe.
std::string errno_text(int e);

// "SIGKILL" (sigabbrev_np), or "signal N" for a number it does not know.
std::string signal_name(int sig);
// How a process ended, from its wait status: "exited with code 3", "was killed by signal 9
// (SIGKILL)" (", core dumped" when it did).
std::string wait_status_text(int status);

}  // namespace accel::text
