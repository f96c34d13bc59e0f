/* Fine-tunes a small Qwen2-shaped model with LoRA on a chat-format JSONL, from C, on 2
 * simulated GPUs (DDP): the tokenizer (a byte-level BPE with Qwen2's pre-tokenizer and ChatML
 * tokens) and its chat template come from the data directory, the conversations are tokenized
 * with the loss on the assistant's answers only, and the model answers questions before and
 * after, generated from a left-padded batch of chat prompts.
 *
 *   finetune_lm [--steps 240] [--batch 8] [--lr 3e-3] [--rank 16] [--data examples/data/chat]
 *               [--out runs/finetune_lm] [--quick]
 *
 * The base model is Qwen2's architecture scaled down (4 blocks of width 128, grouped-query
 * attention, q/k/v biases, SwiGLU, tied embeddings: 0.5 M parameters) with random weights
 * from the context's seed, as transformers initialises them; LoRA adapters of rank 16 on
 * every linear module train. The data (examples/data/chat/arithmetic.jsonl, made by
 * scripts/make_chat_example.py) asks for sums and differences. About a minute on 2 cores;
 * --quick trains 120 steps (the suite's check, tests/scripts/check_finetune_lm.sh). Writes
 * OUT/adapter, a PEFT adapter directory. */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "progress.h"

#ifndef CHAT_DATA_DIR
#define CHAT_DATA_DIR "examples/data/chat"
#endif

#define TRY(call)                      \
    do {                               \
        accel_status s_ = (call);      \
        if (s_ != ACCEL_OK) return s_; \
    } while (0)

/* Qwen2's architecture at a small width; the vocabulary is the tokenizer's (1,203 ids). */
static const char *kConfig =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"vocab_size\": 1203,\n"
    " \"hidden_size\": 128, \"intermediate_size\": 352, \"num_hidden_layers\": 4,\n"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 256,\n"
    " \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"initializer_range\": 0.2,\n"
    " \"tie_word_embeddings\": true, \"eos_token_id\": 1200}\n";

static const char *kSystem = "You are a calculator. Answer with the equation.";
static const char *kQuestions[] = {"What is 12 plus 7?", "What is 45 minus 3?", "What is 30 plus 30?"};
enum { kNumQuestions = 3 };

typedef struct {
    int steps, rank;
    int64_t batch;
    double lr;
    char data[1024], jsonl[1100], config[1100], adapter[1100];
} job;

/* mkdir -p */
static int make_dirs(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; ++c)
        if (*c == '/') {
            *c = '\0';
            mkdir(p, 0777);
            *c = '/';
        }
    struct stat st;
    return mkdir(p, 0777) == 0 || (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) ? 0 : -1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The model's answers to kQuestions: each rendered with the chat template and the generation
 * prompt, encoded as one batch padded on the left, continued greedily until <|im_end|>. */
static accel_status answer(accel_context *ctx, accel_model *model, const accel_tokenizer *tok, const char *when) {
    const char *texts[kNumQuestions];
    char rendered[kNumQuestions][512];
    for (int q = 0; q < kNumQuestions; ++q) {
        const accel_chat_message msgs[2] = {{"system", kSystem}, {"user", kQuestions[q]}};
        size_t n = 0;
        TRY(accel_tokenizer_apply_chat(tok, ACCEL_CHAT_AUTO, msgs, 2, 1, rendered[q], sizeof rendered[q], &n));
        texts[q] = rendered[q];
    }
    accel_encode_options eo;
    TRY(accel_encode_options_init(&eo, ACCEL_ENCODE_OPTIONS_VERSION));
    eo.add_special_tokens = 0; /* the template holds the special tokens */
    eo.padding_side = ACCEL_SIDE_LEFT;
    accel_tensor *ids = NULL, *mask = NULL, *out = NULL;
    TRY(accel_tokenizer_encode_batch(tok, texts, NULL, kNumQuestions, &eo, &ids, &mask));
    int64_t eos = -1;
    TRY(accel_tokenizer_special_id(tok, ACCEL_TOKEN_EOS, &eos));
    accel_generate_options go = ACCEL_GENERATE_OPTIONS_INIT;
    go.max_new_tokens = 16;
    go.eos_token_id = eos;
    TRY(accel_model_set_training(ctx, model, 0));
    accel_status s = accel_lm_generate_padded(ctx, model, ids, mask, &go, &out);
    TRY(accel_model_set_training(ctx, model, 1));
    int64_t in_shape[2], out_shape[2];
    if (s == ACCEL_OK) s = accel_tensor_shape(ids, in_shape, 2);
    if (s == ACCEL_OK) s = accel_tensor_shape(out, out_shape, 2);
    int64_t *all = NULL;
    if (s == ACCEL_OK) {
        all = malloc((size_t)(out_shape[0] * out_shape[1]) * sizeof *all);
        s = accel_tensor_copy_to_host(out, all, (size_t)(out_shape[0] * out_shape[1]) * sizeof *all);
    }
    char line[1200];
    snprintf(line, sizeof line, "%s (greedy, from a left-padded batch of %d chat prompts):", when, kNumQuestions);
    if (s == ACCEL_OK) accel_print(ctx, line);
    for (int q = 0; s == ACCEL_OK && q < kNumQuestions; ++q) {
        const int64_t *row = all + q * out_shape[1] + in_shape[1];
        size_t n = (size_t)(out_shape[1] - in_shape[1]), len = 0;
        while (n > 0 && row[n - 1] == eos) --n; /* a finished row repeats EOS */
        char text[512], shown[1024];  /* line holds a question and shown */
        s = accel_tokenizer_decode(tok, row, n, 1, text, sizeof text, &len);
        if (s == ACCEL_OK) {
            /* control characters shown escaped, so a sample stays on its line */
            size_t k = 0;
            for (size_t i = 0; i < len && k + 5 < sizeof shown; ++i) {
                const unsigned char c = (unsigned char)text[i];
                if (c == '\n') k += (size_t)snprintf(shown + k, sizeof shown - k, "\\n");
                else if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02x", c);
                else shown[k++] = (char)c;
            }
            shown[k] = '\0';
            snprintf(line, sizeof line, "  %s -> \"%s\"", kQuestions[q], shown);
            accel_print(ctx, line);
        }
    }
    free(all);
    accel_tensor_destroy(ids);
    accel_tensor_destroy(mask);
    accel_tensor_destroy(out);
    return s;
}

static accel_status rank_main(accel_context *ctx, void *user) {
    const job *j = user;
    accel_tokenizer *tok = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_dataloader *loader = NULL;
    TRY(accel_tokenizer_load(j->data, &tok));
    TRY(accel_model_create_lm(ctx, j->config, NULL, &model));
    accel_lora_options la = ACCEL_LORA_OPTIONS_INIT;
    la.r = j->rank;
    la.alpha = 2.0 * j->rank;
    la.target_modules = "all-linear";
    TRY(accel_model_add_lora(ctx, model, &la));
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    ao.lr = j->lr;
    ao.weight_decay = 0.0;
    TRY(accel_optimizer_create_adamw(ctx, model, &ao, &opt));
    /* the conversations, tokenized once: labels on the assistant's answers and <|im_end|> */
    accel_sft_options so;
    TRY(accel_sft_options_init(&so, ACCEL_SFT_OPTIONS_VERSION));
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    lo.batch_size = j->batch;
    lo.shuffle = 1;
    lo.drop_last = 1;
    TRY(accel_sft_dataloader_create(ctx, tok, j->jsonl, &so, &lo, &loader));
    TRY(accel_prepare(ctx, model, opt, NULL, loader));
    TRY(answer(ctx, model, tok, "Before fine-tuning"));

    progress bar;
    progress_begin(&bar, ctx, "LoRA fine-tuning", j->steps, j->steps / 8 > 0 ? j->steps / 8 : 1);
    double first = 0, window = 0, t0 = now_s();
    int in_window = 0;
    char status[128];
    for (int step = 1; step <= j->steps; ++step) {
        accel_tensor *ids = NULL, *labels = NULL, *mask = NULL, *loss = NULL;
        TRY(accel_dataloader_next(ctx, loader, &ids, &labels));
        if (!ids) TRY(accel_dataloader_next(ctx, loader, &ids, &labels)); /* the next epoch */
        double l = 0;
        accel_status s = accel_dataloader_attention_mask(ctx, loader, &mask);
        if (s == ACCEL_OK) s = accel_lm_forward(ctx, model, ids, mask, labels, NULL, &loss, NULL);
        if (s == ACCEL_OK) s = accel_backward(ctx, loss);
        if (s == ACCEL_OK) s = accel_step(ctx, NULL);
        if (s == ACCEL_OK) s = accel_tensor_item(loss, &l);
        accel_tensor_destroy(ids);
        accel_tensor_destroy(labels);
        accel_tensor_destroy(mask);
        accel_tensor_destroy(loss);
        if (s != ACCEL_OK) return s;
        if (step == 1) first = l;
        window += l;
        ++in_window;
        snprintf(status, sizeof status, "loss %.3f", l);
        progress_update(&bar, step, status);
        if (step % 20 == 0 || step == j->steps) {
            char line[160];
            snprintf(line, sizeof line, "step %d: loss %.3f (mean of the last %d steps; first step %.3f), %.1f steps/s",
                     step, window / in_window, in_window, first, step / (now_s() - t0));
            accel_print(ctx, line);
            window = 0;
            in_window = 0;
        }
    }
    progress_end(&bar);
    TRY(answer(ctx, model, tok, "After fine-tuning"));
    TRY(accel_save_adapter(ctx, model, j->adapter));
    accel_dataloader_destroy(loader);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_tokenizer_destroy(tok);
    return ACCEL_OK;
}

int main(int argc, char **argv) {
    job j;
    memset(&j, 0, sizeof j);
    j.steps = 240;
    j.batch = 8;
    j.lr = 3e-3;
    j.rank = 16;
    const char *data = CHAT_DATA_DIR, *out = "runs/finetune_lm";
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s [--steps 240] [--batch 8] [--lr 3e-3] [--rank 16] [--data %s] [--out runs/finetune_lm] "
                   "[--quick]\n", argv[0], CHAT_DATA_DIR);
            return 0;
        }
        if (!strcmp(a, "--quick")) {
            j.steps = 120;
            continue;
        }
        if (!v) {
            fprintf(stderr, "finetune_lm: %s needs a value (see the top of examples/c/finetune_lm.c)\n", a);
            return 2;
        }
        if (!strcmp(a, "--steps")) j.steps = atoi(v);
        else if (!strcmp(a, "--batch")) j.batch = atol(v);
        else if (!strcmp(a, "--lr")) j.lr = atof(v);
        else if (!strcmp(a, "--rank")) j.rank = atoi(v);
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--out")) out = v;
        else {
            fprintf(stderr, "finetune_lm: unknown argument %s\n", a);
            return 2;
        }
        ++i;
    }
    if (j.steps < 1 || j.batch < 1 || j.rank < 1 || !(j.lr > 0)) {
        fprintf(stderr, "finetune_lm: --steps, --batch and --rank >= 1, --lr > 0\n");
        return 2;
    }
    snprintf(j.data, sizeof j.data, "%s", data);
    snprintf(j.jsonl, sizeof j.jsonl, "%s/arithmetic.jsonl", data);
    snprintf(j.adapter, sizeof j.adapter, "%s/adapter", out);
    /* the model's config.json, written beside the adapter */
    if (make_dirs(out) != 0) {
        fprintf(stderr, "finetune_lm: cannot create %s\n", out);
        return 1;
    }
    snprintf(j.config, sizeof j.config, "%s/config.json", out);
    FILE *f = fopen(j.config, "w");
    if (!f || fputs(kConfig, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "finetune_lm: cannot write %s\n", j.config);
        return 1;
    }
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    so.world_size = 2;
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.seed = 7;
    o.strategy = ACCEL_STRATEGY_DDP;
    accel_sim_report *rep = NULL;
    const double t0 = now_s();
    if (accel_sim_run(&so, &o, rank_main, &j, &rep) != ACCEL_OK) {
        fprintf(stderr, "finetune_lm: %s\n", accel_last_error(NULL));
        accel_sim_report_destroy(rep);
        return 1;
    }
    accel_sim_report_destroy(rep);
    printf("Fine-tuned on 2 simulated GPUs in %.0f s; the adapter is in %s\n", now_s() - t0, j.adapter);
    return 0;
}
