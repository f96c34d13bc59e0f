/* Trains accel's built-in MLP on the UCI handwritten digits through the C ABI and prints
 * the held-out accuracy on its last line ("accuracy: 0.9722").
 *
 *   train_digits [--data PATH] [--precision no|bf16|fp16] [--accum K] [--epochs N]
 *                [--batch B] [--save PATH.safetensors]
 *
 * The data: examples/data/digits.csv.gz (CC BY 4.0, see examples/data/README.md). */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
#endif

int main(int argc, char **argv) {
    const char *data = DIGITS_DEFAULT_PATH, *save = NULL;
    int epochs = 20, accum = 1, batch = 32, i;
    accel_precision precision = ACCEL_PRECISION_NO;
    digits all, train, test;
    accel_options opts = ACCEL_OPTIONS_INIT;
    accel_context *ctx = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_scheduler *sched = NULL;
    accel_dataloader *loader = NULL;
    accel_tensor *xs, *ys;
    int64_t sizes[] = {DIGITS_FEATURES, 128, 64, DIGITS_CLASSES}, batches;
    accel_mlp_options mlp = ACCEL_MLP_OPTIONS_INIT;
    accel_adamw_options adamw = ACCEL_ADAMW_OPTIONS_INIT;
    accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--accum") && i + 1 < argc) accum = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *p = argv[++i];
            if (!strcmp(p, "no")) precision = ACCEL_PRECISION_NO;
            else if (!strcmp(p, "bf16")) precision = ACCEL_PRECISION_BF16;
            else if (!strcmp(p, "fp16")) precision = ACCEL_PRECISION_FP16;
            else { fprintf(stderr, "unknown precision '%s' (no, bf16, fp16)\n", p); return 2; }
        } else {
            fprintf(stderr, "usage: %s [--data PATH] [--precision no|bf16|fp16] [--accum K] [--epochs N] [--batch B] [--save FILE]\n", argv[0]);
            return 2;
        }
    }
    if (epochs < 1 || accum < 1 || batch < 1) { fprintf(stderr, "epochs, accum and batch must be >= 1\n"); return 2; }

    if (digits_load(data, &all) != 0 || digits_split(&all, 0.2, 42, &train, &test) != 0) return 1;
    printf("digits: %lld training samples, %lld held out\n", (long long)train.n, (long long)test.n);

    opts.mixed_precision = precision;
    opts.gradient_accumulation_steps = accum;
    opts.seed = 42;
    CHECK(NULL, accel_init(&opts, &ctx));

    mlp.layer_sizes = sizes;
    mlp.num_layer_sizes = sizeof sizes / sizeof sizes[0];
    CHECK(ctx, accel_model_create_mlp(ctx, &mlp, &model));
    adamw.lr = 3e-3;
    CHECK(ctx, accel_optimizer_create_adamw(ctx, model, &adamw, &opt));

    xs = host_tensor(ACCEL_FLOAT32, train.n, DIGITS_FEATURES, train.x);
    ys = host_tensor(ACCEL_INT64, train.n, 0, train.y);
    lo.batch_size = batch;
    lo.shuffle = 1;
    lo.seed = 42;
    CHECK(ctx, accel_dataloader_create(ctx, xs, ys, &lo, &loader));
    accel_tensor_destroy(xs);
    accel_tensor_destroy(ys);
    CHECK(ctx, accel_dataloader_num_batches(loader, &batches));

    so.kind = ACCEL_SCHEDULE_COSINE;
    so.total_steps = (int64_t)epochs * ((batches + accum - 1) / accum);
    so.warmup_steps = so.total_steps / 20;
    CHECK(ctx, accel_scheduler_create(ctx, opt, &so, &sched));
    CHECK(ctx, accel_prepare(ctx, model, opt, sched, loader));

    for (i = 0; i < epochs; ++i) {
        accel_tensor *x = NULL, *y = NULL;
        double loss_sum = 0, lr = 0;
        int64_t n = 0, skipped = 0;
        accel_step_result r;
        for (;;) {
            accel_tensor *logits = NULL, *loss = NULL;
            double l;
            CHECK(ctx, accel_dataloader_next(ctx, loader, &x, &y));
            if (!x) break; /* end of the epoch */
            CHECK(ctx, accel_model_forward(ctx, model, &x, 1, &logits));
            CHECK(ctx, accel_loss_cross_entropy(ctx, logits, y, &loss));
            CHECK(ctx, accel_tensor_item(loss, &l));
            CHECK(ctx, accel_backward(ctx, loss));
            CHECK(ctx, accel_clip_grad_norm(ctx, 1.0, NULL));
            CHECK(ctx, accel_step(ctx, &r));
            skipped += r.skipped;
            loss_sum += l;
            ++n;
            accel_tensor_destroy(logits);
            accel_tensor_destroy(loss);
            accel_tensor_destroy(x);
            accel_tensor_destroy(y);
        }
        CHECK(ctx, accel_optimizer_lr(opt, &lr));
        printf("epoch %2d/%d  loss %.4f  lr %.2e  steps %lld", i + 1, epochs, loss_sum / (double)n, lr,
               (long long)r.optimizer_steps);
        if (precision == ACCEL_PRECISION_FP16) printf("  loss-scale %.0f  skipped %lld", r.loss_scale, (long long)skipped);
        printf("  test-accuracy %.4f\n", evaluate(ctx, model, &test));
        fflush(stdout);
    }
    if (save) {
        CHECK(ctx, accel_save_model(ctx, model, save));
        printf("weights saved to %s\n", save);
    }
    printf("accuracy: %.4f\n", evaluate(ctx, model, &test));

    accel_dataloader_destroy(loader);
    accel_scheduler_destroy(sched);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_destroy(ctx);
    digits_free(&all);
    digits_free(&train);
    digits_free(&test);
    return 0;
}
