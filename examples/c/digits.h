/* Shared by the C examples: loads the UCI digits (examples/data/digits.csv.gz: 64 pixel
 * values in 0..16 then the label, one sample per line), scales pixels to [0, 1], and
 * splits 80/20 with a fixed seed. Plain C99 with zlib. */
#ifndef ACCEL_EXAMPLES_DIGITS_H
#define ACCEL_EXAMPLES_DIGITS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <accel/accel.h>

#define DIGITS_FEATURES 64
#define DIGITS_CLASSES 10

typedef struct digits {
    float *x;      /* [n, 64] */
    int64_t *y;    /* [n] */
    int64_t n;
} digits;

static inline void digits_free(digits *d) {
    free(d->x);
    free(d->y);
    d->x = NULL;
    d->y = NULL;
    d->n = 0;
}

/* Returns 0 on success; prints what went wrong otherwise. */
static inline int digits_load(const char *path, digits *out) {
    gzFile f = gzopen(path, "rb");
    char line[1024];
    int64_t cap = 2048;
    memset(out, 0, sizeof *out);
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    out->x = malloc((size_t)cap * DIGITS_FEATURES * sizeof(float));
    out->y = malloc((size_t)cap * sizeof(int64_t));
    while (out->x && out->y && gzgets(f, line, sizeof line)) {
        char *p = line;
        int j;
        if (line[0] == '\n' || line[0] == '\0') continue;
        if (out->n == cap) {
            cap *= 2;
            out->x = realloc(out->x, (size_t)cap * DIGITS_FEATURES * sizeof(float));
            out->y = realloc(out->y, (size_t)cap * sizeof(int64_t));
            if (!out->x || !out->y) break;
        }
        for (j = 0; j <= DIGITS_FEATURES; ++j) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) {
                fprintf(stderr, "%s: line %lld is malformed\n", path, (long long)out->n + 1);
                gzclose(f);
                digits_free(out);
                return -1;
            }
            if (j < DIGITS_FEATURES)
                out->x[out->n * DIGITS_FEATURES + j] = (float)v / 16.0f;
            else
                out->y[out->n] = v;
            p = end + (*end == ',');
        }
        out->n++;
    }
    gzclose(f);
    if (!out->x || !out->y || out->n == 0) {
        fprintf(stderr, "%s: no samples read\n", path);
        digits_free(out);
        return -1;
    }
    return 0;
}

/* Shuffles with a fixed seed (xorshift64*) and splits off the last `test_fraction`. */
static inline int digits_split(const digits *all, double test_fraction, uint64_t seed, digits *train, digits *test) {
    int64_t *perm = malloc((size_t)all->n * sizeof(int64_t));
    int64_t i, n_test = (int64_t)(all->n * test_fraction + 0.5), n_train = all->n - n_test;
    uint64_t s = seed ? seed : 88172645463325252ull;
    if (!perm) return -1;
    for (i = 0; i < all->n; ++i) perm[i] = i;
    for (i = all->n - 1; i > 0; --i) {
        int64_t j, t;
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        j = (int64_t)((s * 2685821657736338717ull) % (uint64_t)(i + 1));
        t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    train->n = n_train;
    test->n = n_test;
    train->x = malloc((size_t)n_train * DIGITS_FEATURES * sizeof(float));
    train->y = malloc((size_t)n_train * sizeof(int64_t));
    test->x = malloc((size_t)n_test * DIGITS_FEATURES * sizeof(float));
    test->y = malloc((size_t)n_test * sizeof(int64_t));
    if (!train->x || !train->y || !test->x || !test->y) {
        free(perm);
        return -1;
    }
    for (i = 0; i < all->n; ++i) {
        digits *d = i < n_train ? train : test;
        int64_t k = i < n_train ? i : i - n_train;
        memcpy(d->x + k * DIGITS_FEATURES, all->x + perm[i] * DIGITS_FEATURES, DIGITS_FEATURES * sizeof(float));
        d->y[k] = all->y[perm[i]];
    }
    free(perm);
    return 0;
}

/* ---- helpers shared by the examples that train on the digits ---- */

#define CHECK(ctx, call)                                                                    \
    do {                                                                                    \
        accel_status s_ = (call);                                                           \
        if (s_ != ACCEL_OK) {                                                               \
            fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(s_), accel_last_error(ctx)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static inline accel_tensor *host_tensor(accel_dtype dt, int64_t d0, int64_t d1, const void *data) {
    int64_t shape[2] = {d0, d1};
    accel_tensor *t = NULL;
    CHECK(NULL, accel_tensor_create(dt, shape, d1 > 0 ? 2 : 1, data, &t));
    return t;
}

/* Accuracy of `model` on `set`: one forward in evaluation mode, argmax on the host. */
static inline double evaluate(accel_context *ctx, accel_model *model, const digits *set) {
    accel_tensor *x = host_tensor(ACCEL_FLOAT32, set->n, DIGITS_FEATURES, set->x), *logits = NULL;
    float *out = malloc((size_t)set->n * DIGITS_CLASSES * sizeof(float));
    int64_t i, correct = 0;
    CHECK(ctx, accel_model_set_training(ctx, model, 0));
    CHECK(ctx, accel_model_forward(ctx, model, &x, 1, &logits));
    /* bf16 autocast returns bf16 logits: read them as float32 */
    CHECK(ctx, accel_tensor_copy_to_host_as(logits, ACCEL_FLOAT32, out, (size_t)set->n * DIGITS_CLASSES * sizeof(float)));
    for (i = 0; i < set->n; ++i) {
        int k, best = 0;
        for (k = 1; k < DIGITS_CLASSES; ++k)
            if (out[i * DIGITS_CLASSES + k] > out[i * DIGITS_CLASSES + best]) best = k;
        correct += best == set->y[i];
    }
    CHECK(ctx, accel_model_set_training(ctx, model, 1));
    accel_tensor_destroy(x);
    accel_tensor_destroy(logits);
    free(out);
    return (double)correct / (double)set->n;
}

#endif
