/* lm_step's accel side (bench/lm_step.py drives it): causal-LM training steps of a model made
 * from a config.json, through the C ABI. A step is accel_lm_forward (logits and the loss of
 * a batch of random token ids, labels = the ids), accel_backward, accel_step (AdamW, lr 1e-4)
 * and the release of the handles.
 *
 *   lm_step_c CONFIG.json [--batch B] [--seq T] [--steps N] [--warmup W] [--threads K]
 *             [--precision no|bf16] [--checkpointing]
 *
 * Prints one JSON line: {"side":"accel","params":..,"step_ms":[...]} (the timed steps). */
#define _POSIX_C_SOURCE 199309L
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, accel_context *ctx) {
    fprintf(stderr, "lm_step_c: %s: %s\n", what, accel_last_error(ctx));
    exit(1);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lm_step_c CONFIG.json [--batch B] [--seq T] [--steps N] [--warmup W] [--threads K] "
                        "[--precision no|bf16] [--checkpointing]\n");
        return 2;
    }
    const char *config = argv[1];
    long batch = 1, seq = 128, steps = 5, warmup = 1, threads = 0, ckpt = 0;
    const char *precision = "no";
    for (int i = 2; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--checkpointing")) { ckpt = 1; continue; }
        if (!v) { fprintf(stderr, "lm_step_c: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--batch")) batch = atol(v);
        else if (!strcmp(a, "--seq")) seq = atol(v);
        else if (!strcmp(a, "--steps")) steps = atol(v);
        else if (!strcmp(a, "--warmup")) warmup = atol(v);
        else if (!strcmp(a, "--threads")) threads = atol(v);
        else if (!strcmp(a, "--precision")) precision = v;
        else { fprintf(stderr, "lm_step_c: unknown argument %s\n", a); return 2; }
        ++i;
    }
    if (batch < 1 || seq < 2 || steps < 1 || warmup < 0) { fprintf(stderr, "lm_step_c: bad sizes\n"); return 2; }

    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.seed = 1;
    o.num_threads = (int32_t)threads;
    o.mixed_precision = !strcmp(precision, "bf16") ? ACCEL_PRECISION_BF16 : ACCEL_PRECISION_NO;
    accel_context *ctx = NULL;
    if (accel_init(&o, &ctx) != ACCEL_OK) die("accel_init", NULL);
    accel_lm_options lo = ACCEL_LM_OPTIONS_INIT;
    lo.gradient_checkpointing = (int32_t)ckpt;
    accel_model *model = NULL;
    if (accel_model_create_lm(ctx, config, &lo, &model) != ACCEL_OK) die("accel_model_create_lm", ctx);
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    ao.lr = 1e-4;
    accel_optimizer *opt = NULL;
    if (accel_optimizer_create_adamw(ctx, model, &ao, &opt) != ACCEL_OK) die("accel_optimizer_create_adamw", ctx);
    if (accel_prepare(ctx, model, opt, NULL, NULL) != ACCEL_OK) die("accel_prepare", ctx);
    int64_t params = 0;
    if (accel_model_num_parameters(model, NULL, &params) != ACCEL_OK) die("accel_model_num_parameters", NULL);
    /* the vocabulary: the first parameter is the token embedding [vocab, hidden] */
    accel_tensor *emb = NULL;
    int64_t shape[2];
    if (accel_model_parameter(ctx, model, 0, &emb) != ACCEL_OK || accel_tensor_shape(emb, shape, 2) != ACCEL_OK)
        die("accel_model_parameter", ctx);
    accel_tensor_destroy(emb);
    const int64_t vocab = shape[0];

    const size_t n = (size_t)(batch * seq);
    int64_t *ids = malloc(n * sizeof *ids);
    uint64_t x = 88172645463325252ull;
    double *ms = malloc((size_t)steps * sizeof *ms);
    for (long s = 0; s < warmup + steps; ++s) {
        for (size_t i = 0; i < n; ++i) {  /* xorshift: new random tokens each step */
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            ids[i] = (int64_t)(x % (uint64_t)vocab);
        }
        const int64_t dims[2] = {batch, seq};
        const double t0 = now_ms();
        accel_tensor *in = NULL, *logits = NULL, *loss = NULL;
        if (accel_tensor_create(ACCEL_INT64, dims, 2, ids, &in) != ACCEL_OK) die("accel_tensor_create", NULL);
        if (accel_lm_forward(ctx, model, in, NULL, in, &logits, &loss, NULL) != ACCEL_OK) die("accel_lm_forward", ctx);
        if (accel_backward(ctx, loss) != ACCEL_OK) die("accel_backward", ctx);
        if (accel_step(ctx, NULL) != ACCEL_OK) die("accel_step", ctx);
        accel_tensor_destroy(loss);
        accel_tensor_destroy(logits);
        accel_tensor_destroy(in);
        if (s >= warmup) ms[s - warmup] = now_ms() - t0;
    }
    printf("{\"side\":\"accel\",\"params\":%lld,\"version\":\"%s\",\"step_ms\":[", (long long)params,
           accel_version_string());
    for (long s = 0; s < steps; ++s) printf("%s%.3f", s ? "," : "", ms[s]);
    printf("]}\n");
    free(ms);
    free(ids);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_destroy(ctx);
    return 0;
}
