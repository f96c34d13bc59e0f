"""The C declarations of accel.h for cffi's ABI mode, and how libaccel is found and loaded.

CDEF is a hand-maintained copy of include/accel/accel.h (comments dropped, the
ACCEL_API markers removed, macros that are not plain integers left out).
tests/test_abi_layout.py compares every struct's size and field offsets and every enum
constant with the table printed by the C program abi_layout_probe, so it cannot drift.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
from typing import Any, Callable, List, Mapping, Optional, Tuple

from cffi import FFI  # type: ignore[import-untyped,unused-ignore]  # types-cffi is optional

#: The major version of the C ABI this binding was written for.
BINDING_MAJOR = 0

CDEF = r"""
#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 1
#define ACCEL_VERSION_PATCH 0
int accel_version_number(void);
const char *accel_version_string(void);
typedef enum accel_status {
    ACCEL_OK = 0,
    ACCEL_ERR_INVALID_ARGUMENT = -1,
    ACCEL_ERR_INVALID_STATE = -2,
    ACCEL_ERR_OUT_OF_MEMORY = -3,
    ACCEL_ERR_COMMUNICATION = -4,
    ACCEL_ERR_TIMEOUT = -5,
    ACCEL_ERR_IO = -6,
    ACCEL_ERR_FORMAT = -7,
    ACCEL_ERR_UNSUPPORTED = -8,
    ACCEL_ERR_INTERNAL = -9,
    ACCEL_ERR_NON_FINITE = -10
} accel_status;
const char *accel_status_name(accel_status status);
typedef struct accel_context accel_context;
const char *accel_last_error(const accel_context *ctx);
typedef enum accel_dtype {
    ACCEL_FLOAT32 = 0,
    ACCEL_FLOAT16 = 1,
    ACCEL_BFLOAT16 = 2,
    ACCEL_INT64 = 3,
    ACCEL_INT32 = 4,
    ACCEL_UINT8 = 5,
    ACCEL_FLOAT64 = 6,
    ACCEL_INT8 = 7
} accel_dtype;
typedef struct accel_tensor accel_tensor;
size_t accel_dtype_size(accel_dtype dtype);
accel_status accel_tensor_create(accel_dtype dtype, const int64_t *shape, size_t ndim, const void *data, accel_tensor **out);
void accel_tensor_destroy(accel_tensor *tensor);
accel_status accel_tensor_copy_to_host(const accel_tensor *tensor, void *dst, size_t dst_bytes);
accel_status accel_tensor_copy_to_host_as(const accel_tensor *tensor, accel_dtype dtype, void *dst, size_t dst_bytes);
accel_status accel_tensor_item(const accel_tensor *tensor, double *out);
accel_status accel_tensor_dtype(const accel_tensor *tensor, accel_dtype *out);
accel_status accel_tensor_ndim(const accel_tensor *tensor, size_t *out);
accel_status accel_tensor_shape(const accel_tensor *tensor, int64_t *out, size_t capacity);
accel_status accel_tensor_numel(const accel_tensor *tensor, int64_t *out);
accel_status accel_tensor_nbytes(const accel_tensor *tensor, size_t *out);
typedef enum accel_precision {
    ACCEL_PRECISION_NO = 0,
    ACCEL_PRECISION_BF16 = 1,
    ACCEL_PRECISION_FP16 = 2,
    ACCEL_PRECISION_AUTO = 3
} accel_precision;
typedef enum accel_device {
    ACCEL_DEVICE_AUTO = 0,
    ACCEL_DEVICE_CPU = 1,
    ACCEL_DEVICE_CUDA = 2
} accel_device;
typedef enum accel_strategy {
    ACCEL_STRATEGY_NO = 0,
    ACCEL_STRATEGY_DDP = 1,
    ACCEL_STRATEGY_ZERO1 = 2,
    ACCEL_STRATEGY_ZERO2 = 3,
    ACCEL_STRATEGY_ZERO3 = 4,
    ACCEL_STRATEGY_SHARD_GRAD_OP = ACCEL_STRATEGY_ZERO2,
    ACCEL_STRATEGY_FULL_SHARD = ACCEL_STRATEGY_ZERO3
} accel_strategy;
typedef enum accel_backend {
    ACCEL_BACKEND_AUTO = 0,
    ACCEL_BACKEND_GLOO = 1,
    ACCEL_BACKEND_NCCL = 2,
    ACCEL_BACKEND_SIM = 3
} accel_backend;
typedef enum accel_offload {
    ACCEL_OFFLOAD_NONE = 0,
    ACCEL_OFFLOAD_OPTIMIZER = 1,
    ACCEL_OFFLOAD_PARAMETERS = 2
} accel_offload;
#define ACCEL_OPTIONS_VERSION 4
typedef struct accel_options {
    uint32_t version;
    accel_precision mixed_precision;
    int32_t gradient_accumulation_steps;
    uint64_t seed;
    accel_device device;
    int32_t device_index;
    double loss_scale_init;
    double loss_scale_growth_factor;
    double loss_scale_backoff_factor;
    int32_t loss_scale_growth_interval;
    int32_t num_threads;
    accel_strategy strategy;
    int64_t bucket_bytes;
    accel_backend backend;
    double timeout_seconds;
    accel_offload offload;
} accel_options;
accel_status accel_options_init(accel_options *opts, uint32_t version);
accel_status accel_init(const accel_options *opts, accel_context **out);
void accel_destroy(accel_context *ctx);
accel_status accel_device_kind(const accel_context *ctx, accel_device *out);
accel_status accel_mixed_precision(const accel_context *ctx, accel_precision *out);
typedef struct accel_model accel_model;
typedef enum accel_activation {
    ACCEL_ACT_RELU = 0,
    ACCEL_ACT_GELU = 1,
    ACCEL_ACT_TANH = 2,
    ACCEL_ACT_SIGMOID = 3
} accel_activation;
#define ACCEL_MLP_OPTIONS_VERSION 1
typedef struct accel_mlp_options {
    uint32_t version;
    const int64_t *layer_sizes;
    size_t num_layer_sizes;
    accel_activation activation;
    double dropout;
    int32_t bias;
} accel_mlp_options;
accel_status accel_mlp_options_init(accel_mlp_options *opts, uint32_t version);
accel_status accel_model_create_mlp(accel_context *ctx, const accel_mlp_options *opts, accel_model **out);
accel_status accel_model_load_torchscript(accel_context *ctx, const char *path, accel_model **out);
void accel_model_destroy(accel_model *model);
accel_status accel_model_forward(accel_context *ctx, accel_model *model, accel_tensor *const *inputs, size_t num_inputs, accel_tensor **out);
accel_status accel_model_set_training(accel_context *ctx, accel_model *model, int training);
accel_status accel_model_num_parameters(const accel_model *model, size_t *out_tensors, int64_t *out_elements);
accel_status accel_model_parameter_name(const accel_model *model, size_t index, const char **out);
accel_status accel_model_parameter(accel_context *ctx, const accel_model *model, size_t index, accel_tensor **out);
accel_status accel_model_parameter_grad(accel_context *ctx, const accel_model *model, size_t index, accel_tensor **out);
accel_status accel_save_model(accel_context *ctx, const accel_model *model, const char *path);
accel_status accel_loss_cross_entropy(accel_context *ctx, const accel_tensor *logits, const accel_tensor *targets, accel_tensor **out);
accel_status accel_loss_mse(accel_context *ctx, const accel_tensor *input, const accel_tensor *target, accel_tensor **out);
typedef struct accel_optimizer accel_optimizer;
typedef struct accel_scheduler accel_scheduler;
#define ACCEL_SGD_OPTIONS_VERSION 1
typedef struct accel_sgd_options {
    uint32_t version;
    double lr;
    double momentum;
    double dampening;
    double weight_decay;
    int32_t nesterov;
} accel_sgd_options;
accel_status accel_sgd_options_init(accel_sgd_options *opts, uint32_t version);
#define ACCEL_ADAMW_OPTIONS_VERSION 1
typedef struct accel_adamw_options {
    uint32_t version;
    double lr;
    double beta1;
    double beta2;
    double eps;
    double weight_decay;
} accel_adamw_options;
accel_status accel_adamw_options_init(accel_adamw_options *opts, uint32_t version);
accel_status accel_optimizer_create_sgd(accel_context *ctx, accel_model *model, const accel_sgd_options *opts, accel_optimizer **out);
accel_status accel_optimizer_create_adamw(accel_context *ctx, accel_model *model, const accel_adamw_options *opts, accel_optimizer **out);
#define ACCEL_LAMB_OPTIONS_VERSION 1
typedef struct accel_lamb_options {
    uint32_t version;
    double lr;
    double beta1;
    double beta2;
    double eps;
    double weight_decay;
} accel_lamb_options;
accel_status accel_lamb_options_init(accel_lamb_options *opts, uint32_t version);
accel_status accel_optimizer_create_lamb(accel_context *ctx, accel_model *model, const accel_lamb_options *opts, accel_optimizer **out);
void accel_optimizer_destroy(accel_optimizer *optimizer);
accel_status accel_optimizer_lr(const accel_optimizer *optimizer, double *out);
typedef enum accel_schedule {
    ACCEL_SCHEDULE_CONSTANT = 0,
    ACCEL_SCHEDULE_LINEAR = 1,
    ACCEL_SCHEDULE_COSINE = 2
} accel_schedule;
#define ACCEL_SCHEDULER_OPTIONS_VERSION 1
typedef struct accel_scheduler_options {
    uint32_t version;
    accel_schedule kind;
    int64_t warmup_steps;
    int64_t total_steps;
    double min_lr_ratio;
} accel_scheduler_options;
accel_status accel_scheduler_options_init(accel_scheduler_options *opts, uint32_t version);
accel_status accel_scheduler_create(accel_context *ctx, accel_optimizer *optimizer, const accel_scheduler_options *opts, accel_scheduler **out);
void accel_scheduler_destroy(accel_scheduler *scheduler);
accel_status accel_scheduler_steps(const accel_scheduler *scheduler, int64_t *out);
typedef struct accel_dataloader accel_dataloader;
#define ACCEL_DATALOADER_OPTIONS_VERSION 3
typedef struct accel_dataloader_options {
    uint32_t version;
    int64_t batch_size;
    int32_t shuffle;
    uint64_t seed;
    int32_t drop_last;
    int32_t even_batches;
    int32_t split_batches;
    int32_t iterable;
} accel_dataloader_options;
accel_status accel_dataloader_options_init(accel_dataloader_options *opts, uint32_t version);
accel_status accel_dataloader_create(accel_context *ctx, const accel_tensor *inputs, const accel_tensor *targets, const accel_dataloader_options *opts, accel_dataloader **out);
void accel_dataloader_destroy(accel_dataloader *loader);
accel_status accel_dataloader_next(accel_context *ctx, accel_dataloader *loader, accel_tensor **out_inputs, accel_tensor **out_targets);
accel_status accel_dataloader_epoch(const accel_dataloader *loader, int64_t *out);
accel_status accel_dataloader_num_batches(const accel_dataloader *loader, int64_t *out);
accel_status accel_dataloader_set_epoch(accel_dataloader *loader, int64_t epoch);
accel_status accel_prepare(accel_context *ctx, accel_model *model, accel_optimizer *optimizer, accel_scheduler *scheduler, accel_dataloader *loader);
accel_status accel_backward(accel_context *ctx, const accel_tensor *loss);
accel_status accel_sync_gradients(const accel_context *ctx, int *out);
accel_status accel_clip_grad_norm(accel_context *ctx, double max_norm, double *out);
typedef struct accel_step_result {
    int32_t stepped;
    int32_t skipped;
    int32_t sync_step;
    double loss_scale;
    int64_t optimizer_steps;
    int64_t micro_steps;
} accel_step_result;
accel_status accel_step(accel_context *ctx, accel_step_result *out);
accel_status accel_loss_scale(const accel_context *ctx, double *out);
accel_status accel_process_index(const accel_context *ctx, int32_t *out);
accel_status accel_num_processes(const accel_context *ctx, int32_t *out);
accel_status accel_barrier(accel_context *ctx);
typedef enum accel_reduce_op {
    ACCEL_REDUCE_SUM = 0,
    ACCEL_REDUCE_MEAN = 1,
    ACCEL_REDUCE_MAX = 2,
    ACCEL_REDUCE_MIN = 3,
    ACCEL_REDUCE_PROD = 4
} accel_reduce_op;
accel_status accel_reduce(accel_context *ctx, const accel_tensor *tensor, accel_reduce_op op, accel_tensor **out);
accel_status accel_local_process_index(const accel_context *ctx, int32_t *out);
accel_status accel_is_main_process(const accel_context *ctx, int *out);
accel_status accel_is_local_main_process(const accel_context *ctx, int *out);
accel_status accel_broadcast(accel_context *ctx, const accel_tensor *tensor, int32_t root, accel_tensor **out);
accel_status accel_gather(accel_context *ctx, const accel_tensor *tensor, accel_tensor **out);
accel_status accel_gather_for_metrics(accel_context *ctx, const accel_tensor *tensor, accel_tensor **out);
accel_status accel_pad_across_processes(accel_context *ctx, const accel_tensor *tensor, int32_t dim, double pad_value, int pad_first, accel_tensor **out);
accel_status accel_print(accel_context *ctx, const char *message);
accel_status accel_set_seed(accel_context *ctx, uint64_t seed, int per_process);
#define ACCEL_SIM_OPTIONS_VERSION 2
typedef struct accel_sim_options {
    uint32_t version;
    int32_t world_size;
    const char *device_memory;
    const char *topology;
    double timeout_seconds;
    const char *faults;
    const char *trace_path;
    int32_t engine_threads;
    const char *host_memory;
} accel_sim_options;
accel_status accel_sim_options_init(accel_sim_options *opts, uint32_t version);
typedef accel_status (*accel_rank_fn)(accel_context *ctx, void *user);
typedef struct accel_sim_report accel_sim_report;
accel_status accel_sim_run(const accel_sim_options *sim, const accel_options *ctx_opts, accel_rank_fn fn, void *user, accel_sim_report **out);
void accel_sim_report_destroy(accel_sim_report *report);
accel_status accel_sim_report_world_size(const accel_sim_report *report, int32_t *out);
accel_status accel_sim_report_rank(const accel_sim_report *report, int32_t rank, accel_status *out_status, const char **out_error, uint64_t *out_peak_bytes);
accel_status accel_sim_report_predicted_seconds(const accel_sim_report *report, double *out);
accel_status accel_sim_report_rank_host(const accel_sim_report *report, int32_t rank, uint64_t *out_host_peak_bytes, uint64_t *out_transfer_bytes, double *out_transfer_seconds);
accel_status accel_sim_charge_compute(accel_context *ctx, double seconds, const char *label);
#define ACCEL_PROJECT_OPTIONS_VERSION 1
typedef struct accel_project_options {
    uint32_t version;
    const char *project_dir;
    int32_t total_limit;
} accel_project_options;
accel_status accel_project_options_init(accel_project_options *opts, uint32_t version);
accel_status accel_set_project(accel_context *ctx, const accel_project_options *opts);
accel_status accel_save_state(accel_context *ctx, const char *dir);
accel_status accel_load_state(accel_context *ctx, const char *dir);
accel_status accel_last_checkpoint(const accel_context *ctx, const char **out);
typedef enum accel_quantization {
    ACCEL_QUANT_NONE = 0,
    ACCEL_QUANT_NF4 = 1,
    ACCEL_QUANT_FP4 = 2,
    ACCEL_QUANT_INT8 = 3
} accel_quantization;
#define ACCEL_LM_OPTIONS_VERSION 2
typedef struct accel_lm_options {
    uint32_t version;
    accel_dtype dtype;
    int32_t gradient_checkpointing;
    accel_quantization quantization;
    int32_t double_quant;
} accel_lm_options;
accel_status accel_lm_options_init(accel_lm_options *opts, uint32_t version);
accel_status accel_model_load_pretrained(accel_context *ctx, const char *dir, const accel_lm_options *opts, accel_model **out);
accel_status accel_model_create_lm(accel_context *ctx, const char *config, const accel_lm_options *opts, accel_model **out);
accel_status accel_save_pretrained(accel_context *ctx, const accel_model *model, const char *dir);
accel_status accel_lm_forward(accel_context *ctx, accel_model *model, const accel_tensor *input_ids, const accel_tensor *attention_mask, const accel_tensor *labels, accel_tensor **out_logits, accel_tensor **out_loss, int64_t *out_tokens);
#define ACCEL_ADAFACTOR_OPTIONS_VERSION 1
typedef struct accel_adafactor_options {
    uint32_t version;
    double lr;
    double eps1;
    double eps2;
    double clip_threshold;
    double decay_rate;
    double beta1;
    double weight_decay;
    int32_t scale_parameter;
    int32_t relative_step;
    int32_t warmup_init;
} accel_adafactor_options;
accel_status accel_adafactor_options_init(accel_adafactor_options *opts, uint32_t version);
accel_status accel_optimizer_create_adafactor(accel_context *ctx, accel_model *model, const accel_adafactor_options *opts, accel_optimizer **out);
#define ACCEL_GENERATE_OPTIONS_VERSION 1
typedef struct accel_generate_options {
    uint32_t version;
    int64_t max_new_tokens;
    double temperature;
    int64_t top_k;
    int64_t eos_token_id;
    uint64_t seed;
    int32_t use_cache;
} accel_generate_options;
accel_status accel_generate_options_init(accel_generate_options *opts, uint32_t version);
accel_status accel_lm_generate(accel_context *ctx, accel_model *model, const accel_tensor *input_ids, const accel_generate_options *opts, accel_tensor **out);
#define ACCEL_LORA_OPTIONS_VERSION 1
typedef struct accel_lora_options {
    uint32_t version;
    int32_t r;
    double alpha;
    double dropout;
    const char *target_modules;
    int32_t use_rslora;
} accel_lora_options;
accel_status accel_lora_options_init(accel_lora_options *opts, uint32_t version);
accel_status accel_model_add_lora(accel_context *ctx, accel_model *model, const accel_lora_options *opts);
accel_status accel_model_load_adapter(accel_context *ctx, accel_model *model, const char *dir);
accel_status accel_save_adapter(accel_context *ctx, const accel_model *model, const char *dir);
accel_status accel_token_file_write(const char *path, const accel_tensor *tokens, int32_t token_bytes);
accel_status accel_token_file_read(const char *path, accel_tensor **out);
#define ACCEL_LM_DATA_OPTIONS_VERSION 2
typedef struct accel_lm_data_options {
    uint32_t version;
    int64_t block_size;
    int64_t max_length;
    int64_t pad_id;
    int64_t pad_to_multiple_of;
    int32_t group_by_length;
    int32_t padding_side;
} accel_lm_data_options;
accel_status accel_lm_data_options_init(accel_lm_data_options *opts, uint32_t version);
accel_status accel_lm_dataloader_create(accel_context *ctx, const accel_tensor *tokens, const accel_tensor *offsets, const accel_lm_data_options *lm_opts, const accel_dataloader_options *loader_opts, accel_dataloader **out);
typedef enum accel_optimizer_kind {
    ACCEL_OPTIMIZER_SGD = 0,
    ACCEL_OPTIMIZER_SGD_MOMENTUM = 1,
    ACCEL_OPTIMIZER_ADAMW = 2,
    ACCEL_OPTIMIZER_ADAFACTOR = 3,
    ACCEL_OPTIMIZER_LAMB = 4
} accel_optimizer_kind;
#define ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION 2
typedef struct accel_memory_estimate_options {
    uint32_t version;
    accel_precision mixed_precision;
    accel_dtype weights_dtype;
    accel_optimizer_kind optimizer;
    accel_strategy strategy;
    int32_t world_size;
    int64_t micro_batch;
    int64_t seq_len;
    int32_t gradient_checkpointing;
    int32_t lora_rank;
    const char *lora_target_modules;
    int32_t attention;
    accel_offload offload;
    accel_quantization quantization;
    int32_t double_quant;
} accel_memory_estimate_options;
accel_status accel_memory_estimate_options_init(accel_memory_estimate_options *opts, uint32_t version);
#define ACCEL_MEMORY_ESTIMATE_VERSION 3
typedef struct accel_memory_estimate {
    uint32_t version;
    int64_t parameters;
    int64_t trainable_parameters;
    int64_t seq_len;
    int32_t attention;
    uint64_t weights;
    uint64_t gradients;
    uint64_t optimizer_state;
    uint64_t activations;
    uint64_t temporaries;
    uint64_t total;
    uint64_t host;
    uint64_t transfer_bytes;
    uint64_t gradient_transfer_bytes;
} accel_memory_estimate;
accel_status accel_estimate_memory(const char *model, const accel_memory_estimate_options *opts, accel_memory_estimate *out);
typedef enum accel_log_writer {
    ACCEL_LOG_JSONL = 1,
    ACCEL_LOG_CSV = 2,
    ACCEL_LOG_TENSORBOARD = 4
} accel_log_writer;
#define ACCEL_TRACKER_OPTIONS_VERSION 1
typedef struct accel_tracker_options {
    uint32_t version;
    const char *log_dir;
    uint32_t writers;
    int32_t all_processes;
} accel_tracker_options;
accel_status accel_tracker_options_init(accel_tracker_options *opts, uint32_t version);
accel_status accel_init_trackers(accel_context *ctx, const accel_tracker_options *opts);
accel_status accel_log(accel_context *ctx, int64_t step, const char *const *names, const double *values, int32_t count);
accel_status accel_end_training(accel_context *ctx);
typedef struct accel_inference accel_inference;
#define ACCEL_INFERENCE_OPTIONS_VERSION 1
typedef struct accel_inference_options {
    uint32_t version;
    int32_t num_threads;
} accel_inference_options;
accel_status accel_inference_options_init(accel_inference_options *opts, uint32_t version);
accel_status accel_inference_create(accel_context *ctx, const accel_model *model, const accel_inference_options *opts, accel_inference **out);
void accel_inference_destroy(accel_inference *inference);
accel_status accel_publish_weights(accel_context *ctx, const accel_model *model, uint64_t *out);
accel_status accel_inference_run(accel_inference *inference, accel_tensor *const *inputs, size_t num_inputs, accel_tensor **out);
accel_status accel_inference_weights(const accel_inference *inference, uint64_t *out_version, double *out_age_seconds);
typedef enum accel_loss {
    ACCEL_LOSS_MSE = 0,
    ACCEL_LOSS_CROSS_ENTROPY = 1,
    ACCEL_LOSS_CAUSAL_LM = 2
} accel_loss;
#define ACCEL_TRAIN_RESULT_VERSION 1
typedef struct accel_train_result {
    uint32_t version;
    int32_t micro_batches;
    int32_t optimizer_steps;
    int32_t skipped_steps;
    int32_t epoch_ended;
    double mean_loss;
    double seconds;
} accel_train_result;
accel_status accel_train_micro_batches(accel_context *ctx, accel_model *model, accel_dataloader *loader, accel_loss loss, int32_t max_micro_batches, double max_seconds, accel_train_result *out);
typedef struct accel_tokenizer accel_tokenizer;
accel_status accel_tokenizer_load(const char *path, accel_tokenizer **out);
void accel_tokenizer_destroy(accel_tokenizer *tokenizer);
accel_status accel_tokenizer_vocab_size(const accel_tokenizer *tokenizer, int64_t *out);
typedef enum accel_special_token {
    ACCEL_TOKEN_BOS = 0,
    ACCEL_TOKEN_EOS = 1,
    ACCEL_TOKEN_PAD = 2,
    ACCEL_TOKEN_UNK = 3
} accel_special_token;
accel_status accel_tokenizer_special_id(const accel_tokenizer *tokenizer, accel_special_token which, int64_t *out);
accel_status accel_tokenizer_token_to_id(const accel_tokenizer *tokenizer, const char *token, int64_t *out);
accel_status accel_tokenizer_id_to_token(const accel_tokenizer *tokenizer, int64_t id, const char **out, int *out_special);
typedef enum accel_side {
    ACCEL_SIDE_RIGHT = 0,
    ACCEL_SIDE_LEFT = 1
} accel_side;
#define ACCEL_ENCODE_OPTIONS_VERSION 1
typedef struct accel_encode_options {
    uint32_t version;
    int32_t add_special_tokens;
    int32_t replace_invalid_utf8;
    int64_t max_length;
    accel_side truncation_side;
    accel_side padding_side;
    int32_t pad_to_max_length;
    int64_t pad_to_multiple_of;
    int64_t pad_id;
} accel_encode_options;
accel_status accel_encode_options_init(accel_encode_options *opts, uint32_t version);
accel_status accel_tokenizer_encode(const accel_tokenizer *tokenizer, const char *text, size_t length, const accel_encode_options *opts, accel_tensor **out);
accel_status accel_tokenizer_encode_batch(const accel_tokenizer *tokenizer, const char *const *texts, const size_t *lengths, size_t count, const accel_encode_options *opts, accel_tensor **out_ids, accel_tensor **out_mask);
accel_status accel_tokenizer_decode(const accel_tokenizer *tokenizer, const int64_t *ids, size_t count, int skip_special_tokens, char *buf, size_t capacity, size_t *out_length);
typedef enum accel_chat_format {
    ACCEL_CHAT_AUTO = 0,
    ACCEL_CHAT_CHATML = 1,
    ACCEL_CHAT_LLAMA3 = 2,
    ACCEL_CHAT_GEMMA = 3,
    ACCEL_CHAT_PHI3 = 4,
    ACCEL_CHAT_MISTRAL = 5
} accel_chat_format;
typedef struct accel_chat_message {
    const char *role;
    const char *content;
} accel_chat_message;
accel_status accel_tokenizer_apply_chat(const accel_tokenizer *tokenizer, accel_chat_format format, const accel_chat_message *messages, size_t count, int add_generation_prompt, char *buf, size_t capacity, size_t *out_length);
#define ACCEL_SFT_OPTIONS_VERSION 1
typedef struct accel_sft_options {
    uint32_t version;
    accel_chat_format chat_format;
    int32_t completion_only_loss;
    int32_t add_eos;
    int64_t max_length;
    int32_t packing;
    accel_side padding_side;
    int64_t pad_to_multiple_of;
    int64_t pad_id;
} accel_sft_options;
accel_status accel_sft_options_init(accel_sft_options *opts, uint32_t version);
accel_status accel_sft_dataloader_create(accel_context *ctx, const accel_tokenizer *tokenizer, const char *path, const accel_sft_options *sft_opts, const accel_dataloader_options *loader_opts, accel_dataloader **out);
accel_status accel_dataloader_attention_mask(accel_context *ctx, const accel_dataloader *loader, accel_tensor **out);
accel_status accel_lm_generate_padded(accel_context *ctx, accel_model *model, const accel_tensor *input_ids, const accel_tensor *attention_mask, const accel_generate_options *opts, accel_tensor **out);
"""

# Any: the cdata cffi makes has the fields and functions of CDEF, which no stub can describe
ffi: Any = FFI()
ffi.cdef(CDEF)


class LibraryNotFoundError(ImportError):
    """libaccel could not be found or loaded; the message lists what was tried."""


class LibraryVersionError(ImportError):
    """The libaccel that was loaded has a major version this binding does not support."""


def check_version(number: int, binding_major: int = BINDING_MAJOR) -> None:
    """Raises LibraryVersionError unless `number` (accel_version_number()) has the binding's major."""
    major, minor, patch = number // 10000, number // 100 % 100, number % 100
    if major != binding_major:
        raise LibraryVersionError(
            f"libaccel {major}.{minor}.{patch} is loaded, this binding was written for {binding_major}.x: "
            f"install a libaccel {binding_major}.x (and point ACCEL_LIBRARY at it) or a version of this "
            f"binding made for {major}.x"
        )


def _pkg_config_libdir(env: Mapping[str, str]) -> Tuple[Optional[str], str]:
    exe = shutil.which("pkg-config", path=env.get("PATH"))
    if exe is None:
        return None, "pkg-config: not installed"
    try:
        proc = subprocess.run([exe, "--variable=libdir", "accel"], capture_output=True, text=True,
                              timeout=10, env=dict(env))
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"pkg-config --variable=libdir accel: {exc}"
    if proc.returncode != 0 or not proc.stdout.strip():
        why = proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else "no accel.pc on PKG_CONFIG_PATH"
        return None, f"pkg-config --variable=libdir accel: {why}"
    libdir = proc.stdout.strip()
    if not os.path.exists(os.path.join(libdir, "libaccel.so")):
        # meson's accel-uninstalled.pc (a build directory, PKG_CONFIG_PATH=BUILD/meson-uninstalled)
        # names the install's libdir; the library is in the -L directory of its Libs
        try:
            libs = subprocess.run([exe, "--libs-only-L", "accel"], capture_output=True, text=True, timeout=10,
                                  env=dict(env)).stdout.split()
        except (OSError, subprocess.SubprocessError):
            libs = []
        for flag in libs:
            if flag.startswith("-L") and os.path.exists(os.path.join(flag[2:], "libaccel.so")):
                return flag[2:], ""
    return libdir, ""


def candidates(env: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str]]:
    """The places to try, in order, as (how it was found, path or name to dlopen).

    An ACCEL_LIBRARY that is set is the only candidate (a wrong path is an error, not a reason
    to load some other libaccel)."""
    env = os.environ if env is None else env
    explicit = env.get("ACCEL_LIBRARY")
    if explicit:
        return [("ACCEL_LIBRARY", explicit)]
    out: List[Tuple[str, str]] = []
    libdir, why = _pkg_config_libdir(env)
    if libdir:
        out.append(("pkg-config", os.path.join(libdir, "libaccel.so")))
    else:
        out.append(("pkg-config", "(" + why + ")"))
    found = ctypes.util.find_library("accel")
    if found:
        out.append(("ctypes.util.find_library('accel')", found))
    out.append(("system loader", "libaccel.so.0"))
    return out


def load(env: Optional[Mapping[str, str]] = None,
         dlopen: Optional[Callable[[str], Any]] = None) -> Any:
    """Finds, opens and version-checks libaccel; raises LibraryNotFoundError listing what was tried."""
    opener = dlopen if dlopen is not None else ffi.dlopen
    tried: List[str] = []
    for how, what in candidates(env):
        if what.startswith("("):
            tried.append(f"{how}: {what[1:-1]}")
            continue
        try:
            lib = opener(what)
        except OSError as exc:
            tried.append(f"{how}: {what}: {exc}")
            continue
        check_version(int(lib.accel_version_number()))
        return lib
    raise LibraryNotFoundError(
        "libaccel was not found. Tried:\n  " + "\n  ".join(tried) + "\n"
        "Fix: set ACCEL_LIBRARY to the path of libaccel.so (e.g. ACCEL_LIBRARY=/opt/accel/lib/libaccel.so), "
        "or add the directory holding accel.pc to PKG_CONFIG_PATH, or install libaccel where the system "
        "loader finds it (ldconfig, LD_LIBRARY_PATH)."
    )
