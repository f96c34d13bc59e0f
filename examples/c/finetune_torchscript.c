/* Loads a TorchScript model (made without Python by make_torchscript_model, or saved by
 * torch.jit.save) and fine-tunes it on the digits through the C ABI with SGD + momentum
 * and a linear schedule, then writes the trained weights as safetensors.
 *
 *   finetune_torchscript MODEL.pt [--data PATH] [--epochs N] [--save OUT.safetensors]
 *
 * Prints the held-out accuracy before and after; the last line is "accuracy: 0.95..". */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
#endif

int main(int argc, char **argv) {
    const char *model_path = NULL, *data = DIGITS_DEFAULT_PATH, *save = NULL;
    int epochs = 15, i;
    digits all, train, test;
    accel_options opts = ACCEL_OPTIONS_INIT;
    accel_context *ctx = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_scheduler *sched = NULL;
    accel_dataloader *loader = NULL;
    accel_tensor *xs, *ys;
    accel_sgd_options sgd = ACCEL_SGD_OPTIONS_INIT;
    accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    int64_t batches, elements;
    size_t tensors;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s MODEL.pt [--data PATH] [--epochs N] [--save FILE]\n", argv[0]);
            return 0;
        }
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
        else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else {
            fprintf(stderr, "usage: %s MODEL.pt [--data PATH] [--epochs N] [--save FILE]\n", argv[0]);
            return 2;
        }
    }
    if (!model_path || epochs < 1) {
        fprintf(stderr, "usage: %s MODEL.pt [--data PATH] [--epochs N] [--save FILE]\n", argv[0]);
        return 2;
    }
    if (digits_load(data, &all) != 0 || digits_split(&all, 0.2, 42, &train, &test) != 0) return 1;

    opts.seed = 7;
    CHECK(NULL, accel_init(&opts, &ctx));
    CHECK(ctx, accel_model_load_torchscript(ctx, model_path, &model));
    CHECK(ctx, accel_model_num_parameters(model, &tensors, &elements));
    printf("loaded %s: %zu parameter tensors, %lld parameters\n", model_path, tensors, (long long)elements);

    sgd.lr = 0.1;
    sgd.momentum = 0.9;
    sgd.nesterov = 1;
    CHECK(ctx, accel_optimizer_create_sgd(ctx, model, &sgd, &opt));
    xs = host_tensor(ACCEL_FLOAT32, train.n, DIGITS_FEATURES, train.x);
    ys = host_tensor(ACCEL_INT64, train.n, 0, train.y);
    lo.batch_size = 64;
    lo.shuffle = 1;
    lo.seed = 7;
    CHECK(ctx, accel_dataloader_create(ctx, xs, ys, &lo, &loader));
    accel_tensor_destroy(xs);
    accel_tensor_destroy(ys);
    CHECK(ctx, accel_dataloader_num_batches(loader, &batches));
    so.kind = ACCEL_SCHEDULE_LINEAR;
    so.warmup_steps = batches;
    so.total_steps = (int64_t)epochs * batches;
    CHECK(ctx, accel_scheduler_create(ctx, opt, &so, &sched));
    CHECK(ctx, accel_prepare(ctx, model, opt, sched, loader));

    printf("accuracy before fine-tuning: %.4f\n", evaluate(ctx, model, &test));
    for (i = 0; i < epochs; ++i) {
        accel_tensor *x = NULL, *y = NULL;
        double loss_sum = 0;
        int64_t n = 0;
        for (;;) {
            accel_tensor *logits = NULL, *loss = NULL;
            double l;
            CHECK(ctx, accel_dataloader_next(ctx, loader, &x, &y));
            if (!x) break;
            CHECK(ctx, accel_model_forward(ctx, model, &x, 1, &logits));
            CHECK(ctx, accel_loss_cross_entropy(ctx, logits, y, &loss));
            CHECK(ctx, accel_tensor_item(loss, &l));
            CHECK(ctx, accel_backward(ctx, loss));
            CHECK(ctx, accel_step(ctx, NULL));
            loss_sum += l;
            ++n;
            accel_tensor_destroy(logits);
            accel_tensor_destroy(loss);
            accel_tensor_destroy(x);
            accel_tensor_destroy(y);
        }
        printf("epoch %2d/%d  loss %.4f\n", i + 1, epochs, loss_sum / (double)n);
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
