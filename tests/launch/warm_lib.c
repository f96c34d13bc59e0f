/* A library of warm_helper: its constructor notes the process it ran in (with --warm-start,
 * the template process; otherwise each process itself), and starts a thread that lives to
 * the end when WARM_HELPER_THREAD is set (a library with a thread before main). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static pid_t loaded_in;

static void* idle(void* arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

__attribute__((constructor)) static void on_load(void) {
  loaded_in = getpid();
  if (getenv("WARM_HELPER_THREAD")) {
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
  }
}

pid_t warm_lib_loaded_in(void) { return loaded_in; }
