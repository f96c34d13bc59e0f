/* Trains a tiny Llama (3.0 M parameters, a byte-level tokenizer: token = byte) from scratch on
 * the King James Bible's Genesis and Exodus (public domain; examples/data/README.md) on 4
 * simulated GPUs with ZeRO-3, bf16 autocast (where the CPU computes bf16 natively, else fp32:
 * --precision auto) and gradient checkpointing, through the C ABI
 * only. Each epoch prints the training loss and the validation perplexity next to a unigram
 * baseline's (byte frequencies of the training text). Then it fine-tunes LoRA adapters on
 * Proverbs (a second text), and generates text with the KV cache, greedy and top-k, after each
 * phase. The simulator measures each GPU's memory peak, printed next to accel_estimate_memory.
 *
 *   train_lm [--epochs 3] [--lora-epochs 2] [--ranks 4] [--batch 8] [--seq 128]
 *            [--lr 2e-3] [--out runs/train_lm] [--data examples/data] [--precision auto|no|bf16]
 *            [--quick]
 *
 * About 3 minutes on 2 cores. --quick trains on the first 64 KiB of each text, 2 epochs and
 * 1 of LoRA, 4 blocks per GPU per step (half a minute: the suite's check,
 * tests/scripts/check_train_lm.sh). Writes OUT/base (a Hugging Face directory transformers loads) and OUT/lora
 * (a PEFT adapter directory peft loads). */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "progress.h"

#ifndef LM_DATA_DIR
#define LM_DATA_DIR "examples/data"
#endif

#define TRY(call)                      \
    do {                               \
        accel_status s_ = (call);      \
        if (s_ != ACCEL_OK) return s_; \
    } while (0)

/* The model: 4 blocks of width 256, 8 query heads sharing 4 key-value heads (GQA), SwiGLU
 * of 688, rotary positions up to 256, a vocabulary of the 256 byte values. */
static const char *kConfig =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 256,\n"
    " \"hidden_size\": 256, \"intermediate_size\": 688, \"num_hidden_layers\": 4,\n"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"max_position_embeddings\": 256,\n"
    " \"rms_norm_eps\": 1e-5, \"initializer_range\": 0.02, \"tie_word_embeddings\": false}\n";

typedef struct {
    int64_t *tok;
    int64_t n;
} tokens;

typedef struct {
    /* settings */
    int ranks, epochs, lora_epochs;
    accel_precision precision; /* resolved: ACCEL_PRECISION_BF16 or ACCEL_PRECISION_NO */
    int64_t batch, seq;
    double lr;
    char out[1024], config[1100], base_dir[1100], lora_dir[1100];
    /* data */
    tokens train, val, ft_train, ft_val;
    double unigram_ppl, ft_unigram_ppl;
    int phase; /* 0: pretraining, 1: LoRA */
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads a gzipped text whole; its bytes are the tokens. */
static int read_text(const char *path, int64_t limit, tokens *t) {
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr, "train_lm: cannot open %s\n", path);
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
    if (!buf || err < 0 || n < 1024) {
        fprintf(stderr, "train_lm: cannot read %s (%zu bytes)\n", path, n);
        free(buf);
        return -1;
    }
    if (limit > 0 && (int64_t)n > limit) n = (size_t)limit;
    t->tok = malloc(n * sizeof *t->tok);
    for (size_t i = 0; i < n; ++i) t->tok[i] = buf[i];
    t->n = (int64_t)n;
    free(buf);
    return 0;
}

/* The first 90% trains, the last 10% validates. */
static void split(const tokens *all, tokens *train, tokens *val) {
    const int64_t cut = all->n * 9 / 10;
    train->tok = all->tok;
    train->n = cut;
    val->tok = all->tok + cut;
    val->n = all->n - cut;
}

/* The unigram baseline: each byte's frequency in the training text (add-one smoothed over the
 * 256 values); its perplexity on the validation text. */
static double unigram_perplexity(const tokens *train, const tokens *val) {
    double count[256] = {0}, nll = 0;
    for (int64_t i = 0; i < train->n; ++i) count[train->tok[i]] += 1;
    for (int64_t i = 0; i < val->n; ++i) nll -= log((count[val->tok[i]] + 1) / ((double)train->n + 256));
    return exp(nll / (double)val->n);
}

static void say(accel_context *ctx, const char *fmt, double a, double b, double c, double d) {
    char line[512];
    snprintf(line, sizeof line, fmt, a, b, c, d);
    accel_print(ctx, line);
}

/* The mean loss over the real targets of `loader` on every process: each process sums loss x
 * targets over its batches, one accel_reduce adds them. */
static accel_status evaluate(accel_context *ctx, accel_model *model, accel_dataloader *loader, double *mean_loss) {
    double sums[2] = {0, 0};
    TRY(accel_model_set_training(ctx, model, 0));
    for (;;) {
        accel_tensor *ids = NULL, *labels = NULL, *loss = NULL;
        TRY(accel_dataloader_next(ctx, loader, &ids, &labels));
        if (!ids) break;
        int64_t n = 0;
        double l = 0;
        accel_status s = accel_lm_forward(ctx, model, ids, NULL, labels, NULL, &loss, &n);
        if (s == ACCEL_OK) s = accel_tensor_item(loss, &l);
        accel_tensor_destroy(ids);
        accel_tensor_destroy(labels);
        accel_tensor_destroy(loss);
        if (s != ACCEL_OK) return s;
        sums[0] += l * (double)n;
        sums[1] += (double)n;
    }
    TRY(accel_model_set_training(ctx, model, 1));
    const int64_t two = 2;
    accel_tensor *local = NULL, *total = NULL;
    TRY(accel_tensor_create(ACCEL_FLOAT64, &two, 1, sums, &local));
    accel_status s = accel_reduce(ctx, local, ACCEL_REDUCE_SUM, &total);
    if (s == ACCEL_OK) s = accel_tensor_copy_to_host(total, sums, sizeof sums);
    accel_tensor_destroy(local);
    accel_tensor_destroy(total);
    if (s == ACCEL_OK) *mean_loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    return s;
}

/* Continues `prompt` greedily and with top-k sampling (the KV cache on), printing both. A
 * collective under ZeRO-3: every process generates the same tokens. */
static accel_status sample(accel_context *ctx, accel_model *model, const char *prompt, int64_t new_tokens) {
    const int64_t len = (int64_t)strlen(prompt), shape[2] = {1, len};
    int64_t ids[256];
    for (int64_t i = 0; i < len; ++i) ids[i] = (unsigned char)prompt[i];
    accel_tensor *in = NULL;
    TRY(accel_tensor_create(ACCEL_INT64, shape, 2, ids, &in));
    TRY(accel_model_set_training(ctx, model, 0));
    for (int mode = 0; mode < 2; ++mode) {
        accel_generate_options g = ACCEL_GENERATE_OPTIONS_INIT;
        g.max_new_tokens = new_tokens;
        if (mode == 1) {
            g.temperature = 0.8;
            g.top_k = 10;
            g.seed = 7;
        }
        accel_tensor *out = NULL;
        accel_status s = accel_lm_generate(ctx, model, in, &g, &out);
        int64_t all[512], dims[2] = {0, 0};
        if (s == ACCEL_OK) s = accel_tensor_shape(out, dims, 2);
        if (s == ACCEL_OK && dims[1] > 512) s = ACCEL_ERR_INTERNAL;
        if (s == ACCEL_OK) s = accel_tensor_copy_to_host(out, all, (size_t)dims[1] * sizeof all[0]);
        accel_tensor_destroy(out);
        if (s != ACCEL_OK) {
            accel_tensor_destroy(in);
            return s;
        }
        char text[1100];
        size_t k = 0;
        for (int64_t i = 0; i < dims[1] && k + 1 < sizeof text; ++i) {
            const int64_t c = all[i];
            text[k++] = c == '\n' ? '\n' : (c >= 32 && c < 127) ? (char)c : '?';
        }
        text[k] = 0;
        char line[1300];
        snprintf(line, sizeof line, "  %s (KV cache): \"%s\"", mode == 0 ? "greedy" : "top-k 10, temperature 0.8", text);
        accel_print(ctx, line);
    }
    accel_tensor_destroy(in);
    return accel_model_set_training(ctx, model, 1);
}

static accel_status make_loader(accel_context *ctx, const job *j, const tokens *t, int train,
                                accel_dataloader **out) {
    accel_tensor *tt = NULL;
    TRY(accel_tensor_create(ACCEL_INT64, &t->n, 1, t->tok, &tt));
    accel_lm_data_options lo = ACCEL_LM_DATA_OPTIONS_INIT;
    lo.block_size = j->seq;
    accel_dataloader_options dl = ACCEL_DATALOADER_OPTIONS_INIT;
    dl.batch_size = j->batch;
    dl.shuffle = train;
    dl.seed = 1;
    /* validation: whole rounds only, so every process runs the same forwards (collectives
       under ZeRO-3); the few blocks past the last round are not scored */
    dl.drop_last = 1;
    accel_status s = accel_lm_dataloader_create(ctx, tt, NULL, &lo, &dl, out);
    accel_tensor_destroy(tt);
    return s;
}

static accel_status rank_main(accel_context *ctx, void *user) {
    const job *j = user;
    const int lora = j->phase == 1;
    const tokens *train = lora ? &j->ft_train : &j->train, *val = lora ? &j->ft_val : &j->val;
    const int epochs = lora ? j->lora_epochs : j->epochs;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_scheduler *sched = NULL;
    accel_dataloader *tl = NULL, *vl = NULL;
    accel_lm_options lo = ACCEL_LM_OPTIONS_INIT;
    lo.gradient_checkpointing = 1;
    if (!lora) {
        TRY(accel_model_create_lm(ctx, j->config, &lo, &model));
    } else {
        TRY(accel_model_load_pretrained(ctx, j->base_dir, &lo, &model));
        accel_lora_options la = ACCEL_LORA_OPTIONS_INIT;
        la.r = 8;
        la.alpha = 16;
        la.target_modules = "all-linear";
        TRY(accel_model_add_lora(ctx, model, &la));
    }
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    ao.lr = lora ? 2 * j->lr : j->lr;
    ao.weight_decay = lora ? 0.0 : 0.1;
    TRY(accel_optimizer_create_adamw(ctx, model, &ao, &opt));
    TRY(make_loader(ctx, j, train, 1, &tl));
    TRY(make_loader(ctx, j, val, 0, &vl));
    TRY(accel_prepare(ctx, model, opt, NULL, tl));
    TRY(accel_prepare(ctx, NULL, NULL, NULL, vl));
    int64_t batches = 0;
    TRY(accel_dataloader_num_batches(tl, &batches));
    accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
    so.kind = ACCEL_SCHEDULE_COSINE;
    so.total_steps = batches * epochs;
    so.warmup_steps = so.total_steps / 10 > 0 ? so.total_steps / 10 : 1;
    so.min_lr_ratio = 0.1;
    if (so.total_steps <= so.warmup_steps) so.total_steps = so.warmup_steps + 1;
    TRY(accel_scheduler_create(ctx, opt, &so, &sched));
    TRY(accel_prepare(ctx, NULL, NULL, sched, NULL));

    double val_loss = 0;
    TRY(evaluate(ctx, model, vl, &val_loss));
    say(ctx, lora ? "LoRA on Proverbs: before fine-tuning, validation perplexity %.2f (unigram baseline %.2f)"
                  : "epoch 0 (random weights): validation perplexity %.2f (unigram baseline %.2f)",
        exp(val_loss), lora ? j->ft_unigram_ppl : j->unigram_ppl, 0, 0);
    for (int epoch = 1; epoch <= epochs; ++epoch) {
        double sum = 0, t0 = now_s();
        int64_t steps = 0, every = batches / 4 > 0 ? batches / 4 : 1;
        progress bar;
        char what[32], status[96];
        snprintf(what, sizeof what, "%s epoch %d/%d", lora ? "LoRA" : "pretraining", epoch, epochs);
        progress_begin(&bar, ctx, what, batches, every);
        for (;;) {
            accel_tensor *ids = NULL, *labels = NULL, *loss = NULL;
            TRY(accel_dataloader_next(ctx, tl, &ids, &labels));
            if (!ids) break;
            double l = 0;
            accel_status s = accel_lm_forward(ctx, model, ids, NULL, labels, NULL, &loss, NULL);
            if (s == ACCEL_OK) s = accel_backward(ctx, loss);
            if (s == ACCEL_OK) s = accel_step(ctx, NULL);
            if (s == ACCEL_OK) s = accel_tensor_item(loss, &l);
            accel_tensor_destroy(ids);
            accel_tensor_destroy(labels);
            accel_tensor_destroy(loss);
            if (s != ACCEL_OK) return s;
            sum += l;
            ++steps;
            snprintf(status, sizeof status, "loss %.3f  %.0f tokens/s on all GPUs", l,
                     (double)(steps * j->batch * j->seq * j->ranks) / (now_s() - t0));
            progress_update(&bar, steps, status);
        }
        progress_end(&bar);
        /* the epoch's mean training loss over the processes */
        const int64_t one = 1;
        double mean = sum / (double)(steps > 0 ? steps : 1);
        accel_tensor *local = NULL, *avg = NULL;
        TRY(accel_tensor_create(ACCEL_FLOAT64, &one, 1, &mean, &local));
        accel_status s = accel_reduce(ctx, local, ACCEL_REDUCE_MEAN, &avg);
        if (s == ACCEL_OK) s = accel_tensor_item(avg, &mean);
        accel_tensor_destroy(local);
        accel_tensor_destroy(avg);
        if (s != ACCEL_OK) return s;
        TRY(evaluate(ctx, model, vl, &val_loss));
        say(ctx, "epoch %.0f: training loss %.3f, validation perplexity %.2f (unigram baseline %.2f)", epoch, mean,
            exp(val_loss), lora ? j->ft_unigram_ppl : j->unigram_ppl);
    }
    accel_print(ctx, lora ? "Generated after LoRA fine-tuning on Proverbs:" : "Generated after pretraining on Genesis and Exodus:");
    TRY(sample(ctx, model, lora ? "My son, " : "And God said", 120));
    if (lora)
        TRY(accel_save_adapter(ctx, model, j->lora_dir));
    else
        TRY(accel_save_pretrained(ctx, model, j->base_dir));
    accel_scheduler_destroy(sched);
    accel_dataloader_destroy(tl);
    accel_dataloader_destroy(vl);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    return ACCEL_OK;
}

/* One phase on the simulator's GPUs; prints each GPU's measured peak beside the estimate. */
static int run_phase(job *j, int phase) {
    j->phase = phase;
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    so.world_size = j->ranks;
    so.device_memory = "80GiB";
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.seed = 1;
    o.strategy = ACCEL_STRATEGY_ZERO3;
    o.mixed_precision = j->precision;
    accel_sim_report *rep = NULL;
    const double t0 = now_s();
    if (accel_sim_run(&so, &o, rank_main, j, &rep) != ACCEL_OK) {
        fprintf(stderr, "train_lm: %s\n", accel_last_error(NULL));
        accel_sim_report_destroy(rep);
        return 1;
    }
    uint64_t peak = 0;
    for (int32_t r = 0; r < j->ranks; ++r) {
        uint64_t p = 0;
        accel_sim_report_rank(rep, r, NULL, NULL, &p);
        if (p > peak) peak = p;
    }
    accel_sim_report_destroy(rep);
    accel_memory_estimate_options eo = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
    eo.mixed_precision = j->precision;
    eo.strategy = ACCEL_STRATEGY_ZERO3;
    eo.world_size = j->ranks;
    eo.micro_batch = j->batch;
    eo.seq_len = j->seq;
    eo.gradient_checkpointing = 1;
    eo.lora_rank = phase == 1 ? 8 : 0;
    eo.lora_target_modules = phase == 1 ? "all-linear" : NULL;
    accel_memory_estimate e;
    memset(&e, 0, sizeof e);
    e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
    if (accel_estimate_memory(j->config, &eo, &e) != ACCEL_OK) {
        fprintf(stderr, "train_lm: %s\n", accel_last_error(NULL));
        return 1;
    }
    printf("%s: %.0f s on this machine; each simulated GPU's peak %.1f MiB (accel_estimate_memory: %.1f MiB); "
           "%.2f M of %.2f M parameters trained\n",
           phase == 0 ? "Pretraining" : "LoRA", now_s() - t0, (double)peak / 1048576.0, (double)e.total / 1048576.0,
           (double)e.trainable_parameters / 1e6, (double)e.parameters / 1e6);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    job j;
    memset(&j, 0, sizeof j);
    j.ranks = 4;
    j.epochs = 3;
    j.lora_epochs = 2;
    j.batch = 8;
    j.seq = 128;
    j.lr = 2e-3;
    const char *out = "runs/train_lm", *data = LM_DATA_DIR, *precision = "auto";
    int quick = 0;
    for (int i = 1; i < argc; ++i) {
        quick |= !strcmp(argv[i], "--quick");
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [--epochs 3] [--lora-epochs 2] [--ranks 4] [--batch 8] [--seq 128]\n"
                   "       [--lr 2e-3] [--out runs/train_lm] [--data examples/data] [--precision auto|no|bf16] [--quick]\n",
                   argv[0]);
            return 0;
        }
    }
    if (quick) {  /* the defaults of a quick run; explicit flags still win */
        j.epochs = 2;
        j.lora_epochs = 1;
        j.batch = 4;
    }
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) continue;
        if (!v) { fprintf(stderr, "train_lm: %s needs a value (see the top of examples/c/train_lm.c)\n", a); return 2; }
        if (!strcmp(a, "--epochs")) j.epochs = atoi(v);
        else if (!strcmp(a, "--lora-epochs")) j.lora_epochs = atoi(v);
        else if (!strcmp(a, "--ranks")) j.ranks = atoi(v);
        else if (!strcmp(a, "--batch")) j.batch = atol(v);
        else if (!strcmp(a, "--seq")) j.seq = atol(v);
        else if (!strcmp(a, "--lr")) j.lr = atof(v);
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--precision")) precision = v;
        else { fprintf(stderr, "train_lm: unknown argument %s\n", a); return 2; }
        ++i;
    }
    if (j.epochs < 1 || j.lora_epochs < 1 || j.ranks < 1 || j.ranks > 8 || j.batch < 1 || j.seq < 2 || j.seq > 256 ||
        !(j.lr > 0)) {
        fprintf(stderr, "train_lm: --epochs and --lora-epochs >= 1, --ranks in [1, 8], --batch >= 1, --seq in [2, 256], --lr > 0\n");
        return 2;
    }
    if (!strcmp(precision, "no") || !strcmp(precision, "fp32")) j.precision = ACCEL_PRECISION_NO;
    else if (!strcmp(precision, "bf16")) j.precision = ACCEL_PRECISION_BF16;
    else if (!strcmp(precision, "auto")) { /* what auto means on this machine's CPU, where the simulated ranks run */
        accel_options po = ACCEL_OPTIONS_INIT;
        accel_context *probe = NULL;
        po.device = ACCEL_DEVICE_CPU;
        po.mixed_precision = ACCEL_PRECISION_AUTO;
        if (accel_init(&po, &probe) != ACCEL_OK || accel_mixed_precision(probe, &j.precision) != ACCEL_OK) {
            fprintf(stderr, "train_lm: %s\n", accel_last_error(probe));
            accel_destroy(probe);
            return 1;
        }
        accel_destroy(probe);
    } else {
        fprintf(stderr, "train_lm: --precision is auto, no or bf16, got '%s'\n", precision);
        return 2;
    }
    snprintf(j.out, sizeof j.out, "%s", out);
    /* OUT and its parents */
    for (char *p = j.out + 1; *p; ++p)
        if (*p == '/') {
            *p = 0;
            mkdir(j.out, 0777);
            *p = '/';
        }
    mkdir(j.out, 0777);
    snprintf(j.config, sizeof j.config, "%s/tiny-llama.json", j.out);
    snprintf(j.base_dir, sizeof j.base_dir, "%s/base", j.out);
    snprintf(j.lora_dir, sizeof j.lora_dir, "%s/lora", j.out);
    FILE *f = fopen(j.config, "w");
    if (!f || fputs(kConfig, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "train_lm: cannot write %s\n", j.config);
        return 1;
    }
    char path[1200];
    tokens bible, proverbs;
    const int64_t limit = quick ? 64 * 1024 : 0;
    snprintf(path, sizeof path, "%s/kjv-genesis-exodus.txt.gz", data);
    if (read_text(path, limit, &bible) != 0) return 1;
    snprintf(path, sizeof path, "%s/kjv-proverbs.txt.gz", data);
    if (read_text(path, limit, &proverbs) != 0) return 1;
    split(&bible, &j.train, &j.val);
    split(&proverbs, &j.ft_train, &j.ft_val);
    j.unigram_ppl = unigram_perplexity(&j.train, &j.val);
    j.ft_unigram_ppl = unigram_perplexity(&j.ft_train, &j.ft_val);
    printf("accel %s: a 3.0 M-parameter Llama, bytes as tokens, on %d simulated GPUs (ZeRO-3, %s, gradient "
           "checkpointing)\n",
           accel_version_string(), j.ranks, j.precision == ACCEL_PRECISION_BF16 ? "bf16" : "fp32");
    printf("Genesis + Exodus (KJV): %lld training bytes, %lld validation; Proverbs: %lld and %lld; "
           "blocks of %lld, %lld per GPU per step\n",
           (long long)j.train.n, (long long)j.val.n, (long long)j.ft_train.n, (long long)j.ft_val.n, (long long)j.seq,
           (long long)j.batch);
    fflush(stdout);
    int rc = run_phase(&j, 0);
    if (rc == 0) rc = run_phase(&j, 1);
    if (rc == 0)
        printf("Saved %s (transformers' from_pretrained loads it) and %s (peft's PeftModel.from_pretrained)\n",
               j.base_dir, j.lora_dir);
    free(bible.tok);
    free(proverbs.tok);
    return rc;
}
