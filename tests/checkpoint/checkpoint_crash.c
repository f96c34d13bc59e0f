/* Helper of tests/checkpoint/test_checkpoint.cpp (Crash.*): trains the test's small model through the
 * C ABI and saves under a project directory.
 *   checkpoint_crash PROJECT STEPS
 * loads the project's latest checkpoint if there is one, trains STEPS more optimizer steps,
 * and saves the next checkpoint_N. With ACCEL_CHECKPOINT_CRASH_AT=K in the environment the
 * save ends the process abruptly at its K-th point (exit status 86): the library calls
 * accel_test_checkpoint_point at each point of the save protocol when the program defines
 * it, which only this helper does (linked with -rdynamic so the library sees it). With
 * ACCEL_CHECKPOINT_HOLD set it prints "held" once the project is its own and waits to be
 * killed. */
#include <accel/accel.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void accel_test_checkpoint_point(int point);
void accel_test_checkpoint_point(int point) {
    static int at = -1;
    if (at < 0) {
        const char *v = getenv("ACCEL_CHECKPOINT_CRASH_AT");
        at = v ? atoi(v) : 0;
    }
    if (at == point) _exit(86);
}

#define TRY(call)                                                                                   \
    do {                                                                                            \
        accel_status s_ = (call);                                                                   \
        if (s_ != ACCEL_OK) {                                                                       \
            fprintf(stderr, "%s: %s: %s\n", #call, accel_status_name(s_), accel_last_error(ctx));  \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

int main(int argc, char **argv) {
    accel_context *ctx = NULL;
    accel_model *model = NULL;
    accel_optimizer *opt = NULL;
    accel_dataloader *dl = NULL;
    accel_tensor *X = NULL, *Y = NULL;
    accel_options o = ACCEL_OPTIONS_INIT;
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    accel_project_options po = ACCEL_PROJECT_OPTIONS_INIT;
    int64_t sizes[] = {6, 8, 3}, xs[] = {32, 6}, ys[] = {32}, target, steps = 0;
    float x[32 * 6];
    int64_t y[32];
    int i;
    const char *latest = NULL;
    if (argc != 3) {
        fprintf(stderr, "usage: %s PROJECT STEPS\n", argv[0]);
        return 2;
    }
    for (i = 0; i < 32 * 6; ++i) x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (i = 0; i < 32; ++i) y[i] = i % 3;
    o.device = ACCEL_DEVICE_CPU;
    o.seed = 3;
    TRY(accel_init(&o, &ctx));
    m.layer_sizes = sizes;
    m.num_layer_sizes = 3;
    TRY(accel_model_create_mlp(ctx, &m, &model));
    ao.lr = 1e-2;
    TRY(accel_optimizer_create_adamw(ctx, model, &ao, &opt));
    TRY(accel_tensor_create(ACCEL_FLOAT32, xs, 2, x, &X));
    TRY(accel_tensor_create(ACCEL_INT64, ys, 1, y, &Y));
    lo.batch_size = 4;
    lo.shuffle = 1;
    TRY(accel_dataloader_create(ctx, X, Y, &lo, &dl));
    TRY(accel_prepare(ctx, model, opt, NULL, dl));
    po.project_dir = argv[1];
    TRY(accel_set_project(ctx, &po));
    if (getenv("ACCEL_CHECKPOINT_HOLD")) { /* holds the project until killed (Project.OneRunPerProject) */
        printf("held\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (accel_load_state(ctx, NULL) == ACCEL_OK) {
        TRY(accel_last_checkpoint(ctx, &latest));
        printf("resumed from %s\n", latest);
    }
    target = atoll(argv[2]);
    while (steps < target) {
        accel_tensor *xb = NULL, *yb = NULL, *logits = NULL, *loss = NULL;
        accel_step_result r;
        TRY(accel_dataloader_next(ctx, dl, &xb, &yb));
        if (!xb) continue;
        TRY(accel_model_forward(ctx, model, &xb, 1, &logits));
        TRY(accel_loss_cross_entropy(ctx, logits, yb, &loss));
        TRY(accel_backward(ctx, loss));
        TRY(accel_step(ctx, &r));
        steps += r.stepped;
        accel_tensor_destroy(xb);
        accel_tensor_destroy(yb);
        accel_tensor_destroy(logits);
        accel_tensor_destroy(loss);
    }
    TRY(accel_save_state(ctx, NULL));
    TRY(accel_last_checkpoint(ctx, &latest));
    printf("saved %s\n", latest);
    accel_dataloader_destroy(dl);
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_tensor_destroy(X);
    accel_tensor_destroy(Y);
    accel_destroy(ctx);
    return 0;
}
