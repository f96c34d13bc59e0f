/* TCP ports for check_launch.sh, on 127.0.0.1:
 *   port_helper free                prints a port nobody uses now
 *   port_helper bindable PORT       exits 0 when PORT can be bound and listened on
 *   port_helper hold PORT CMD...    listens on PORT (0: a free one) while CMD runs, with the
 *                                   port in HELD_PORT; exits with CMD's status
 *   port_helper timewait CMD...     leaves a connection in TIME_WAIT on a port, as a finished
 *                                   run's rendezvous server does (it closes first), then runs
 *                                   CMD with the port in HELD_PORT; exits with CMD's status */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* A listening socket on PORT (0: any), or -1; *bound gets the port. */
static int listen_on(int port, int reuse, int* bound) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int one = 1;
  if (reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = loopback(port);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  if (bound) *bound = ntohs(a.sin_port);
  return fd;
}

static int run(char** argv, int port) {
  char text[16];
  snprintf(text, sizeof text, "%d", port);
  setenv("HELD_PORT", text, 1);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[0], argv);
    perror(argv[0]);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 125;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char** argv) {
  if (argc >= 2 && !strcmp(argv[1], "free")) {
    int port = 0, fd = listen_on(0, 0, &port);
    if (fd < 0) return 1;
    close(fd);
    printf("%d\n", port);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "bindable")) {
    int fd = listen_on(atoi(argv[2]), 0, NULL);
    if (fd < 0) return 1;
    close(fd);
    return 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "hold")) {
    int port = 0, fd = listen_on(atoi(argv[2]), 0, &port);
    if (fd < 0) {
      perror("port_helper hold");
      return 125;
    }
    return run(argv + 3, port);
  }
  if (argc >= 3 && !strcmp(argv[1], "timewait")) {
    int port = 0, server = listen_on(0, 1, &port);
    int client = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = loopback(port);
    if (server < 0 || client < 0 || connect(client, (struct sockaddr*)&a, sizeof a) != 0) return 125;
    int accepted = accept(server, NULL, NULL);
    if (accepted < 0) return 125;
    close(accepted); /* the server's side closes first: it is the one left in TIME_WAIT */
    usleep(50000);
    close(client);
    close(server);
    usleep(50000);
    int probe = listen_on(port, 0, NULL); /* the TIME_WAIT refuses a bind without SO_REUSEADDR */
    if (probe >= 0) {
      close(probe);
      fprintf(stderr, "port_helper: no TIME_WAIT left on port %d\n", port);
      return 125;
    }
    return run(argv + 2, port);
  }
  fprintf(stderr, "usage: port_helper free | bindable PORT | hold PORT CMD... | timewait CMD...\n");
  return 2;
}
