/* Compiled as C99 with -Wall -Wextra -Werror -pedantic: the public header must be clean C.
 * Also checks at run time that the option macros and init functions agree. */
#include <accel/accel.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    accel_options a = ACCEL_OPTIONS_INIT, b;
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT, m2;
    accel_sgd_options s = ACCEL_SGD_OPTIONS_INIT, s2;
    accel_adamw_options w = ACCEL_ADAMW_OPTIONS_INIT, w2;
    accel_scheduler_options c = ACCEL_SCHEDULER_OPTIONS_INIT, c2;
    accel_dataloader_options d = ACCEL_DATALOADER_OPTIONS_INIT, d2;
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT, so2;
    int failures = 0;
    if (accel_version_number() != ACCEL_VERSION_NUMBER) {
        fprintf(stderr, "library %d, header %d\n", accel_version_number(), ACCEL_VERSION_NUMBER);
        return 1;
    }
    memset(&b, 0xff, sizeof b);
    memset(&m2, 0xff, sizeof m2);
    memset(&s2, 0xff, sizeof s2);
    memset(&w2, 0xff, sizeof w2);
    memset(&c2, 0xff, sizeof c2);
    memset(&d2, 0xff, sizeof d2);
    memset(&so2, 0xff, sizeof so2);
    failures += accel_options_init(&b, ACCEL_OPTIONS_VERSION) != ACCEL_OK;
    failures += accel_mlp_options_init(&m2, ACCEL_MLP_OPTIONS_VERSION) != ACCEL_OK;
    failures += accel_sgd_options_init(&s2, ACCEL_SGD_OPTIONS_VERSION) != ACCEL_OK;
    failures += accel_adamw_options_init(&w2, ACCEL_ADAMW_OPTIONS_VERSION) != ACCEL_OK;
    failures += accel_scheduler_options_init(&c2, ACCEL_SCHEDULER_OPTIONS_VERSION) != ACCEL_OK;
    failures += accel_dataloader_options_init(&d2, ACCEL_DATALOADER_OPTIONS_VERSION) != ACCEL_OK;
    failures += accel_sim_options_init(&so2, ACCEL_SIM_OPTIONS_VERSION) != ACCEL_OK;
    /* field by field: padding bytes may differ */
    failures += a.version != b.version || a.mixed_precision != b.mixed_precision ||
                a.gradient_accumulation_steps != b.gradient_accumulation_steps || a.seed != b.seed ||
                a.device != b.device || a.device_index != b.device_index || a.loss_scale_init != b.loss_scale_init ||
                a.loss_scale_growth_factor != b.loss_scale_growth_factor ||
                a.loss_scale_backoff_factor != b.loss_scale_backoff_factor ||
                a.loss_scale_growth_interval != b.loss_scale_growth_interval || a.num_threads != b.num_threads ||
                a.strategy != b.strategy || a.bucket_bytes != b.bucket_bytes;
    failures += m.version != m2.version || m.layer_sizes != m2.layer_sizes || m.num_layer_sizes != m2.num_layer_sizes ||
                m.activation != m2.activation || m.dropout != m2.dropout || m.bias != m2.bias;
    failures += s.version != s2.version || s.lr != s2.lr || s.momentum != s2.momentum || s.dampening != s2.dampening ||
                s.weight_decay != s2.weight_decay || s.nesterov != s2.nesterov;
    failures += w.version != w2.version || w.lr != w2.lr || w.beta1 != w2.beta1 || w.beta2 != w2.beta2 ||
                w.eps != w2.eps || w.weight_decay != w2.weight_decay;
    failures += c.version != c2.version || c.kind != c2.kind || c.warmup_steps != c2.warmup_steps ||
                c.total_steps != c2.total_steps || c.min_lr_ratio != c2.min_lr_ratio;
    failures += d.version != d2.version || d.batch_size != d2.batch_size || d.shuffle != d2.shuffle ||
                d.seed != d2.seed || d.drop_last != d2.drop_last ||
                d.even_batches != d2.even_batches || d.split_batches != d2.split_batches;
    failures += so.version != so2.version || so.world_size != so2.world_size || so.device_memory != so2.device_memory ||
                strcmp(so.topology, so2.topology) != 0 || so.timeout_seconds != so2.timeout_seconds ||
                so.faults != so2.faults || so.trace_path != so2.trace_path || so.engine_threads != so2.engine_threads;
    if (failures) fprintf(stderr, "%d mismatches between the _INIT macros and the _init functions\n", failures);
    else printf("accel %s: header compiles as C99; option macros match the library\n", accel_version_string());
    return failures != 0;
}
