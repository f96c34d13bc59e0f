// The collective engine: moves the data of matched operations with NCCL's semantics.
// Reductions combine the ranks' inputs in the order NCCL's algorithm would, with its
// rounding (comm::reduce_nccl), so results do not depend on thread scheduling; large ones
// run on several threads over disjoint slices. Torch-free.
#pragma once

#include <vector>

#include "comm/kernels.h"
#include "sim/operation.h"

namespace accel::sim {

class Engine {
 public:
  explicit Engine(int threads = 1) : threads_(threads) {}

  // A collective every rank has posted: ops[q] is rank q's call, ref the call they all
  // match (the first poster's: its type, count, operation, scalar and root are used).
  // `order`: how NCCL would combine the ranks' values (the algorithm the cost model picked);
  // its owner and count are filled in here per collective.
  void collective(const Op& ref, const std::vector<OpPtr>& ops, comm::NcclOrder order = {}) const;
  // A send's data into its matched recv.
  static void p2p(const Op& send, const Op& recv);

 private:
  template <class F>
  void parallel_for(size_t count, size_t min_chunk, F&& body) const;

  int threads_;  // the most threads one operation uses
};

}  // namespace accel::sim
