// `accel launch`: the signals (SIGCHLD, SIGINT, SIGTERM, SIGHUP): handlers that only set
// flags, blocked except inside ppoll() (SignalScope; see internal.h).
#include "tools/launch/internal.h"

#include <signal.h>

#include <cstddef>

namespace accel::launch {

// ---- signals --------------------------------------------------------------------------

volatile sig_atomic_t g_child_changed = 0;  // wakes ppoll; children are reaped every turn anyway
volatile sig_atomic_t g_signal = 0;        // the first SIGINT/SIGTERM/SIGHUP received
volatile sig_atomic_t g_signal_count = 0;  // how many of them
volatile sig_atomic_t g_second_signal = 0;  // the second of them (0: none yet)

namespace {

extern "C" void on_signal(int sig) {
  if (sig == SIGCHLD) {
    g_child_changed = 1;
  } else {
    if (g_signal == 0) g_signal = sig;
    g_signal_count = g_signal_count + 1;
    if (g_signal_count == 2) g_second_signal = sig;
  }
}

}  // namespace

SignalScope::SignalScope() {
  g_child_changed = 0;
  g_signal = 0;
  g_signal_count = 0;
  g_second_signal = 0;
  sigset_t block;
  sigemptyset(&block);
  for (int s : kHandled) sigaddset(&block, s);
  ::sigprocmask(SIG_BLOCK, &block, &original_mask_);
  wait_mask_ = original_mask_;
  for (int s : kHandled) sigdelset(&wait_mask_, s);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < kNumHandled; ++i) {
    ::sigaction(kHandled[i], nullptr, &old_[i]);
    child_ignores_[i] = kHandled[i] != SIGCHLD && old_[i].sa_handler == SIG_IGN;
    if (!child_ignores_[i]) ::sigaction(kHandled[i], &sa, nullptr);
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalScope::~SignalScope() {
  for (size_t i = 0; i < kNumHandled; ++i) ::sigaction(kHandled[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
}

}  // namespace accel::launch
