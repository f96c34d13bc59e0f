/* One process of a launched world, through the C ABI alone: it joins the world in
 * accel_init and checks every process utility against what its launcher's variables say.
 * Prints one line, "rank R of N local L/M: ok sum S", or what was wrong, and exits non-zero.
 *
 *   process_probe [--no-destroy | --stall SECONDS | --mismatch]
 *
 * --no-destroy exits without accel_destroy; --stall makes process 1 sleep SECONDS before the
 * collectives (the others must fail with ACCEL_ERR_TIMEOUT when that exceeds the timeout);
 * --mismatch makes process 1 reduce two values where the others reduce one (a mismatched
 * collective: the simulator fails every process naming the calls).
 *
 * The expected rank and size come from RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, PMI_*
 * or SLURM_* (whichever the launcher set). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, sleep */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int env_int(const char *const *names, int fallback) {
    for (; *names; ++names) {
        const char *v = getenv(*names);
        if (v) return atoi(v);
    }
    return fallback;
}

#define CHECK(call)                                                                              \
    do {                                                                                         \
        accel_status s_ = (call);                                                                \
        if (s_ != ACCEL_OK) {                                                                    \
            printf("%s failed: %s: %s\n", #call, accel_status_name(s_), accel_last_error(ctx)); \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)
#define EXPECT(cond, ...)                      \
    do {                                       \
        if (!(cond)) {                         \
            printf("wrong: " __VA_ARGS__);     \
            printf("\n");                      \
            return 1;                          \
        }                                      \
    } while (0)

int main(int argc, char **argv) {
    static const char *const rank_vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    static const char *const size_vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
    const int want_rank = env_int(rank_vars, 0), want_size = env_int(size_vars, 1);
    const int no_destroy = argc > 1 && !strcmp(argv[1], "--no-destroy");
    const int stall = argc > 2 && !strcmp(argv[1], "--stall") ? atoi(argv[2]) : 0;
    const int mismatch = argc > 1 && !strcmp(argv[1], "--mismatch");
    struct timespec t0, t1;
    accel_context *ctx = NULL;
    accel_tensor *mine = NULL, *sum = NULL, *all = NULL, *bc = NULL;
    int32_t rank = -1, size = -1, local = -1;
    int is_main = -1, is_local_main = -1;
    double value, s = 0, gathered[64], b = 0;
    double pair[2];
    int64_t shape[] = {1}, n = 0;
    int r;

    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(accel_init(NULL, &ctx));
    CHECK(accel_process_index(ctx, &rank));
    CHECK(accel_num_processes(ctx, &size));
    CHECK(accel_local_process_index(ctx, &local));
    CHECK(accel_is_main_process(ctx, &is_main));
    CHECK(accel_is_local_main_process(ctx, &is_local_main));
    EXPECT(rank == want_rank && size == want_size, "rank %d of %d, the launcher says %d of %d", rank, size, want_rank,
           want_size);
    EXPECT(is_main == (rank == 0) && is_local_main == (local == 0), "is_main %d is_local_main %d", is_main,
           is_local_main);
    /* the collectives of the C ABI, across the processes */
    if (stall && rank == 1) sleep((unsigned)stall);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    value = rank + 1;
    if (mismatch && rank == 1) {
        pair[0] = pair[1] = value;
        shape[0] = 2;
        CHECK(accel_tensor_create(ACCEL_FLOAT64, shape, 1, pair, &mine));
    } else {
        CHECK(accel_tensor_create(ACCEL_FLOAT64, shape, 1, &value, &mine));
    }
    {
        accel_status st = accel_reduce(ctx, mine, ACCEL_REDUCE_SUM, &sum);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (st != ACCEL_OK) { /* how long it waited, for the timeout tests */
            printf("accel_reduce failed after %.1f s: %s: %s\n",
                   (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), accel_status_name(st),
                   accel_last_error(ctx));
            return 1;
        }
    }
    CHECK(accel_tensor_item(sum, &s));
    EXPECT(s == size * (size + 1) / 2.0, "sum %g", s);
    CHECK(accel_gather(ctx, mine, &all));
    CHECK(accel_tensor_numel(all, &n));
    EXPECT(n == size && n <= 64, "gathered %lld values", (long long)n);
    CHECK(accel_tensor_copy_to_host(all, gathered, sizeof(double) * (size_t)n));
    for (r = 0; r < size; ++r) EXPECT(gathered[r] == r + 1, "gathered[%d] = %g", r, gathered[r]);
    CHECK(accel_broadcast(ctx, mine, size - 1, &bc));
    CHECK(accel_tensor_item(bc, &b));
    EXPECT(b == size, "broadcast from the last process gave %g", b);
    CHECK(accel_barrier(ctx));
    printf("rank %d of %d local %d: ok sum %g\n", rank, size, local, s);
    accel_tensor_destroy(mine);
    accel_tensor_destroy(sum);
    accel_tensor_destroy(all);
    accel_tensor_destroy(bc);
    if (no_destroy) exit(0); /* the context and its world are left to the process's exit */
    accel_destroy(ctx);
    return 0;
}
