/* Trains accel's built-in MLP on the UCI handwritten digits through the C ABI. By default
 * on 4 simulated GPUs with ZeRO stage 2 and bf16 (where the CPU computes bf16 natively, else
 * fp32: --precision auto): every rank trains on its shard of each
 * batch, gradients are reduce-scattered, optimizer state and fp32 master weights sharded.
 * Prints progress per epoch, each rank's peak device memory, the predicted time per step on
 * the simulator's topology (8xH100 by default) and, on its last line, the held-out accuracy
 * ("accuracy: 0.9722").
 *
 *   train_digits [--ranks N] [--strategy no|ddp|zero1|zero2|zero3] [--precision auto|no|bf16|fp16]
 *                [--accum K] [--epochs N] [--batch B] [--topology 8xH100] [--memory 80GiB]
 *                [--trace out.json] [--data PATH] [--save PATH.safetensors] [--project DIR]
 *                [--log-dir DIR]
 *
 * Started by a launcher (accel launch, torchrun, mpirun, srun), it runs as one process of
 * that world instead: accel_init joins the others (Gloo on a CPU) and the same training
 * function runs on every process, `--ranks` left out:
 *
 *   accel launch -n 4 train_digits                      4 real processes, ZeRO-2, bf16
 *   accel launch -n 2 --max-restarts 1 train_digits --project runs/digits
 *                                                        restarted from the newest checkpoint
 *                                                        if a process dies
 *
 * --project DIR saves a checkpoint after every epoch under DIR/checkpoints (the newest 2
 * kept) and, when DIR already has one, resumes from it: kill the run, start it again with
 * the same arguments, and it finishes with the model the uninterrupted run would have.
 *
 * --log-dir DIR logs each step's loss and learning rate and each epoch's test accuracy with
 * accel_log: JSON lines, CSV and a TensorBoard event file in DIR (ACCEL_LOG_WITH picks fewer;
 * docs/trackers.md). A progress bar shows each epoch on a terminal (examples/c/progress.h).
 *
 * --ranks 0 trains in this process alone, on its default device (a GPU when there is one).
 * --batch is per process. The data: examples/data/digits.csv.gz (CC BY 4.0, see
 * examples/data/README.md). */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"
#include "progress.h"

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
#endif

typedef struct job {
    digits train, test;
    accel_tensor *xs, *ys; /* the training set in host memory, shared by the processes */
    int epochs, batch, accum, precision_fp16;
    const char *save, *project, *log_dir;
    int stop_after; /* --stop-after N: end after N epochs of this run, as if killed (a test aid) */
    int resave;     /* --resave: after resuming, save the state again at once and end: what was
                       loaded, written back (a test aid: tests/scripts/check_legacy_checkpoint.sh) */
    int crash_after; /* --crash-after N: process 1 kills itself (SIGKILL) in epoch N+1 of a launched
                        world's first attempt (a test aid for accel launch --max-restarts) */
    double accuracy;
    int64_t steps;
} job;

#define TRY(call)                      \
    do {                               \
        accel_status s_ = (call);      \
        if (s_ != ACCEL_OK) return s_; \
    } while (0)

/* One process's training: the same code on 1 or N processes. */
static accel_status train(accel_context *ctx, void *user) {
    job *j = user;
    int64_t sizes[] = {DIGITS_FEATURES, 128, 64, DIGITS_CLASSES}, batches;
    accel_mlp_options mlp = ACCEL_MLP_OPTIONS_INIT;
    accel_adamw_options adamw = ACCEL_ADAMW_OPTIONS_INIT;
    accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_scheduler *sched = NULL;
    accel_dataloader *loader = NULL;
    accel_step_result r;
    int32_t nproc = 1;
    int epoch, ran = 0, epochs = j->epochs;
    const int64_t accum = j->accum;
    char line[256];

    memset(&r, 0, sizeof r);
    mlp.layer_sizes = sizes;
    mlp.num_layer_sizes = sizeof sizes / sizeof sizes[0];
    TRY(accel_model_create_mlp(ctx, &mlp, &model));
    TRY(accel_num_processes(ctx, &nproc));
    /* the global batch grows with the processes: scale the step with it (capped) */
    adamw.lr = 3e-3 * (nproc < 4 ? nproc : 4);
    TRY(accel_optimizer_create_adamw(ctx, model, &adamw, &opt));
    lo.batch_size = j->batch;
    lo.shuffle = 1;
    lo.seed = 42;
    TRY(accel_dataloader_create(ctx, j->xs, j->ys, &lo, &loader));
    TRY(accel_prepare(ctx, NULL, NULL, NULL, loader)); /* shards the batches across processes */
    TRY(accel_dataloader_num_batches(loader, &batches)); /* this process's share */
    so.kind = ACCEL_SCHEDULE_COSINE;
    so.total_steps = (int64_t)j->epochs * ((batches + accum - 1) / accum);
    so.warmup_steps = so.total_steps / 20;
    TRY(accel_scheduler_create(ctx, opt, &so, &sched));
    TRY(accel_prepare(ctx, model, opt, sched, NULL));
    epoch = 0;
    if (j->project) {
        accel_project_options po = ACCEL_PROJECT_OPTIONS_INIT;
        const char *from = NULL;
        int64_t e = 0;
        po.project_dir = j->project;
        po.total_limit = 2;
        TRY(accel_set_project(ctx, &po));
        if (accel_load_state(ctx, NULL) == ACCEL_OK) { /* the newest checkpoint, if any */
            TRY(accel_last_checkpoint(ctx, &from));
            TRY(accel_dataloader_epoch(loader, &e));
            epoch = (int)e;
            snprintf(line, sizeof line, "resumed from %s at epoch %d", from, epoch + 1);
            TRY(accel_print(ctx, line));
            if (j->resave) { /* every process: a collective */
                TRY(accel_save_state(ctx, NULL));
                TRY(accel_last_checkpoint(ctx, &from));
                snprintf(line, sizeof line, "saved again as %s", from);
                TRY(accel_print(ctx, line));
                epochs = epoch; /* no training */
            }
        }
    }

    if (j->log_dir) { /* every process opens them; the main process writes */
        accel_tracker_options to = ACCEL_TRACKER_OPTIONS_INIT;
        const char *with = getenv("ACCEL_LOG_WITH");
        to.log_dir = j->log_dir;
        to.writers = with && *with ? 0 : ACCEL_LOG_JSONL | ACCEL_LOG_CSV | ACCEL_LOG_TENSORBOARD;
        TRY(accel_init_trackers(ctx, &to));
    }
    for (; epoch < epochs; ++epoch) {
        accel_tensor *x = NULL, *y = NULL, *mean = NULL, *sum = NULL;
        double loss_sum = 0, lr = 0, global = 0;
        int64_t n = 0, skipped = 0, batches = 0;
        progress bar;
        char what[32], status[64];
        TRY(accel_dataloader_num_batches(loader, &batches));
        snprintf(what, sizeof what, "epoch %d/%d", epoch + 1, j->epochs);
        progress_begin(&bar, ctx, what, batches, 0); /* plain: the epoch's line below is enough */
        for (;;) {
            accel_tensor *logits = NULL, *loss = NULL;
            double l;
            TRY(accel_dataloader_next(ctx, loader, &x, &y));
            if (!x) break; /* end of the epoch */
            if (j->crash_after > 0 && epoch == j->crash_after && n == 5) {
                int32_t me = 0;
                const char *attempt = getenv("ACCEL_RESTART_COUNT");
                TRY(accel_process_index(ctx, &me));
                if (me == 1 && (!attempt || !strcmp(attempt, "0"))) raise(SIGKILL);
            }
            TRY(accel_model_forward(ctx, model, &x, 1, &logits));
            TRY(accel_loss_cross_entropy(ctx, logits, y, &loss));
            TRY(accel_tensor_item(loss, &l));
            TRY(accel_backward(ctx, loss));
            TRY(accel_clip_grad_norm(ctx, 1.0, NULL));
            TRY(accel_step(ctx, &r));
            skipped += r.skipped;
            loss_sum += l;
            ++n;
            if (j->log_dir) {
                static const char *const step_names[2] = {"train/loss", "train/lr"};
                double step_values[2];
                step_values[0] = l;
                TRY(accel_optimizer_lr(opt, &step_values[1]));
                TRY(accel_log(ctx, r.optimizer_steps, step_names, step_values, 2));
            }
            snprintf(status, sizeof status, "loss %.4f", loss_sum / (double)n);
            progress_update(&bar, n, status);
            accel_tensor_destroy(logits);
            accel_tensor_destroy(loss);
            accel_tensor_destroy(x);
            accel_tensor_destroy(y);
        }
        progress_end(&bar);
        /* the mean loss over every process's batches */
        loss_sum /= (double)n;
        TRY(accel_tensor_create(ACCEL_FLOAT64, (int64_t[]){1}, 1, &loss_sum, &sum));
        TRY(accel_reduce(ctx, sum, ACCEL_REDUCE_MEAN, &mean));
        TRY(accel_tensor_item(mean, &global));
        accel_tensor_destroy(sum);
        accel_tensor_destroy(mean);
        TRY(accel_optimizer_lr(opt, &lr));
        j->accuracy = evaluate(ctx, model, &j->test); /* every process: under ZeRO-3 forward gathers */
        snprintf(line, sizeof line, "epoch %2d/%d  loss %.4f  lr %.2e  steps %lld%s  test-accuracy %.4f", epoch + 1,
                 j->epochs, global, lr, (long long)r.optimizer_steps, "", j->accuracy);
        if (j->precision_fp16) {
            size_t len = strlen(line);
            snprintf(line + len, sizeof line - len, "  loss-scale %.0f  skipped %lld", r.loss_scale, (long long)skipped);
        }
        TRY(accel_print(ctx, line)); /* the main process prints */
        if (j->log_dir) {
            static const char *const epoch_names[2] = {"epoch/loss", "epoch/test_accuracy"};
            const double epoch_values[2] = {global, j->accuracy};
            TRY(accel_log(ctx, r.optimizer_steps, epoch_names, epoch_values, 2));
        }
        if (j->project) TRY(accel_save_state(ctx, NULL)); /* every process: a collective */
        if (j->stop_after > 0 && ++ran == j->stop_after) break; /* "killed": no save of the model */
    }
    if (epoch == 0 || j->accuracy == 0) j->accuracy = evaluate(ctx, model, &j->test); /* resumed after the last epoch */
    j->steps = r.optimizer_steps;
    if (j->save) {
        TRY(accel_save_model(ctx, model, j->save)); /* gathers the shards; the main process writes */
        snprintf(line, sizeof line, "weights saved to %s", j->save);
        TRY(accel_print(ctx, line));
    }
    if (j->log_dir) TRY(accel_end_training(ctx));
    accel_dataloader_destroy(loader);
    accel_scheduler_destroy(sched);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    return ACCEL_OK;
}

int main(int argc, char **argv) {
    const char *data = DIGITS_DEFAULT_PATH, *topology = "8xH100", *memory = NULL, *trace = NULL;
    int ranks = 4, accum = 1, i, main_process = 1;
    const char *strategy_env = getenv("ACCEL_STRATEGY"), *precision_env = getenv("ACCEL_MIXED_PRECISION");
    /* started by a launcher: one process of its world (accel_init joins it) */
    const int launched = getenv("WORLD_SIZE") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") ||
                         getenv("SLURM_NTASKS");
    accel_precision precision = ACCEL_PRECISION_AUTO; /* bf16 where this CPU or GPU has it natively, else fp32 */
    accel_strategy strategy = ACCEL_STRATEGY_ZERO2;
    digits all;
    job j;
    accel_options opts = ACCEL_OPTIONS_INIT;
    static const char *usage =
        "usage: %s [--ranks N] [--strategy no|ddp|zero1|zero2|zero3] [--precision auto|no|bf16|fp16] [--accum K]\n"
        "       [--epochs N] [--batch B] [--topology NAME] [--memory BYTES] [--trace FILE] [--data PATH] [--save FILE]\n"
        "       [--project DIR] [--log-dir DIR]\n";

    memset(&j, 0, sizeof j);
    j.epochs = 20;
    j.batch = 32;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { printf(usage, argv[0]); return 0; }
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) j.epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--accum") && i + 1 < argc) accum = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) j.batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) j.save = argv[++i];
        else if (!strcmp(argv[i], "--topology") && i + 1 < argc) topology = argv[++i];
        else if (!strcmp(argv[i], "--memory") && i + 1 < argc) memory = argv[++i];
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
        else if (!strcmp(argv[i], "--project") && i + 1 < argc) j.project = argv[++i];
        else if (!strcmp(argv[i], "--log-dir") && i + 1 < argc) j.log_dir = argv[++i];
        else if (!strcmp(argv[i], "--stop-after") && i + 1 < argc) j.stop_after = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--resave")) j.resave = 1;
        else if (!strcmp(argv[i], "--crash-after") && i + 1 < argc) j.crash_after = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *p = argv[++i];
            if (!strcmp(p, "no")) precision = ACCEL_PRECISION_NO;
            else if (!strcmp(p, "bf16")) precision = ACCEL_PRECISION_BF16;
            else if (!strcmp(p, "fp16")) precision = ACCEL_PRECISION_FP16;
            else if (!strcmp(p, "auto")) precision = ACCEL_PRECISION_AUTO;
            else { fprintf(stderr, "unknown precision '%s' (auto, no, bf16, fp16)\n", p); return 2; }
        } else if (!strcmp(argv[i], "--strategy") && i + 1 < argc) {
            const char *p = argv[++i];
            if (!strcmp(p, "no")) strategy = ACCEL_STRATEGY_NO;
            else if (!strcmp(p, "ddp")) strategy = ACCEL_STRATEGY_DDP;
            else if (!strcmp(p, "zero1")) strategy = ACCEL_STRATEGY_ZERO1;
            else if (!strcmp(p, "zero2")) strategy = ACCEL_STRATEGY_ZERO2;
            else if (!strcmp(p, "zero3")) strategy = ACCEL_STRATEGY_ZERO3;
            else { fprintf(stderr, "unknown strategy '%s' (no, ddp, zero1, zero2, zero3)\n", p); return 2; }
        } else {
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
    }
    if (launched && ranks == 4) ranks = 0;
    for (i = 1; i < argc; ++i) { /* what --strategy / --precision leave out, the launcher's variables may say */
        if (!strcmp(argv[i], "--strategy")) strategy_env = NULL;
        if (!strcmp(argv[i], "--precision")) precision_env = NULL;
    }
    for (i = 1; i < argc; ++i)
        if (launched && !strcmp(argv[i], "--ranks")) {
            fprintf(stderr, "train_digits: started by a launcher, it runs as one of its processes: leave out --ranks\n");
            return 2;
        }
    if (j.epochs < 1 || accum < 1 || j.batch < 1 || ranks < 0) {
        fprintf(stderr, "epochs, accum and batch must be >= 1, ranks >= 0\n");
        return 2;
    }

    if (digits_load(data, &all) != 0 || digits_split(&all, 0.2, 42, &j.train, &j.test) != 0) return 1;
    if (!launched) printf("digits: %lld training samples, %lld held out\n", (long long)j.train.n, (long long)j.test.n);

    j.xs = host_tensor(ACCEL_FLOAT32, j.train.n, DIGITS_FEATURES, j.train.x);
    j.ys = host_tensor(ACCEL_INT64, j.train.n, 0, j.train.y);
    opts.mixed_precision = precision;
    opts.gradient_accumulation_steps = accum;
    j.accum = accum;
    opts.seed = 42;
    opts.strategy = strategy;
    if (strategy_env) opts.strategy = ACCEL_STRATEGY_NO;       /* accel_init reads ACCEL_STRATEGY */
    if (precision_env) opts.mixed_precision = ACCEL_PRECISION_NO; /* and ACCEL_MIXED_PRECISION */
    j.precision_fp16 = precision == ACCEL_PRECISION_FP16;
    if (ranks == 0) { /* this process alone, or one process of a launched world */
        accel_context *ctx = NULL;
        int32_t nproc = 1;
        CHECK(NULL, accel_init(&opts, &ctx)); /* a launched process joins its world here */
        CHECK(ctx, accel_num_processes(ctx, &nproc));
        CHECK(ctx, accel_is_main_process(ctx, &main_process));
        if (launched && main_process) {
            printf("training on %d processes, strategy %s, precision %s\n", (int)nproc,
                   strategy_env ? strategy_env : strategy == ACCEL_STRATEGY_NO ? "no" : strategy == ACCEL_STRATEGY_DDP ? "ddp"
                   : strategy == ACCEL_STRATEGY_ZERO1 ? "zero1" : strategy == ACCEL_STRATEGY_ZERO2 ? "zero2" : "zero3",
                   precision_env ? precision_env : precision == ACCEL_PRECISION_NO ? "fp32"
                   : precision == ACCEL_PRECISION_BF16 ? "bf16" : precision == ACCEL_PRECISION_FP16 ? "fp16" : "auto");
            fflush(stdout);
        }
        CHECK(ctx, train(ctx, &j));
        accel_destroy(ctx);
    } else {
        accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
        accel_sim_report *rep = NULL;
        double predicted = 0;
        int32_t r;
        accel_status st;
        so.world_size = ranks;
        so.topology = topology;
        so.device_memory = memory;
        so.trace_path = trace;
        printf("training on %d simulated GPUs (%s), strategy %s, precision %s\n", ranks, topology,
               strategy == ACCEL_STRATEGY_NO ? "no" : strategy == ACCEL_STRATEGY_DDP ? "ddp"
               : strategy == ACCEL_STRATEGY_ZERO1 ? "zero1" : strategy == ACCEL_STRATEGY_ZERO2 ? "zero2" : "zero3",
               precision == ACCEL_PRECISION_NO ? "fp32" : precision == ACCEL_PRECISION_BF16 ? "bf16"
               : precision == ACCEL_PRECISION_FP16 ? "fp16" : "auto");
        fflush(stdout);
        st = accel_sim_run(&so, &opts, train, &j, &rep);
        if (st != ACCEL_OK) {
            fprintf(stderr, "training failed: %s: %s\n", accel_status_name(st), accel_last_error(NULL));
            accel_sim_report_destroy(rep);
            return 1;
        }
        for (r = 0; r < ranks; ++r) {
            uint64_t peak = 0;
            CHECK(NULL, accel_sim_report_rank(rep, r, NULL, NULL, &peak));
            printf("rank %d peak device memory %.1f KiB\n", r, (double)peak / 1024.0);
        }
        CHECK(NULL, accel_sim_report_predicted_seconds(rep, &predicted));
        printf("predicted on %s: %.3f ms for the run, %.1f us per optimizer step (%lld steps)\n", topology,
               predicted * 1e3, j.steps ? predicted * 1e6 / (double)j.steps : 0.0, (long long)j.steps);
        if (trace) printf("timeline written to %s (open it in ui.perfetto.dev)\n", trace);
        accel_sim_report_destroy(rep);
    }
    if (main_process) printf("accuracy: %.4f\n", j.accuracy);
    accel_tensor_destroy(j.xs);
    accel_tensor_destroy(j.ys);
    digits_free(&all);
    digits_free(&j.train);
    digits_free(&j.test);
    return 0;
}
