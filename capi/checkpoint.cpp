// The C ABI: projects and checkpoints (save_state, load_state).
#include "capi/internal.h"

using namespace accel::capi;

extern "C" {

accel_status accel_project_options_init(accel_project_options* opts, uint32_t version) {
  return guard(nullptr, "accel_project_options_init", [&] { init_options(opts, version); });
}

accel_status accel_set_project(accel_context* ctx, const accel_project_options* opts) {
  return guard(ctx, "accel_set_project", [&] {
    NEED(ctx);
    NEED(opts);
    const accel_project_options o = read_options(opts);
    ACCEL_CHECK(o.project_dir != nullptr, Status::InvalidArgument, "project_dir is NULL");
    ACCEL_CHECK(o.project_dir[0] != '\0', Status::InvalidArgument, "project_dir is empty");
    acc_of(ctx).set_project(accel::ProjectConfig{o.project_dir, o.total_limit});
  });
}

accel_status accel_save_state(accel_context* ctx, const char* dir) {
  return guard(ctx, "accel_save_state", [&] {
    NEED(ctx);
    ACCEL_CHECK(dir == nullptr || dir[0] != '\0', Status::InvalidArgument,
                "dir is empty (pass NULL for the project's next checkpoint)");
    ctx->last_checkpoint = acc_of(ctx).save_state(dir ? dir : "");
  });
}

accel_status accel_load_state(accel_context* ctx, const char* dir) {
  return guard(ctx, "accel_load_state", [&] {
    NEED(ctx);
    ACCEL_CHECK(dir == nullptr || dir[0] != '\0', Status::InvalidArgument,
                "dir is empty (pass NULL for the project's newest checkpoint)");
    ctx->last_checkpoint = acc_of(ctx).load_state(dir ? dir : "");
  });
}

accel_status accel_last_checkpoint(const accel_context* ctx, const char** out) {
  return guard(ctx, "accel_last_checkpoint", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->last_checkpoint.c_str();
  });
}

}  // extern "C"
