/* For check_launch.sh's warm case: prints what a process sees of its start
 *   rank=R local=L lib=here|elsewhere preload=LD_PRELOAD|unset
 * (lib: whether warm_lib's constructor ran in this process or in another, the template) and
 * exits with 3 when RANK equals WARM_HELPER_FAIL_RANK, else 0. */
#include <stdio.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pid_t warm_lib_loaded_in(void);

int main(void) {
  const char* rank = getenv("RANK");
  const char* local = getenv("LOCAL_RANK");
  const char* preload = getenv("LD_PRELOAD");
  const char* fail = getenv("WARM_HELPER_FAIL_RANK");
  printf("rank=%s local=%s lib=%s preload=%s\n", rank ? rank : "unset", local ? local : "unset",
         warm_lib_loaded_in() == getpid() ? "here" : "elsewhere", preload ? preload : "unset");
  return fail && rank && strcmp(fail, rank) == 0 ? 3 : 0;
}
