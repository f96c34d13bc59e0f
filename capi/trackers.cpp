// The C ABI: trackers (accel.h's section "Trackers": init_trackers, log, end_training).
#include "capi/internal.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Trackers

accel_status accel_tracker_options_init(accel_tracker_options* opts, uint32_t version) {
  return guard(nullptr, "accel_tracker_options_init", [&] { init_options(opts, version); });
}

accel_status accel_init_trackers(accel_context* ctx, const accel_tracker_options* opts) {
  return guard(ctx, "accel_init_trackers", [&] {
    NEED(ctx);
    NEED(opts);
    const accel_tracker_options o = read_options(opts);
    ACCEL_CHECK(!ctx->trackers_open, Status::InvalidState,
                "the trackers are already open (accel_end_training closes them)");
    ACCEL_CHECK(o.log_dir != nullptr && o.log_dir[0] != '\0', Status::InvalidArgument, "log_dir is NULL or empty");
    uint32_t writers = o.writers;
    if (writers == 0) {
      const char* with = std::getenv("ACCEL_LOG_WITH");
      writers = with && *with ? accel::tracker::parse_writers(with, "ACCEL_LOG_WITH") : accel::tracker::JsonLines;
    }
    accel::tracker::check_writers(writers);  // also on a process that writes nothing
    const int rank = ctx->acc->comm().rank();
    if (o.all_processes != 0)
      ctx->tracker = std::make_unique<accel::tracker::Tracker>(
          (std::filesystem::path(o.log_dir) / ("process-" + std::to_string(rank))).string(), writers);
    else if (rank == 0)
      ctx->tracker = std::make_unique<accel::tracker::Tracker>(o.log_dir, writers);
    ctx->trackers_open = true;
  });
}

accel_status accel_log(accel_context* ctx, int64_t step, const char* const* names, const double* values, int32_t count) {
  return guard(ctx, "accel_log", [&] {
    NEED(ctx);
    ACCEL_CHECK(ctx->trackers_open, Status::InvalidState, "no trackers are open: call accel_init_trackers first");
    NEED(names);
    NEED(values);
    ACCEL_CHECK(count >= 1, Status::InvalidArgument, "count must be >= 1, got ", count);
    ACCEL_CHECK(step >= 0, Status::InvalidArgument, "step must be >= 0, got ", step);
    std::vector<std::string> n;
    std::vector<double> v(values, values + count);
    for (int32_t i = 0; i < count; ++i) {
      ACCEL_CHECK(names[i] != nullptr, Status::InvalidArgument, "names[", i, "] is NULL");
      n.emplace_back(names[i]);
    }
    if (ctx->tracker)
      ctx->tracker->log(step, n, v);
    else  // a process that writes nothing checks the names as the writing one does
      accel::tracker::check_names(n);
  });
}

accel_status accel_end_training(accel_context* ctx) {
  return guard(ctx, "accel_end_training", [&] {
    NEED(ctx);
    ctx->trackers_open = false;
    if (!ctx->tracker) return;
    auto t = std::move(ctx->tracker);
    t->close();
  });
}

}  // extern "C"
