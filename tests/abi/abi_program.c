/* A program built against an older accel.h keeps working with today's library.
 *
 * This one file is compiled once per header accel released (tests/abi/vN/accel.h, with
 * only that directory on the include path: never include/) as C99 with warnings as
 * errors, and linked and run against today's libaccel.so. What a header lacks is left out
 * by its own macros (ACCEL_DATALOADER_OPTIONS_VERSION >= 2, ...), so the program is what a
 * user of that header could have written. It checks, with the header's versions:
 *   - every accel_*_options_init of the header: ACCEL_OK, the header's defaults filled
 *     field by field (the same values as its _INIT macro), the header's version stored,
 *     and not one byte written past the end of the header's (shorter) struct; versions 0
 *     and 1000 refused;
 *   - accel_init with those options, the bytes after the struct holding garbage that would
 *     be refused (a strategy of 0xA5A5A5A5) if the library read past the caller's version;
 *   - a small MLP trained for some epochs from a shuffled loader, with an optimizer and a
 *     scheduler made from init'd options: every step steps, the counters add up, the loss
 *     falls;
 *   - the simulator: two ranks, each with a context made from the old options, reduce,
 *     charged compute, and training from a prepared (sharded) loader whose struct is
 *     followed by bytes that would turn split_batches on if read; the report's figures.
 * Each failed check prints its line; the exit status is 0 when every check passed. */
#include "accel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64        /* samples */
#define F 4         /* features */
#define C 3         /* classes */
#define BATCH 16    /* N / BATCH batches per epoch */
#define EPOCHS 12
#define GUARD 32    /* bytes after an options struct that the library must neither write nor read */
#define GARBAGE 0xA5

static int failures;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            ++failures;                                                           \
        }                                                                         \
    } while (0)

/* A call that must succeed; the program cannot go on without it. */
#define MUST(call)                                                                          \
    do {                                                                                    \
        accel_status s_ = (call);                                                           \
        if (s_ != ACCEL_OK) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, accel_status_name(s_), \
                    accel_last_error(NULL));                                                \
            exit(100);                                                                      \
        }                                                                                   \
    } while (0)

/* In a rank's function: a failing call ends the rank with its status. */
#define TRY(call)                                                                                \
    do {                                                                                         \
        accel_status s_ = (call);                                                                \
        if (s_ != ACCEL_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, accel_status_name(s_), \
                    accel_last_error(ctx));                                                      \
            return s_;                                                                           \
        }                                                                                        \
    } while (0)

static int untouched(const unsigned char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (p[i] != GARBAGE) return 0;
    return 1;
}

/* An options struct as this header knows it, followed by GUARD bytes of garbage. */
#define GUARDED(T)                  \
    typedef struct guarded_##T {    \
        T opts;                     \
        unsigned char after[GUARD]; \
    } guarded_##T
GUARDED(accel_options);
GUARDED(accel_mlp_options);
GUARDED(accel_sgd_options);
GUARDED(accel_adamw_options);
GUARDED(accel_scheduler_options);
GUARDED(accel_dataloader_options);
GUARDED(accel_sim_options);
#ifdef ACCEL_LAMB_OPTIONS_VERSION
GUARDED(accel_lamb_options);
#endif
#ifdef ACCEL_PROJECT_OPTIONS_VERSION
GUARDED(accel_project_options);
#endif
#ifdef ACCEL_ENCODE_OPTIONS_VERSION
GUARDED(accel_encode_options);
#endif
#ifdef ACCEL_MEMORY_ESTIMATE_VERSION
GUARDED(accel_memory_estimate);
GUARDED(accel_memory_estimate_options);
#endif
#ifdef ACCEL_LM_OPTIONS_VERSION
GUARDED(accel_lm_options);
GUARDED(accel_lora_options);
GUARDED(accel_lm_data_options);
GUARDED(accel_adafactor_options);
GUARDED(accel_generate_options);
#endif

/* init(&opts, VERSION) into a guarded struct: ACCEL_OK, the version stored, nothing
 * written after the struct; versions 0 and 1000 and a NULL struct refused. Leaves the
 * result in g (a guarded_T) for the caller's field checks. */
#define CHECK_INIT(g, init, VERSION)                                                                         \
    do {                                                                                                     \
        unsigned char snap_[sizeof(g)];                                                                      \
        memset(&(g), GARBAGE, sizeof(g));                                                                    \
        CHECK(init(&(g).opts, VERSION) == ACCEL_OK, #init "(&opts, %d): %s", (int)(VERSION),                 \
              accel_last_error(NULL));                                                                       \
        CHECK((g).opts.version == (VERSION), #init " stored version %u", (unsigned)(g).opts.version);       \
        CHECK(untouched((g).after, GUARD), #init "(&opts, %d) wrote past the end of the header's struct (%u bytes)", \
              (int)(VERSION), (unsigned)sizeof((g).opts));                                                  \
        memcpy(snap_, &(g), sizeof(g));                                                                      \
        CHECK(init(&(g).opts, 0) == ACCEL_ERR_INVALID_ARGUMENT, #init "(&opts, 0) accepted");                \
        CHECK(init(&(g).opts, 1000) == ACCEL_ERR_INVALID_ARGUMENT, #init "(&opts, 1000) accepted");          \
        CHECK(init(NULL, VERSION) == ACCEL_ERR_INVALID_ARGUMENT, #init "(NULL, %d) accepted", (int)(VERSION)); \
        CHECK(memcmp(snap_, &(g), sizeof(g)) == 0, #init ": a refused call changed the struct");             \
    } while (0)

#define SAME(a, b, field) CHECK((a).field == (b).field, "field " #field " is not the header's default")

static void check_options_init(void) {
    guarded_accel_options o;
    guarded_accel_mlp_options m;
    guarded_accel_sgd_options s;
    guarded_accel_adamw_options a;
    guarded_accel_scheduler_options c;
    guarded_accel_dataloader_options d;
    guarded_accel_sim_options so;
    const accel_options o0 = ACCEL_OPTIONS_INIT;
    const accel_mlp_options m0 = ACCEL_MLP_OPTIONS_INIT;
    const accel_sgd_options s0 = ACCEL_SGD_OPTIONS_INIT;
    const accel_adamw_options a0 = ACCEL_ADAMW_OPTIONS_INIT;
    const accel_scheduler_options c0 = ACCEL_SCHEDULER_OPTIONS_INIT;
    const accel_dataloader_options d0 = ACCEL_DATALOADER_OPTIONS_INIT;
    const accel_sim_options so0 = ACCEL_SIM_OPTIONS_INIT;

    CHECK_INIT(o, accel_options_init, ACCEL_OPTIONS_VERSION);
    SAME(o.opts, o0, mixed_precision);
    SAME(o.opts, o0, gradient_accumulation_steps);
    SAME(o.opts, o0, seed);
    SAME(o.opts, o0, device);
    SAME(o.opts, o0, device_index);
    SAME(o.opts, o0, loss_scale_init);
    SAME(o.opts, o0, loss_scale_growth_factor);
    SAME(o.opts, o0, loss_scale_backoff_factor);
    SAME(o.opts, o0, loss_scale_growth_interval);
    SAME(o.opts, o0, num_threads);
    CHECK(o.opts.gradient_accumulation_steps == 1 && o.opts.loss_scale_init == 65536.0 &&
              o.opts.loss_scale_growth_interval == 2000,
          "accel_options defaults");
#if ACCEL_OPTIONS_VERSION >= 2
    SAME(o.opts, o0, strategy);
    SAME(o.opts, o0, bucket_bytes);
    CHECK(o.opts.strategy == ACCEL_STRATEGY_NO && o.opts.bucket_bytes == 25 * 1024 * 1024, "accel_options v2 defaults");
#endif
#if ACCEL_OPTIONS_VERSION >= 3
    SAME(o.opts, o0, backend);
    SAME(o.opts, o0, timeout_seconds);
    CHECK(o.opts.backend == ACCEL_BACKEND_AUTO && o.opts.timeout_seconds == 0.0, "accel_options v3 defaults");
#endif

    CHECK_INIT(m, accel_mlp_options_init, ACCEL_MLP_OPTIONS_VERSION);
    SAME(m.opts, m0, layer_sizes);
    SAME(m.opts, m0, num_layer_sizes);
    SAME(m.opts, m0, activation);
    SAME(m.opts, m0, dropout);
    SAME(m.opts, m0, bias);

    CHECK_INIT(s, accel_sgd_options_init, ACCEL_SGD_OPTIONS_VERSION);
    SAME(s.opts, s0, lr);
    SAME(s.opts, s0, momentum);
    SAME(s.opts, s0, dampening);
    SAME(s.opts, s0, weight_decay);
    SAME(s.opts, s0, nesterov);
    CHECK(s.opts.lr == 0.01, "accel_sgd_options.lr default %g", s.opts.lr);

    CHECK_INIT(a, accel_adamw_options_init, ACCEL_ADAMW_OPTIONS_VERSION);
    SAME(a.opts, a0, lr);
    SAME(a.opts, a0, beta1);
    SAME(a.opts, a0, beta2);
    SAME(a.opts, a0, eps);
    SAME(a.opts, a0, weight_decay);

    CHECK_INIT(c, accel_scheduler_options_init, ACCEL_SCHEDULER_OPTIONS_VERSION);
    SAME(c.opts, c0, kind);
    SAME(c.opts, c0, warmup_steps);
    SAME(c.opts, c0, total_steps);
    SAME(c.opts, c0, min_lr_ratio);

    CHECK_INIT(d, accel_dataloader_options_init, ACCEL_DATALOADER_OPTIONS_VERSION);
    SAME(d.opts, d0, batch_size);
    SAME(d.opts, d0, shuffle);
    SAME(d.opts, d0, seed);
    SAME(d.opts, d0, drop_last);
    CHECK(d.opts.batch_size == 1, "accel_dataloader_options.batch_size default %lld", (long long)d.opts.batch_size);
#if ACCEL_DATALOADER_OPTIONS_VERSION >= 2
    SAME(d.opts, d0, even_batches);
    SAME(d.opts, d0, split_batches);
    CHECK(d.opts.even_batches == 1 && d.opts.split_batches == 0, "accel_dataloader_options v2 defaults");
#endif
#if ACCEL_DATALOADER_OPTIONS_VERSION >= 3
    SAME(d.opts, d0, iterable);
    CHECK(d.opts.iterable == 0, "accel_dataloader_options v3 default");
#endif

    CHECK_INIT(so, accel_sim_options_init, ACCEL_SIM_OPTIONS_VERSION);
    SAME(so.opts, so0, world_size);
    SAME(so.opts, so0, device_memory);
    CHECK(so.opts.topology && strcmp(so.opts.topology, so0.topology) == 0, "accel_sim_options.topology default");
    SAME(so.opts, so0, timeout_seconds);
    SAME(so.opts, so0, faults);
    SAME(so.opts, so0, trace_path);
    SAME(so.opts, so0, engine_threads);

#ifdef ACCEL_LAMB_OPTIONS_VERSION
    {
        guarded_accel_lamb_options l;
        const accel_lamb_options l0 = ACCEL_LAMB_OPTIONS_INIT;
        CHECK_INIT(l, accel_lamb_options_init, ACCEL_LAMB_OPTIONS_VERSION);
        SAME(l.opts, l0, lr);
        SAME(l.opts, l0, beta1);
        SAME(l.opts, l0, beta2);
        SAME(l.opts, l0, eps);
        SAME(l.opts, l0, weight_decay);
    }
#endif
#ifdef ACCEL_PROJECT_OPTIONS_VERSION
    {
        guarded_accel_project_options p;
        const accel_project_options p0 = ACCEL_PROJECT_OPTIONS_INIT;
        CHECK_INIT(p, accel_project_options_init, ACCEL_PROJECT_OPTIONS_VERSION);
        SAME(p.opts, p0, project_dir);
        SAME(p.opts, p0, total_limit);
    }
#endif
#ifdef ACCEL_LM_OPTIONS_VERSION /* v5: language models, LoRA, LM data, Adafactor */
    {
        guarded_accel_lm_options m;
        const accel_lm_options m0 = ACCEL_LM_OPTIONS_INIT;
        CHECK_INIT(m, accel_lm_options_init, ACCEL_LM_OPTIONS_VERSION);
        SAME(m.opts, m0, dtype);
        SAME(m.opts, m0, gradient_checkpointing);
    }
    {
        guarded_accel_lora_options r;
        const accel_lora_options r0 = ACCEL_LORA_OPTIONS_INIT;
        CHECK_INIT(r, accel_lora_options_init, ACCEL_LORA_OPTIONS_VERSION);
        SAME(r.opts, r0, r);
        SAME(r.opts, r0, alpha);
        SAME(r.opts, r0, dropout);
        SAME(r.opts, r0, target_modules);
        SAME(r.opts, r0, use_rslora);
    }
    {
        guarded_accel_lm_data_options d;
        const accel_lm_data_options d0 = ACCEL_LM_DATA_OPTIONS_INIT;
        CHECK_INIT(d, accel_lm_data_options_init, ACCEL_LM_DATA_OPTIONS_VERSION);
        SAME(d.opts, d0, block_size);
        SAME(d.opts, d0, max_length);
        SAME(d.opts, d0, pad_id);
        SAME(d.opts, d0, pad_to_multiple_of);
        SAME(d.opts, d0, group_by_length);
#if ACCEL_LM_DATA_OPTIONS_VERSION >= 2
        SAME(d.opts, d0, padding_side);
#endif
    }
    {
        guarded_accel_adafactor_options a;
        const accel_adafactor_options a0 = ACCEL_ADAFACTOR_OPTIONS_INIT;
        CHECK_INIT(a, accel_adafactor_options_init, ACCEL_ADAFACTOR_OPTIONS_VERSION);
        SAME(a.opts, a0, lr);
        SAME(a.opts, a0, eps1);
        SAME(a.opts, a0, eps2);
        SAME(a.opts, a0, clip_threshold);
        SAME(a.opts, a0, decay_rate);
        SAME(a.opts, a0, beta1);
        SAME(a.opts, a0, weight_decay);
        SAME(a.opts, a0, scale_parameter);
        SAME(a.opts, a0, relative_step);
        SAME(a.opts, a0, warmup_init);
    }
    {
        guarded_accel_generate_options gg;
        const accel_generate_options g0 = ACCEL_GENERATE_OPTIONS_INIT;
        CHECK_INIT(gg, accel_generate_options_init, ACCEL_GENERATE_OPTIONS_VERSION);
        SAME(gg.opts, g0, max_new_tokens);
        SAME(gg.opts, g0, temperature);
        SAME(gg.opts, g0, top_k);
        SAME(gg.opts, g0, eos_token_id);
        SAME(gg.opts, g0, seed);
        SAME(gg.opts, g0, use_cache);
    }
#endif
#ifdef ACCEL_ENCODE_OPTIONS_VERSION /* v7: tokenizers */
    {
        guarded_accel_encode_options e;
        const accel_encode_options e0 = ACCEL_ENCODE_OPTIONS_INIT;
        CHECK_INIT(e, accel_encode_options_init, ACCEL_ENCODE_OPTIONS_VERSION);
        SAME(e.opts, e0, add_special_tokens);
        SAME(e.opts, e0, replace_invalid_utf8);
        SAME(e.opts, e0, max_length);
        SAME(e.opts, e0, truncation_side);
        SAME(e.opts, e0, padding_side);
        SAME(e.opts, e0, pad_to_max_length);
        SAME(e.opts, e0, pad_to_multiple_of);
        SAME(e.opts, e0, pad_id);
    }
#endif
}

/* The data set: N points in [-1, 1)^F from a fixed generator, three classes cut by two
 * planes (learnable by a small MLP). */
typedef struct dataset {
    float x[N * F];
    int64_t y[N];
} dataset;

static void make_data(dataset *d) {
    uint32_t s = 12345u;
    int i, j;
    for (i = 0; i < N; ++i) {
        float v[F], a, b;
        for (j = 0; j < F; ++j) {
            s = s * 1664525u + 1013904223u;
            v[j] = (float)((s >> 8) & 0xffffu) / 32768.0f - 1.0f;
            d->x[i * F + j] = v[j];
        }
        a = v[0] + v[1] - v[2];
        b = v[2] + v[3] - v[0];
        d->y[i] = a > 0.3f ? 0 : (b > 0.0f ? 1 : 2);
    }
}

/* Options built by each *_options_init with the header's version inside a guarded
 * struct whose trailing bytes are garbage: the library must read no further than the
 * caller's version. */
static void loader_options(guarded_accel_dataloader_options *g, uint64_t seed) {
    memset(g, GARBAGE, sizeof *g);
    MUST(accel_dataloader_options_init(&g->opts, ACCEL_DATALOADER_OPTIONS_VERSION));
    g->opts.batch_size = BATCH;
    g->opts.shuffle = 1;
    g->opts.seed = seed;
}

/* One epoch of training: every step a real one (K = 1), steps counted in *steps, the
 * epoch's mean loss in *mean. */
static accel_status train_epoch(accel_context *ctx, accel_model *model, accel_dataloader *dl, int64_t *steps,
                                double *mean) {
    double sum = 0;
    int batches = 0;
    for (;;) {
        accel_tensor *xb = NULL, *yb = NULL, *logits = NULL, *loss = NULL;
        accel_step_result r;
        int64_t shape[2] = {0, 0};
        double l = 0;
        TRY(accel_dataloader_next(ctx, dl, &xb, &yb));
        if (!xb) break; /* the end of the epoch */
        TRY(accel_tensor_shape(xb, shape, 2));
        if (shape[0] != BATCH || shape[1] != F) {
            fprintf(stderr, "a batch of [%lld, %lld], expected [%d, %d]\n", (long long)shape[0], (long long)shape[1],
                    BATCH, F);
            return ACCEL_ERR_INTERNAL;
        }
        TRY(accel_model_forward(ctx, model, &xb, 1, &logits));
        TRY(accel_loss_cross_entropy(ctx, logits, yb, &loss));
        TRY(accel_tensor_item(loss, &l));
        TRY(accel_backward(ctx, loss));
        memset(&r, 0, sizeof r);
        TRY(accel_step(ctx, &r));
        ++*steps;
        if (!r.stepped || r.skipped || !r.sync_step || r.optimizer_steps != *steps || r.micro_steps != *steps ||
            r.loss_scale != 1.0) {
            fprintf(stderr, "step %lld: stepped %d skipped %d sync %d optimizer_steps %lld micro_steps %lld scale %g\n",
                    (long long)*steps, r.stepped, r.skipped, r.sync_step, (long long)r.optimizer_steps,
                    (long long)r.micro_steps, r.loss_scale);
            return ACCEL_ERR_INTERNAL;
        }
        accel_tensor_destroy(xb);
        accel_tensor_destroy(yb);
        accel_tensor_destroy(logits);
        accel_tensor_destroy(loss);
        sum += l;
        ++batches;
    }
    *mean = batches ? sum / batches : NAN;
    return ACCEL_OK;
}

static void train_one_process(const dataset *data) {
    guarded_accel_options o;
    guarded_accel_mlp_options m;
    guarded_accel_sgd_options s;
    guarded_accel_scheduler_options c;
    guarded_accel_dataloader_options d;
    int64_t sizes[] = {F, 16, C}, xshape[] = {N, F}, yshape[] = {N}, steps = 0, n = 0;
    accel_context *ctx = NULL;
    accel_tensor *X = NULL, *Y = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_scheduler *sched = NULL;
    accel_dataloader *dl = NULL;
    accel_device dev;
    size_t tensors = 0;
    int64_t elements = 0;
    double first = 0, last = 0, lr = 0;
    int e;

    memset(&o, GARBAGE, sizeof o);
    MUST(accel_options_init(&o.opts, ACCEL_OPTIONS_VERSION));
    o.opts.seed = 7;
    o.opts.num_threads = 1;
    MUST(accel_init(&o.opts, &ctx));
    MUST(accel_device_kind(ctx, &dev));
    CHECK(dev == ACCEL_DEVICE_CPU || dev == ACCEL_DEVICE_CUDA, "device %d", (int)dev);

    memset(&m, GARBAGE, sizeof m);
    MUST(accel_mlp_options_init(&m.opts, ACCEL_MLP_OPTIONS_VERSION));
    m.opts.layer_sizes = sizes;
    m.opts.num_layer_sizes = 3;
    MUST(accel_model_create_mlp(ctx, &m.opts, &model));
    MUST(accel_model_num_parameters(model, &tensors, &elements));
    CHECK(tensors == 4 && elements == F * 16 + 16 + 16 * C + C, "%zu parameter tensors, %lld parameters", tensors,
          (long long)elements);

    memset(&s, GARBAGE, sizeof s);
    MUST(accel_sgd_options_init(&s.opts, ACCEL_SGD_OPTIONS_VERSION));
    s.opts.lr = 0.1;
    s.opts.momentum = 0.9;
    MUST(accel_optimizer_create_sgd(ctx, model, &s.opts, &opt));

    memset(&c, GARBAGE, sizeof c);
    MUST(accel_scheduler_options_init(&c.opts, ACCEL_SCHEDULER_OPTIONS_VERSION));
    c.opts.warmup_steps = 4;
    MUST(accel_scheduler_create(ctx, opt, &c.opts, &sched));

    MUST(accel_tensor_create(ACCEL_FLOAT32, xshape, 2, data->x, &X));
    MUST(accel_tensor_create(ACCEL_INT64, yshape, 1, data->y, &Y));
    loader_options(&d, 3);
    MUST(accel_dataloader_create(ctx, X, Y, &d.opts, &dl));
    MUST(accel_prepare(ctx, model, opt, sched, dl));
    MUST(accel_dataloader_num_batches(dl, &n));
    CHECK(n == N / BATCH, "%lld batches per epoch", (long long)n);

    for (e = 0; e < EPOCHS; ++e) {
        double mean = NAN;
        MUST(train_epoch(ctx, model, dl, &steps, &mean));
        CHECK(isfinite(mean), "epoch %d: mean loss %g", e, mean);
        if (e == 0) first = mean;
        last = mean;
    }
    printf("one process: mean loss %.4f in the first epoch, %.4f in the last\n", first, last);
    CHECK(last < 0.7 * first, "the loss did not fall: %g -> %g", first, last);
    CHECK(steps == EPOCHS * N / BATCH, "%lld steps", (long long)steps);
    MUST(accel_scheduler_steps(sched, &n));
    CHECK(n == steps, "the scheduler took %lld steps, the optimizer %lld", (long long)n, (long long)steps);
    MUST(accel_optimizer_lr(opt, &lr));
    CHECK(lr > 0.1 - 1e-9 && lr < 0.1 + 1e-9, "lr after the warmup %g", lr);
    MUST(accel_dataloader_epoch(dl, &n));
    CHECK(n == EPOCHS, "the loader is at epoch %lld", (long long)n);

    accel_dataloader_destroy(dl);
    accel_scheduler_destroy(sched);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_tensor_destroy(X);
    accel_tensor_destroy(Y);
    accel_destroy(ctx);
}

/* Each simulated rank: its index, a reduction, charged compute, and training from a
 * prepared loader (each rank gets its share of the batches). */
typedef struct job {
    const dataset *data;
    double first[2], last[2];
} job;

static accel_status rank_main(accel_context *ctx, void *user) {
    job *j = user;
    guarded_accel_mlp_options m;
    guarded_accel_adamw_options a;
    guarded_accel_dataloader_options d;
    int64_t sizes[] = {F, 16, C}, xshape[] = {N, F}, yshape[] = {N}, one = 1, steps = 0;
    int32_t rank = -1, size = 0;
    accel_tensor *X = NULL, *Y = NULL, *t = NULL, *sum = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_dataloader *dl = NULL;
    float v = 0;
    int e;

    TRY(accel_process_index(ctx, &rank));
    TRY(accel_num_processes(ctx, &size));
    if (size != 2 || rank < 0 || rank > 1) return ACCEL_ERR_INTERNAL;
    v = (float)(rank + 1);
    TRY(accel_tensor_create(ACCEL_FLOAT32, &one, 1, &v, &t));
    TRY(accel_reduce(ctx, t, ACCEL_REDUCE_SUM, &sum));
    TRY(accel_tensor_copy_to_host(sum, &v, sizeof v));
    accel_tensor_destroy(t);
    accel_tensor_destroy(sum);
    if (v != 3.0f) {
        fprintf(stderr, "rank %d: the sum of 1 and 2 is %g\n", rank, v);
        return ACCEL_ERR_INTERNAL;
    }
    TRY(accel_sim_charge_compute(ctx, 0.25, "abi"));

    memset(&m, GARBAGE, sizeof m);
    TRY(accel_mlp_options_init(&m.opts, ACCEL_MLP_OPTIONS_VERSION));
    m.opts.layer_sizes = sizes;
    m.opts.num_layer_sizes = 3;
    TRY(accel_model_create_mlp(ctx, &m.opts, &model));
    memset(&a, GARBAGE, sizeof a);
    TRY(accel_adamw_options_init(&a.opts, ACCEL_ADAMW_OPTIONS_VERSION));
    a.opts.lr = 0.02;
    TRY(accel_optimizer_create_adamw(ctx, model, &a.opts, &opt));
    TRY(accel_tensor_create(ACCEL_FLOAT32, xshape, 2, j->data->x, &X));
    TRY(accel_tensor_create(ACCEL_INT64, yshape, 1, j->data->y, &Y));
    loader_options(&d, 5);
    TRY(accel_dataloader_create(ctx, X, Y, &d.opts, &dl));
    TRY(accel_prepare(ctx, model, opt, NULL, dl));
    for (e = 0; e < EPOCHS; ++e) {
        double mean = NAN;
        TRY(train_epoch(ctx, model, dl, &steps, &mean));
        if (e == 0) j->first[rank] = mean;
        j->last[rank] = mean;
    }
#if ACCEL_OPTIONS_VERSION >= 2
    { /* under DDP (set by main) the ranks hold the same weights: the max and min agree */
        accel_tensor *w = NULL, *hi = NULL, *lo = NULL;
        float whi[16 * F], wlo[16 * F];
        TRY(accel_model_parameter(ctx, model, 0, &w));
        TRY(accel_reduce(ctx, w, ACCEL_REDUCE_MAX, &hi));
        TRY(accel_reduce(ctx, w, ACCEL_REDUCE_MIN, &lo));
        TRY(accel_tensor_copy_to_host(hi, whi, sizeof whi));
        TRY(accel_tensor_copy_to_host(lo, wlo, sizeof wlo));
        accel_tensor_destroy(w);
        accel_tensor_destroy(hi);
        accel_tensor_destroy(lo);
        if (memcmp(whi, wlo, sizeof whi) != 0) {
            fprintf(stderr, "rank %d: the ranks' weights differ under DDP\n", rank);
            return ACCEL_ERR_INTERNAL;
        }
    }
#endif
    TRY(accel_barrier(ctx));
    accel_dataloader_destroy(dl);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_tensor_destroy(X);
    accel_tensor_destroy(Y);
    return ACCEL_OK;
}

static void simulate(const dataset *data) {
    guarded_accel_sim_options so;
    guarded_accel_options o;
    accel_sim_report *rep = NULL;
    job j;
    int32_t world = 0, r;
    double predicted = 0;

    memset(&j, 0, sizeof j);
    j.data = data;
    memset(&so, GARBAGE, sizeof so);
    MUST(accel_sim_options_init(&so.opts, ACCEL_SIM_OPTIONS_VERSION));
    so.opts.world_size = 2;
    so.opts.engine_threads = 1;
    memset(&o, GARBAGE, sizeof o);
    MUST(accel_options_init(&o.opts, ACCEL_OPTIONS_VERSION));
    o.opts.seed = 11;
    o.opts.num_threads = 1;
#if ACCEL_OPTIONS_VERSION >= 2
    o.opts.strategy = ACCEL_STRATEGY_DDP;
#endif
    CHECK(accel_sim_run(&so.opts, &o.opts, rank_main, &j, &rep) == ACCEL_OK, "accel_sim_run: %s",
          accel_last_error(NULL));
    if (!rep) {
        ++failures;
        fprintf(stderr, "accel_sim_run gave no report\n");
        return;
    }
    MUST(accel_sim_report_world_size(rep, &world));
    CHECK(world == 2, "world size %d", world);
    for (r = 0; r < world && r < 2; ++r) {
        accel_status st = ACCEL_ERR_INTERNAL;
        const char *err = NULL;
        uint64_t peak = 0;
        MUST(accel_sim_report_rank(rep, r, &st, &err, &peak));
        CHECK(st == ACCEL_OK && err && err[0] == '\0', "rank %d: %s: %s", r, accel_status_name(st), err ? err : "");
        CHECK(peak > 0, "rank %d: peak memory %llu", r, (unsigned long long)peak);
        printf("rank %d: mean loss %.4f in the first epoch, %.4f in the last\n", r, j.first[r], j.last[r]);
        CHECK(isfinite(j.first[r]) && j.last[r] < 0.7 * j.first[r], "rank %d: the loss did not fall: %g -> %g", r,
              j.first[r], j.last[r]);
    }
    MUST(accel_sim_report_predicted_seconds(rep, &predicted));
    CHECK(predicted >= 0.25 && isfinite(predicted), "predicted %g s (0.25 s of compute was charged)", predicted);
    accel_sim_report_destroy(rep);
}

#ifdef ACCEL_MEMORY_ESTIMATE_VERSION
/* v6: accel_estimate_memory fills the estimate as far as the caller's version and no
 * further, from options of the header's version (their fields past it never read). */
static void estimate(void) {
    guarded_accel_memory_estimate e;
    guarded_accel_memory_estimate_options o;
    CHECK_INIT(o, accel_memory_estimate_options_init, ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION);
    o.opts.world_size = 8;
    o.opts.strategy = ACCEL_STRATEGY_ZERO3;
    o.opts.mixed_precision = ACCEL_PRECISION_BF16;
    memset(&e, GARBAGE, sizeof e);
    e.opts.version = ACCEL_MEMORY_ESTIMATE_VERSION;
    CHECK(accel_estimate_memory("llama-7b", &o.opts, &e.opts) == ACCEL_OK, "accel_estimate_memory: %s",
          accel_last_error(NULL));
    CHECK(e.opts.total > e.opts.weights && e.opts.weights > 0, "estimate total %llu, weights %llu",
          (unsigned long long)e.opts.total, (unsigned long long)e.opts.weights);
    CHECK(untouched(e.after, GUARD), "accel_estimate_memory wrote past the end of the header's estimate (%u bytes)",
          (unsigned)sizeof e.opts);
}
#endif

int main(void) {
    dataset data;
    printf("header %s (options v%d, dataloader v%d) against library %s\n", ACCEL_VERSION_STRING,
           ACCEL_OPTIONS_VERSION, ACCEL_DATALOADER_OPTIONS_VERSION, accel_version_string());
    CHECK(accel_version_number() >= ACCEL_VERSION_NUMBER, "library %d is older than the header %d",
          accel_version_number(), ACCEL_VERSION_NUMBER);
    make_data(&data);
    check_options_init();
    train_one_process(&data);
    simulate(&data);
#ifdef ACCEL_MEMORY_ESTIMATE_VERSION
    estimate();
#endif
    if (failures) fprintf(stderr, "%d checks failed\n", failures);
    else printf("all checks passed\n");
    return failures ? 1 : 0;
}
