/* The C side of the binding_overhead benchmark (bench/binding_overhead.py): the digits MLP's
 * training step through the C ABI, exactly the loop each binding's bench_steps program runs
 * (bindings/{python,rust,go}), so their per-step times compare.
 *
 *   binding_steps_c [--data PATH] [--warmup W] [--steps N]
 *
 * One process, CPU, fp32, 1 thread, seed 42; all 1,797 samples; MLP [64,128,64,10] ReLU;
 * AdamW lr 3e-3; a loader with batch 32, shuffle, seed 42. One step: accel_dataloader_next
 * (again at the end of an epoch), accel_model_forward, accel_loss_cross_entropy,
 * accel_backward, accel_step, and the four tensors released. W steps untimed, then N timed.
 * Prints one JSON line: {"lang":"c","steps":N,"us_per_step":X}. */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digits.h"

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
#endif

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void one_step(accel_context *ctx, accel_model *model, accel_dataloader *loader) {
    accel_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    accel_step_result r;
    CHECK(ctx, accel_dataloader_next(ctx, loader, &x, &y));
    if (!x) CHECK(ctx, accel_dataloader_next(ctx, loader, &x, &y)); /* the epoch ended */
    CHECK(ctx, accel_model_forward(ctx, model, &x, 1, &logits));
    CHECK(ctx, accel_loss_cross_entropy(ctx, logits, y, &loss));
    CHECK(ctx, accel_backward(ctx, loss));
    CHECK(ctx, accel_step(ctx, &r));
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    accel_tensor_destroy(logits);
    accel_tensor_destroy(loss);
}

int main(int argc, char **argv) {
    const char *data = DIGITS_DEFAULT_PATH;
    long warmup = 200, steps = 2000, i;
    int a;
    digits all;
    accel_options o = ACCEL_OPTIONS_INIT;
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    int64_t sizes[] = {DIGITS_FEATURES, 128, 64, DIGITS_CLASSES};
    accel_context *ctx = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_dataloader *loader = NULL;
    accel_tensor *xs, *ys;
    double t0, t1;
    for (a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "--data") && a + 1 < argc) data = argv[++a];
        else if (!strcmp(argv[a], "--warmup") && a + 1 < argc) warmup = atol(argv[++a]);
        else if (!strcmp(argv[a], "--steps") && a + 1 < argc) steps = atol(argv[++a]);
        else {
            fprintf(stderr, "usage: %s [--data PATH] [--warmup W] [--steps N]\n", argv[0]);
            return 2;
        }
    }
    if (warmup < 0 || steps < 1) {
        fprintf(stderr, "--warmup must be >= 0 and --steps >= 1\n");
        return 2;
    }
    if (digits_load(data, &all) != 0) return 1;
    o.num_threads = 1;
    o.seed = 42;
    CHECK(NULL, accel_init(&o, &ctx));
    m.layer_sizes = sizes;
    m.num_layer_sizes = 4;
    CHECK(ctx, accel_model_create_mlp(ctx, &m, &model));
    ao.lr = 3e-3;
    CHECK(ctx, accel_optimizer_create_adamw(ctx, model, &ao, &opt));
    xs = host_tensor(ACCEL_FLOAT32, all.n, DIGITS_FEATURES, all.x);
    ys = host_tensor(ACCEL_INT64, all.n, 0, all.y);
    lo.batch_size = 32;
    lo.shuffle = 1;
    lo.seed = 42;
    CHECK(ctx, accel_dataloader_create(ctx, xs, ys, &lo, &loader));
    CHECK(ctx, accel_prepare(ctx, model, opt, NULL, loader));
    for (i = 0; i < warmup; ++i) one_step(ctx, model, loader);
    t0 = now_s();
    for (i = 0; i < steps; ++i) one_step(ctx, model, loader);
    t1 = now_s();
    printf("{\"lang\":\"c\",\"steps\":%ld,\"us_per_step\":%.2f}\n", steps, (t1 - t0) * 1e6 / (double)steps);
    accel_tensor_destroy(xs);
    accel_tensor_destroy(ys);
    accel_dataloader_destroy(loader);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_destroy(ctx);
    digits_free(&all);
    return 0;
}
