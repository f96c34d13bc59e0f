/* Fine-tunes LoRA adapters on a GPU too small for the usual way (issue 37, docs/memory.md):
 * a 23 M-parameter Llama (bytes as tokens) on one simulated PCIe GPU whose memory budget is
 * set between what plain LoRA needs and what LoRA needs on an NF4 base with the optimizer
 * offloaded. Through the C ABI only:
 *
 *   1. accel_estimate_memory for both plans (device and host bytes);
 *   2. plain LoRA (float32 base) under the budget: the simulator's CUDA out-of-memory error;
 *   3. QLoRA (the base's linear weights in NF4 with double quantization, as bitsandbytes
 *      stores them) with optimizer offload, under the same budget: trains on Proverbs (KJV,
 *      public domain; examples/data/README.md), its loss falling, with the device and host
 *      peaks the simulator measured, the bytes moved to the host and their time on the preset's
 *      PCIe 4.0 x16, then saves the adapter in PEFT's format.
 *
 *   qlora_budget [--steps 16] [--batch 4] [--seq 128] [--rank 8] [--budget SIZE] [--base DIR]
 *                [--out runs/qlora_budget] [--data examples/data] [--quick]
 *
 * The base is initialised from the config with the context's seed unless --base names a
 * Hugging Face directory of the same shape (train_lm's OUT/base is another shape: pass its
 * config's model). --budget defaults to halfway between the two plans' estimated peaks.
 * About a minute on 2 cores; --quick (the suite's check, tests/scripts/check_qlora_budget.sh)
 * takes a 4-block model of width 256 and 6 steps. */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#ifndef LM_DATA_DIR
#define LM_DATA_DIR "examples/data"
#endif

#define TRY(call)                      \
    do {                               \
        accel_status s_ = (call);      \
        if (s_ != ACCEL_OK) return s_; \
    } while (0)

/* 8 blocks of width 512, GQA (8 query heads, 4 key-value heads), SwiGLU of 1376: 23.4 M
 * parameters, 22.8 M of them in the blocks' linear weights that NF4 stores in 0.52 bytes. */
static const char *kConfig =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 256,\n"
    " \"hidden_size\": 512, \"intermediate_size\": 1376, \"num_hidden_layers\": 8,\n"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"max_position_embeddings\": 256,\n"
    " \"rms_norm_eps\": 1e-5, \"initializer_range\": 0.02, \"tie_word_embeddings\": false}\n";
static const char *kQuickConfig =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 256,\n"
    " \"hidden_size\": 256, \"intermediate_size\": 688, \"num_hidden_layers\": 4,\n"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"max_position_embeddings\": 256,\n"
    " \"rms_norm_eps\": 1e-5, \"initializer_range\": 0.02, \"tie_word_embeddings\": false}\n";

typedef struct {
    int steps, rank, qlora;
    int64_t batch, seq, n_tokens;
    int64_t *tokens;
    char model[1100], adapter[1100];
    int from_dir;
    double first_loss, last_loss;  /* the means of the first and last two steps */
} job;

/* The text's bytes as tokens. */
static int read_bytes(const char *path, job *j) {
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr, "qlora_budget: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    int got;
    while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (!b) break;
            buf = b;
        }
    }
    int err = 0;
    gzerror(f, &err);
    gzclose(f);
    if (!buf || err < 0 || n < 4096) {
        fprintf(stderr, "qlora_budget: cannot read %s (%zu bytes)\n", path, n);
        free(buf);
        return -1;
    }
    j->tokens = malloc(n * sizeof *j->tokens);
    if (!j->tokens) {
        free(buf);
        return -1;
    }
    for (size_t i = 0; i < n; ++i) j->tokens[i] = buf[i];
    j->n_tokens = (int64_t)n;
    free(buf);
    return 0;
}

/* The model, its adapters, AdamW, `steps` steps on shuffled blocks of the text. */
static accel_status rank_main(accel_context *ctx, void *user) {
    job *j = user;
    accel_lm_options lo = ACCEL_LM_OPTIONS_INIT;
    if (j->qlora) {
        lo.quantization = ACCEL_QUANT_NF4;
        lo.double_quant = 1;
    }
    accel_model *model = NULL;
    if (j->from_dir)
        TRY(accel_model_load_pretrained(ctx, j->model, &lo, &model));
    else
        TRY(accel_model_create_lm(ctx, j->model, &lo, &model));
    accel_lora_options la = ACCEL_LORA_OPTIONS_INIT;
    la.r = j->rank;
    la.alpha = 2.0 * j->rank;
    la.target_modules = "all-linear";
    TRY(accel_model_add_lora(ctx, model, &la));
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    ao.lr = 3e-3;
    ao.weight_decay = 0.0;
    accel_optimizer *opt = NULL;
    TRY(accel_optimizer_create_adamw(ctx, model, &ao, &opt));
    accel_tensor *text = NULL;
    TRY(accel_tensor_create(ACCEL_INT64, &j->n_tokens, 1, j->tokens, &text));
    accel_lm_data_options ld = ACCEL_LM_DATA_OPTIONS_INIT;
    ld.block_size = j->seq;
    accel_dataloader_options dl = ACCEL_DATALOADER_OPTIONS_INIT;
    dl.batch_size = j->batch;
    dl.shuffle = 1;
    dl.seed = 1;
    dl.drop_last = 1;
    accel_dataloader *loader = NULL;
    accel_status s = accel_lm_dataloader_create(ctx, text, NULL, &ld, &dl, &loader);
    accel_tensor_destroy(text);
    TRY(s);
    TRY(accel_prepare(ctx, model, opt, NULL, loader));
    double losses[4] = {0, 0, 0, 0};
    for (int step = 0; step < j->steps; ++step) {
        accel_tensor *ids = NULL, *labels = NULL, *loss = NULL;
        TRY(accel_dataloader_next(ctx, loader, &ids, &labels));
        if (!ids) { /* the epoch ended: the next one */
            --step;
            continue;
        }
        double l = 0;
        s = accel_lm_forward(ctx, model, ids, NULL, labels, NULL, &loss, NULL);
        if (s == ACCEL_OK) s = accel_backward(ctx, loss);
        if (s == ACCEL_OK) s = accel_step(ctx, NULL);
        if (s == ACCEL_OK) s = accel_tensor_item(loss, &l);
        accel_tensor_destroy(ids);
        accel_tensor_destroy(labels);
        accel_tensor_destroy(loss);
        TRY(s);
        if (step < 2) losses[step] = l;
        if (step >= j->steps - 2) losses[2 + step - (j->steps - 2)] = l;
        char line[128];
        snprintf(line, sizeof line, "  step %2d/%d: loss %.3f", step + 1, j->steps, l);
        accel_print(ctx, line);
    }
    j->first_loss = (losses[0] + losses[1]) / 2;
    j->last_loss = (losses[2] + losses[3]) / 2;
    if (j->qlora) TRY(accel_save_adapter(ctx, model, j->adapter));
    accel_dataloader_destroy(loader);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    return ACCEL_OK;
}

/* The estimate of one plan: LoRA on all linear modules, on the float32 base or on an NF4 one
 * with the optimizer offloaded. */
static int estimate(const job *j, const char *config, int qlora, accel_memory_estimate *e) {
    accel_memory_estimate_options o = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
    o.micro_batch = j->batch;
    o.seq_len = j->seq;
    o.lora_rank = j->rank;
    o.lora_target_modules = "all-linear";
    if (qlora) {
        o.quantization = ACCEL_QUANT_NF4;
        o.double_quant = 1;
        o.offload = ACCEL_OFFLOAD_OPTIMIZER;
    }
    memset(e, 0, sizeof *e);
    e->version = ACCEL_MEMORY_ESTIMATE_VERSION;
    if (accel_estimate_memory(config, &o, e) != ACCEL_OK) {
        fprintf(stderr, "qlora_budget: %s\n", accel_last_error(NULL));
        return -1;
    }
    return 0;
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/* One run on one simulated GPU of the 8xPCIe preset (PCIe 4.0 x16 to the host) with `budget`
 * of device memory. Returns the run's status; *out gets the report (destroy it). */
static accel_status run(job *j, int qlora, const char *budget, accel_sim_report **out) {
    j->qlora = qlora;
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    so.world_size = 1;
    so.topology = "8xPCIe";
    so.device_memory = budget;
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.seed = 1;
    o.num_threads = 0;
    o.offload = qlora ? ACCEL_OFFLOAD_OPTIMIZER : ACCEL_OFFLOAD_NONE;
    return accel_sim_run(&so, &o, rank_main, j, out);
}

int main(int argc, char **argv) {
    job j;
    memset(&j, 0, sizeof j);
    j.steps = 16;
    j.batch = 4;
    j.seq = 128;
    j.rank = 8;
    const char *out = "runs/qlora_budget", *data = LM_DATA_DIR, *base = NULL, *budget_arg = NULL;
    int quick = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
            continue;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [--steps 16] [--batch 4] [--seq 128] [--rank 8] [--budget SIZE] [--base DIR]\n"
                   "       [--out runs/qlora_budget] [--data examples/data] [--quick]\n",
                   argv[0]);
            return 0;
        }
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "qlora_budget: %s needs a value (see --help)\n", a);
            return 2;
        }
        if (!strcmp(a, "--steps")) j.steps = atoi(v);
        else if (!strcmp(a, "--batch")) j.batch = atol(v);
        else if (!strcmp(a, "--seq")) j.seq = atol(v);
        else if (!strcmp(a, "--rank")) j.rank = atoi(v);
        else if (!strcmp(a, "--budget")) budget_arg = v;
        else if (!strcmp(a, "--base")) base = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--data")) data = v;
        else {
            fprintf(stderr, "qlora_budget: unknown argument %s (see --help)\n", a);
            return 2;
        }
        ++i;
    }
    if (quick && j.steps == 16) j.steps = 6;
    if (j.steps < 4 || j.batch < 1 || j.seq < 2 || j.seq > 256 || j.rank < 1) {
        fprintf(stderr, "qlora_budget: --steps >= 4, --batch >= 1, --seq in [2, 256], --rank >= 1\n");
        return 2;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s", out);
    for (char *p = path + 1; *p; ++p)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0777);
            *p = '/';
        }
    mkdir(path, 0777);
    snprintf(j.adapter, sizeof j.adapter, "%s/adapter", out);
    if (base) {
        snprintf(j.model, sizeof j.model, "%s", base);
        j.from_dir = 1;
    } else {
        snprintf(j.model, sizeof j.model, "%s/config.json", out);
        FILE *f = fopen(j.model, "w");
        if (!f || fputs(quick ? kQuickConfig : kConfig, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "qlora_budget: cannot write %s\n", j.model);
            return 1;
        }
    }
    snprintf(path, sizeof path, "%s/kjv-proverbs.txt.gz", data);
    if (read_bytes(path, &j) != 0) return 1;

    /* 1. what each plan needs */
    accel_memory_estimate plain, qlora;
    if (estimate(&j, j.model, 0, &plain) || estimate(&j, j.model, 1, &qlora)) return 1;
    printf("accel %s: LoRA r%d on every linear module of a %.1f M-parameter Llama (%s), %lld x %lld tokens a step\n",
           accel_version_string(), j.rank, (double)plain.parameters / 1e6, base ? base : "initialised from its config",
           (long long)j.batch, (long long)j.seq);
    printf("accel_estimate_memory: LoRA on the float32 base %.1f MiB of device memory; on an NF4 base (double quant) "
           "with the optimizer offloaded %.1f MiB, and %.2f MiB of host memory\n",
           mib(plain.total), mib(qlora.total), mib(qlora.host));
    /* the budget: halfway, and above the load's peak (the float32 weights before quantization) */
    char budget[64];
    if (budget_arg) {
        snprintf(budget, sizeof budget, "%s", budget_arg);
    } else {
        const uint64_t low = qlora.total > plain.weights ? qlora.total : plain.weights;
        if (low >= plain.total) {
            fprintf(stderr, "qlora_budget: this shape leaves no room between the plans (%.1f and %.1f MiB): pass --budget\n",
                    mib(low), mib(plain.total));
            return 1;
        }
        snprintf(budget, sizeof budget, "%.1fMiB", mib(low + (plain.total - low) / 2));
    }
    printf("The simulated GPU: one of 8xPCIe (PCIe 4.0 x16 to the host) with %s of memory\n\n", budget);
    fflush(stdout);

    /* 2. the plain run: out of memory */
    printf("LoRA on the float32 base:\n");
    fflush(stdout);
    accel_sim_report *rep = NULL;
    accel_status st = run(&j, 0, budget, &rep);
    accel_sim_report_destroy(rep);
    if (st != ACCEL_ERR_OUT_OF_MEMORY) {
        fprintf(stderr, "qlora_budget: the plain run %s under %s (%s): pick a smaller --budget\n",
                st == ACCEL_OK ? "fitted" : "failed otherwise", budget, st == ACCEL_OK ? "" : accel_last_error(NULL));
        return 1;
    }
    printf("  %s\n\n", accel_last_error(NULL));

    /* 3. QLoRA with the optimizer offloaded, under the same budget */
    printf("LoRA on an NF4 base (double quantization) with the optimizer offloaded to host memory:\n");
    fflush(stdout);
    rep = NULL;
    st = run(&j, 1, budget, &rep);
    if (st != ACCEL_OK) {
        fprintf(stderr, "qlora_budget: %s\n", accel_last_error(NULL));
        accel_sim_report_destroy(rep);
        return 1;
    }
    uint64_t peak = 0, host_peak = 0, moved = 0;
    double moved_s = 0, predicted = 0;
    accel_sim_report_rank(rep, 0, NULL, NULL, &peak);
    accel_sim_report_rank_host(rep, 0, &host_peak, &moved, &moved_s);
    accel_sim_report_predicted_seconds(rep, &predicted);
    accel_sim_report_destroy(rep);
    printf("\nTrained under %s: loss %.3f -> %.3f (the first and last two steps); device peak %.1f MiB "
           "(estimated %.1f), host peak %.2f MiB (estimated %.2f); %.2f MiB moved between device and host, %.3f ms on "
           "the host link (the gradients' copies beside the backward) in the %.3f ms predicted on the preset\n",
           budget, j.first_loss, j.last_loss, mib(peak), mib(qlora.total), mib(host_peak), mib(qlora.host), mib(moved),
           moved_s * 1e3, predicted * 1e3);
    printf("Saved %s (PEFT's adapter format; the base stays as it was loaded)\n", j.adapter);
    free(j.tokens);
    return j.last_loss < j.first_loss ? 0 : 1;
}
