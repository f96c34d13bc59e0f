/* A progress bar for the examples. On a terminal it is one line redrawn in place
 * ("epoch 1/4 [#######.............] 16/45  loss 1.23  87 steps/s"); on a pipe, a log file
 * or CI it is plain lines, a few per run (or none: `plain_every` 0). ACCEL_PROGRESS=bar,
 * plain or off overrides the guess; `accel launch` sets it to bar for its processes when its
 * own output is a terminal, and redraws their bars under their rank. Only the main process
 * draws. Header-only: each example includes it once. */
#ifndef ACCEL_EXAMPLES_PROGRESS_H
#define ACCEL_EXAMPLES_PROGRESS_H

/* (clock_gettime and isatty: the includer defines _POSIX_C_SOURCE 200809L before any include) */
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct progress {
    int mode;      /* 0 off (not the main process, or ACCEL_PROGRESS=off), 1 plain lines, 2 bar */
    int64_t total; /* updates expected */
    int64_t every; /* plain mode: a line every this many updates (0: none) */
    double t0, drawn; /* bar mode: redrawn at most 10 times a second, and at the last update */
    char what[96];
} progress;

static double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts a bar of `total` updates labelled `what` ("epoch 1/4"). */
static void progress_begin(progress *p, accel_context *ctx, const char *what, int64_t total, int64_t plain_every) {
    int32_t main_process = 0;
    const char *env = getenv("ACCEL_PROGRESS");
    memset(p, 0, sizeof *p);
    if (accel_is_main_process(ctx, &main_process) != ACCEL_OK || !main_process) return;
    if (env && !strcmp(env, "off")) return;
    if (env && !strcmp(env, "bar")) p->mode = 2;
    else if (env && !strcmp(env, "plain")) p->mode = 1;
    else p->mode = isatty(STDOUT_FILENO) ? 2 : 1;
    p->total = total > 0 ? total : 1;
    p->every = plain_every;
    p->t0 = progress_now();
    snprintf(p->what, sizeof p->what, "%s", what);
}

/* `done` of the total, and a status after the counts ("loss 1.23"). */
static void progress_update(progress *p, int64_t done, const char *status) {
    const int width = 24;
    const double rate = (double)done / (progress_now() - p->t0 + 1e-9);
    if (p->mode == 2) {
        char bar[32];
        const double t = progress_now();
        if (t - p->drawn < 0.1 && done < p->total) return;
        p->drawn = t;
        int64_t fill = done * width / p->total;
        int i;
        if (fill > width) fill = width;
        for (i = 0; i < width; ++i) bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        /* the line, the rest of the terminal line cleared, back to its start: the next update
         * (or the next line printed) overwrites it */
        printf("%s [%s] %lld/%lld  %s  %.1f it/s\033[K\r", p->what, bar, (long long)done, (long long)p->total, status, rate);
        fflush(stdout);
    } else if (p->mode == 1 && p->every > 0 && done % p->every == 0 && done < p->total) {
        printf("  %s: %lld/%lld  %s  %.1f it/s\n", p->what, (long long)done, (long long)p->total, status, rate);
        fflush(stdout);
    }
}

/* Ends the bar: on a terminal the line is cleared, so that the caller's summary line takes
 * its place. */
static void progress_end(progress *p) {
    if (p->mode == 2) {
        printf("\033[K");
        fflush(stdout);
    }
    p->mode = 0;
}

#endif
