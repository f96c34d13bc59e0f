/* Writes a known series through accel_log with every writer, for tests/scripts/check_trackers.py:
 * steps 0..9, "loss" = 1/(step+1), "lr" = 0.001*step, "accuracy" at odd steps only (NaN at
 * step 5), "name, with \"quotes\"" at step 9. Usage: tracker_probe LOG_DIR */
#include <accel/accel.h>

#include <math.h>
#include <stdio.h>

#define CHECK(call)                                                             \
    do {                                                                        \
        if ((call) != ACCEL_OK) {                                               \
            fprintf(stderr, "%s failed: %s\n", #call, accel_last_error(ctx)); \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(int argc, char **argv) {
    accel_context *ctx = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: %s LOG_DIR\n", argv[0]);
        return 2;
    }
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    CHECK(accel_init(&o, &ctx));
    accel_tracker_options t = ACCEL_TRACKER_OPTIONS_INIT;
    t.log_dir = argv[1];
    t.writers = ACCEL_LOG_JSONL | ACCEL_LOG_CSV | ACCEL_LOG_TENSORBOARD;
    CHECK(accel_init_trackers(ctx, &t));
    for (int step = 0; step < 10; ++step) {
        const char *names[3] = {"loss", "lr", "accuracy"};
        double values[3] = {1.0 / (step + 1), 0.001 * step, step == 5 ? NAN : 0.5 + 0.05 * step};
        CHECK(accel_log(ctx, step, names, values, step % 2 ? 3 : 2));
    }
    const char *odd[1] = {"name, with \"quotes\""};
    const double v[1] = {-2.5};
    CHECK(accel_log(ctx, 9, odd, v, 1));
    CHECK(accel_end_training(ctx));
    accel_destroy(ctx);
    return 0;
}
