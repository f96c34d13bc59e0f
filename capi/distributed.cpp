// The C ABI: process utilities (Accelerate's names), across the processes of a world.
#include "capi/internal.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Processes

accel_status accel_process_index(const accel_context* ctx, int32_t* out) {
  return guard(ctx, "accel_process_index", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->process_index();
  });
}

accel_status accel_num_processes(const accel_context* ctx, int32_t* out) {
  return guard(ctx, "accel_num_processes", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->num_processes();
  });
}

accel_status accel_barrier(accel_context* ctx) {
  return guard(ctx, "accel_barrier", [&] {
    NEED(ctx);
    acc_of(ctx).comm().barrier();
  });
}

accel_status accel_reduce(accel_context* ctx, const accel_tensor* tensor, accel_reduce_op op, accel_tensor** out) {
  return guard(ctx, "accel_reduce", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    accel::comm::RedOp rop;
    switch (raw(op)) {
      case ACCEL_REDUCE_SUM: rop = accel::comm::RedOp::Sum; break;
      case ACCEL_REDUCE_MEAN: rop = accel::comm::RedOp::Avg; break;
      case ACCEL_REDUCE_MAX: rop = accel::comm::RedOp::Max; break;
      case ACCEL_REDUCE_MIN: rop = accel::comm::RedOp::Min; break;
      case ACCEL_REDUCE_PROD: rop = accel::comm::RedOp::Prod; break;
      default: accel::fail(Status::InvalidArgument, "op must be an accel_reduce_op (0..4), got ", raw(op));
    }
    *out = wrap(acc_of(ctx).reduce(tensor->t, rop));
  });
}

accel_status accel_local_process_index(const accel_context* ctx, int32_t* out) {
  return guard(ctx, "accel_local_process_index", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->local_process_index();
  });
}

accel_status accel_is_main_process(const accel_context* ctx, int* out) {
  return guard(ctx, "accel_is_main_process", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->process_index() == 0;
  });
}

accel_status accel_is_local_main_process(const accel_context* ctx, int* out) {
  return guard(ctx, "accel_is_local_main_process", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->local_process_index() == 0;
  });
}

accel_status accel_broadcast(accel_context* ctx, const accel_tensor* tensor, int32_t root, accel_tensor** out) {
  return guard(ctx, "accel_broadcast", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).broadcast(tensor->t, root));
  });
}

accel_status accel_gather(accel_context* ctx, const accel_tensor* tensor, accel_tensor** out) {
  return guard(ctx, "accel_gather", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).gather(tensor->t));
  });
}

accel_status accel_gather_for_metrics(accel_context* ctx, const accel_tensor* tensor, accel_tensor** out) {
  return guard(ctx, "accel_gather_for_metrics", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).gather_for_metrics(tensor->t));
  });
}

accel_status accel_pad_across_processes(accel_context* ctx, const accel_tensor* tensor, int32_t dim, double pad_value,
                                        int pad_first, accel_tensor** out) {
  return guard(ctx, "accel_pad_across_processes", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).pad_across_processes(tensor->t, dim, pad_value, pad_first != 0));
  });
}

accel_status accel_print(accel_context* ctx, const char* message) {
  return guard(ctx, "accel_print", [&] {
    NEED(ctx);
    NEED(message);
    if (ctx->acc->process_index() == 0) {
      std::fputs(message, stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
  });
}

accel_status accel_set_seed(accel_context* ctx, uint64_t seed, int per_process) {
  return guard(ctx, "accel_set_seed", [&] {
    NEED(ctx);
    acc_of(ctx).set_seed(seed, per_process != 0);
  });
}

}  // extern "C"
