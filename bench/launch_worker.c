/* bench_launch's worker: a minimal distributed program on accel's public C ABI, run by
 * `accel launch -n N`. It joins the launched world in accel_init (the launcher's variables;
 * backend Gloo on the CPU), sums a one-element tensor holding rank + 1 with accel_reduce,
 * checks the sum (N(N+1)/2), and writes to DIR/rank_<R> three CLOCK_REALTIME timestamps in
 * seconds: main entered, accel_init returned, the reduction returned.
 *
 *   launch_worker DIR
 *
 * Exits 0 on success, 1 on an accel error or a wrong sum (the message on stderr). */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, accel_status st, accel_context *ctx) {
    fprintf(stderr, "launch_worker: %s: %s: %s\n", what, accel_status_name(st), accel_last_error(ctx));
    return 1;
}

int main(int argc, char **argv) {
    const double t_main = now_real();
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (run by bench_launch through accel launch)\n", argv[0]);
        return 2;
    }
    accel_options o;
    accel_status st = accel_options_init(&o, ACCEL_OPTIONS_VERSION);
    if (st != ACCEL_OK) return fail("accel_options_init", st, NULL);
    o.device = ACCEL_DEVICE_CPU;
    o.backend = ACCEL_BACKEND_GLOO;
    o.num_threads = 1;
    o.timeout_seconds = 60;
    accel_context *ctx = NULL;
    st = accel_init(&o, &ctx);
    if (st != ACCEL_OK) return fail("accel_init", st, NULL);
    const double t_init = now_real();

    int32_t rank = 0, world = 0;
    if ((st = accel_process_index(ctx, &rank)) != ACCEL_OK) return fail("accel_process_index", st, ctx);
    if ((st = accel_num_processes(ctx, &world)) != ACCEL_OK) return fail("accel_num_processes", st, ctx);
    const float mine = (float)(rank + 1);
    const int64_t shape[1] = {1};
    accel_tensor *t = NULL, *sum = NULL;
    if ((st = accel_tensor_create(ACCEL_FLOAT32, shape, 1, &mine, &t)) != ACCEL_OK)
        return fail("accel_tensor_create", st, NULL);
    if ((st = accel_reduce(ctx, t, ACCEL_REDUCE_SUM, &sum)) != ACCEL_OK) return fail("accel_reduce", st, ctx);
    const double t_coll = now_real();
    double got = 0;
    if ((st = accel_tensor_item(sum, &got)) != ACCEL_OK) return fail("accel_tensor_item", st, NULL);
    const double want = (double)world * (world + 1) / 2.0;
    if (got != want) {
        fprintf(stderr, "launch_worker %d: the sum is %g, expected %g\n", rank, got, want);
        return 1;
    }

    char path[4096];
    snprintf(path, sizeof path, "%s/rank_%d", argv[1], rank);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%.6f %.6f %.6f\n", t_main, t_init, t_coll) < 0 || fclose(f) != 0) {
        fprintf(stderr, "launch_worker %d: cannot write %s\n", rank, path);
        return 1;
    }
    accel_tensor_destroy(sum);
    accel_tensor_destroy(t);
    accel_destroy(ctx);
    return 0;
}
