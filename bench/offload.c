/* Optimizer offload's cost (issue 37, docs/memory.md "Offload"), through the C ABI only.
 *
 *   bench_offload [--rounds R] [--steps S]
 *
 * 1. The CPU path: a Llama-shaped causal LM (14.8 M parameters, 4 x 128 tokens, AdamW) trained
 *    by two contexts in this process, one with ACCEL_OFFLOAD_OPTIMIZER and one without,
 *    round by round interleaved on the same machine (S timed steps each per round, R rounds):
 *      {"bench":"offload","case":"cpu/...","plain_ms":..,"offload_ms":..,"offload_ratio":..}
 *    offload_ratio = the offloaded step's median time over the plain one's (on a CPU the
 *    "host" is the same memory: what it costs is the copies of the weights and gradients).
 * 2. The simulator's prediction of the same step on GPUs: DDP on "8xH100" (8 ranks, PCIe 5.0
 *    x16 to the host), one GPU of "8xPCIe" (PCIe 4.0 x16) and DDP on "4xGH200" (4 ranks,
 *    NVLink-C2C to the host, 450 GB/s a direction), with and without offload: the
 *    predicted time of a step (the difference between runs of 3 and 1 steps, halved), the host
 *    transfers' share of it, the device and host peaks of rank 0:
 *      {"bench":"offload","case":"sim/8xH100/...","plain_step_s":..,"offload_step_s":..,
 *       "transfer_step_s":..,"offload_ratio":..,"device_peak_bytes":[plain, offload],
 *       "host_peak_bytes":..}
 */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *kConfig = "{\"model_type\": \"llama\", \"vocab_size\": 2048, \"hidden_size\": 512, "
                             "\"intermediate_size\": 1376, \"num_hidden_layers\": 4, \"num_attention_heads\": 8, "
                             "\"num_key_value_heads\": 8, \"max_position_embeddings\": 256}";
enum { kBatch = 4, kSeq = 128 };

#define CHECK(call, ctx)                                                               \
    do {                                                                               \
        accel_status st_ = (call);                                                     \
        if (st_ != ACCEL_OK) {                                                         \
            fprintf(stderr, "bench_offload: %s: %s\n", #call, accel_last_error(ctx));  \
            return st_;                                                                \
        }                                                                              \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    accel_context *ctx;
    accel_model *model;
    accel_optimizer *opt;
    accel_tensor *ids;
} Trainer;

static int64_t g_ids[kBatch * kSeq];

static accel_status make_trainer(Trainer *t, const char *config, accel_offload offload, accel_context *given) {
    memset(t, 0, sizeof *t);
    if (given) {
        t->ctx = given;
    } else {
        accel_options o = ACCEL_OPTIONS_INIT;
        o.device = ACCEL_DEVICE_CPU;
        o.seed = 1;
        o.offload = offload;
        CHECK(accel_init(&o, &t->ctx), NULL);
    }
    CHECK(accel_model_create_lm(t->ctx, config, NULL, &t->model), t->ctx);
    accel_adamw_options a = ACCEL_ADAMW_OPTIONS_INIT;
    CHECK(accel_optimizer_create_adamw(t->ctx, t->model, &a, &t->opt), t->ctx);
    CHECK(accel_prepare(t->ctx, t->model, t->opt, NULL, NULL), t->ctx);
    const int64_t dims[2] = {kBatch, kSeq};
    CHECK(accel_tensor_create(ACCEL_INT64, dims, 2, g_ids, &t->ids), t->ctx);
    return ACCEL_OK;
}

static accel_status train_step(Trainer *t) {
    accel_tensor *loss = NULL;
    CHECK(accel_lm_forward(t->ctx, t->model, t->ids, NULL, t->ids, NULL, &loss, NULL), t->ctx);
    accel_status st = accel_backward(t->ctx, loss);
    if (st == ACCEL_OK) st = accel_step(t->ctx, NULL);
    accel_tensor_destroy(loss);
    if (st != ACCEL_OK) fprintf(stderr, "bench_offload: step: %s\n", accel_last_error(t->ctx));
    return st;
}

static void free_trainer(Trainer *t, int own_ctx) {
    accel_tensor_destroy(t->ids);
    accel_optimizer_destroy(t->opt);
    accel_model_destroy(t->model);
    if (own_ctx) accel_destroy(t->ctx);
}

typedef struct {
    const char *config;
    int steps;
} SimJob;

static accel_status sim_rank(accel_context *ctx, void *user) {
    const SimJob *job = user;
    Trainer t;
    accel_status st = make_trainer(&t, job->config, ACCEL_OFFLOAD_NONE, ctx);
    for (int s = 0; s < job->steps && st == ACCEL_OK; ++s) st = train_step(&t);
    free_trainer(&t, 0);
    return st;
}

typedef struct {
    double predicted, transfer;
    uint64_t device_peak, host_peak;
} SimOut;

static int simulate(const char *topology, int world, accel_offload offload, int steps, const char *config, SimOut *out) {
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    so.world_size = world;
    so.topology = topology;
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.seed = 1;
    o.strategy = world > 1 ? ACCEL_STRATEGY_DDP : ACCEL_STRATEGY_NO;
    o.offload = offload;
    SimJob job = {config, steps};
    accel_sim_report *rep = NULL;
    if (accel_sim_run(&so, &o, sim_rank, &job, &rep) != ACCEL_OK) {
        fprintf(stderr, "bench_offload: simulate %s: %s\n", topology, accel_last_error(NULL));
        accel_sim_report_destroy(rep);
        return 1;
    }
    accel_sim_report_predicted_seconds(rep, &out->predicted);
    accel_sim_report_rank(rep, 0, NULL, NULL, &out->device_peak);
    accel_sim_report_rank_host(rep, 0, &out->host_peak, NULL, &out->transfer);
    accel_sim_report_destroy(rep);
    return 0;
}

int main(int argc, char **argv) {
    int rounds = 5, steps = 3;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_offload [--rounds R] [--steps S]\n");
            return 2;
        }
    }
    if (rounds < 1 || steps < 1) {
        fprintf(stderr, "bench_offload: --rounds and --steps must be >= 1\n");
        return 2;
    }
    char dir[] = "/tmp/bench_offload_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_offload: mkdtemp");
        return 1;
    }
    char config[4096];
    snprintf(config, sizeof config, "%s/config.json", dir);
    FILE *f = fopen(config, "w");
    if (!f || fputs(kConfig, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "bench_offload: cannot write %s\n", config);
        return 1;
    }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < sizeof g_ids / sizeof g_ids[0]; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g_ids[i] = (int64_t)(x % 2048u);
    }

    /* 1. the CPU path, interleaved */
    Trainer plain, off;
    if (make_trainer(&plain, config, ACCEL_OFFLOAD_NONE, NULL) != ACCEL_OK ||
        make_trainer(&off, config, ACCEL_OFFLOAD_OPTIMIZER, NULL) != ACCEL_OK)
        return 1;
    for (int w = 0; w < 2; ++w)  /* warm-up: the state is made at the first step */
        if (train_step(&plain) != ACCEL_OK || train_step(&off) != ACCEL_OK) return 1;
    double *tp = malloc(sizeof(double) * (size_t)rounds), *to = malloc(sizeof(double) * (size_t)rounds);
    for (int r = 0; r < rounds; ++r) {
        Trainer *order[2] = {r % 2 ? &off : &plain, r % 2 ? &plain : &off};
        for (int k = 0; k < 2; ++k) {
            const double t0 = now();
            for (int s = 0; s < steps; ++s)
                if (train_step(order[k]) != ACCEL_OK) return 1;
            const double ms = (now() - t0) * 1e3 / steps;
            if (order[k] == &plain) tp[r] = ms; else to[r] = ms;
        }
        fprintf(stderr, "bench_offload: round %d/%d: plain %.1f ms, offload %.1f ms a step\n", r + 1, rounds, tp[r], to[r]);
    }
    qsort(tp, (size_t)rounds, sizeof *tp, cmp);
    qsort(to, (size_t)rounds, sizeof *to, cmp);
    const double mp = tp[rounds / 2], mo = to[rounds / 2];
    printf("{\"bench\":\"offload\",\"case\":\"cpu/llama-14.8M/adamw/b4xT128\",\"rounds\":%d,\"steps_per_round\":%d,"
           "\"plain_ms\":%.2f,\"offload_ms\":%.2f,\"offload_ratio\":%.3f}\n",
           rounds, steps, mp, mo, mo / mp);
    fflush(stdout);
    free(tp);
    free(to);
    free_trainer(&plain, 1);
    free_trainer(&off, 1);

    /* 2. the simulator's prediction on GPUs */
    const struct { const char *topology, *what; int world; } sims[] = {
        {"8xH100", "8xH100/ddp-8", 8}, {"8xPCIe", "1xPCIe4-GPU", 1}, {"4xGH200", "4xGH200/ddp-4", 4}};
    for (size_t k = 0; k < sizeof sims / sizeof sims[0]; ++k) {
        SimOut p1, p3, o1, o3;
        if (simulate(sims[k].topology, sims[k].world, ACCEL_OFFLOAD_NONE, 1, config, &p1) ||
            simulate(sims[k].topology, sims[k].world, ACCEL_OFFLOAD_NONE, 3, config, &p3) ||
            simulate(sims[k].topology, sims[k].world, ACCEL_OFFLOAD_OPTIMIZER, 1, config, &o1) ||
            simulate(sims[k].topology, sims[k].world, ACCEL_OFFLOAD_OPTIMIZER, 3, config, &o3))
            return 1;
        const double ps = (p3.predicted - p1.predicted) / 2, os = (o3.predicted - o1.predicted) / 2,
                     ts = (o3.transfer - o1.transfer) / 2;
        printf("{\"bench\":\"offload\",\"case\":\"sim/%s/llama-14.8M/adamw/b4xT128\",\"plain_step_s\":%.6g,"
               "\"offload_step_s\":%.6g,\"transfer_step_s\":%.6g,\"offload_ratio\":%.3f,"
               "\"device_peak_bytes\":[%llu,%llu],\"host_peak_bytes\":%llu}\n",
               sims[k].what, ps, os, ts, os / ps, (unsigned long long)p3.device_peak,
               (unsigned long long)o3.device_peak, (unsigned long long)o3.host_peak);
        fflush(stdout);
    }
    remove(config);
    rmdir(dir);
    return 0;
}
