/* The accel side of bench/tokenizer.py: encodes a corpus with a tokenizer through the C ABI.
 *   tokenizer_c TOKENIZER CORPUS ROUNDS
 * CORPUS: texts as (uint32 little-endian length, bytes)*. Each round times, in this order:
 * the whole corpus in one accel_tokenizer_encode_batch call (its threads), the texts one by
 * one with accel_tokenizer_encode (one thread), and accel_tokenizer_decode of every text's ids.
 * Prints one JSON line per round: {"batch_s":..,"single_s":..,"decode_s":..,"tokens":..,"texts":..}. */
#define _POSIX_C_SOURCE 199309L
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void check(accel_status s, const char *what) {
    if (s != ACCEL_OK) {
        fprintf(stderr, "tokenizer_c: %s: %s\n", what, accel_last_error(NULL));
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: tokenizer_c TOKENIZER CORPUS ROUNDS\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)size + 1);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "tokenizer_c: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    size_t n = 0, cap = 1024;
    const char **texts = malloc(cap * sizeof *texts);
    size_t *lens = malloc(cap * sizeof *lens);
    for (long at = 0; at + 4 <= size;) {
        uint32_t len;
        memcpy(&len, data + at, 4);
        at += 4;
        if (n == cap) {
            cap *= 2;
            texts = realloc(texts, cap * sizeof *texts);
            lens = realloc(lens, cap * sizeof *lens);
        }
        texts[n] = data + at;
        lens[n++] = len;
        at += len;
    }
    accel_tokenizer *tok = NULL;
    check(accel_tokenizer_load(argv[1], &tok), "accel_tokenizer_load");
    const int rounds = atoi(argv[3]);
    accel_encode_options o;
    check(accel_encode_options_init(&o, ACCEL_ENCODE_OPTIONS_VERSION), "accel_encode_options_init");
    o.add_special_tokens = 0;
    int64_t **ids = calloc(n, sizeof *ids);
    size_t *counts = calloc(n, sizeof *counts);
    char *buf = NULL;
    size_t buf_cap = 0;
    for (int r = 0; r < rounds; ++r) {
        double t0 = now();
        accel_tensor *batch = NULL, *mask = NULL;
        check(accel_tokenizer_encode_batch(tok, texts, lens, n, &o, &batch, &mask), "accel_tokenizer_encode_batch");
        int64_t tokens = 0;
        {
            int64_t numel = 0;
            check(accel_tensor_numel(mask, &numel), "accel_tensor_numel");
            int64_t *m = malloc((size_t)numel * sizeof *m);
            check(accel_tensor_copy_to_host(mask, m, (size_t)numel * sizeof *m), "copy");
            for (int64_t i = 0; i < numel; ++i) tokens += m[i];
            free(m);
        }
        const double batch_s = now() - t0;
        accel_tensor_destroy(batch);
        accel_tensor_destroy(mask);
        t0 = now();
        int64_t single_tokens = 0;
        for (size_t i = 0; i < n; ++i) {
            accel_tensor *t = NULL;
            check(accel_tokenizer_encode(tok, texts[i], lens[i], &o, &t), "accel_tokenizer_encode");
            int64_t k = 0;
            check(accel_tensor_numel(t, &k), "accel_tensor_numel");
            if (!ids[i]) ids[i] = malloc(((size_t)k + 1) * sizeof **ids);
            check(accel_tensor_copy_to_host(t, ids[i], (size_t)k * sizeof **ids), "copy");
            counts[i] = (size_t)k;
            single_tokens += k;
            accel_tensor_destroy(t);
        }
        const double single_s = now() - t0;
        if (single_tokens != tokens) {
            fprintf(stderr, "tokenizer_c: the batch has %lld tokens, the texts one by one %lld\n", (long long)tokens,
                    (long long)single_tokens);
            return 1;
        }
        t0 = now();
        for (size_t i = 0; i < n; ++i) {
            size_t len = 0;
            accel_status s = accel_tokenizer_decode(tok, ids[i], counts[i], 0, buf, buf_cap, &len);
            if (s != ACCEL_OK) {
                buf_cap = 2 * len + 64;
                buf = realloc(buf, buf_cap);
                check(accel_tokenizer_decode(tok, ids[i], counts[i], 0, buf, buf_cap, &len), "accel_tokenizer_decode");
            }
        }
        const double decode_s = now() - t0;
        printf("{\"batch_s\":%.6f,\"single_s\":%.6f,\"decode_s\":%.6f,\"tokens\":%lld,\"texts\":%zu}\n", batch_s,
               single_s, decode_s, (long long)tokens, n);
        fflush(stdout);
    }
    accel_tokenizer_destroy(tok);
    return 0;
}
