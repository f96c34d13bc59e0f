// Adafactor (Shazeer & Stern, 2018) exactly as transformers' `Adafactor` (optimizer.h), written
// once, for a shard: one process steps each parameter as a shard of its own; ZeRO steps the
// rank's chunks. The sums it needs over a whole tensor (each matrix's row and column sums of
// g^2 + eps1, each parameter's sum of squares before the step and its update's) are the
// shard's partial sums in fp64, summed over the ranks by the shard's reducer (two
// all-reduces a step under ZeRO, none on one process); each rank then updates its elements.
#include <cmath>

#include "runtime/optim/optimizer.h"

namespace accel {

void validate(const AdafactorConfig& c) {
  if (c.relative_step) {
    ACCEL_CHECK(c.lr == 0, Status::InvalidArgument, "Adafactor: lr ", c.lr,
                " with relative_step: the step size is relative (set lr 0, or turn relative_step off)");
  } else {
    domain::positive("lr", c.lr);
    ACCEL_CHECK(!c.warmup_init, Status::InvalidArgument, "Adafactor: warmup_init needs relative_step");
  }
  domain::non_negative("eps1", c.eps1);
  domain::non_negative("eps2", c.eps2);
  domain::positive("clip_threshold", c.clip_threshold);
  ACCEL_CHECK(std::isfinite(c.decay_rate) && c.decay_rate < 0, Status::InvalidArgument,
              "Adafactor: decay_rate must be finite and < 0 (beta2 at step t is 1 - t^decay_rate), got ", c.decay_rate);
  domain::half_open("beta1", c.beta1, 0, 1);
  domain::non_negative("weight_decay", c.weight_decay);
}

namespace {

int64_t product(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t d = from; d < to; ++d) n *= s[d];
  return n;
}

class Adafactor final : public OptimizerAlgorithm {
 public:
  explicit Adafactor(const AdafactorConfig& c) : c_(c) { validate(c_); }
  const char* kind() const override { return "adafactor"; }
  const char* name() const override { return "Adafactor"; }
  double base_lr() const override { return c_.lr; }
  std::vector<std::string> state_kinds() const override {
    if (c_.beta1 > 0) return {"exp_avg", "exp_avg_sq", "exp_avg_sq_row", "exp_avg_sq_col"};
    return {"exp_avg_sq", "exp_avg_sq_row", "exp_avg_sq_col"};
  }
  // second moments factored for tensors of 2 or more dimensions, full for the others
  std::vector<std::string> kinds_of(const torch::Tensor& param) const override {
    std::vector<std::string> k;
    if (c_.beta1 > 0) k.push_back("exp_avg");
    if (param.dim() >= 2) {
      k.push_back("exp_avg_sq_row");
      k.push_back("exp_avg_sq_col");
    } else {
      k.push_back("exp_avg_sq");
    }
    return k;
  }
  std::vector<int64_t> state_shape(const std::string& kind, const std::vector<int64_t>& shape) const override {
    std::vector<int64_t> s = shape;
    if (kind == "exp_avg_sq_row" && !s.empty()) s.pop_back();
    if (kind == "exp_avg_sq_col" && s.size() >= 2) s.erase(s.end() - 2);
    return s;
  }
  StateScope scope(const std::string& kind) const override {
    if (kind == "exp_avg_sq_row" || kind == "exp_avg_sq_col") return StateScope::Parameter;
    if (kind == "exp_avg_sq") return StateScope::Piece;
    return StateScope::Element;
  }
  bool fp32_state() const override { return true; }
  int64_t state_steps(const std::vector<ParamState>& state) const override {
    for (const auto& st : state)  // the first parameter's count that has one
      for (const auto& [k, t] : st.t)
        if (t.defined()) return st.steps;
    return 0;
  }
  void check_schedulable() const override {
    ACCEL_CHECK(!c_.relative_step, Status::InvalidArgument,
                "Adafactor with relative_step sets its own step size: a scheduler has no lr to schedule (create it "
                "with an lr and relative_step off)");
  }

  void step(const std::vector<torch::Tensor>& params, std::vector<ParamState>& state, double lr) override {
    step_as_shards(*this, params, state, lr);
  }
  bool shardable() const override { return true; }
  void check_shardable(const Model& model) const override {
    for (size_t i = 0; i < model.parameters().size(); ++i)
      ACCEL_CHECK(model.parameters()[i].dim() <= 2, Status::Unsupported, "ZeRO shards Adafactor for parameters of 1 or 2 ",
                  "dimensions; '", model.parameter_names()[i], "' has ", model.parameters()[i].dim());
  }
  void step_shard(Shard& shard, double base_lr) const override;

 private:
  AdafactorConfig c_;
};

void Adafactor::step_shard(Shard& shard, double base_lr) const {
  const AdafactorConfig& c = c_;
  torch::NoGradGuard ng;
  const std::vector<size_t>& params = shard.params();
  const size_t np = params.size();
  const std::vector<StatePiece>& mine = shard.pieces();
  const torch::Device dev = shard.segments() > 0 ? shard.weight(0).device() : torch::Device(torch::kCPU);
  const auto f32 = torch::dtype(torch::kFloat).device(dev), f64 = torch::dtype(torch::kDouble).device(dev);
  // each parameter's place in `params`, its shape; a tensor of 2 or more dimensions is
  // factored as `mats` matrices of R x C (its last two dimensions)
  std::vector<size_t> at_of;
  std::vector<std::vector<int64_t>> shape(np);
  std::vector<int64_t> numel(np), R(np, 0), C(np, 0), mats(np, 0);
  for (size_t k = 0; k < np; ++k) {
    if (params[k] >= at_of.size()) at_of.resize(params[k] + 1, SIZE_MAX);
    at_of[params[k]] = k;
    shape[k] = shard.shape(params[k]);
    numel[k] = product(shape[k], 0, shape[k].size());
    if (shape[k].size() < 2) continue;
    R[k] = shape[k][shape[k].size() - 2];
    C[k] = shape[k].back();
    mats[k] = product(shape[k], 0, shape[k].size() - 2);
  }
  auto factored = [&](size_t k) { return shape[k].size() >= 2; };
  // the state: the factors whole on every rank, a vector's second moment over its piece
  for (size_t k = 0; k < np; ++k)
    if (factored(k)) {
      shard.param_state("exp_avg_sq_row", params[k]);
      shard.param_state("exp_avg_sq_col", params[k]);
    }
  for (const auto& pc : mine)
    if (!factored(at_of[pc.param])) shard.param_state("exp_avg_sq", pc.param);
  if (c.beta1 > 0 && shard.segments() > 0) shard.state("exp_avg", 0);

  // 1. partial sums: rows and columns of g^2 + eps1 per matrix, then each parameter's sum of squares
  std::vector<int64_t> row_at(np, -1), col_at(np, -1);
  int64_t n = 0;
  for (size_t k = 0; k < np; ++k)
    if (factored(k)) {
      row_at[k] = n;
      n += mats[k] * R[k];
      col_at[k] = n;
      n += mats[k] * C[k];
    }
  const int64_t wsq_at = n;
  n += static_cast<int64_t>(np);
  torch::Tensor sums = torch::zeros({n}, f64);
  // a piece's gradient (fp32, unscaled; a view when it already is)
  auto grad_of = [&](const StatePiece& pc) { return shard.grad(pc.unit, pc.in_chunk, pc.len); };
  // a matrix piece (a range of its row-major elements) as rectangles: the end of a first row,
  // whole rows (within one matrix), the start of a last row; `row` and `col` count the rows
  // and columns of every matrix of the tensor before
  struct Rect {
    int64_t at, row, rows, col, cols;  // at: the offset in the piece
  };
  auto rects = [&](const StatePiece& pc) {
    const size_t k = at_of[pc.param];
    const int64_t rr = R[k], cc = C[k];
    std::vector<Rect> out;
    int64_t at = 0, e = pc.start;
    while (at < pc.len) {
      const int64_t mat = e / (rr * cc), in = e % (rr * cc);
      const int64_t row = in / cc, col = in % cc, left = pc.len - at;
      Rect r{at, mat * rr + row, 1, mat * cc + col, std::min(cc - col, left)};
      if (col == 0 && left >= cc) r = Rect{at, mat * rr + row, std::min(left / cc, rr - row), mat * cc, cc};
      out.push_back(r);
      at += r.rows * r.cols;
      e += r.rows * r.cols;
    }
    return out;
  };
  for (const StatePiece& pc : mine) {
    const size_t k = at_of[pc.param];
    const torch::Tensor w = shard.weight(pc.unit).narrow(0, pc.in_chunk, pc.len);
    sums.narrow(0, wsq_at + static_cast<int64_t>(k), 1).add_(w.pow(2).sum(torch::kDouble));
    if (row_at[k] >= 0) {
      const torch::Tensor g = grad_of(pc);
      for (const Rect& r : rects(pc)) {
        auto sq = g.narrow(0, r.at, r.rows * r.cols).view({r.rows, r.cols}).pow(2).add_(c.eps1);
        sums.narrow(0, row_at[k] + r.row, r.rows).add_(sq.sum(1, false, torch::kDouble));
        sums.narrow(0, col_at[k] + r.col, r.cols).add_(sq.sum(0, false, torch::kDouble));
      }
    }
  }
  shard.reducer().sum(sums);
  const torch::Tensor sums_host = sums.narrow(0, wsq_at, static_cast<int64_t>(np)).cpu();
  const double* wsq = sums_host.data_ptr<double>();

  // 2. the step sizes (transformers' _get_lr, with the parameter's RMS before this update)
  // and the factors (the same on every rank)
  const double step = static_cast<double>(shard.step());
  double rel = base_lr;
  if (c.relative_step) rel = std::min(c.warmup_init ? 1e-6 * step : 1e-2, 1.0 / std::sqrt(step));
  const double beta2t = 1.0 - std::pow(step, c.decay_rate);
  std::vector<double> lr(np);
  for (size_t k = 0; k < np; ++k) {
    const double rms_w = std::sqrt(wsq[k] / static_cast<double>(numel[k]));
    lr[k] = (c.scale_parameter ? std::max(c.eps2, rms_w) : 1.0) * rel;
    if (row_at[k] < 0) continue;
    torch::Tensor row = shard.param_state("exp_avg_sq_row", params[k]).view({-1});
    torch::Tensor col = shard.param_state("exp_avg_sq_col", params[k]).view({-1});
    row.mul_(beta2t).add_((sums.narrow(0, row_at[k], mats[k] * R[k]) / static_cast<double>(C[k])).to(torch::kFloat),
                          1.0 - beta2t);
    col.mul_(beta2t).add_((sums.narrow(0, col_at[k], mats[k] * C[k]) / static_cast<double>(R[k])).to(torch::kFloat),
                          1.0 - beta2t);
  }

  // 3. this shard's elements of each update, and their sums of squares for its RMS
  std::vector<torch::Tensor> upd(mine.size());
  torch::Tensor usq = torch::zeros({static_cast<int64_t>(np)}, f64);
  std::vector<torch::Tensor> rfac(np), cfac(np);
  for (size_t j = 0; j < mine.size(); ++j) {
    const size_t k = at_of[mine[j].param];
    const torch::Tensor g = grad_of(mine[j]);
    if (row_at[k] >= 0) {
      if (!rfac[k].defined()) {
        const torch::Tensor row = shard.param_state("exp_avg_sq_row", params[k]);
        rfac[k] = (row / row.mean(-1, /*keepdim=*/true)).rsqrt_().reshape({-1});
        cfac[k] = shard.param_state("exp_avg_sq_col", params[k]).rsqrt().reshape({-1});
      }
      upd[j] = torch::empty({mine[j].len}, f32);
      for (const Rect& r : rects(mine[j]))
        upd[j]
            .narrow(0, r.at, r.rows * r.cols)
            .view({r.rows, r.cols})
            .copy_(rfac[k].narrow(0, r.row, r.rows).unsqueeze(1) * cfac[k].narrow(0, r.col, r.cols).unsqueeze(0))
            .mul_(g.narrow(0, r.at, r.rows * r.cols).view({r.rows, r.cols}));
    } else {
      torch::Tensor sq = shard.param_state("exp_avg_sq", mine[j].param).view({-1});
      sq.mul_(beta2t).add_(g * g + c.eps1, 1.0 - beta2t);
      upd[j] = sq.rsqrt().mul_(g);
    }
    usq.narrow(0, static_cast<int64_t>(k), 1).add_(upd[j].pow(2).sum(torch::kDouble));
  }
  shard.reducer().sum(usq);
  const torch::Tensor usq_host = usq.cpu();
  const double* usq_of = usq_host.data_ptr<double>();

  // 4. clip by the update's RMS, the step size, beta1, weight decay, the update
  for (size_t j = 0; j < mine.size(); ++j) {
    const StatePiece& pc = mine[j];
    const size_t k = at_of[pc.param];
    const double rms_u = std::sqrt(usq_of[k] / static_cast<double>(numel[k]));
    torch::Tensor u = upd[j];
    u.div_(std::max(rms_u / c.clip_threshold, 1.0));
    u.mul_(lr[k]);
    if (c.beta1 > 0) {
      torch::Tensor ea = shard.state("exp_avg", pc.unit).narrow(0, pc.in_chunk, pc.len);
      ea.mul_(c.beta1).add_(u, 1.0 - c.beta1);
      u = ea;
    }
    torch::Tensor w = shard.weight(pc.unit).narrow(0, pc.in_chunk, pc.len);
    if (c.weight_decay != 0) w.add_(w, -c.weight_decay * lr[k]);
    w.add_(-u);
    upd[j] = torch::Tensor();
  }
  for (size_t s = 0; s < shard.segments(); ++s) shard.stepped(s);
}

}  // namespace

Optimizer::Optimizer(std::shared_ptr<Model> model, AdafactorConfig cfg)
    : Optimizer(std::move(model), std::make_unique<Adafactor>(cfg)) {}

}  // namespace accel
