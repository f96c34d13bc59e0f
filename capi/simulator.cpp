// The C ABI: the simulator (accel_sim_run and its reports).
#include "capi/internal.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// The simulator

accel_status accel_sim_options_init(accel_sim_options* opts, uint32_t version) {
  return guard(nullptr, "accel_sim_options_init", [&] { init_options(opts, version); });
}

accel_status accel_sim_run(const accel_sim_options* sim, const accel_options* ctx_opts, accel_rank_fn fn, void* user,
                           accel_sim_report** out) {
  std::unique_ptr<accel_sim_report> report;
  accel_status st = guard(nullptr, "accel_sim_run", [&] {
    NEED(fn);
    const accel_sim_options so = read_options(sim);
    accel::sim::WorldSettings ws;
    ws.world_size = so.world_size;
    if (so.topology) ws.topology = so.topology;
    if (so.device_memory) ws.device_memory = so.device_memory;
    if (so.host_memory) ws.host_memory = so.host_memory;
    ws.timeout_seconds = so.timeout_seconds;
    if (so.faults) ws.faults = so.faults;
    ws.engine_threads = so.engine_threads;
    const std::string trace = so.trace_path ? so.trace_path : "";
    accel::sim::RunReport ran = accel::world::run_simulated(ws, trace, runtime_options(ctx_opts), [&](std::unique_ptr<accel::Accelerator> acc) {
      auto ctx = std::make_unique<accel_context>();
      ctx->acc = std::move(acc);
      tls_error.clear();
      const accel_status s = fn(ctx.get(), user);
      // read as an int: a value outside the enum's range may not be loaded as accel_status (UBSan);
      // the lowest code is ACCEL_ERR_NON_FINITE until a new one is appended
      const int code = raw(s);
      // a value that is no accel_status (positive, or an unknown code) is the caller's bug
      ACCEL_CHECK(code <= ACCEL_OK && code >= ACCEL_ERR_NON_FINITE, Status::InvalidArgument, "fn returned ", code,
                  ", which is not an accel_status (ACCEL_OK or a negative ACCEL_ERR_* code)");
      // the rank's last failure message: this thread's slot holds the latest of them all
      if (code != ACCEL_OK)
        throw accel::Error(static_cast<Status>(code),
                           tls_error.empty() ? std::string(accel_status_name(static_cast<accel_status>(code))) : tls_error);
    });
    report = std::make_unique<accel_sim_report>();  // the world ran: the caller gets its report
    report->rep = std::move(ran);
    for (const auto& r : report->rep.ranks)
      if (r.status != Status::Ok) throw accel::Error(r.status, "rank " + std::to_string(r.rank) + ": " + r.error);
  });
  if (report && out) *out = report.release();
  return st;
}

void accel_sim_report_destroy(accel_sim_report* report) { delete report; }

accel_status accel_sim_report_world_size(const accel_sim_report* report, int32_t* out) {
  return guard(nullptr, "accel_sim_report_world_size", [&] {
    NEED(report);
    NEED(out);
    *out = static_cast<int32_t>(report->rep.ranks.size());
  });
}

accel_status accel_sim_report_rank(const accel_sim_report* report, int32_t rank, accel_status* out_status,
                                   const char** out_error, uint64_t* out_peak_bytes) {
  return guard(nullptr, "accel_sim_report_rank", [&] {
    NEED(report);
    ACCEL_CHECK(rank >= 0 && static_cast<size_t>(rank) < report->rep.ranks.size(), Status::InvalidArgument, "rank ",
                rank, " is not in this ", report->rep.ranks.size(), "-rank report");
    const auto& r = report->rep.ranks[static_cast<size_t>(rank)];
    if (out_status) *out_status = static_cast<accel_status>(r.status);
    if (out_error) *out_error = r.error.c_str();
    if (out_peak_bytes) *out_peak_bytes = r.peak_bytes;
  });
}

accel_status accel_sim_report_rank_host(const accel_sim_report* report, int32_t rank, uint64_t* out_host_peak_bytes,
                                        uint64_t* out_transfer_bytes, double* out_transfer_seconds) {
  return guard(nullptr, "accel_sim_report_rank_host", [&] {
    NEED(report);
    ACCEL_CHECK(rank >= 0 && static_cast<size_t>(rank) < report->rep.ranks.size(), Status::InvalidArgument, "rank ",
                rank, " is not in this ", report->rep.ranks.size(), "-rank report");
    const auto& r = report->rep.ranks[static_cast<size_t>(rank)];
    if (out_host_peak_bytes) *out_host_peak_bytes = r.host_peak_bytes;
    if (out_transfer_bytes) *out_transfer_bytes = r.host_transfer_bytes;
    if (out_transfer_seconds) *out_transfer_seconds = r.host_transfer_seconds;
  });
}

accel_status accel_sim_report_predicted_seconds(const accel_sim_report* report, double* out) {
  return guard(nullptr, "accel_sim_report_predicted_seconds", [&] {
    NEED(report);
    NEED(out);
    *out = report->rep.predicted_seconds;
  });
}

accel_status accel_sim_charge_compute(accel_context* ctx, double seconds, const char* label) {
  return guard(ctx, "accel_sim_charge_compute", [&] {
    NEED(ctx);
    ACCEL_CHECK(std::isfinite(seconds) && seconds >= 0, Status::InvalidArgument, "seconds must be >= 0, got ", seconds);
    if (accel::comm::ComputeClock* clock = acc_of(ctx).clock()) clock->charge_compute(seconds, label);  // else not simulated: nothing to charge
  });
}

}  // extern "C"
