/* lm_step's memory side (bench/lm_step.py runs it): accel_estimate_memory against the
 * simulator's measured per-rank peak, through the C ABI only. Each configuration trains two
 * steps of a tiny causal LM (accel_model_create_lm from a config.json, optional LoRA, an
 * optimizer, accel_prepare, accel_lm_forward for the loss only, accel_backward, accel_step)
 * on simulated ranks (accel_sim_run), and the estimate for the same configuration is
 * compared with the highest rank's peak.
 *
 *   lm_memory_c DIR     (DIR: where the config.json files are written)
 *
 * Prints one JSON line per configuration:
 *   {"bench":"lm_step","case":"estimate_memory/<name>","measured_bytes":..,"estimated_bytes":..,"ratio":..}
 * (ratio = estimated / measured) and a summary line with the mean and worst |ratio - 1|. */
#include <accel/accel.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *config;  /* a file name under DIR */
    accel_strategy strategy;
    int32_t world;
    accel_precision precision;
    accel_optimizer_kind optimizer;
    int64_t batch, seq;
    int32_t checkpointing, lora_rank;
} Case;

typedef struct {
    const Case *c;
    char path[4096];
} Job;

static const char *kLlama = "{\"model_type\": \"llama\", \"vocab_size\": 256, \"hidden_size\": 64, "
                            "\"intermediate_size\": 176, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
                            "\"num_key_value_heads\": 2, \"max_position_embeddings\": 1024}";
static const char *kWide = "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 256, "
                           "\"intermediate_size\": 688, \"num_hidden_layers\": 4, \"num_attention_heads\": 8, "
                           "\"num_key_value_heads\": 8, \"max_position_embeddings\": 1024, \"tie_word_embeddings\": true}";
static const char *kGPT2 = "{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_embd\": 96, \"n_layer\": 3, "
                           "\"n_head\": 4, \"n_positions\": 512}";

#define CHECK(call, ctx)                                                                   \
    do {                                                                                   \
        accel_status st_ = (call);                                                         \
        if (st_ != ACCEL_OK) {                                                             \
            fprintf(stderr, "lm_memory_c: %s: %s\n", #call, accel_last_error(ctx));        \
            return st_;                                                                    \
        }                                                                                  \
    } while (0)

static accel_status rank_fn(accel_context *ctx, void *user) {
    const Job *job = user;
    const Case *c = job->c;
    accel_lm_options lo = ACCEL_LM_OPTIONS_INIT;
    lo.gradient_checkpointing = c->checkpointing;
    accel_model *model = NULL;
    CHECK(accel_model_create_lm(ctx, job->path, &lo, &model), ctx);
    if (c->lora_rank > 0) {
        accel_lora_options l = ACCEL_LORA_OPTIONS_INIT;
        l.r = c->lora_rank;
        CHECK(accel_model_add_lora(ctx, model, &l), ctx);
    }
    accel_optimizer *opt = NULL;
    if (c->optimizer == ACCEL_OPTIMIZER_ADAMW) {
        accel_adamw_options a = ACCEL_ADAMW_OPTIONS_INIT;
        CHECK(accel_optimizer_create_adamw(ctx, model, &a, &opt), ctx);
    } else if (c->optimizer == ACCEL_OPTIMIZER_ADAFACTOR) {
        accel_adafactor_options a = ACCEL_ADAFACTOR_OPTIONS_INIT;
        CHECK(accel_optimizer_create_adafactor(ctx, model, &a, &opt), ctx);
    } else {
        accel_sgd_options s = ACCEL_SGD_OPTIONS_INIT;
        s.momentum = c->optimizer == ACCEL_OPTIMIZER_SGD_MOMENTUM ? 0.9 : 0.0;
        CHECK(accel_optimizer_create_sgd(ctx, model, &s, &opt), ctx);
    }
    CHECK(accel_prepare(ctx, model, opt, NULL, NULL), ctx);
    const int64_t vocab = 256; /* every config's vocabulary is at least this */
    const size_t n = (size_t)(c->batch * c->seq);
    int64_t *ids = malloc(n * sizeof *ids);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ids[i] = (int64_t)(x % (uint64_t)vocab);
    }
    const int64_t dims[2] = {c->batch, c->seq};
    accel_status st = ACCEL_OK;
    for (int step = 0; step < 2 && st == ACCEL_OK; ++step) {
        accel_tensor *in = NULL, *loss = NULL;
        st = accel_tensor_create(ACCEL_INT64, dims, 2, ids, &in);
        if (st == ACCEL_OK) st = accel_lm_forward(ctx, model, in, NULL, in, NULL, &loss, NULL);
        if (st == ACCEL_OK) st = accel_backward(ctx, loss);
        if (st == ACCEL_OK) st = accel_step(ctx, NULL);
        accel_tensor_destroy(loss);
        accel_tensor_destroy(in);
    }
    if (st != ACCEL_OK) fprintf(stderr, "lm_memory_c: %s: %s\n", c->name, accel_last_error(ctx));
    free(ids);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: lm_memory_c DIR\n");
        return 2;
    }
    const struct { const char *file, *text; } configs[] = {
        {"llama.json", kLlama}, {"wide.json", kWide}, {"gpt2.json", kGPT2}};
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; ++i) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", argv[1], configs[i].file);
        FILE *f = fopen(p, "w");
        if (!f || fputs(configs[i].text, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "lm_memory_c: cannot write %s\n", p);
            return 1;
        }
    }
    const Case cases[] = {
        {"llama/ddp", "llama.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 0},
        {"llama/zero1", "llama.json", ACCEL_STRATEGY_ZERO1, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 0},
        {"llama/zero2-bf16", "llama.json", ACCEL_STRATEGY_ZERO2, 2, ACCEL_PRECISION_BF16, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 0},
        {"llama/zero3x4", "llama.json", ACCEL_STRATEGY_ZERO3, 4, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 0},
        {"llama/ckpt-T256", "llama.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 4, 256, 1, 0},
        {"llama/lora8", "llama.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 8},
        {"llama/adafactor", "llama.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAFACTOR, 4, 64, 0, 0},
        {"wide/ddp-b1", "wide.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 1, 32, 0, 0},
        {"wide/zero3-b1", "wide.json", ACCEL_STRATEGY_ZERO3, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 1, 32, 0, 0},
        {"gpt2/ddp", "gpt2.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 0},
        {"gpt2/zero2-bf16", "gpt2.json", ACCEL_STRATEGY_ZERO2, 2, ACCEL_PRECISION_BF16, ACCEL_OPTIMIZER_ADAMW, 4, 64, 0, 0},
        {"gpt2/momentum-ckpt", "gpt2.json", ACCEL_STRATEGY_DDP, 2, ACCEL_PRECISION_NO, ACCEL_OPTIMIZER_SGD_MOMENTUM, 4, 128, 1, 0},
    };
    const size_t ncases = sizeof cases / sizeof cases[0];
    double sum = 0, worst = 0;
    for (size_t k = 0; k < ncases; ++k) {
        const Case *c = &cases[k];
        Job job;
        job.c = c;
        snprintf(job.path, sizeof job.path, "%s/%s", argv[1], c->config);
        accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
        so.world_size = c->world;
        accel_options o = ACCEL_OPTIONS_INIT;
        o.device = ACCEL_DEVICE_CPU;
        o.seed = 1;
        o.strategy = c->strategy;
        o.mixed_precision = c->precision;
        accel_sim_report *rep = NULL;
        if (accel_sim_run(&so, &o, rank_fn, &job, &rep) != ACCEL_OK) {
            fprintf(stderr, "lm_memory_c: %s: %s\n", c->name, accel_last_error(NULL));
            accel_sim_report_destroy(rep);
            return 1;
        }
        uint64_t peak = 0;
        for (int32_t r = 0; r < c->world; ++r) {
            uint64_t p = 0;
            accel_sim_report_rank(rep, r, NULL, NULL, &p);
            if (p > peak) peak = p;
        }
        accel_sim_report_destroy(rep);
        accel_memory_estimate_options eo = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
        eo.mixed_precision = c->precision;
        eo.optimizer = c->optimizer;
        eo.strategy = c->strategy;
        eo.world_size = c->world;
        eo.micro_batch = c->batch;
        eo.seq_len = c->seq;
        eo.gradient_checkpointing = c->checkpointing;
        eo.lora_rank = c->lora_rank;
        accel_memory_estimate e;
        memset(&e, 0, sizeof e);
        e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
        if (accel_estimate_memory(job.path, &eo, &e) != ACCEL_OK) {
            fprintf(stderr, "lm_memory_c: estimate %s: %s\n", c->name, accel_last_error(NULL));
            return 1;
        }
        const double ratio = (double)e.total / (double)peak;
        sum += fabs(ratio - 1);
        if (fabs(ratio - 1) > worst) worst = fabs(ratio - 1);
        printf("{\"bench\":\"lm_step\",\"case\":\"estimate_memory/%s\",\"measured_bytes\":%llu,\"estimated_bytes\":%llu,"
               "\"ratio\":%.4f,\"attention\":\"%s\"}\n",
               c->name, (unsigned long long)peak, (unsigned long long)e.total, ratio, e.attention == 2 ? "fused" : "eager");
        fflush(stdout);
    }
    printf("{\"bench\":\"lm_step\",\"case\":\"estimate_memory\",\"configurations\":%zu,\"mean_abs_error\":%.4f,"
           "\"worst_abs_error\":%.4f,\"ratio\":%.4f}\n",
           ncases, sum / (double)ncases, worst, 1.0 + worst);
    return worst <= 0.10 ? 0 : 1;
}
