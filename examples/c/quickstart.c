#include <accel/accel.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) { /* learns y = x0 - 2*x1 with a bf16 MLP, 2 accumulation micro-batches per step */
    if (argc > 1) { int help = !strcmp(argv[1], "--help"); fprintf(help ? stdout : stderr, "usage: %s (no arguments)\n", argv[0]); return help ? 0 : 2; }
    float x[512], y[256]; double l = 0;
    for (int i = 0; i < 256; ++i) { x[2*i] = i % 16 / 8.f - 1; x[2*i+1] = i / 16 / 8.f - 1; y[i] = x[2*i] - 2 * x[2*i+1]; }
    int64_t xshape[] = {256, 2}, yshape[] = {256, 1}, sizes[] = {2, 32, 1};
    accel_options o = ACCEL_OPTIONS_INIT;  o.mixed_precision = ACCEL_PRECISION_BF16;  o.gradient_accumulation_steps = 2;
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;  m.layer_sizes = sizes;  m.num_layer_sizes = 3;
    accel_dataloader_options d = ACCEL_DATALOADER_OPTIONS_INIT;  d.batch_size = 16;  d.shuffle = 1;
    accel_context *ctx; accel_model *model; accel_optimizer *opt; accel_dataloader *dl; accel_tensor *X, *Y, *xb, *yb, *pred, *loss;
    if (accel_init(&o, &ctx) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); return 1; }
    accel_tensor_create(ACCEL_FLOAT32, xshape, 2, x, &X);  accel_tensor_create(ACCEL_FLOAT32, yshape, 2, y, &Y);
    accel_model_create_mlp(ctx, &m, &model);  accel_optimizer_create_adamw(ctx, model, NULL, &opt);
    accel_dataloader_create(ctx, X, Y, &d, &dl);  accel_prepare(ctx, model, opt, NULL, dl);
    for (int epoch = 0; epoch < 40; ++epoch)
        while (accel_dataloader_next(ctx, dl, &xb, &yb) == ACCEL_OK && xb) {   /* NULL batch: epoch over */
            accel_model_forward(ctx, model, &xb, 1, &pred);  accel_loss_mse(ctx, pred, yb, &loss);
            if (accel_backward(ctx, loss) != ACCEL_OK || accel_step(ctx, NULL) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(ctx)); return 1; }
            accel_tensor_item(loss, &l);
            accel_tensor_destroy(xb); accel_tensor_destroy(yb); accel_tensor_destroy(pred); accel_tensor_destroy(loss);
        }
    printf("final loss: %.5f\n", l);
    accel_dataloader_destroy(dl); accel_optimizer_destroy(opt); accel_model_destroy(model); accel_tensor_destroy(X); accel_tensor_destroy(Y); accel_destroy(ctx);
    return l < 0.01 ? 0 : 1;
}
