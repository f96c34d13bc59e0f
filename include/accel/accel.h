/*
 * accel.h - the C ABI of accel, an embeddable training runtime.
 *
 * This is the only public header. It is C99 and hand-written; everything else in
 * the project is an implementation detail.
 *
 * Conventions (they hold for every function below unless its comment says otherwise):
 *
 * - Names: functions and types are prefixed `accel_`, macros and constants `ACCEL_`.
 *   Objects are opaque handles created by `accel_*_create`/`accel_*_load` and released by
 *   the matching `accel_*_destroy`, which accepts NULL.
 *
 * - Errors: every fallible function returns an `accel_status`; ACCEL_OK (0) is success and
 *   every error is negative. New codes may be added in later versions: treat any non-zero
 *   value you do not know as an error. When a call fails, its out-parameters are left
 *   untouched and no object is half-modified ("nothing lost on failure").
 *   The message of the last error is kept per context and read with
 *   accel_last_error(ctx); functions that take no context record their message in a
 *   thread-local slot read with accel_last_error(NULL). Functions that take a context
 *   record their message in both places. No C++ exception ever crosses this boundary.
 *
 * - Errors every function shares (docs/errors.md lists every status with an example):
 *   every message starts with the function's name ("accel_backward: ...") and names the
 *   argument or field at fault with its value and its domain ("weight_decay must be
 *   finite and >= 0, got inf"). A required pointer that is NULL, an options struct of an
 *   unknown version, an enum value the type does not define, or a handle that belongs to
 *   another context is ACCEL_ERR_INVALID_ARGUMENT. A number outside the domain documented
 *   at its argument or field is ACCEL_ERR_INVALID_ARGUMENT; "finite" means NaN and +-inf
 *   are refused. A call in the wrong order (before accel_prepare, twice where once is
 *   allowed) is ACCEL_ERR_INVALID_STATE. A host allocation, thread or file descriptor
 *   that cannot be had is ACCEL_ERR_OUT_OF_MEMORY, naming what ran out. No input aborts
 *   the process.
 *
 * - Outputs: out-parameters come last; a single output is named `out`.
 *
 * - Options: option structs start with a `version` field. Fill them with the
 *   ACCEL_*_OPTIONS_INIT macro or the accel_*_options_init() function, then change the
 *   fields you need. The library rejects a version it does not know with
 *   ACCEL_ERR_INVALID_ARGUMENT. New fields are only ever appended (with a new version),
 *   and the library accepts every version it published: a program built against an
 *   older header passes its older, shorter struct, of which the library reads (and
 *   accel_*_options_init writes) only that version's bytes; the fields the version lacks
 *   take their defaults (docs/api.md, "Versioning").
 *
 * - Ownership: a handle returned through an out-parameter belongs to the caller, who
 *   destroys it. Tensors passed in are copied unless the function says it borrows them.
 *   Strings returned as `const char *` belong to the library and stay valid as stated.
 *
 * - Threads: a context, and every object created from it, is used by one thread at a
 *   time. Distinct contexts are independent and may be used from different threads.
 *   Tensors are independent objects; a tensor may be read from several threads at once
 *   but not destroyed while another thread uses it.
 *
 * - Evolution: the ABI only grows. Functions are never removed or changed; struct fields
 *   are only appended behind a new version number.
 */
#ifndef ACCEL_ACCEL_H
#define ACCEL_ACCEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ACCEL_API __declspec(dllexport)
#elif defined(__GNUC__)
#define ACCEL_API __attribute__((visibility("default")))
#else
#define ACCEL_API
#endif

/* ------------------------------------------------------------------------------------
 * Versions
 * ---------------------------------------------------------------------------------- */

#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 1
#define ACCEL_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define ACCEL_VERSION_NUMBER (ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH)
#define ACCEL_VERSION_STRING "0.1.0"

/* The version of the library loaded at run time, as ACCEL_VERSION_NUMBER. Bindings compare
 * it with the header they were built against. Never fails. */
ACCEL_API int accel_version_number(void);

/* The version of the library loaded at run time, as "MAJOR.MINOR.PATCH". Static string. */
ACCEL_API const char *accel_version_string(void);

/* ------------------------------------------------------------------------------------
 * Status codes and errors
 * ---------------------------------------------------------------------------------- */

typedef enum accel_status {
    ACCEL_OK = 0,
    ACCEL_ERR_INVALID_ARGUMENT = -1, /* a NULL handle, a bad value, a shape or dtype mismatch */
    ACCEL_ERR_INVALID_STATE = -2,    /* a call at the wrong time, e.g. accel_step before accel_prepare */
    ACCEL_ERR_OUT_OF_MEMORY = -3,    /* host or device allocation failed */
    ACCEL_ERR_COMMUNICATION = -4,    /* a collective or a peer failed */
    ACCEL_ERR_TIMEOUT = -5,          /* an operation did not complete in time */
    ACCEL_ERR_IO = -6,               /* a file is missing, unreadable or unwritable */
    ACCEL_ERR_FORMAT = -7,           /* a file or value has the wrong format */
    ACCEL_ERR_UNSUPPORTED = -8,      /* the build or machine lacks a capability (e.g. no CUDA) */
    ACCEL_ERR_INTERNAL = -9,         /* a bug in accel or libtorch; the message says more */
    ACCEL_ERR_NON_FINITE = -10       /* a loss or value is NaN or infinite */
} accel_status;

/* A short, static, human-readable name for a status ("ACCEL_ERR_IO"); "ACCEL_ERR_UNKNOWN"
 * for codes this version does not know. Never fails. */
ACCEL_API const char *accel_status_name(accel_status status);

typedef struct accel_context accel_context;

/* The message of the last error recorded on `ctx`, or, with ctx == NULL, of the last
 * error recorded by a function called on this thread. "" when there is none.
 * The string belongs to the library and is valid until the next failing call on the same
 * context (or thread). */
ACCEL_API const char *accel_last_error(const accel_context *ctx);

/* ------------------------------------------------------------------------------------
 * Tensors
 * ---------------------------------------------------------------------------------- */

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

/* A tensor: a typed n-dimensional array that lives on the host or on a context's device.
 * Tensors created here live on the host; tensors returned by models, losses and loaders
 * live on the context's device. Independent of any context once created. */
typedef struct accel_tensor accel_tensor;

/* The size in bytes of one element of `dtype`, or 0 for an unknown dtype. Never fails. */
ACCEL_API size_t accel_dtype_size(accel_dtype dtype);

/* Creates a host tensor of `dtype` and shape shape[0..ndim) by copying
 * prod(shape) * accel_dtype_size(dtype) bytes from `data` (row-major, contiguous).
 * ndim in [0, 16] (0: a scalar, one element); every shape[i] >= 0.
 * `data` may be NULL only when the tensor has no elements. The caller keeps `data`.
 * On success *out is a new tensor owned by the caller.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT for a dtype that is no accel_dtype, ndim > 16, a
 * negative dimension, a shape whose byte size overflows ("shape: the product of the
 * dimensions overflows"), NULL data for a non-empty tensor; ACCEL_ERR_OUT_OF_MEMORY when
 * the host cannot allocate the tensor, and before allocating when it is larger than the
 * machine's RAM + swap or its cgroup's memory limit (where the kernel overcommits, such an
 * allocation succeeds and the copy meets the OOM killer). */
ACCEL_API accel_status accel_tensor_create(accel_dtype dtype, const int64_t *shape, size_t ndim,
                                           const void *data, accel_tensor **out);

/* Releases a tensor. NULL is accepted. */
ACCEL_API void accel_tensor_destroy(accel_tensor *tensor);

/* Copies the tensor's elements, row-major, into `dst`, which holds `dst_bytes` bytes.
 * dst_bytes must equal accel_tensor_nbytes(tensor), else ACCEL_ERR_INVALID_ARGUMENT.
 * Works for tensors on any device (they are copied to the host). */
ACCEL_API accel_status accel_tensor_copy_to_host(const accel_tensor *tensor, void *dst, size_t dst_bytes);

/* Like accel_tensor_copy_to_host, but converts the elements to `dtype` first (for example
 * bfloat16 logits read as float32). dst_bytes must equal numel * accel_dtype_size(dtype). */
ACCEL_API accel_status accel_tensor_copy_to_host_as(const accel_tensor *tensor, accel_dtype dtype, void *dst,
                                                    size_t dst_bytes);

/* The tensor's single element converted to double. ACCEL_ERR_INVALID_ARGUMENT unless the
 * tensor has exactly one element. */
ACCEL_API accel_status accel_tensor_item(const accel_tensor *tensor, double *out);

/* The tensor's dtype. */
ACCEL_API accel_status accel_tensor_dtype(const accel_tensor *tensor, accel_dtype *out);

/* The number of dimensions. */
ACCEL_API accel_status accel_tensor_ndim(const accel_tensor *tensor, size_t *out);

/* Writes the shape into out[0..capacity). ACCEL_ERR_INVALID_ARGUMENT when capacity is
 * smaller than the number of dimensions. */
ACCEL_API accel_status accel_tensor_shape(const accel_tensor *tensor, int64_t *out, size_t capacity);

/* The number of elements. */
ACCEL_API accel_status accel_tensor_numel(const accel_tensor *tensor, int64_t *out);

/* The number of bytes accel_tensor_copy_to_host writes: numel * dtype size. */
ACCEL_API accel_status accel_tensor_nbytes(const accel_tensor *tensor, size_t *out);

/* ------------------------------------------------------------------------------------
 * The context (the Accelerator)
 * ---------------------------------------------------------------------------------- */

typedef enum accel_precision {
    ACCEL_PRECISION_NO = 0,   /* fp32 everywhere */
    ACCEL_PRECISION_BF16 = 1, /* autocast to bfloat16, no loss scaling, fp32 master weights */
    ACCEL_PRECISION_FP16 = 2, /* float16 with dynamic loss scaling, fp32 master weights.
                                 On a CPU, float16 is emulated (see docs/precision.md). */
    ACCEL_PRECISION_AUTO = 3  /* bf16 where the context's device computes it natively (a CUDA
                                 GPU; a CPU with AVX-512 BF16 or AMX-BF16 that
                                 ONEDNN_MAX_CPU_ISA does not hold below them), else fp32
                                 (no), which process 0 says once on stderr: on other CPUs
                                 bf16 is several times slower than fp32.
                                 Resolved by accel_init; accel_estimate_memory refuses it. */
} accel_precision;

typedef enum accel_device {
    ACCEL_DEVICE_AUTO = 0, /* CUDA when this libtorch and machine have it (in a launched world:
                              a GPU for each process of the node), else the CPU; the CPU under
                              the simulator, whose GPUs are this machine's memory */
    ACCEL_DEVICE_CPU = 1,
    ACCEL_DEVICE_CUDA = 2
} accel_device;

typedef enum accel_strategy {
    ACCEL_STRATEGY_NO = 0, /* every process trains on its own (the default) */
    ACCEL_STRATEGY_DDP = 1, /* data parallel: weights from process 0 at prepare, gradients
                               averaged across processes in buckets during backward */
    /* ZeRO (docs/distributed.md): every process holds 1/N of the optimizer state (stage 1),
       also of the gradients (stage 2, reduce-scattered during backward), also of the
       parameters (stage 3, gathered before each layer's use and freed after). Under mixed
       precision the working weights are 16-bit and the fp32 master weights are sharded. */
    ACCEL_STRATEGY_ZERO1 = 2,
    ACCEL_STRATEGY_ZERO2 = 3,
    ACCEL_STRATEGY_ZERO3 = 4,
    ACCEL_STRATEGY_SHARD_GRAD_OP = ACCEL_STRATEGY_ZERO2, /* FSDP's names */
    ACCEL_STRATEGY_FULL_SHARD = ACCEL_STRATEGY_ZERO3
} accel_strategy;

/* How the processes of a launched world talk (docs/distributed.md, "Real processes"). */
typedef enum accel_backend {
    ACCEL_BACKEND_AUTO = 0, /* one process alone: none needed; a launched world of several:
                               NCCL for CUDA devices, Gloo for the CPU */
    ACCEL_BACKEND_GLOO = 1, /* libtorch's c10d Gloo over TCP (CPU tensors; others staged); the
                               processes of one machine move their collectives through shared
                               memory (ACCEL_GLOO_SHM=0: TCP for all; docs/distributed.md) */
    ACCEL_BACKEND_NCCL = 2, /* NCCL (CUDA devices): libnccl.so.2 and the CUDA runtime are loaded
                               when it is first used, in every build (ACCEL_NCCL_LIBRARY and
                               ACCEL_CUDART_LIBRARY name others); ACCEL_ERR_UNSUPPORTED,
                               naming the files tried, where they cannot be loaded */
    ACCEL_BACKEND_SIM = 3   /* simulated GPUs: each process one, the nccl backend on the simulated
                               NCCL library (libaccel-nccl-sim.so); `accel launch --backend sim`
                               sets it (docs/simulator.md, "Simulated processes") */
} accel_backend;

/* What lives in host memory instead of the device's (docs/memory.md, "Offload"). */
typedef enum accel_offload {
    ACCEL_OFFLOAD_NONE = 0,      /* everything on the device */
    ACCEL_OFFLOAD_OPTIMIZER = 1, /* ZeRO-Offload: the optimizer's state and the fp32 master
                                    weights live in host memory (pinned on CUDA); each step
                                    copies the gradients there, steps with the CPU kernels
                                    and copies the updated weights back in the model's dtype.
                                    The same arithmetic as without: the same weights, bit for
                                    bit, and the same checkpoints */
    ACCEL_OFFLOAD_PARAMETERS = 2 /* ZeRO-3 only (ACCEL_ERR_INVALID_ARGUMENT otherwise): the
                                    optimizer's, as above, and each rank's shard of the
                                    working weights in host memory too, copied to the device
                                    unit by unit for its all-gathers (forward and backward).
                                    In fp32 the shard is the master, in host memory with
                                    either value. The same weights, bit for bit */
} accel_offload;

#define ACCEL_OPTIONS_VERSION 4

typedef struct accel_options {
    uint32_t version;                    /* ACCEL_OPTIONS_VERSION */
    accel_precision mixed_precision;     /* default ACCEL_PRECISION_NO */
    int32_t gradient_accumulation_steps; /* K >= 1, default 1 */
    uint64_t seed;                       /* seeds the context's generator (MLP init, dropout) and
                                            libtorch's process-wide default one (used by
                                            TorchScript models); default 0 */
    accel_device device;                 /* default ACCEL_DEVICE_AUTO. A context on the CPU
                                            keeps memory freed by its steps in glibc's heap
                                            (process-wide, once: mmap threshold 32 MiB, trim
                                            threshold 256 MiB) unless ACCEL_MALLOC_TUNE=0 or the
                                            program set its own (GLIBC_TUNABLES, MALLOC_*_) */
    int32_t device_index;                /* CUDA device ordinal, >= 0, default 0 (a process of a
                                            launched world left at 0 takes its local rank's
                                            device, modulo the devices it sees) */
    /* Dynamic loss scaling (fp16 only). Defaults match Accelerate / torch.cuda.amp. */
    double loss_scale_init;              /* finite and > 0, default 65536 */
    double loss_scale_growth_factor;     /* finite and > 1, default 2 */
    double loss_scale_backoff_factor;    /* in (0, 1), default 0.5 */
    int32_t loss_scale_growth_interval;  /* >= 1, default 2000 real steps without overflow */
    int32_t num_threads;                 /* libtorch's intra-op threads and the BLAS's own
                                            (process-wide; OpenBLAS, BLIS), in [0, 4096];
                                            0 = leave as is (docs/performance.md) */
    /* version 2 */
    accel_strategy strategy;             /* how several processes share the work; default
                                            ACCEL_STRATEGY_NO, or the ACCEL_STRATEGY environment
                                            variable when left at the default: "no", "ddp",
                                            "zero1", "zero2", "zero3", "shard_grad_op",
                                            "full_shard" (any case) */
    int64_t bucket_bytes;                /* DDP gradient bucket size, and ZeRO's unit size for
                                            models that are not split in layers; >= 1,
                                            default 25 MiB */
    /* version 3: real processes (a program started by accel launch, torchrun, mpirun or srun
       joins its world in accel_init; docs/distributed.md, "Real processes") */
    accel_backend backend;               /* default ACCEL_BACKEND_AUTO, or the ACCEL_BACKEND
                                            environment variable when left at the default:
                                            "auto", "gloo", "nccl" (any case). Joining a Gloo
                                            world sets SIGPIPE to ignored when the program left
                                            it at its default, so a dead peer is
                                            ACCEL_ERR_COMMUNICATION, not this process's end */
    double timeout_seconds;              /* how long joining the world and each collective may
                                            wait for the other processes before failing with
                                            ACCEL_ERR_TIMEOUT; finite and >= 0; 0 (the default)
                                            = the ACCEL_TIMEOUT environment variable (seconds),
                                            else 300 */
    /* version 4: training in the memory a device has (docs/memory.md) */
    accel_offload offload;               /* default ACCEL_OFFLOAD_NONE, or the ACCEL_OFFLOAD
                                            environment variable when left at the default:
                                            "none", "optimizer", "parameters" (any case;
                                            `accel launch --offload` sets it) */
} accel_options;

#define ACCEL_OPTIONS_INIT \
    { ACCEL_OPTIONS_VERSION, ACCEL_PRECISION_NO, 1, 0, ACCEL_DEVICE_AUTO, 0, 65536.0, 2.0, 0.5, 2000, 0, \
      ACCEL_STRATEGY_NO, 25 * 1024 * 1024, ACCEL_BACKEND_AUTO, 0.0, ACCEL_OFFLOAD_NONE }

/* Fills *opts with the defaults of `version` (pass ACCEL_OPTIONS_VERSION) and stores
 * `version` in opts->version. Every version from 1 to ACCEL_OPTIONS_VERSION is accepted;
 * only that version's fields are written (a version-1 struct ends before `strategy`).
 * Every accel_*_options_init below works the same way.
 * ACCEL_ERR_INVALID_ARGUMENT for a NULL pointer or a version this library does not know
 * (0, or one newer than the library), *opts untouched. */
ACCEL_API accel_status accel_options_init(accel_options *opts, uint32_t version);

/* Creates a context: validates the options, picks the device, seeds the generators.
 * opts may be NULL for the defaults. Errors: ACCEL_ERR_INVALID_ARGUMENT for a field outside
 * its domain above (an unknown version or enum value, K < 1, a NaN scaler setting, ...) or
 * an ACCEL_STRATEGY environment value that names no strategy, ACCEL_ERR_UNSUPPORTED for
 * ACCEL_DEVICE_CUDA when CUDA is not available. The message is then read with
 * accel_last_error(NULL). On success *out belongs to the caller.
 *
 * A process started by a launcher joins its world here: the launcher's variables (torchrun's
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI's,
 * MPICH/PMI's and Slurm's, in the order docs/distributed.md gives) say where it stands;
 * the backend is `backend` (or ACCEL_BACKEND); unset mixed_precision reads
 * ACCEL_MIXED_PRECISION ("no", "bf16", "fp16", "auto"). Process 0 hosts the rendezvous at
 * MASTER_ADDR:MASTER_PORT; accel_init returns when every process has joined. Further
 * errors then: ACCEL_ERR_INVALID_ARGUMENT for malformed or contradictory variables (RANK >=
 * WORLD_SIZE, two processes with one rank, processes that disagree on the world size or
 * backend: the message names them), ACCEL_ERR_UNSUPPORTED for a backend this build lacks,
 * ACCEL_ERR_TIMEOUT when a process never arrives within timeout_seconds (the message names
 * it), ACCEL_ERR_COMMUNICATION when the master cannot be reached or a peer fails. A process
 * belongs to one world: later contexts of the same process share it (their options must
 * name the same backend). */
ACCEL_API accel_status accel_init(const accel_options *opts, accel_context **out);

/* Releases a context. Objects created from it (models, optimizers, schedulers, loaders)
 * must be destroyed first or afterwards, but not used afterwards. NULL is accepted. */
ACCEL_API void accel_destroy(accel_context *ctx);

/* The device the context placed itself on. */
ACCEL_API accel_status accel_device_kind(const accel_context *ctx, accel_device *out);

/* The precision the context trains in: its mixed_precision (or ACCEL_MIXED_PRECISION), with
 * ACCEL_PRECISION_AUTO resolved for its device to ACCEL_PRECISION_BF16 or ACCEL_PRECISION_NO;
 * never ACCEL_PRECISION_AUTO. */
ACCEL_API accel_status accel_mixed_precision(const accel_context *ctx, accel_precision *out);

/* ------------------------------------------------------------------------------------
 * Models
 * ---------------------------------------------------------------------------------- */

typedef struct accel_model accel_model;

typedef enum accel_activation {
    ACCEL_ACT_RELU = 0,
    ACCEL_ACT_GELU = 1,
    ACCEL_ACT_TANH = 2,
    ACCEL_ACT_SIGMOID = 3
} accel_activation;

#define ACCEL_MLP_OPTIONS_VERSION 1

typedef struct accel_mlp_options {
    uint32_t version;             /* ACCEL_MLP_OPTIONS_VERSION */
    const int64_t *layer_sizes;   /* input, hidden..., output: all >= 1; the parameter count
                                     must fit in int64 (else ACCEL_ERR_INVALID_ARGUMENT) and
                                     in host memory (else ACCEL_ERR_OUT_OF_MEMORY) */
    size_t num_layer_sizes;       /* >= 2 */
    accel_activation activation;  /* between linear layers; default ReLU */
    double dropout;               /* dropout after each activation, in [0, 1); default 0 */
    int32_t bias;                 /* non-zero: linear layers have a bias (default 1) */
} accel_mlp_options;

#define ACCEL_MLP_OPTIONS_INIT { ACCEL_MLP_OPTIONS_VERSION, NULL, 0, ACCEL_ACT_RELU, 0.0, 1 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_mlp_options_init(accel_mlp_options *opts, uint32_t version);

/* Creates the built-in multi-layer perceptron: Linear layers of the given sizes with the
 * activation (and dropout) between them, none after the last. Weights are initialised
 * like torch.nn.Linear from the context's seed. The model's forward takes one float
 * tensor [batch, layer_sizes[0]] and returns [batch, layer_sizes[last]].
 * The model lives on the host until accel_prepare. *out belongs to the caller. */
ACCEL_API accel_status accel_model_create_mlp(accel_context *ctx, const accel_mlp_options *opts,
                                              accel_model **out);

/* Loads a TorchScript module saved by torch.jit.save (Python) or
 * torch::jit::Module::save (C++). Its parameters are made trainable and it is put in
 * training mode. Errors: ACCEL_ERR_INVALID_ARGUMENT for an empty path, ACCEL_ERR_IO when
 * the file is missing, unreadable or not a regular file, ACCEL_ERR_FORMAT when it is not a
 * TorchScript module (a text file, a truncated archive) or has no forward method.
 * *out belongs to the caller. */
ACCEL_API accel_status accel_model_load_torchscript(accel_context *ctx, const char *path, accel_model **out);

/* Releases a model. NULL is accepted. */
ACCEL_API void accel_model_destroy(accel_model *model);

/* Runs the model's forward on inputs[0..num_inputs) (borrowed and only read: a tensor on
 * another device is copied to the context's, the input itself never changes, so several
 * threads may pass the same tensor) under the context's precision (autocast for bf16/fp16), and returns
 * the output in *out (a new tensor). In training mode the output records the autograd
 * graph for accel_backward; in evaluation mode no graph is recorded.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT for wrong input count, shapes or dtypes (the message
 * says which), for a model or an input made by another context; ACCEL_ERR_FORMAT when a
 * TorchScript forward returns something other than a tensor. */
ACCEL_API accel_status accel_model_forward(accel_context *ctx, accel_model *model,
                                           accel_tensor *const *inputs, size_t num_inputs,
                                           accel_tensor **out);

/* Switches between training (training != 0; dropout active, graphs recorded) and
 * evaluation mode (dropout off, no graph). Models start in training mode. */
ACCEL_API accel_status accel_model_set_training(accel_context *ctx, accel_model *model, int training);

/* The number of parameter tensors and of scalar parameters. */
ACCEL_API accel_status accel_model_num_parameters(const accel_model *model, size_t *out_tensors,
                                                  int64_t *out_elements);

/* The name of parameter `index` (in [0, num_tensors), else ACCEL_ERR_INVALID_ARGUMENT), e.g.
 * "layers.0.weight". The string
 * belongs to the model and lives as long as the model. */
ACCEL_API accel_status accel_model_parameter_name(const accel_model *model, size_t index, const char **out);

/* A copy of parameter `index` (in [0, num_tensors)) (fp32 master weights) as a new host
 * tensor. The model must belong to ctx. Under ZeRO the
 * weights are sharded: this is a collective that gathers them, and every process must
 * call it with the same index. */
ACCEL_API accel_status accel_model_parameter(accel_context *ctx, const accel_model *model, size_t index,
                                             accel_tensor **out);

/* Writes the model's trained weights (fp32) to `path` in the safetensors format, names as
 * in accel_model_parameter_name. The file appears only when complete (written to a
 * temporary file, then renamed). With several processes every process calls it, the main
 * process writes, and the file exists on every process's return (under ZeRO the shards
 * are gathered first). A path ending in ".pt" writes TorchScript instead, for a model
 * loaded with accel_model_load_torchscript: the module as loaded (from its file) with the
 * trained weights and buffers, for inference elsewhere (ACCEL_ERR_UNSUPPORTED for the
 * built-in MLP). The save never destroys what it did not write: `path` may name nothing
 * or an earlier file of the same format (safetensors, or a TorchScript archive), which is
 * replaced; an empty path, a directory, a symbolic link, a device and any other file are
 * refused with ACCEL_ERR_INVALID_ARGUMENT saying what is there, and left as they are.
 * Errors: also ACCEL_ERR_IO when writing fails (the previous file, if any, is intact). */
ACCEL_API accel_status accel_save_model(accel_context *ctx, const accel_model *model, const char *path);

/* ------------------------------------------------------------------------------------
 * Losses
 * ---------------------------------------------------------------------------------- */

/* Mean cross-entropy of logits [batch, classes] against int64 (or int32) class indices
 * [batch], computed in fp32 whatever the precision. *out is a new scalar tensor.
 * ACCEL_ERR_INVALID_ARGUMENT for mismatched batch sizes, wrong ranks, dtypes, class
 * indices out of range, or logits made by another context's model. */
ACCEL_API accel_status accel_loss_cross_entropy(accel_context *ctx, const accel_tensor *logits,
                                                const accel_tensor *targets, accel_tensor **out);

/* Mean squared error of `input` against a float `target` of the same shape, in fp32.
 * ACCEL_ERR_INVALID_ARGUMENT for different shapes, non-float dtypes, or an input made by
 * another context. */
ACCEL_API accel_status accel_loss_mse(accel_context *ctx, const accel_tensor *input,
                                      const accel_tensor *target, accel_tensor **out);

/* ------------------------------------------------------------------------------------
 * Optimizers and learning-rate schedulers
 * ---------------------------------------------------------------------------------- */

typedef struct accel_optimizer accel_optimizer;
typedef struct accel_scheduler accel_scheduler;

#define ACCEL_SGD_OPTIONS_VERSION 1

typedef struct accel_sgd_options {
    uint32_t version;     /* ACCEL_SGD_OPTIONS_VERSION */
    double lr;            /* finite and > 0, default 0.01 */
    double momentum;      /* finite and >= 0, default 0 */
    double dampening;     /* in [0, 1], default 0 */
    double weight_decay;  /* finite and >= 0, default 0 (L2, added to the gradient as in
                             torch.optim.SGD) */
    int32_t nesterov;     /* non-zero for Nesterov momentum (needs momentum > 0, dampening 0) */
} accel_sgd_options;

#define ACCEL_SGD_OPTIONS_INIT { ACCEL_SGD_OPTIONS_VERSION, 0.01, 0.0, 0.0, 0.0, 0 }

ACCEL_API accel_status accel_sgd_options_init(accel_sgd_options *opts, uint32_t version);

#define ACCEL_ADAMW_OPTIONS_VERSION 1

typedef struct accel_adamw_options {
    uint32_t version;     /* ACCEL_ADAMW_OPTIONS_VERSION */
    double lr;            /* finite and > 0, default 1e-3 */
    double beta1;         /* in [0, 1), default 0.9 */
    double beta2;         /* in [0, 1), default 0.999 */
    double eps;           /* finite and > 0, default 1e-8 */
    double weight_decay;  /* finite and >= 0, decoupled, default 0.01 (torch.optim.AdamW's default) */
} accel_adamw_options;

#define ACCEL_ADAMW_OPTIONS_INIT { ACCEL_ADAMW_OPTIONS_VERSION, 1e-3, 0.9, 0.999, 1e-8, 0.01 }

ACCEL_API accel_status accel_adamw_options_init(accel_adamw_options *opts, uint32_t version);

/* Creates an optimizer for all parameters of `model`. The optimizer's state is built on
 * the model's device at accel_prepare. *out belongs to the caller; destroy it after the
 * context is done stepping it. opts NULL means the defaults. Errors:
 * ACCEL_ERR_INVALID_ARGUMENT for a field outside its domain above ("weight_decay must be
 * finite and >= 0, got inf") or a model of another context. */
ACCEL_API accel_status accel_optimizer_create_sgd(accel_context *ctx, accel_model *model,
                                                  const accel_sgd_options *opts, accel_optimizer **out);
ACCEL_API accel_status accel_optimizer_create_adamw(accel_context *ctx, accel_model *model,
                                                    const accel_adamw_options *opts, accel_optimizer **out);

#define ACCEL_LAMB_OPTIONS_VERSION 1

/* LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019): Adam's update plus
 * decoupled weight decay, rescaled per parameter tensor by the trust ratio
 * ||w|| / ||update|| (1 where either is 0), for large global batches. Its trust ratio
 * needs whole tensors, so ZeRO cannot shard it: accel_prepare refuses LAMB under a ZeRO
 * strategy (ACCEL_ERR_UNSUPPORTED); it works alone and under DDP. */
typedef struct accel_lamb_options {
    uint32_t version;     /* ACCEL_LAMB_OPTIONS_VERSION */
    double lr;            /* finite and > 0, default 1e-3 */
    double beta1;         /* in [0, 1), default 0.9 */
    double beta2;         /* in [0, 1), default 0.999 */
    double eps;           /* finite and > 0, default 1e-6 */
    double weight_decay;  /* finite and >= 0, default 0.01 */
} accel_lamb_options;

#define ACCEL_LAMB_OPTIONS_INIT { ACCEL_LAMB_OPTIONS_VERSION, 1e-3, 0.9, 0.999, 1e-6, 0.01 }

ACCEL_API accel_status accel_lamb_options_init(accel_lamb_options *opts, uint32_t version);

/* Creates a LAMB optimizer for all parameters of `model` (as accel_optimizer_create_adamw). */
ACCEL_API accel_status accel_optimizer_create_lamb(accel_context *ctx, accel_model *model,
                                                   const accel_lamb_options *opts, accel_optimizer **out);

/* Releases an optimizer. NULL is accepted. */
ACCEL_API void accel_optimizer_destroy(accel_optimizer *optimizer);

/* The current learning rate of the optimizer (the scheduler changes it at real steps). */
ACCEL_API accel_status accel_optimizer_lr(const accel_optimizer *optimizer, double *out);

typedef enum accel_schedule {
    ACCEL_SCHEDULE_CONSTANT = 0,       /* optional linear warmup, then the base lr */
    ACCEL_SCHEDULE_LINEAR = 1,         /* linear warmup 0 -> lr, then linear decay to min_lr_ratio*lr at total_steps */
    ACCEL_SCHEDULE_COSINE = 2          /* linear warmup, then half a cosine down to min_lr_ratio*lr at total_steps */
} accel_schedule;

#define ACCEL_SCHEDULER_OPTIONS_VERSION 1

typedef struct accel_scheduler_options {
    uint32_t version;       /* ACCEL_SCHEDULER_OPTIONS_VERSION */
    accel_schedule kind;    /* default ACCEL_SCHEDULE_CONSTANT */
    int64_t warmup_steps;   /* >= 0, default 0 */
    int64_t total_steps;    /* > warmup_steps for LINEAR and COSINE; ignored by CONSTANT */
    double min_lr_ratio;    /* in [0, 1], default 0 */
} accel_scheduler_options;

#define ACCEL_SCHEDULER_OPTIONS_INIT { ACCEL_SCHEDULER_OPTIONS_VERSION, ACCEL_SCHEDULE_CONSTANT, 0, 0, 0.0 }

ACCEL_API accel_status accel_scheduler_options_init(accel_scheduler_options *opts, uint32_t version);

/* Creates a scheduler that sets the learning rate of `optimizer` from its base lr and the
 * number of real optimizer steps taken (the same formulas as transformers'
 * get_{constant,linear,cosine}_schedule_with_warmup). It sets the step-0 lr at once.
 * It advances only on real optimizer steps (not on accumulation micro-steps, not on
 * skipped fp16 steps), once per step whatever the number of processes.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT for a field outside its domain above or an optimizer
 * of another context. */
ACCEL_API accel_status accel_scheduler_create(accel_context *ctx, accel_optimizer *optimizer,
                                              const accel_scheduler_options *opts, accel_scheduler **out);

/* Releases a scheduler. NULL is accepted. */
ACCEL_API void accel_scheduler_destroy(accel_scheduler *scheduler);

/* The number of real steps the scheduler has taken. */
ACCEL_API accel_status accel_scheduler_steps(const accel_scheduler *scheduler, int64_t *out);

/* ------------------------------------------------------------------------------------
 * Data loading
 * ---------------------------------------------------------------------------------- */

typedef struct accel_dataloader accel_dataloader;

#define ACCEL_DATALOADER_OPTIONS_VERSION 3

typedef struct accel_dataloader_options {
    uint32_t version;   /* ACCEL_DATALOADER_OPTIONS_VERSION */
    int64_t batch_size; /* >= 1, default 1 */
    int32_t shuffle;    /* non-zero: a new permutation each epoch, from seed and epoch */
    uint64_t seed;      /* shuffling seed; default 0 */
    int32_t drop_last;  /* non-zero: drop the last incomplete batch (with several processes:
                           stop at the last round that gives every process a full batch;
                           fewer samples than that yield no batch, as in Accelerate) */
    /* version 2: how batches are shared among processes (Accelerate's semantics; they
       matter once the loader is prepared on a context with more than one process) */
    int32_t even_batches;  /* non-zero (default): the data wraps around from the start so
                              every process gets the same number of full batches; zero: the
                              last processes may get fewer batches (fine for evaluation; a
                              training loop whose collectives would then differ between
                              processes fails with ACCEL_ERR_INVALID_STATE, see
                              accel_backward) */
    int32_t split_batches; /* non-zero: every batch is cut into one slice per process (the
                              batch size must divide by their number); zero (default): batch
                              i goes whole to process i % P */
    /* version 3 */
    int32_t iterable;      /* non-zero: the samples are a stream, read in their order and
                              shared as Accelerate shares an IterableDataset
                              (IterableDatasetShard): in rounds of batch_size x P samples
                              (batch_size with split_batches), process r taking the r-th slice
                              of each round as its batch; a last, partial round is completed
                              with the first round's samples (those repeats are left out of
                              accel_gather_for_metrics), or dropped with drop_last. shuffle must
                              be 0; even_batches does not apply (every process gets the same
                              number of batches). One process reads the plain batches. Zero
                              (default): a map-style dataset, sampled by index */
} accel_dataloader_options;

#define ACCEL_DATALOADER_OPTIONS_INIT { ACCEL_DATALOADER_OPTIONS_VERSION, 1, 0, 0, 0, 1, 0, 0 }

ACCEL_API accel_status accel_dataloader_options_init(accel_dataloader_options *opts, uint32_t version);

/* Creates a loader over a dataset held in host memory: sample i is inputs[i] with target
 * targets[i]. Both tensors are copied; their first dimensions must be equal and >= 1.
 * targets may be NULL (the loader then yields inputs only). *out belongs to the caller. */
ACCEL_API accel_status accel_dataloader_create(accel_context *ctx, const accel_tensor *inputs,
                                               const accel_tensor *targets,
                                               const accel_dataloader_options *opts, accel_dataloader **out);

/* Releases a loader. NULL is accepted. */
ACCEL_API void accel_dataloader_destroy(accel_dataloader *loader);

/* Yields the next batch of the current epoch, placed on the context's device:
 * *out_inputs and *out_targets are new tensors (out_targets may be NULL when not wanted;
 * it receives NULL when the loader has no targets). At the end of an epoch it yields no
 * batch (*out_inputs = NULL, *out_targets = NULL, status ACCEL_OK) and advances to the
 * next epoch; the next call starts that epoch. Yielding the last batch of an epoch marks
 * the end of the data for gradient accumulation (the next accel_step is a real step).
 * Errors: ACCEL_ERR_INVALID_STATE at the end of an epoch (the epoch has advanced, no
 * batch is yielded) when, with even_batches off, this process had fewer batches than
 * another and the training loop's collectives would not match theirs (see accel_backward).
 * ACCEL_ERR_INVALID_ARGUMENT for a loader created on another context. */
ACCEL_API accel_status accel_dataloader_next(accel_context *ctx, accel_dataloader *loader,
                                             accel_tensor **out_inputs, accel_tensor **out_targets);

/* The current epoch (0-based). */
ACCEL_API accel_status accel_dataloader_epoch(const accel_dataloader *loader, int64_t *out);

/* The number of batches in one epoch. */
ACCEL_API accel_status accel_dataloader_num_batches(const accel_dataloader *loader, int64_t *out);

/* Sets the epoch (>= 0) and rewinds to its first batch (the permutation depends on the
 * epoch). */
ACCEL_API accel_status accel_dataloader_set_epoch(accel_dataloader *loader, int64_t epoch);

/* ------------------------------------------------------------------------------------
 * Training
 * ---------------------------------------------------------------------------------- */

/* Binds the objects to the context and places them on its device: the model's fp32
 * master weights move to the device, the optimizer state is built there, loaders yield
 * batches there. Any argument but ctx may be NULL. A context trains one model with one
 * optimizer: binding a second, different model or optimizer is ACCEL_ERR_INVALID_STATE.
 * The optimizer must belong to the model, the scheduler to the optimizer. Several loaders
 * may be prepared (for example training and evaluation). The objects are borrowed: they
 * must outlive their use by the context. Errors: ACCEL_ERR_INVALID_ARGUMENT for an object
 * created on another context, an optimizer of another model, a scheduler of another
 * optimizer, split_batches with a batch size that does not divide by the processes. */
ACCEL_API accel_status accel_prepare(accel_context *ctx, accel_model *model, accel_optimizer *optimizer,
                                     accel_scheduler *scheduler, accel_dataloader *loader);

/* Backpropagates `loss` (a scalar produced by a loss function or a model from this
 * context), scaled as the precision requires: divided by the accumulation steps K and, in
 * fp16, multiplied by the loss scale. Gradients accumulate across micro-batches.
 * Errors: ACCEL_ERR_INVALID_STATE before accel_prepare bound a model, and for a loss that
 * was already backpropagated (once per loss: compute a new one);
 * ACCEL_ERR_INVALID_ARGUMENT for a non-scalar or graph-less loss, or one computed by
 * another context;
 * ACCEL_ERR_NON_FINITE for a NaN or infinite loss in fp32 or bf16: the gradients are left
 * as they were and the micro-batch is not counted. In fp16, a non-finite loss is
 * backpropagated like any other: its step will be skipped by the loss scaler.
 * ACCEL_ERR_INVALID_STATE, nothing done, under DDP or ZeRO when the loss comes from a
 * batch of a prepared loader with even_batches off whose uneven shares would make this
 * process communicate where another will not (DDP and ZeRO-1 synchronise on every K-th
 * micro-batch and the epoch's last, ZeRO-2/3 on every micro-batch): process 0 with 4
 * batches and process 1 with 3 fail at process 0's 4th backward and at the end of
 * process 1's epoch, each message naming both counts, instead of waiting for each other
 * (ZeRO-3's accel_model_forward, which gathers weights, fails the same way). */
ACCEL_API accel_status accel_backward(accel_context *ctx, const accel_tensor *loss);

/* Non-zero when the next accel_step is a real optimizer step: the current micro-batch is
 * the K-th since the last real step, or the last batch of a loader's epoch. */
ACCEL_API accel_status accel_sync_gradients(const accel_context *ctx, int *out);

/* Clips the gradients so that their global L2 norm is at most max_norm (finite and > 0)
 * and returns
 * the norm before clipping in *out. In fp16 the gradients are unscaled first (once per
 * step). It acts only when gradients are complete (accel_sync_gradients is non-zero); on
 * an accumulation micro-step it changes nothing and *out is set to NAN. When the
 * gradients hold inf/NaN, *out is that non-finite norm and nothing is clipped. */
ACCEL_API accel_status accel_clip_grad_norm(accel_context *ctx, double max_norm, double *out);

typedef struct accel_step_result {
    int32_t stepped;        /* 1 when the optimizer really stepped */
    int32_t skipped;        /* 1 when an fp16 step was skipped for inf/NaN gradients */
    int32_t sync_step;      /* 1 when this was a gradient-synchronising (real or skipped) step */
    double loss_scale;      /* the loss scale after this call (1 unless fp16) */
    int64_t optimizer_steps;/* real optimizer steps taken so far */
    int64_t micro_steps;    /* accel_backward calls counted so far */
} accel_step_result;

/* Ends a micro-batch. On accumulation micro-steps it does nothing (gradients keep
 * accumulating). On a real step: in fp16 the gradients are unscaled and checked; with
 * inf/NaN they are discarded, the step is skipped (reported), the loss scale backs off and
 * the scheduler does not advance; otherwise the optimizer steps, the scaler updates, the
 * scheduler advances once and the gradients are zeroed. `out` may be NULL.
 * Errors: ACCEL_ERR_INVALID_STATE before accel_prepare bound a model and an optimizer. */
ACCEL_API accel_status accel_step(accel_context *ctx, accel_step_result *out);

/* The current loss scale (1 unless fp16). */
ACCEL_API accel_status accel_loss_scale(const accel_context *ctx, double *out);

/* ------------------------------------------------------------------------------------
 * Processes
 * ---------------------------------------------------------------------------------- */

/* This process's (rank's) index in its world, 0-based; 0 for a single process. */
ACCEL_API accel_status accel_process_index(const accel_context *ctx, int32_t *out);

/* The number of processes (ranks) in the context's world; 1 for a single process. */
ACCEL_API accel_status accel_num_processes(const accel_context *ctx, int32_t *out);

/* Waits until every process of the world has called it (Accelerate's wait_for_everyone). */
ACCEL_API accel_status accel_barrier(accel_context *ctx);

typedef enum accel_reduce_op {
    ACCEL_REDUCE_SUM = 0,
    ACCEL_REDUCE_MEAN = 1, /* the sum divided by the number of processes (integer division for integers) */
    ACCEL_REDUCE_MAX = 2,
    ACCEL_REDUCE_MIN = 3,
    ACCEL_REDUCE_PROD = 4
} accel_reduce_op;

/* Reduces `tensor` element-wise across all processes; every process receives the result
 * as a new tensor in *out (same shape and dtype). Every process must call it with the same
 * shape, dtype and op, in the same order as its other collective calls; a mismatch fails
 * on every process involved (ACCEL_ERR_INVALID_STATE with the calls named) instead of
 * hanging. Errors: ACCEL_ERR_COMMUNICATION when a peer died, ACCEL_ERR_TIMEOUT.
 * Floating values round as the backend does: on NCCL and the simulator each addition in
 * the element type along NCCL's ring (fp16/bf16 pairwise), MEAN as a sum of inputs
 * pre-multiplied by 1/n, MAX/MIN ignoring a NaN unless every process has one
 * (docs/simulator.md, "How reductions round"); on Gloo fp16/bf16 sums go through fp32. */
ACCEL_API accel_status accel_reduce(accel_context *ctx, const accel_tensor *tensor, accel_reduce_op op,
                                    accel_tensor **out);

/* The process's index on its node (machine), 0-based. */
ACCEL_API accel_status accel_local_process_index(const accel_context *ctx, int32_t *out);

/* Non-zero on the main process (index 0) / on the main process of each node. */
ACCEL_API accel_status accel_is_main_process(const accel_context *ctx, int *out);
ACCEL_API accel_status accel_is_local_main_process(const accel_context *ctx, int *out);

/* Every process receives a copy of process `root`'s tensor in *out; root in
 * [0, accel_num_processes). All processes pass a tensor of the same shape and dtype (the
 * others' values are ignored). */
ACCEL_API accel_status accel_broadcast(accel_context *ctx, const accel_tensor *tensor, int32_t root,
                                       accel_tensor **out);

/* Concatenates every process's tensor along dimension 0, in process order; every process
 * receives the result. The dtypes and shapes must be equal on all processes (else
 * ACCEL_ERR_INVALID_ARGUMENT on every process, naming them: accel_pad_across_processes
 * makes the shapes equal). */
ACCEL_API accel_status accel_gather(accel_context *ctx, const accel_tensor *tensor, accel_tensor **out);

/* Like accel_gather for evaluation outputs: the rows of the last batch that even_batches
 * duplicated (to give every process a full batch) are dropped, so every sample of the
 * dataset is counted exactly once. `tensor`'s first dimension is the batch dimension of
 * the last batch this process's prepared loader yielded; other tensors are gathered whole.
 * The processes' row counts may differ. */
ACCEL_API accel_status accel_gather_for_metrics(accel_context *ctx, const accel_tensor *tensor, accel_tensor **out);

/* Pads dimension `dim` (in [-ndim, ndim); negative counts from the end) of every
 * process's tensor to the largest size among the processes, with `pad_value`, after the
 * data (or before it when pad_first is non-zero). For an integer tensor pad_value must be
 * an integer in the dtype's range (a float tensor takes any value, NaN included). The
 * processes' tensors must agree in dtype, number of dimensions and `dim`, else
 * ACCEL_ERR_INVALID_ARGUMENT on every process naming them. */
ACCEL_API accel_status accel_pad_across_processes(accel_context *ctx, const accel_tensor *tensor, int32_t dim,
                                                  double pad_value, int pad_first, accel_tensor **out);

/* Writes `message` and a newline to standard output on the main process only. */
ACCEL_API accel_status accel_print(accel_context *ctx, const char *message);

/* Reseeds the context's generator (initial weights of new models, dropout) and libtorch's
 * default one with `seed`, plus the process index when per_process is non-zero. */
ACCEL_API accel_status accel_set_seed(accel_context *ctx, uint64_t seed, int per_process);

/* ------------------------------------------------------------------------------------
 * The simulator: N ranks in this process, NCCL's semantics, memory budgets, a cost model
 * ---------------------------------------------------------------------------------- */

#define ACCEL_SIM_OPTIONS_VERSION 2

typedef struct accel_sim_options {
    uint32_t version;            /* ACCEL_SIM_OPTIONS_VERSION */
    int32_t world_size;          /* simulated GPUs, in [1, the topology's GPUs] (8 for "8xH100",
                                    8N for "Nx8xH100-IB"); default 2 */
    const char *device_memory;   /* per-rank capacity: a positive number with an optional
                                    fraction and unit, "80GiB", "64MiB", "1.5GiB", "80GB",
                                    "1000000" (bytes), at most 2^64 bytes, or "unlimited";
                                    NULL = the topology's GPU memory as CUDA reports it
                                    (79.15 GiB for 8xH100 and 8xA100, 39.39 GiB for
                                    8xA100-40GB, 139.80 GiB for 8xH200, 23.68 GiB for 8xPCIe's
                                    RTX 4090, 94.98 GiB for 4xGH200; docs/simulator.md).
                                    "0" is refused. Over it a rank fails with
                                    ACCEL_ERR_OUT_OF_MEMORY and PyTorch 2.x's message */
    const char *topology;        /* cost-model preset: "8xH100" (default), "8xA100",
                                    "8xA100-40GB", "8xPCIe", "8xH200", "4xGH200",
                                    "Nx8xH100-IB" (e.g. "4x8xH100-IB"), "Nx8xH100-RoCE",
                                    "Nx8xH100-EFA", "Nx8xA100-IB", "Nx8xA100-EFA",
                                    "Nx8xH200-IB", "Nx8xH200-RoCE" */
    double timeout_seconds;      /* finite and > 0: no progress for this long, waiting ranks
                                    fail with ACCEL_ERR_TIMEOUT; default 60 */
    const char *faults;          /* fault injection, comma-separated: "kill:RANK@collective:K"
                                    (K >= 1), "kill:RANK@step:K" (K >= 0),
                                    "delay:RANK:SECONDS" (finite, >= 0); RANK in
                                    [0, world_size); spaces after a comma are ignored, an
                                    empty item ("a,,b", a comma at an end) is
                                    ACCEL_ERR_INVALID_ARGUMENT; NULL = none */
    const char *trace_path;      /* write the run's timeline here as Chrome trace JSON
                                    (opens in ui.perfetto.dev); NULL = none. It may replace
                                    nothing or an earlier trace: any other file, a directory,
                                    a link or a device is ACCEL_ERR_INVALID_ARGUMENT before
                                    the run */
    int32_t engine_threads;      /* threads for large reductions, in [0, 1024]; 0 = the
                                    machine's cores */
    /* version 2: host memory (docs/memory.md) */
    const char *host_memory;     /* each rank's host memory, where offloaded optimizer state
                                    and master weights live (accel_options.offload), counted
                                    apart from device_memory; a size as device_memory's; NULL
                                    = unlimited. Over it the rank fails with
                                    ACCEL_ERR_OUT_OF_MEMORY naming host memory */
} accel_sim_options;

#define ACCEL_SIM_OPTIONS_INIT { ACCEL_SIM_OPTIONS_VERSION, 2, NULL, "8xH100", 60.0, NULL, NULL, 0, NULL }

ACCEL_API accel_status accel_sim_options_init(accel_sim_options *opts, uint32_t version);

/* A rank's function: runs once per simulated rank with that rank's context. Its return
 * value is the rank's status (ACCEL_OK, or the error that stopped it); a value that is no
 * accel_status (positive, or a code this library does not define) fails that rank with
 * ACCEL_ERR_INVALID_ARGUMENT ("fn returned 7, which is not an accel_status"). */
typedef accel_status (*accel_rank_fn)(accel_context *ctx, void *user);

/* The outcome of accel_sim_run: per-rank status, error message and peak device memory,
 * and the cost model's predicted time. */
typedef struct accel_sim_report accel_sim_report;

/* Runs fn once per rank of a simulated world, each rank in its own thread with its own
 * context created from ctx_opts (NULL for defaults; the device is the CPU). The ranks run
 * one at a time, switching only at communication, so a run is deterministic: the same
 * program, seed and world size give bit-identical results, trace and report.
 * Every tensor a rank allocates counts against its device_memory budget; exceeding it
 * fails that rank with ACCEL_ERR_OUT_OF_MEMORY and PyTorch 2.x's CUDA message ("CUDA out of
 * memory. Tried to allocate X. GPU N has a total capacity of ... of which ... is free. ...",
 * N the rank's GPU on its node, then "(simulated: rank R, peak P)"). (The
 * first run installs a hook on libtorch's CPU allocator, process-wide and for good; it
 * passes every allocation made outside a simulated rank straight through.)
 * A rank that fails or dies makes the others' collectives with it fail (never a hang).
 * The contexts exist only during fn: do not keep them.
 * Returns ACCEL_OK when every rank returned ACCEL_OK; otherwise the first failing rank's
 * status, with "rank R: message" in accel_last_error(NULL). *out (may be NULL) receives
 * the report in both cases, once the world ran; invalid options fail before and leave it.
 * Errors before any rank runs (*out untouched): ACCEL_ERR_INVALID_ARGUMENT for NULL fn or
 * an option outside its domain above, ACCEL_ERR_UNSUPPORTED for ACCEL_DEVICE_CUDA,
 * ACCEL_ERR_OUT_OF_MEMORY when the rank threads cannot all be started (too many for the
 * process's thread or address-space limits: the started ones are stopped and joined, no
 * rank runs; the message names the limit that bound, e.g. kernel.pid_max).
 * Environment: NCCL_ALGO (Ring, Tree, NVLS, NVLSTree, ^ to exclude) restricts the algorithms
 * the cost model picks, as it does NCCL's; ACCEL_SIM_PROGRAM=FILE records every rank's
 * computes, collectives and waits there, which `accel sim step --program FILE -n N` replays
 * on N ranks (100,000 in seconds; docs/simulator.md). */
ACCEL_API accel_status accel_sim_run(const accel_sim_options *sim, const accel_options *ctx_opts, accel_rank_fn fn,
                                     void *user, accel_sim_report **out);

/* Releases a report. NULL is accepted. */
ACCEL_API void accel_sim_report_destroy(accel_sim_report *report);

/* The number of ranks. */
ACCEL_API accel_status accel_sim_report_world_size(const accel_sim_report *report, int32_t *out);

/* Rank `rank`'s outcome: its status, its error message ("" when OK; owned by the report),
 * and its peak device memory in bytes. Any out-parameter may be NULL. */
ACCEL_API accel_status accel_sim_report_rank(const accel_sim_report *report, int32_t rank, accel_status *out_status,
                                             const char **out_error, uint64_t *out_peak_bytes);

/* The cost model's predicted wall time of the run on the topology (the slowest rank's
 * virtual clock: charged compute plus communication). */
ACCEL_API accel_status accel_sim_report_predicted_seconds(const accel_sim_report *report, double *out);

/* Rank `rank`'s host side (docs/memory.md, "Offload"): its peak host memory in bytes (what
 * offload kept there; 0 without offload), the bytes that crossed between its device and
 * the host (both directions), and their time over the topology's host link (PCIe 5.0 x16
 * at 63 GB/s for the H100 presets, 4.0 x16 at 31.5 GB/s for the A100 and PCIe ones,
 * NVLink-C2C at 450 GB/s a direction for 4xGH200),
 * included in the predicted time. Any out-parameter may be NULL. ACCEL_ERR_INVALID_ARGUMENT
 * for a NULL report or a rank outside it. */
ACCEL_API accel_status accel_sim_report_rank_host(const accel_sim_report *report, int32_t rank,
                                                  uint64_t *out_host_peak_bytes, uint64_t *out_transfer_bytes,
                                                  double *out_transfer_seconds);

/* Charges `seconds` (finite and >= 0) of compute to the calling rank's virtual clock (what a forward or
 * backward would take on the simulated GPU); `label` names it in the trace (may be NULL).
 * A no-op outside the simulator. */
ACCEL_API accel_status accel_sim_charge_compute(accel_context *ctx, double seconds, const char *label);

/* ------------------------------------------------------------------------------------
 * Checkpoints (docs/checkpoints.md)
 * ---------------------------------------------------------------------------------- */

#define ACCEL_PROJECT_OPTIONS_VERSION 1

typedef struct accel_project_options {
    uint32_t version;         /* ACCEL_PROJECT_OPTIONS_VERSION */
    const char *project_dir;  /* non-empty; checkpoints go to <project_dir>/checkpoints/checkpoint_N */
    int32_t total_limit;      /* >= 0: keep the newest N automatic checkpoints (oldest
                                 deleted first, and only directories that are complete accel
                                 checkpoints); 0 = keep all (the default) */
} accel_project_options;

#define ACCEL_PROJECT_OPTIONS_INIT { ACCEL_PROJECT_OPTIONS_VERSION, NULL, 0 }

ACCEL_API accel_status accel_project_options_init(accel_project_options *opts, uint32_t version);

/* Sets the project directory that accel_save_state / accel_load_state use when given no
 * directory (the path is copied; the directory is created). A project belongs to one run at
 * a time: process 0 takes an advisory lock on <project_dir>/.accel.lock for the world, held
 * until the context is destroyed or set to another project and released by the system when
 * the process ends. Every process of the world calls it (they agree on the outcome).
 * Errors: ACCEL_ERR_INVALID_STATE when another run holds the project (the message names its
 * pid, host and start), ACCEL_ERR_IO when the directory cannot be made. */
ACCEL_API accel_status accel_set_project(accel_context *ctx, const accel_project_options *opts);

/* Saves the whole training state to `dir` (NULL: the next checkpoint_N of the project):
 * the model's fp32 weights, the optimizer's state, the scheduler, the loss scaler, the
 * step counters, every process's random generators and the prepared data loaders' epoch
 * and position, with a manifest (format version, accel version, world size, strategy,
 * precision, each file's size and CRC-32). Without ZeRO the weights are `model.safetensors`
 * (the standard format: Python's safetensors and torch load it unchanged); under ZeRO each
 * process writes the ranges it holds, in parallel (accel merge-weights DIR OUT consolidates
 * them). The checkpoint appears only when complete: it is written to a hidden temporary
 * directory beside `dir`, flushed, and renamed into place, so a process killed during a
 * save leaves the previous checkpoint as it was.
 * A save never destroys what it did not write: `dir` may name nothing, an empty
 * directory, or an earlier accel checkpoint (a directory holding a checkpoint manifest and
 * only checkpoint files), which is replaced. A regular file, a directory holding other
 * files, a symbolic link, a device, or a user's file where the save's hidden temporary
 * (".NAME.tmp", ".NAME.old") would go are refused with ACCEL_ERR_INVALID_ARGUMENT saying
 * what is there, and left as they are. "" is ACCEL_ERR_INVALID_ARGUMENT (NULL means the
 * project's next checkpoint).
 * A collective: every process calls it, and every process returns process 0's outcome.
 * Call it after an accel_step that stepped (not between a backward and its step:
 * ACCEL_ERR_INVALID_STATE; before accel_prepare: ACCEL_ERR_INVALID_STATE).
 * Errors: also ACCEL_ERR_IO when writing fails (the previous checkpoint is intact). */
ACCEL_API accel_status accel_save_state(accel_context *ctx, const char *dir);

/* Restores what accel_save_state saved, from `dir` (NULL: the project's newest complete
 * checkpoint), on any number of processes and under any strategy (the weights and
 * optimizer state are resharded on load; with a different number of processes the data
 * position is carried over as the same share of the epoch). Every file is checked against
 * the manifest before anything changes: a missing, truncated or corrupted file, a header
 * that lies, a manifest from a newer format, or parameters whose names or shapes differ
 * from the model's fail with ACCEL_ERR_IO, ACCEL_ERR_FORMAT or ACCEL_ERR_INVALID_ARGUMENT
 * naming the file and the problem, and leave the context untouched. Files that are
 * well-formed and consistent with their CRC but lie (a counter of the wrong JSON type or
 * out of its domain, a missing field, a generator state of the wrong size, a file name
 * outside the directory) are ACCEL_ERR_FORMAT naming the file and the field: every file
 * is parsed and checked into memory before anything changes, and on several processes
 * either every process loads or none does. "" is ACCEL_ERR_INVALID_ARGUMENT (NULL means
 * the project's newest checkpoint).
 * Call it after accel_prepare (model, optimizer, scheduler, loaders; before:
 * ACCEL_ERR_INVALID_STATE). A collective. */
ACCEL_API accel_status accel_load_state(accel_context *ctx, const char *dir);

/* The directory the context's last successful accel_save_state or accel_load_state used;
 * "" before either. The string belongs to the context and changes with the next call. */
ACCEL_API accel_status accel_last_checkpoint(const accel_context *ctx, const char **out);

/* ------------------------------------------------------------------------------------
 * Language models: GPT-2, Llama and the families shaped like it (Mistral, Qwen2/2.5, Qwen3,
 * Phi-3, Gemma 2, Gemma 3 text, SmolLM3) in Hugging Face's formats (docs/lm.md)
 *
 * A causal LM is an accel_model: it prepares, trains, checkpoints (accel_save_state) and
 * reports its parameters like any other, under every strategy and precision. Its parameters
 * carry Hugging Face's names ("model.layers.0.self_attn.q_proj.weight"); its forward takes
 * input_ids (int64 [batch, seq]) and optionally an attention_mask (int64, int32 or bool
 * [batch, seq]: 1 for real tokens, 0 for padding, on either side: positions are 0..seq-1 in
 * every row, as transformers' forward without position_ids) and returns fp32 logits
 * [batch, seq, vocab_size]. accel_model_forward accepts the same inputs and a third,
 * position_ids (int64 [batch, seq], each >= 0; GPT-2: below n_positions), as transformers'.
 * ---------------------------------------------------------------------------------- */

/* A frozen base quantized for LoRA (QLoRA; docs/memory.md, "Quantized bases"): the linear
 * modules of the transformer blocks (what transformers' BitsAndBytesConfig converts: not the
 * embeddings, norms or head), byte for byte as bitsandbytes quantizes them. */
typedef enum accel_quantization {
    ACCEL_QUANT_NONE = 0,  /* the weights in accel_lm_options.dtype */
    ACCEL_QUANT_NF4 = 1,   /* 4-bit NormalFloat, one float32 absmax per 64 values (0.53 bytes a
                              weight; 0.51 with double_quant): bitsandbytes' quantize_4bit nf4 */
    ACCEL_QUANT_FP4 = 2,   /* 4-bit float, the same blocks: quantize_4bit fp4 */
    ACCEL_QUANT_INT8 = 3   /* LLM.int8's row-wise int8 (1 byte a weight and a float32 per row):
                              Int8Params' CB and SCB */
} accel_quantization;

#define ACCEL_LM_OPTIONS_VERSION 2

typedef struct accel_lm_options {
    uint32_t version;                /* ACCEL_LM_OPTIONS_VERSION */
    accel_dtype dtype;               /* the parameters' dtype: ACCEL_FLOAT32 (default) or
                                        ACCEL_BFLOAT16 (half the memory; the checkpoint's
                                        tensors are converted on load) */
    int32_t gradient_checkpointing;  /* non-zero: each transformer block keeps only its input
                                        in forward and recomputes its activations in backward
                                        (the same gradients, much less activation memory,
                                        about one more forward's time); default 0 */
    /* version 2 */
    accel_quantization quantization; /* the base's linear weights quantized at load (default
                                        ACCEL_QUANT_NONE). Each is dequantized to dtype one at
                                        a time in the forward and again for the backward's
                                        input gradient. Such a model runs forward and
                                        generation; training needs LoRA adapters
                                        (accel_model_add_lora or accel_model_load_adapter):
                                        creating an optimizer without them fails with
                                        ACCEL_ERR_INVALID_STATE. accel_save_pretrained refuses it
                                        (the base stays as loaded; save the adapters) */
    int32_t double_quant;            /* non-zero: NF4/FP4's absmax quantized again (8-bit, blocks
                                        of 256), bitsandbytes' bnb_4bit_use_double_quant; not
                                        with int8 (default 0) */
} accel_lm_options;

#define ACCEL_LM_OPTIONS_INIT { ACCEL_LM_OPTIONS_VERSION, ACCEL_FLOAT32, 0, ACCEL_QUANT_NONE, 0 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_lm_options_init(accel_lm_options *opts, uint32_t version);

/* Loads a Hugging Face causal-LM directory (as transformers' save_pretrained writes it):
 * config.json (model_type "gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2",
 * "gemma3_text" or "smollm3") and model.safetensors (fp32, bf16 or fp16), or
 * model.safetensors.index.json and its shards. opts may be NULL (the defaults). Every tensor
 * is checked against the config before the model exists. The model is in training mode.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT for an empty dir or a dtype other than float32 or
 * bfloat16; ACCEL_ERR_IO for a missing directory or file; ACCEL_ERR_FORMAT naming the file
 * and the field or tensor for a malformed config.json, a missing, extra, misshapen or
 * wrongly typed tensor, or a truncated shard; ACCEL_ERR_UNSUPPORTED for a model_type,
 * activation or RoPE scaling accel does not implement. *out belongs to the caller. */
ACCEL_API accel_status accel_model_load_pretrained(accel_context *ctx, const char *dir, const accel_lm_options *opts,
                                                   accel_model **out);

/* Creates a causal LM with random weights from a config.json: `config` names the file or a
 * directory holding it. Weights are drawn from the context's seed as transformers
 * initialises them (normal(0, initializer_range) weights, zero biases, unit norms). Errors as
 * accel_model_load_pretrained's for the config. *out belongs to the caller. */
ACCEL_API accel_status accel_model_create_lm(accel_context *ctx, const char *config, const accel_lm_options *opts,
                                             accel_model **out);

/* Writes the model's trained weights as a Hugging Face directory: config.json and
 * model.safetensors with Hugging Face's names, in the parameters' dtype (the one given at
 * load or create), which transformers' AutoModelForCausalLM.from_pretrained(dir) loads.
 * With several processes every process calls it and the main process writes (under ZeRO
 * the shards are gathered first); every process returns its outcome. The directory appears
 * complete or not at all (written beside it, then renamed). It never destroys what it did not
 * write: `dir` may name nothing, an empty directory or an earlier saved directory (replaced);
 * anything else is ACCEL_ERR_INVALID_ARGUMENT, left as it is. Errors: also
 * ACCEL_ERR_INVALID_ARGUMENT for a model that is not a causal LM; ACCEL_ERR_IO when the
 * parent directory is missing or writing fails. */
ACCEL_API accel_status accel_save_pretrained(accel_context *ctx, const accel_model *model, const char *dir);

/* The forward of a causal LM and its loss. input_ids: int64 [batch, seq]; attention_mask:
 * NULL or [batch, seq] (see above); labels: NULL or int64/int32 [batch, seq], usually
 * input_ids with -100 where the mask is 0: the logits at position t predict labels[t + 1]
 * (the shift is done here, as in transformers) and labels of -100 are ignored.
 * *out_logits (may be NULL) receives the logits; *out_loss (may be NULL; needs labels)
 * receives the mean cross-entropy over the real targets, fp32 (0 when there are none), and
 * *out_tokens (may be NULL) their number. Passed to accel_backward, such a loss is a token
 * mean: under gradient accumulation and across processes the step's gradients are those of
 * the mean over every real target of the global batch (all micro-batches of the step on all
 * processes), not a mean of per-micro-batch means (docs/lm.md). One step's losses are either
 * all token means or all plain means (accel_backward: ACCEL_ERR_INVALID_ARGUMENT).
 * Errors: ACCEL_ERR_INVALID_ARGUMENT for a model that is not a causal LM, a wrong shape or
 * dtype, a token id outside the vocabulary, more positions than GPT-2's n_positions, a loss
 * asked without labels, nothing asked (out_logits and out_loss both NULL). */
ACCEL_API accel_status accel_lm_forward(accel_context *ctx, accel_model *model, const accel_tensor *input_ids,
                                        const accel_tensor *attention_mask, const accel_tensor *labels,
                                        accel_tensor **out_logits, accel_tensor **out_loss, int64_t *out_tokens);

#define ACCEL_GENERATE_OPTIONS_VERSION 1

typedef struct accel_generate_options {
    uint32_t version;        /* ACCEL_GENERATE_OPTIONS_VERSION */
    int64_t max_new_tokens;  /* >= 1 (default 32) */
    double temperature;      /* 0 (default): greedy; > 0: sampling from softmax(logits / temperature) */
    int64_t top_k;           /* sampling among the k most likely tokens (0, the default: all) */
    int64_t eos_token_id;    /* a row that emits it has finished and repeats it; generation
                                stops when every row has (-1, the default: never) */
    uint64_t seed;           /* the sampling generator's seed (default 0) */
    int32_t use_cache;       /* non-zero (default): keep every layer's keys and values (the KV
                                cache), so each new token runs the model on one position; zero:
                                run the whole sequence again at each step (the same tokens) */
} accel_generate_options;

#define ACCEL_GENERATE_OPTIONS_INIT { ACCEL_GENERATE_OPTIONS_VERSION, 32, 0.0, 0, -1, 0, 1 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_generate_options_init(accel_generate_options *opts, uint32_t version);

/* Continues the prompts input_ids (int64 [batch, seq], no padding) with the causal LM and
 * returns *out: a new int64 host tensor [batch, seq + n] (the prompts, then n <=
 * max_new_tokens new tokens). No gradient is recorded; in training mode dropout is active
 * (call accel_model_set_training(ctx, model, 0) first, as model.eval() before transformers'
 * generate). Under ZeRO-3 every process calls it with the same arguments (each forward
 * gathers the weights). opts may be NULL (the defaults: 32 greedy tokens). Errors:
 * ACCEL_ERR_INVALID_ARGUMENT for a model that is not a causal LM, a wrong shape or dtype, a
 * token id outside the vocabulary, max_new_tokens < 1, a negative or non-finite temperature,
 * top_k < 0, an eos_token_id outside the vocabulary, more positions than GPT-2's n_positions. */
ACCEL_API accel_status accel_lm_generate(accel_context *ctx, accel_model *model, const accel_tensor *input_ids,
                                         const accel_generate_options *opts, accel_tensor **out);

/* LoRA: low-rank adapters on a causal LM's linear modules, in PEFT's format (docs/lm.md,
 * "LoRA"). Each adapted module computes W x + (alpha / r) B A dropout(x); the base weights
 * are frozen: the model's parameters (what optimizers, strategies, checkpoints and
 * accel_model_parameter see) become the adapters, named "<module>.lora_A.weight" and
 * "<module>.lora_B.weight", so the base weights get no gradients and no optimizer state. */

#define ACCEL_LORA_OPTIONS_VERSION 1

typedef struct accel_lora_options {
    uint32_t version;            /* ACCEL_LORA_OPTIONS_VERSION */
    int32_t r;                   /* the adapters' rank, >= 1 (default 8) */
    double alpha;                /* the scale is alpha / r, finite and > 0 (default 8) */
    double dropout;              /* dropout on the adapters' input in training, [0, 1) (default 0) */
    const char *target_modules;  /* comma-separated module names, matched as PEFT matches them (a
                                    module whose name equals one or ends with "." and one):
                                    "q_proj,k_proj,v_proj,o_proj" or "gate_proj,up_proj,down_proj"
                                    (Llama), "c_attn,c_proj,c_fc" (GPT-2), or "all-linear" (every
                                    linear module of the blocks); NULL (default): PEFT's default
                                    for the family (Llama: q_proj,v_proj; GPT-2: c_attn) */
    int32_t use_rslora;          /* non-zero: the scale is alpha / sqrt(r) (rank-stabilised LoRA) */
} accel_lora_options;

#define ACCEL_LORA_OPTIONS_INIT { ACCEL_LORA_OPTIONS_VERSION, 8, 8.0, 0.0, NULL, 0 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_lora_options_init(accel_lora_options *opts, uint32_t version);

/* Adds LoRA adapters to a causal LM: A drawn from the context's seed as nn.Linear's weights
 * (uniform in +-1/sqrt(in_features)), B zero (PEFT's default), so the model starts as the
 * base. Call it before creating the optimizer and before accel_prepare (afterwards:
 * ACCEL_ERR_INVALID_STATE). Errors: ACCEL_ERR_INVALID_ARGUMENT for a model that is not a
 * causal LM or already has adapters, r < 1, alpha or dropout out of range, an empty name in
 * target_modules, a name that matches no module (the message lists the family's modules). */
ACCEL_API accel_status accel_model_add_lora(accel_context *ctx, accel_model *model, const accel_lora_options *opts);

/* Loads a PEFT LoRA adapter directory (adapter_config.json and adapter_model.safetensors, as
 * peft's save_pretrained writes them) onto a causal LM without adapters: its r, lora_alpha,
 * lora_dropout, target_modules and use_rslora, then its tensors (PEFT's key names,
 * "base_model.model.<module>.lora_A.weight"). The base is the caller's: the config's
 * base_model_name_or_path is not read. Before the optimizer and accel_prepare, as
 * accel_model_add_lora. Errors: ACCEL_ERR_IO for a missing directory or file;
 * ACCEL_ERR_FORMAT naming the file for bad JSON, a missing, extra or misshapen tensor;
 * ACCEL_ERR_UNSUPPORTED for another peft_type, DoRA, biases, modules_to_save, rank or alpha
 * patterns, layers_to_transform, a regular expression as target_modules; the model is left
 * without adapters on any error. */
ACCEL_API accel_status accel_model_load_adapter(accel_context *ctx, accel_model *model, const char *dir);

/* Writes the model's trained adapters as a PEFT adapter directory (adapter_config.json,
 * adapter_model.safetensors in fp32) that peft.PeftModel.from_pretrained(base, dir) loads.
 * A collective like accel_save_pretrained (shards gathered, the main process writes), with
 * its rules for what it may replace (nothing, an empty directory or an earlier adapter
 * directory). accel_save_pretrained on a model with adapters writes the base weights with the
 * adapters merged in (W + scale B A), a plain pretrained directory. Errors:
 * ACCEL_ERR_INVALID_ARGUMENT for a model without adapters; as accel_save_pretrained's. */
ACCEL_API accel_status accel_save_adapter(accel_context *ctx, const accel_model *model, const char *dir);

/* Causal-LM data. A packed token file holds a tokenized corpus: the 8 bytes "ACCELTOK", a
 * little-endian uint32 version (1), a uint32 token width in bytes (2 or 4), a uint64 token
 * count, then the tokens as little-endian unsigned integers of that width (docs/lm.md). */

/* Writes `tokens` (int64 or int32, one-dimensional, each in [0, 2^(8 token_bytes))) as a
 * token file of 2- or 4-byte tokens, atomically. Like accel_save_model it replaces only
 * nothing or an earlier token file: a directory, a link, a device or another file is
 * ACCEL_ERR_INVALID_ARGUMENT, left as it is. Errors: also ACCEL_ERR_INVALID_ARGUMENT for a
 * token that does not fit, a width other than 2 or 4; ACCEL_ERR_IO when writing fails. */
ACCEL_API accel_status accel_token_file_write(const char *path, const accel_tensor *tokens, int32_t token_bytes);

/* Reads a token file into a new int64 host tensor [count]. Errors: ACCEL_ERR_IO for a missing
 * or unreadable file; ACCEL_ERR_FORMAT naming the file for another kind of file, an unknown
 * version, a width other than 2 or 4, or a token count the file's size does not hold
 * (truncated). *out belongs to the caller. */
ACCEL_API accel_status accel_token_file_read(const char *path, accel_tensor **out);

#define ACCEL_LM_DATA_OPTIONS_VERSION 2

typedef struct accel_lm_data_options {
    uint32_t version;            /* ACCEL_LM_DATA_OPTIONS_VERSION */
    int64_t block_size;          /* without offsets: samples are the consecutive blocks of
                                    this many tokens (>= 2; the last partial block is dropped) */
    int64_t max_length;          /* with offsets: each sequence is cut to this many tokens
                                    (0, the default: whole) */
    int64_t pad_id;              /* the token id of padding positions in input_ids (default 0;
                                    must be below the model's vocabulary) */
    int64_t pad_to_multiple_of;  /* dynamic padding rounds the batch's length up to a multiple
                                    of this (8 suits tensor cores; 0, the default: the longest
                                    sequence of the batch) */
    int32_t group_by_length;     /* non-zero: each epoch's order is grouped in megabatches
                                    sorted by length (transformers' LengthGroupedSampler), so a
                                    batch holds similar lengths and pads less */
    /* version 2 */
    int32_t padding_side;        /* 0 (default): padding on the right; 1: on the left (an
                                    accel_side; pass accel_dataloader_attention_mask's mask to
                                    accel_lm_forward then) */
} accel_lm_data_options;

#define ACCEL_LM_DATA_OPTIONS_INIT { ACCEL_LM_DATA_OPTIONS_VERSION, 0, 0, 0, 0, 0, 0 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_lm_data_options_init(accel_lm_data_options *opts, uint32_t version);

/* Creates a loader of causal-LM batches over `tokens` (int64 or int32 [N], copied). Without
 * `offsets` (NULL) the samples are fixed blocks of lm_opts->block_size tokens. With `offsets`
 * (int64 or int32 [D + 1]: 0 = offsets[0] <= ... <= offsets[D] = N) sample d is the sequence
 * tokens[offsets[d] .. offsets[d+1]), cut to max_length; empty sequences are skipped.
 * accel_dataloader_next yields input_ids (int64 [batch, T]) as the inputs and labels (int64
 * [batch, T]) as the targets, with dynamic padding: T is the longest sequence of the batch
 * (rounded up to pad_to_multiple_of), each row padded on the right with pad_id in input_ids
 * and -100 in labels. Pass them to accel_lm_forward as input_ids and labels with no
 * attention mask: with right padding, causal attention never lets a real token see a
 * padding position, so the loss and gradients are those with the mask. loader_opts gives the
 * batch size, shuffling, drop_last and the sharding across processes, as for
 * accel_dataloader_create; the loader prepares, shards, checkpoints and resumes like one.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT naming the field for a wrong dtype or shape, offsets
 * that do not start at 0, decrease or do not end at N, block_size < 2 or with offsets, more
 * block tokens than there are, no non-empty sequence, negative max_length or
 * pad_to_multiple_of. *out belongs to the caller. */
ACCEL_API accel_status accel_lm_dataloader_create(accel_context *ctx, const accel_tensor *tokens,
                                                  const accel_tensor *offsets, const accel_lm_data_options *lm_opts,
                                                  const accel_dataloader_options *loader_opts, accel_dataloader **out);

/* ------------------------------------------------------------------------------------
 * Adafactor (an optimizer for any model; here because it came with the language models)
 * ---------------------------------------------------------------------------------- */

#define ACCEL_ADAFACTOR_OPTIONS_VERSION 1

typedef struct accel_adafactor_options {
    uint32_t version;        /* ACCEL_ADAFACTOR_OPTIONS_VERSION */
    double lr;               /* the step size with relative_step off (> 0); must be 0 with
                                relative_step (transformers' lr=None) */
    double eps1;             /* added to the squared gradient (default 1e-30) */
    double eps2;             /* the least parameter RMS scale_parameter uses (default 1e-3) */
    double clip_threshold;   /* updates are divided by max(1, RMS(update) / this) (default 1) */
    double decay_rate;       /* beta2 at step t is 1 - t^decay_rate, < 0 (default -0.8) */
    double beta1;            /* first-moment decay in [0, 1); 0 (default): none */
    double weight_decay;     /* decoupled, times the step size (default 0) */
    int32_t scale_parameter; /* non-zero (default): the step size is scaled by the parameter's RMS */
    int32_t relative_step;   /* non-zero (default): step size min(1e-2, 1/sqrt(step)) instead of lr */
    int32_t warmup_init;     /* non-zero: with relative_step, min(1e-6 * step, 1/sqrt(step)) */
} accel_adafactor_options;

#define ACCEL_ADAFACTOR_OPTIONS_INIT \
    { ACCEL_ADAFACTOR_OPTIONS_VERSION, 0.0, 1e-30, 1e-3, 1.0, -0.8, 0.0, 0.0, 1, 1, 0 }

/* Fills *opts with the defaults of `version` (transformers' Adafactor defaults). */
ACCEL_API accel_status accel_adafactor_options_init(accel_adafactor_options *opts, uint32_t version);

/* Creates Adafactor over the model's parameters, exactly as transformers' Adafactor: the
 * second moments of a parameter of 2 or more dimensions are kept as row and column means
 * (rows + columns numbers instead of one per weight; a vector keeps them whole), updates are
 * clipped by their RMS, and the step size is lr or relative to the step and the parameter's
 * RMS. Its state checkpoints as the other optimizers' ("exp_avg_sq_row", "exp_avg_sq_col",
 * "exp_avg_sq", "exp_avg"). A scheduler needs relative_step off. Under ZeRO each process
 * steps its shard: the row and column sums and the RMS sums are all-reduced, the factors
 * are held whole by every process (rows + columns numbers per matrix) and written once in
 * the sharded checkpoint; parameters of more than 2 dimensions are then
 * ACCEL_ERR_UNSUPPORTED at accel_prepare. Errors: ACCEL_ERR_INVALID_ARGUMENT naming the field for lr with
 * relative_step, lr <= 0 without it, warmup_init without relative_step, a negative eps,
 * clip_threshold <= 0, decay_rate >= 0, beta1 outside [0, 1), weight_decay < 0. */
ACCEL_API accel_status accel_optimizer_create_adafactor(accel_context *ctx, accel_model *model,
                                                        const accel_adafactor_options *opts, accel_optimizer **out);

/* ------------------------------------------------------------------------------------
 * Memory estimates (`accel estimate-memory`; docs/lm.md, "Memory estimates")
 *
 * What training a causal LM takes per GPU, before running anything: weights, gradients,
 * optimizer state, activations and the peak, under a precision, optimizer, strategy, world
 * size, micro-batch, sequence length, gradient checkpointing and LoRA rank. The model state
 * is exact arithmetic over accel's layouts (DDP's buckets, ZeRO's fp32 master shards and
 * 16-bit working copies); the activations are what accel's blocks save for backward, per
 * token, calibrated against the simulator's per-rank budget (within 10% of its measured peak
 * on a grid of tiny configurations). Unlike `accelerate estimate-memory`, which counts the
 * weights only, it includes gradients, optimizer state and activations.
 * ---------------------------------------------------------------------------------- */

typedef enum accel_optimizer_kind {
    ACCEL_OPTIMIZER_SGD = 0,
    ACCEL_OPTIMIZER_SGD_MOMENTUM = 1,
    ACCEL_OPTIMIZER_ADAMW = 2,
    ACCEL_OPTIMIZER_ADAFACTOR = 3,
    ACCEL_OPTIMIZER_LAMB = 4
} accel_optimizer_kind;

#define ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION 2

typedef struct accel_memory_estimate_options {
    uint32_t version;                 /* ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION */
    accel_precision mixed_precision;  /* autocast with fp32 master weights (default NO) */
    accel_dtype weights_dtype;        /* ACCEL_FLOAT32 (default) or ACCEL_BFLOAT16 (the
                                         parameters, gradients and optimizer state in bf16,
                                         as accel_lm_options.dtype; no autocast) */
    accel_optimizer_kind optimizer;   /* default ACCEL_OPTIMIZER_ADAMW */
    accel_strategy strategy;          /* default ACCEL_STRATEGY_NO */
    int32_t world_size;               /* processes (GPUs), >= 1; > 1 needs a strategy (default 1) */
    int64_t micro_batch;              /* sequences per micro-batch and GPU, >= 1 (default 1) */
    int64_t seq_len;                  /* tokens per sequence; 0 (default): min(1024,
                                         max_position_embeddings) */
    int32_t gradient_checkpointing;   /* non-zero: as accel_lm_options.gradient_checkpointing */
    int32_t lora_rank;                /* > 0: LoRA adapters of this rank, the base frozen; 0
                                         (default): full fine-tuning */
    const char *lora_target_modules;  /* as accel_lora_options.target_modules (NULL: PEFT's
                                         default for the family) */
    int32_t attention;                /* the attention kernel assumed: 0 (default) this build's
                                         (libtorch >= 2.1: fused, else eager), 1 eager (the
                                         T x T probabilities are saved), 2 fused (as a GPU's
                                         flash or memory-efficient attention) */
    /* version 2: training in the memory a device has (docs/memory.md) */
    accel_offload offload;            /* as accel_options.offload: ACCEL_OFFLOAD_OPTIMIZER puts
                                         the optimizer's state (fp32) and ZeRO's separate fp32
                                         master in host memory, ACCEL_OFFLOAD_PARAMETERS (ZeRO-3)
                                         ZeRO-3's working shard too (default ACCEL_OFFLOAD_NONE) */
    accel_quantization quantization;  /* as accel_lm_options.quantization: the LoRA base's
                                         linear weights in NF4, FP4 or int8 (needs lora_rank >
                                         0; default ACCEL_QUANT_NONE) */
    int32_t double_quant;             /* non-zero: NF4's or FP4's absmax quantized again */
} accel_memory_estimate_options;

#define ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT \
    { ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION, ACCEL_PRECISION_NO, ACCEL_FLOAT32, ACCEL_OPTIMIZER_ADAMW, \
      ACCEL_STRATEGY_NO, 1, 1, 0, 0, 0, NULL, 0, ACCEL_OFFLOAD_NONE, ACCEL_QUANT_NONE, 0 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_memory_estimate_options_init(accel_memory_estimate_options *opts, uint32_t version);

#define ACCEL_MEMORY_ESTIMATE_VERSION 3

/* An estimate, in bytes per GPU. The caller sets `version` (ACCEL_MEMORY_ESTIMATE_VERSION);
 * the library writes the fields of that version only, so later versions may append. */
typedef struct accel_memory_estimate {
    uint32_t version;               /* set by the caller */
    int64_t parameters;             /* the model's parameters */
    int64_t trainable_parameters;   /* those trained (the adapters under LoRA) */
    int64_t seq_len;                /* the sequence length used */
    int32_t attention;              /* the attention kernel assumed: 1 eager, 2 fused */
    uint64_t weights;               /* working weights, ZeRO's master shards, a LoRA base */
    uint64_t gradients;             /* the gradients the strategy holds at the step */
    uint64_t optimizer_state;       /* the optimizer's state on this GPU */
    uint64_t activations;           /* saved for backward at the end of the forward (with
                                       autocast's 16-bit weight copies) */
    uint64_t temporaries;           /* the rest of the peak: the logits' gradient, a block
                                       recomputed under checkpointing, gathered ZeRO-3 units,
                                       gradient buffers in flight */
    uint64_t total;                 /* the peak of a training step (device memory) */
    /* version 2 */
    uint64_t host;                  /* the peak of host memory a rank holds (offload: the
                                       optimizer's state, ZeRO's master, the step's fp32
                                       copies and temporaries; 0 without offload) */
    uint64_t transfer_bytes;        /* bytes between the device and the host per optimizer
                                       step, both directions (offload; 0 without): what the
                                       simulator charges over the preset's host link */
    /* version 3 */
    uint64_t gradient_transfer_bytes; /* of transfer_bytes, the gradients' copies to the host,
                                         made as each bucket is reduced: they run beside the
                                         backward (the rest is serial with the compute) */
} accel_memory_estimate;

/* Estimates the memory per GPU of training `model`: a named shape ("gpt2", "gpt2-medium",
 * "gpt2-large", "gpt2-xl", "llama-7b", "llama-13b", "llama-70b", "tiny-llama", and the
 * published models' shapes: "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-0.5b",
 * "qwen2.5-1.5b", "qwen2.5-7b", "qwen3-0.6b", "mistral-7b", "phi-3-mini", "gemma-2-2b",
 * "gemma-3-1b", "smollm2-135m", "smollm2-1.7b", "smollm3-3b"), a Hugging
 * Face config.json, or a directory holding one. opts may be NULL (the defaults). Needs no
 * context, allocates nothing model-sized and is thread-safe.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT naming the field for an empty model, a bad option value,
 * world_size > 1 without a strategy, bf16 weights with autocast, LoRA targets that match no
 * module, a quantization without lora_rank, double_quant without NF4 or FP4, or an unknown
 * out->version; ACCEL_ERR_IO for a model that is neither a named shape
 * nor a readable config; ACCEL_ERR_FORMAT or ACCEL_ERR_UNSUPPORTED as
 * accel_model_create_lm for the config; ACCEL_ERR_UNSUPPORTED for what accel_prepare refuses
 * (LAMB or Adafactor under ZeRO; bf16 weights under ZeRO; LAMB with offload).
 * With offload (version 2 of the options) `total` counts the device only and `host` what
 * lives in host memory; with a quantized base `weights` holds its bitsandbytes bytes.
 * `accel estimate-memory --budget` searches these options for the plans that fit. */
ACCEL_API accel_status accel_estimate_memory(const char *model, const accel_memory_estimate_options *opts,
                                             accel_memory_estimate *out);

/* ------------------------------------------------------------------------------------
 * Trackers (Accelerate's init_trackers, log and end_training; docs/trackers.md)
 *
 * A step's named scalars (loss, learning rate, accuracy...) written as JSON lines, CSV and
 * TensorBoard event files in a log directory, on the main process only unless every process
 * is asked to. TensorBoard (`tensorboard --logdir DIR`) reads the event files; pandas or a
 * spreadsheet the CSV (a row per scalar: wall_time,step,name,value); any JSON reader the
 * lines ({"step":S,"wall_time":T,"values":{"NAME":V,...}}; a value that is not finite is
 * null there). Each accel_log is written and flushed before it returns.
 * ---------------------------------------------------------------------------------- */

typedef enum accel_log_writer {
    ACCEL_LOG_JSONL = 1,       /* LOG_DIR/metrics.jsonl, appended to */
    ACCEL_LOG_CSV = 2,         /* LOG_DIR/metrics.csv, appended to */
    ACCEL_LOG_TENSORBOARD = 4  /* LOG_DIR/events.out.tfevents.TIME.HOST.PID, new for each init */
} accel_log_writer;

#define ACCEL_TRACKER_OPTIONS_VERSION 1

typedef struct accel_tracker_options {
    uint32_t version;       /* ACCEL_TRACKER_OPTIONS_VERSION */
    const char *log_dir;    /* required; created where missing */
    uint32_t writers;       /* an OR of accel_log_writer; 0 (default): the environment's
                               ACCEL_LOG_WITH ("jsonl", "csv", "tensorboard", "all",
                               comma-separated), else ACCEL_LOG_JSONL */
    int32_t all_processes;  /* non-zero: every process writes, into LOG_DIR/process-RANK;
                               0 (default): the main process alone writes, into LOG_DIR, and
                               the others' calls check their arguments and write nothing */
} accel_tracker_options;

#define ACCEL_TRACKER_OPTIONS_INIT { ACCEL_TRACKER_OPTIONS_VERSION, NULL, 0, 0 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_tracker_options_init(accel_tracker_options *opts, uint32_t version);

/* Opens the context's trackers. Every process calls it (a process that writes nothing
 * still checks its options). Errors: ACCEL_ERR_INVALID_ARGUMENT for a NULL or empty log_dir,
 * a log_dir that is not a directory, writers outside the three, a bad ACCEL_LOG_WITH (named),
 * or a log file that is not a regular file (a symbolic link, a device: never written);
 * ACCEL_ERR_IO naming the path for a directory or file that cannot be created;
 * ACCEL_ERR_INVALID_STATE when the context's trackers are already open. */
ACCEL_API accel_status accel_init_trackers(accel_context *ctx, const accel_tracker_options *opts);

/* Logs `count` scalars at `step`: names[i] = values[i]. The names are non-empty UTF-8,
 * distinct within a call; a value may be any double (TensorBoard keeps a float). The same
 * thread rules as the context's other calls. Errors: ACCEL_ERR_INVALID_STATE before
 * accel_init_trackers or after accel_end_training; ACCEL_ERR_INVALID_ARGUMENT for step < 0,
 * count < 1, NULL arrays, an empty or repeated name; ACCEL_ERR_IO when a write fails (a full
 * disk: the call's lines may be partly written). */
ACCEL_API accel_status accel_log(accel_context *ctx, int64_t step, const char *const *names, const double *values,
                                 int32_t count);

/* Flushes and closes the trackers (accel_destroy does too); accel_init_trackers may open
 * them again (a new event file). ACCEL_OK when none are open. Errors: ACCEL_ERR_IO when a
 * file cannot be closed (its last writes may be lost). */
ACCEL_API accel_status accel_end_training(accel_context *ctx);

/* ------------------------------------------------------------------------------------
 * Real time: inference beside training (docs/on-device.md)
 *
 * A game or a robot keeps its loop at a fixed rate while a model learns. The loop's thread
 * runs an inference copy of the model; a training thread (or the loop itself, between
 * frames) trains the model and publishes its weights; the copy picks up the latest
 * published weights at the start of a run and never waits for the trainer.
 *
 * Threads: accel_inference_create and accel_publish_weights use the context and the model,
 * so they follow the context's rule (its one thread at a time). An inference copy is used
 * by one thread at a time, any thread, and independently of everything else: its runs may
 * overlap the context's training, publishing, checkpoints, and even the destruction of the
 * model or the context (the copy keeps what it needs). Several copies may run on several
 * threads at once. No lock is held across a run: publishing copies the weights into a set
 * no run is using (a new one when every set is in use) and then swaps one pointer, and a
 * run takes the latest set by swapping that pointer under the same short mutex.
 * ---------------------------------------------------------------------------------- */

typedef struct accel_inference accel_inference;

#define ACCEL_INFERENCE_OPTIONS_VERSION 1

typedef struct accel_inference_options {
    uint32_t version;     /* ACCEL_INFERENCE_OPTIONS_VERSION */
    int32_t num_threads;  /* the intra-op threads of the thread that calls accel_inference_run
                             (libtorch's OpenMP threads are counted per thread: this sets the
                             calling thread's, leaving the trainer's); in [1, 4096], default 1 */
} accel_inference_options;

#define ACCEL_INFERENCE_OPTIONS_INIT { ACCEL_INFERENCE_OPTIONS_VERSION, 1 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_inference_options_init(accel_inference_options *opts, uint32_t version);

/* Creates an inference copy of `model` on the context's device: the same structure (the
 * built-in MLP, a TorchScript module (loaded again from its file, ACCEL_ERR_IO when that is
 * gone), a causal LM with or without LoRA adapters), in
 * evaluation mode, without autograd. It publishes the model's current weights (as
 * accel_publish_weights, so under ZeRO every process calls it) and starts with them.
 * opts may be NULL for the defaults. *out belongs to the caller (accel_inference_destroy).
 * Errors: ACCEL_ERR_INVALID_ARGUMENT for a model of another context or a field outside its
 * domain; ACCEL_ERR_UNSUPPORTED for a LoRA model whose base weights ZeRO shards (gather
 * them with accel_save_pretrained and load that instead). */
ACCEL_API accel_status accel_inference_create(accel_context *ctx, const accel_model *model,
                                              const accel_inference_options *opts, accel_inference **out);

/* Releases an inference copy (from any thread, not during its own run). NULL is accepted. */
ACCEL_API void accel_inference_destroy(accel_inference *inference);

/* Publishes the model's current trained weights (fp32 masters, or the weights' own dtype
 * for a causal LM) to every inference copy of it, and returns their version in *out (may
 * be NULL): 1 for the first publication (accel_inference_create's), then 2, 3, ... Each
 * copy's next run uses them. The weights are copied, so training goes on at once; a copy
 * whose run is in progress finishes it with the weights it started with. Under ZeRO this
 * gathers the shards: every process calls it. Errors: ACCEL_ERR_INVALID_ARGUMENT for a
 * model of another context; ACCEL_ERR_OUT_OF_MEMORY when no set can be allocated (the
 * copies keep the weights they had). */
ACCEL_API accel_status accel_publish_weights(accel_context *ctx, const accel_model *model, uint64_t *out);

/* Runs the copy's forward on inputs[0..num_inputs) (borrowed, only read; any device: they
 * are copied to the copy's) in fp32 (a causal LM in its weights' dtype), and returns the
 * output in *out (a new tensor without a graph, usable anywhere, also as a loss's input).
 * At its start the run takes the latest published weights; it never waits for the trainer.
 * The message of a failure is read with accel_last_error(NULL) on the calling thread.
 * Errors: ACCEL_ERR_INVALID_ARGUMENT as accel_model_forward's (input count, shapes, dtypes:
 * the message says which) and for NULL pointers; ACCEL_ERR_INVALID_STATE when another
 * thread's run of the same copy is in progress (a copy runs on one thread at a time). */
ACCEL_API accel_status accel_inference_run(accel_inference *inference, accel_tensor *const *inputs,
                                           size_t num_inputs, accel_tensor **out);

/* The version of the weights the copy's last run used (before any run: those it was
 * created with) in *out_version, and in *out_age_seconds how long ago they were published
 * (>= 0). Either pointer may be NULL. The same thread rule as accel_inference_run. */
ACCEL_API accel_status accel_inference_weights(const accel_inference *inference, uint64_t *out_version,
                                               double *out_age_seconds);

typedef enum accel_loss {
    ACCEL_LOSS_MSE = 0,            /* accel_loss_mse(forward(inputs), targets) */
    ACCEL_LOSS_CROSS_ENTROPY = 1,  /* accel_loss_cross_entropy(forward(inputs), targets) */
    ACCEL_LOSS_CAUSAL_LM = 2       /* a causal LM's next-token loss (accel_lm_forward), labels
                                      the batch's targets, or its inputs when it has none */
} accel_loss;

#define ACCEL_TRAIN_RESULT_VERSION 1

typedef struct accel_train_result {
    uint32_t version;         /* set by the caller: ACCEL_TRAIN_RESULT_VERSION */
    int32_t micro_batches;    /* micro-batches trained by this call */
    int32_t optimizer_steps;  /* real optimizer steps taken by this call */
    int32_t skipped_steps;    /* fp16 steps skipped for inf/NaN gradients by this call */
    int32_t epoch_ended;      /* 1 when the call stopped at the end of the loader's epoch (the
                                 loader has advanced: the next call starts the next epoch) */
    double mean_loss;         /* the mean of the micro-batches' losses; NAN when none ran */
    double seconds;           /* the call's wall time */
} accel_train_result;

/* Trains at most max_micro_batches (>= 1) micro-batches of `loader` on the prepared model
 * and optimizer: for each, the next batch, the forward, the loss, accel_backward and
 * accel_step, exactly as a loop of those calls does (gradient accumulation, mixed precision,
 * the strategy and the scheduler included). It stops early at the end of the loader's
 * epoch, and, when max_seconds > 0, before a micro-batch that would end past max_seconds
 * after the call began, judged by the mean time of this call's micro-batches so far (at
 * least one runs): an engine schedules training between frames this way. With several
 * processes every process must train the same number of micro-batches, so max_seconds
 * must be 0 there. *out (may be NULL) says what was done. Errors: those of the calls it
 * makes (ACCEL_ERR_NON_FINITE for a NaN loss, ...): the micro-batches before the failing
 * one stay trained, as with the calls made one by one, and *out is untouched;
 * ACCEL_ERR_INVALID_STATE before accel_prepare bound this model and an optimizer, or with
 * the model in evaluation mode; ACCEL_ERR_INVALID_ARGUMENT for max_micro_batches < 1, a
 * max_seconds that is negative or not finite (or > 0 with several processes), an unknown
 * loss, a loader without targets for MSE or cross-entropy, a causal-LM loss for a model
 * that is not one, or an out version this library does not know. */
ACCEL_API accel_status accel_train_micro_batches(accel_context *ctx, accel_model *model, accel_dataloader *loader,
                                                 accel_loss loss, int32_t max_micro_batches, double max_seconds,
                                                 accel_train_result *out);

/* A copy of parameter `index`'s gradient (in [0, num_tensors); fp32, the parameter's shape) as
 * a new host tensor: the gradient the next accel_step will apply, to look at it (a NaN, a
 * check against finite differences) or to run an optimizer of one's own. It is the mean over
 * the accumulation's micro-batches as accel_backward defines it (over their tokens for
 * causal-LM losses), unscaled under fp16 (it may hold inf/NaN: accel_step would then skip the
 * step), clipped when accel_clip_grad_norm ran, and the same on every process under DDP and
 * ZeRO: averaged over the processes (under ZeRO gathered whole from the shards: a collective,
 * every process calls it with the same index). Read it after the accumulation's last
 * accel_backward and before accel_step (which zeroes the gradients); a parameter that
 * received no gradient reads zeros; under LoRA the parameters are the adapters. The model
 * must be the one accel_prepare bound in ctx. Errors: ACCEL_ERR_INVALID_ARGUMENT for a NULL
 * pointer, an index out of range or a model of another context; ACCEL_ERR_INVALID_STATE
 * before accel_prepare bound the model, when no accel_backward ran since the last
 * accel_step, or between the micro-batches of an accumulation (the gradients are not
 * complete yet). */
ACCEL_API accel_status accel_model_parameter_grad(accel_context *ctx, const accel_model *model, size_t index,
                                                  accel_tensor **out);

/* ------------------------------------------------------------------------------------
 * Tokenizers (docs/lm.md, "Tokenizers")
 *
 * Text to the ids a model was trained with, and back, without Python: a Hugging Face
 * tokenizer.json (BPE, byte-level as GPT-2, Llama 3, Qwen2 and SmolLM publish it, or with
 * byte fallback as Llama 2, Mistral, Gemma and Phi-3 do, with its normalizer, pre-tokenizer
 * regular expression, added and special tokens, post-processor template and decoder) gives
 * the ids Hugging Face `tokenizers` gives; a SentencePiece .model gives SentencePiece's own.
 * A tokenizer is immutable after loading: any number of threads may use it at once.
 * ---------------------------------------------------------------------------------- */

typedef struct accel_tokenizer accel_tokenizer;

/* Loads a tokenizer from `path`: a tokenizer.json, a SentencePiece .model, or a model
 * directory holding tokenizer.json (preferred) or tokenizer.model. From a directory (or a
 * file named tokenizer.json or *.model in one) tokenizer_config.json and
 * special_tokens_map.json are read, when present, for the BOS, EOS, padding and unknown
 * tokens and, for a .model, add_bos_token (default true) and add_eos_token (default
 * false). Errors: ACCEL_ERR_IO naming the path for a missing file or a directory with
 * neither file; ACCEL_ERR_FORMAT naming the file and the field for a file that is not a
 * tokenizer (bad JSON, merges naming unknown tokens, a regular expression that does not
 * compile); ACCEL_ERR_UNSUPPORTED naming the component for a model type other than BPE in
 * tokenizer.json (Unigram and WordPiece), a normalizer, pre-tokenizer, post-processor or
 * decoder this version lacks, or BPE dropout. *out belongs to the caller. */
ACCEL_API accel_status accel_tokenizer_load(const char *path, accel_tokenizer **out);

/* Releases a tokenizer. NULL is accepted. */
ACCEL_API void accel_tokenizer_destroy(accel_tokenizer *tokenizer);

/* The number of ids: one more than the largest id of the vocabulary and the added tokens. */
ACCEL_API accel_status accel_tokenizer_vocab_size(const accel_tokenizer *tokenizer, int64_t *out);

typedef enum accel_special_token {
    ACCEL_TOKEN_BOS = 0,  /* beginning of sequence */
    ACCEL_TOKEN_EOS = 1,  /* end of sequence (generation's stop) */
    ACCEL_TOKEN_PAD = 2,  /* padding */
    ACCEL_TOKEN_UNK = 3   /* unknown */
} accel_special_token;

/* The id of a special token in *out, or -1 when the tokenizer has none (tokenizer_config.json
 * names none, or names a token that is not in the vocabulary). Errors:
 * ACCEL_ERR_INVALID_ARGUMENT for an unknown `which`. */
ACCEL_API accel_status accel_tokenizer_special_id(const accel_tokenizer *tokenizer, accel_special_token which,
                                                  int64_t *out);

/* The id of the token whose text is `token` (NUL-terminated; byte-level tokens in their
 * mapped form, "Ġthe") in *out, or -1 when there is none. */
ACCEL_API accel_status accel_tokenizer_token_to_id(const accel_tokenizer *tokenizer, const char *token, int64_t *out);

/* The text of token `id` in *out (NUL-terminated, owned by the tokenizer, valid until it is
 * destroyed) and whether it is a special token (skipped by decode's skip_special_tokens) in
 * *out_special (may be NULL). Errors: ACCEL_ERR_INVALID_ARGUMENT for an id outside
 * [0, vocab_size). */
ACCEL_API accel_status accel_tokenizer_id_to_token(const accel_tokenizer *tokenizer, int64_t id, const char **out,
                                                   int *out_special);

typedef enum accel_side {
    ACCEL_SIDE_RIGHT = 0,
    ACCEL_SIDE_LEFT = 1
} accel_side;

#define ACCEL_ENCODE_OPTIONS_VERSION 1

typedef struct accel_encode_options {
    uint32_t version;              /* ACCEL_ENCODE_OPTIONS_VERSION */
    int32_t add_special_tokens;    /* non-zero (default): the post-processor's tokens (Llama's
                                      BOS...), as Hugging Face's add_special_tokens=True */
    int32_t replace_invalid_utf8;  /* 0 (default): text that is not valid UTF-8 is
                                      ACCEL_ERR_INVALID_ARGUMENT, naming the byte offset;
                                      non-zero: each invalid sequence becomes U+FFFD first, as
                                      Python's bytes.decode("utf-8", "replace") does */
    int64_t max_length;            /* > 0: truncate to this many ids, the special tokens added
                                      included; 0 (default): no truncation */
    accel_side truncation_side;    /* where truncation drops ids (default RIGHT: the end) */
    accel_side padding_side;       /* batches: where padding goes (default RIGHT; LEFT for
                                      generation from a batch of prompts) */
    int32_t pad_to_max_length;     /* batches: non-zero pads every row to max_length (> 0);
                                      0 (default): to the longest row */
    int64_t pad_to_multiple_of;    /* batches: the width is rounded up to a multiple of this
                                      (0, default: not rounded) */
    int64_t pad_id;                /* batches: the padding id; -1 (default): the tokenizer's
                                      padding token, else 0 */
} accel_encode_options;

#define ACCEL_ENCODE_OPTIONS_INIT \
    { ACCEL_ENCODE_OPTIONS_VERSION, 1, 0, 0, ACCEL_SIDE_RIGHT, ACCEL_SIDE_RIGHT, 0, 0, -1 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_encode_options_init(accel_encode_options *opts, uint32_t version);

/* Encodes text[0..length) (UTF-8; it may hold NUL bytes) into a new int64 host tensor [n]
 * in *out. Special tokens written in the text ("<|im_start|>") become their ids, as in
 * Hugging Face tokenizers (a SentencePiece .model reads them as text, as SentencePiece
 * does). opts may be NULL (the defaults). Errors: ACCEL_ERR_INVALID_ARGUMENT for NULL
 * pointers (text may be NULL when length is 0), invalid UTF-8 without replace_invalid_utf8
 * (the byte offset named), a max_length below the number of special tokens added, a
 * negative max_length, pad_to_multiple_of or a pad_id below -1, an unknown side. */
ACCEL_API accel_status accel_tokenizer_encode(const accel_tokenizer *tokenizer, const char *text, size_t length,
                                              const accel_encode_options *opts, accel_tensor **out);

/* Encodes texts[0..count) (count >= 1; lengths[i] bytes each, or NUL-terminated where
 * lengths is NULL), several threads at once for large batches, into two new int64 host
 * tensors [count, T]: the ids, padded as opts says, in *out_ids and the attention mask (1 for
 * a token, 0 for padding) in *out_mask (may be NULL). These are accel_lm_forward's
 * input_ids and attention_mask. Errors: as accel_tokenizer_encode's, naming the text's
 * index; also pad_to_max_length without max_length, a pad_id outside the vocabulary. */
ACCEL_API accel_status accel_tokenizer_encode_batch(const accel_tokenizer *tokenizer, const char *const *texts,
                                                    const size_t *lengths, size_t count,
                                                    const accel_encode_options *opts, accel_tensor **out_ids,
                                                    accel_tensor **out_mask);

/* Decodes ids[0..count) into text: the decoder's (byte-level bytes, byte fallback,
 * SentencePiece's spaces), special tokens dropped when skip_special_tokens is non-zero,
 * bytes that do not form UTF-8 replaced by U+FFFD, as Hugging Face's decode. The text
 * (NUL-terminated) goes to buf when capacity is more than its length; its length (without
 * the NUL) goes to *out_length in every case, so a call with buf NULL and capacity 0 asks
 * for the size. Errors: ACCEL_ERR_INVALID_ARGUMENT for an id outside [0, vocab_size) (its
 * index named), NULL ids with count > 0, a NULL out_length, or a buf too small (nothing
 * written, *out_length says what is needed). */
ACCEL_API accel_status accel_tokenizer_decode(const accel_tokenizer *tokenizer, const int64_t *ids, size_t count,
                                              int skip_special_tokens, char *buf, size_t capacity,
                                              size_t *out_length);

typedef enum accel_chat_format {
    ACCEL_CHAT_AUTO = 0,     /* the tokenizer's chat_template */
    ACCEL_CHAT_CHATML = 1,   /* <|im_start|>role\n...<|im_end|> (Qwen2, Qwen2.5, Qwen3, SmolLM2/3...) */
    ACCEL_CHAT_LLAMA3 = 2,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    ACCEL_CHAT_GEMMA = 3,    /* <start_of_turn>user|model\n...<end_of_turn> */
    ACCEL_CHAT_PHI3 = 4,     /* <|user|>\n...<|end|> */
    ACCEL_CHAT_MISTRAL = 5   /* [INST] ... [/INST] (Mistral-7B-Instruct, Llama 2 chat) */
} accel_chat_format;

typedef struct accel_chat_message {
    const char *role;
    const char *content;
} accel_chat_message;

/* Renders a conversation (messages[0..count): each a role, "system", "user" or "assistant",
 * and its content, NUL-terminated UTF-8) as the model's chat template does, into buf (as
 * accel_tokenizer_decode: the text and its NUL when capacity exceeds its length; its length
 * in *out_length in every case; buf NULL and capacity 0 asks for the size). `format`
 * ACCEL_CHAT_AUTO reads the template from tokenizer_config.json's chat_template and
 * recognises it by its markers; accel does not run Jinja: each format renders exactly what
 * the family's published template renders (transformers' apply_chat_template with it).
 * With add_generation_prompt the text ends with the assistant's header, for generation.
 * Encode the text with add_special_tokens = 0: the template holds the BOS where the family
 * has one. Errors: ACCEL_ERR_INVALID_ARGUMENT for NULL pointers (messages may be NULL when
 * count is 0), an unknown format, a message the template refuses (Gemma: a system role;
 * Gemma and Mistral: roles that do not alternate user/assistant), a format that needs a
 * BOS or EOS token the tokenizer lacks, no chat_template with ACCEL_CHAT_AUTO, a buf too
 * small; ACCEL_ERR_UNSUPPORTED for a chat_template that is none of the formats. */
ACCEL_API accel_status accel_tokenizer_apply_chat(const accel_tokenizer *tokenizer, accel_chat_format format,
                                                  const accel_chat_message *messages, size_t count,
                                                  int add_generation_prompt, char *buf, size_t capacity,
                                                  size_t *out_length);

/* ------------------------------------------------------------------------------------
 * Fine-tuning data (supervised fine-tuning: docs/lm.md, "Fine-tuning data")
 * ---------------------------------------------------------------------------------- */

#define ACCEL_SFT_OPTIONS_VERSION 1

typedef struct accel_sft_options {
    uint32_t version;                /* ACCEL_SFT_OPTIONS_VERSION */
    accel_chat_format chat_format;   /* for "messages" lines (default ACCEL_CHAT_AUTO) */
    int32_t completion_only_loss;    /* non-zero (default): labels only on the completion of a
                                        prompt/completion line and on the assistant turns of a
                                        conversation (their end-of-turn token included); -100
                                        elsewhere. 0: labels on every token */
    int32_t add_eos;                 /* non-zero (default): "text" and prompt/completion lines
                                        end with the EOS token (conversations: the template's) */
    int64_t max_length;              /* > 0: each example is cut to this many tokens (the end
                                        dropped); with packing, the length of a block. 0
                                        (default): whole examples */
    int32_t packing;                 /* non-zero: the examples are concatenated and cut into
                                        blocks of max_length tokens (attention crosses example
                                        boundaries, as TRL's packing without position resets) */
    accel_side padding_side;         /* default ACCEL_SIDE_RIGHT */
    int64_t pad_to_multiple_of;      /* the batch's width rounded up to a multiple (0, default:
                                        the longest example) */
    int64_t pad_id;                  /* -1 (default): the tokenizer's padding token, else its
                                        EOS, else 0 */
} accel_sft_options;

#define ACCEL_SFT_OPTIONS_INIT \
    { ACCEL_SFT_OPTIONS_VERSION, ACCEL_CHAT_AUTO, 1, 1, 0, 0, ACCEL_SIDE_RIGHT, 0, -1 }

/* Fills *opts with the defaults of `version` (as accel_options_init). */
ACCEL_API accel_status accel_sft_options_init(accel_sft_options *opts, uint32_t version);

/* Creates a loader of fine-tuning batches from a JSONL file, tokenized with `tokenizer`:
 * each non-blank line is an object with "messages" (an array of {"role", "content"}:
 * rendered with the chat format, as accel_tokenizer_apply_chat), "prompt" and "completion"
 * (encoded together with the tokenizer's special tokens), or "text". accel_dataloader_next
 * yields input_ids (int64 [batch, T]) as the inputs and labels (int64 [batch, T], -100 on
 * masked and padding positions) as the targets, padded to the batch's longest example on
 * padding_side; accel_dataloader_attention_mask gives the batch's attention mask. Pass all
 * three to accel_lm_forward (or train with accel_train_micro_batches, which does). The
 * loader shuffles, shards, checkpoints and resumes like the others (loader_opts).
 * Errors: ACCEL_ERR_IO for a missing file; ACCEL_ERR_FORMAT naming the file and line for a
 * line that is not a JSON object, not UTF-8, or has none of the three shapes or a field of
 * the wrong type; ACCEL_ERR_INVALID_ARGUMENT for NULL pointers, a file with no example, a
 * conversation the chat format refuses (file and line named), an unknown chat format or
 * side, negative max_length or pad_to_multiple_of, packing with max_length < 2, a pad_id
 * below -1 or outside the vocabulary; ACCEL_ERR_UNSUPPORTED as accel_tokenizer_apply_chat.
 * The examples are tokenized once, here; the loader keeps no reference to the tokenizer.
 * *out belongs to the caller. */
ACCEL_API accel_status accel_sft_dataloader_create(accel_context *ctx, const accel_tokenizer *tokenizer,
                                                   const char *path, const accel_sft_options *sft_opts,
                                                   const accel_dataloader_options *loader_opts,
                                                   accel_dataloader **out);

/* The attention mask (int64 [batch, T]: 1 for a token, 0 for padding) of the batch the last
 * accel_dataloader_next returned, as a new tensor on the context's device in *out, for the
 * causal-LM loaders (accel_lm_dataloader_create, accel_sft_dataloader_create). Errors:
 * ACCEL_ERR_INVALID_ARGUMENT for NULL pointers, a loader of another context, or a loader
 * whose batches have no mask (rows of tensors); ACCEL_ERR_INVALID_STATE before the loader's
 * first batch or after the end of an epoch (no batch). */
ACCEL_API accel_status accel_dataloader_attention_mask(accel_context *ctx, const accel_dataloader *loader,
                                                       accel_tensor **out);

/* accel_lm_generate from a padded batch of prompts: input_ids (int64 [batch, seq]) with
 * attention_mask ([batch, seq], int64, int32 or bool: 1 for a token, 0 for padding), the
 * padding on the left of each row (accel_tokenizer_encode_batch with padding_side
 * ACCEL_SIDE_LEFT). Each row's positions count its own tokens, so every row continues as its
 * prompt alone would (transformers' generate with an attention mask). *out: int64 [batch,
 * seq + n], the padded prompts then the new tokens. Errors: as accel_lm_generate's; also
 * ACCEL_ERR_INVALID_ARGUMENT for a NULL attention_mask, a mask of another shape or dtype, a
 * row without tokens, or padding after a token (right padding). */
ACCEL_API accel_status accel_lm_generate_padded(accel_context *ctx, accel_model *model, const accel_tensor *input_ids,
                                                const accel_tensor *attention_mask, const accel_generate_options *opts,
                                                accel_tensor **out);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_ACCEL_H */
