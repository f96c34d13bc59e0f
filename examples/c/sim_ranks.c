/* Runs a function on N simulated GPUs through the C ABI: every rank trains its own copy of
 * the digits MLP on its shard of the data for a few epochs (and measures its accuracy), charging the compute a GPU would
 * spend, then the ranks average their weights with accel_reduce and report. The simulator
 * moves the real bytes with NCCL's semantics, checks each rank's memory budget, and
 * predicts the run's time on a cluster preset; --trace writes the timeline for Perfetto.
 *
 *   sim_ranks [--ranks N] [--memory 80GiB] [--topology 8xH100] [--trace out.json]
 *             [--faults kill:1@collective:2] [--data PATH] */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
#endif

typedef struct job {
    digits train, test;
    double loss[1024], accuracy[1024];
} job;

#define EPOCHS 4

#define TRY(call)                          \
    do {                                   \
        accel_status s_ = (call);          \
        if (s_ != ACCEL_OK) return s_;     \
    } while (0)

static accel_status rank_main(accel_context *ctx, void *user) {
    job *j = user;
    int32_t rank = 0, n = 1;
    int64_t sizes[] = {DIGITS_FEATURES, 128, 64, DIGITS_CLASSES}, lo, hi, b, batches = 0;
    int epoch;
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_tensor *w = NULL, *avg = NULL;
    double loss_sum = 0;
    TRY(accel_process_index(ctx, &rank));
    TRY(accel_num_processes(ctx, &n));
    m.layer_sizes = sizes;
    m.num_layer_sizes = 4;
    TRY(accel_model_create_mlp(ctx, &m, &model));
    ao.lr = 3e-3;
    TRY(accel_optimizer_create_adamw(ctx, model, &ao, &opt));
    TRY(accel_prepare(ctx, model, opt, NULL, NULL));
    /* this rank's contiguous shard, in batches of 32 */
    lo = j->train.n * rank / n;
    hi = j->train.n * (rank + 1) / n;
    for (epoch = 0; epoch < EPOCHS; ++epoch) {
        for (b = lo; b < hi; b += 32) {
            int64_t len = hi - b < 32 ? hi - b : 32;
            accel_tensor *x = host_tensor(ACCEL_FLOAT32, len, DIGITS_FEATURES, j->train.x + b * DIGITS_FEATURES);
            accel_tensor *y = host_tensor(ACCEL_INT64, len, 0, j->train.y + b);
            accel_tensor *logits = NULL, *loss = NULL;
            double l = 0;
            accel_status s = accel_model_forward(ctx, model, &x, 1, &logits);
            if (s == ACCEL_OK) s = accel_loss_cross_entropy(ctx, logits, y, &loss);
            if (s == ACCEL_OK) s = accel_backward(ctx, loss);
            if (s == ACCEL_OK) s = accel_step(ctx, NULL);
            if (s == ACCEL_OK) s = accel_tensor_item(loss, &l);
            /* what this step would cost on the simulated GPU: a made-up 2 ms per batch */
            if (s == ACCEL_OK) s = accel_sim_charge_compute(ctx, 0.002, "train step");
            accel_tensor_destroy(x);
            accel_tensor_destroy(y);
            accel_tensor_destroy(logits);
            accel_tensor_destroy(loss);
            if (s != ACCEL_OK) return s;
            if (epoch == EPOCHS - 1) {
                loss_sum += l;
                ++batches;
            }
        }
    }
    j->loss[rank] = loss_sum / (double)batches;
    j->accuracy[rank] = evaluate(ctx, model, &j->test);
    /* average the first layer's weights across ranks */
    TRY(accel_model_parameter(ctx, model, 0, &w));
    TRY(accel_reduce(ctx, w, ACCEL_REDUCE_MEAN, &avg));
    TRY(accel_barrier(ctx));
    accel_tensor_destroy(w);
    accel_tensor_destroy(avg);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    return ACCEL_OK;
}

int main(int argc, char **argv) {
    const char *data = DIGITS_DEFAULT_PATH;
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    accel_options o = ACCEL_OPTIONS_INIT;
    accel_sim_report *rep = NULL;
    digits all;
    static job j;
    int i;
    accel_status s;
    double predicted = 0;
    so.world_size = 4;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [--ranks N] [--memory 80GiB] [--topology 8xH100] [--trace FILE] [--faults SPEC] [--data PATH]\n", argv[0]);
            return 0;
        }
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc) so.world_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--memory") && i + 1 < argc) so.device_memory = argv[++i];
        else if (!strcmp(argv[i], "--topology") && i + 1 < argc) so.topology = argv[++i];
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) so.trace_path = argv[++i];
        else if (!strcmp(argv[i], "--faults") && i + 1 < argc) so.faults = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--ranks N] [--memory 80GiB] [--topology 8xH100] [--trace FILE] [--faults SPEC] [--data PATH]\n", argv[0]);
            return 2;
        }
    }
    if (so.world_size < 1 || so.world_size > 1024) { fprintf(stderr, "--ranks must be in 1..1024\n"); return 2; }
    if (digits_load(data, &all) != 0 || digits_split(&all, 0.2, 42, &j.train, &j.test) != 0) return 1;
    o.seed = 42;
    s = accel_sim_run(&so, &o, rank_main, &j, &rep);
    if (!rep) {
        fprintf(stderr, "accel_sim_run: %s: %s\n", accel_status_name(s), accel_last_error(NULL));
        return 1;
    }
    for (i = 0; i < so.world_size; ++i) {
        accel_status rs;
        const char *err;
        uint64_t peak;
        accel_sim_report_rank(rep, i, &rs, &err, &peak);
        if (rs == ACCEL_OK)
            printf("rank %d: ok, mean loss %.4f, held-out accuracy %.4f, peak device memory %.1f KiB\n", i, j.loss[i],
                   j.accuracy[i], (double)peak / 1024.0);
        else
            printf("rank %d: %s: %s\n", i, accel_status_name(rs), err);
    }
    accel_sim_report_predicted_seconds(rep, &predicted);
    printf("predicted time on %s: %.3f ms\n", so.topology ? so.topology : "8xH100", predicted * 1e3);
    if (so.trace_path) printf("trace written to %s (open it in ui.perfetto.dev)\n", so.trace_path);
    accel_sim_report_destroy(rep);
    digits_free(&all);
    digits_free(&j.train);
    digits_free(&j.test);
    return s == ACCEL_OK ? 0 : 1;
}
