// libaccel-warm-start.so: `accel launch --warm-start` (docs/launch.md). The launcher starts
// the program once, as a template, with this library preloaded; here, after the dynamic
// loader has loaded and relocated every library and run their constructors (libtorch's
// operator registration among them: most of a libtorch program's start-up), and before the
// program's own constructors and main, the template forks one process per rank on the
// launcher's request. Each takes its rank's environment, standard output and error from the
// request, becomes the launcher's child (the launcher is a subreaper: the template forks a
// process that forks the rank and exits at once), tells the launcher its pid and then runs
// the program's constructors and main as if it had been executed. The template itself never
// runs main: when the launcher closes the connection it exits.
//
// Protocol, over the SOCK_SEQPACKET descriptor in ACCEL_WARM_START_FD:
//   launcher -> template: one message per rank: "RANK\0" then the environment's entries,
//     each ending in \0; its descriptors (SCM_RIGHTS) the rank's stdout and stderr.
//   template -> launcher, first: "ready" once its libraries have loaded, or "refused: WHY"
//     when it cannot fork safely (threads running before main), then it exits and the
//     launcher starts every process on its own (the launcher sends nothing before this
//     answer: a socket closed with unread messages would reset the connection and lose it);
//   template -> launcher: "forked RANK" once the rank's process exists, "failed: WHY" when a
//     fork failed;
//   rank -> launcher: "RANK PID" once it is the launcher's child, before main.
// C and libc only: it is loaded into any program (a C program, Python, a shell).
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*main_fn)(int, char**, char**);
typedef int (*start_fn)(main_fn, int, char**, void (*)(void), void (*)(void), void (*)(void), void*);

enum { kMaxMessage = 1 << 20 };

// Threads of this process (a fork copies only the calling one: a library that started one
// before main would find it gone in every rank).
static int thread_count(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

static void say(int fd, const char* text) {
  ssize_t w = send(fd, text, strlen(text), MSG_NOSIGNAL);
  (void)w;
}

// In the rank's process: its environment, descriptors and parent, then the program.
static void become_rank(int sock, pid_t launcher, char* msg, size_t len, int out_fd, int err_fd) {
  // the launcher is its parent once the intermediate process has exited
  for (int i = 0; getppid() != launcher; ++i) {
    if (i > 20000) _exit(125);  // 2 s: the launcher is gone
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(125);
  if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(126);
  if (out_fd > 2) close(out_fd);
  if (err_fd > 2 && err_fd != out_fd) close(err_fd);
  const char* rank = msg;
  clearenv();
  for (size_t at = strlen(msg) + 1; at < len;) {
    char* entry = msg + at;
    at += strlen(entry) + 1;
    if (strchr(entry, '=')) putenv(entry);  // msg lives as long as the process
  }
  char reply[64];
  snprintf(reply, sizeof reply, "%s %ld", rank, (long)getpid());
  say(sock, reply);
  close(sock);
}

int __libc_start_main(main_fn main, int argc, char** argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void* stack_end) {
  start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
  if (!real) _exit(127);
  const char* fd_text = getenv("ACCEL_WARM_START_FD");
  if (!fd_text) return real(main, argc, argv, init, fini, rtld_fini, stack_end);
  const int sock = atoi(fd_text);
  const pid_t launcher = getppid();
  const int threads = thread_count();
  if (threads != 1) {
    char why[160];
    snprintf(why, sizeof why, "refused: %d threads were running before main (a fork keeps only one)", threads);
    say(sock, why);
    _exit(0);
  }
  say(sock, "ready");
  for (;;) {
    char* msg = malloc(kMaxMessage);
    if (!msg) _exit(1);
    union {  // (aligned for the header)
      char bytes[CMSG_SPACE(2 * sizeof(int))];
      struct cmsghdr align;
    } control;
    struct iovec iov = {msg, kMaxMessage - 1};
    struct msghdr h;
    memset(&h, 0, sizeof h);
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control.bytes;
    h.msg_controllen = sizeof control.bytes;
    const ssize_t len = recvmsg(sock, &h, MSG_CMSG_CLOEXEC);
    if (len < 0 && errno == EINTR) {
      free(msg);
      continue;
    }
    if (len <= 0) _exit(0);  // the launcher closed the connection: every rank started
    msg[len] = '\0';
    int fds[2] = {-1, -1};
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(2 * sizeof(int)))
        memcpy(fds, CMSG_DATA(c), sizeof fds);
    if (fds[0] < 0 || fds[1] < 0) _exit(1);
    const pid_t middle = fork();
    if (middle == 0) {
      const pid_t rank = fork();
      if (rank == 0) {
        become_rank(sock, launcher, msg, (size_t)len, fds[0], fds[1]);
        return real(main, argc, argv, init, fini, rtld_fini, stack_end);
      }
      _exit(rank < 0 ? 1 : 0);
    }
    close(fds[0]);
    close(fds[1]);
    char note[96];
    if (middle < 0) {
      snprintf(note, sizeof note, "failed: fork: %s", strerror(errno));
      say(sock, note);
      _exit(1);
    }
    int st = 0;
    while (waitpid(middle, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      say(sock, "failed: fork: the rank's process could not be made");
      _exit(1);
    }
    snprintf(note, sizeof note, "forked %s", msg);  // msg begins with the rank
    say(sock, note);
    free(msg);
  }
}
