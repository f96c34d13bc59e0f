// Element-wise reduction kernels shared by the backends that move bytes on the host
// (local and gloo: reduce; the simulator: reduce_nccl). Deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace accel::comm {

// float16 / bfloat16 <-> float32, round-to-nearest-even, with inf/NaN/subnormals.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

// dst[i] = op(srcs[0][i], srcs[1][i], ..., srcs[n-1][i]) for i in [begin, end), as the
// Gloo and local backends reduce: floating types accumulate in fp32 (fp16, bf16, fp32) or
// fp64 (fp64), in the order of `srcs`, and are rounded once to the type at the end; max/min
// propagate NaN; integers use wrapping arithmetic.
// Avg divides the sum by n (integer division for integer types, as NCCL). PreMulSum
// multiplies each input by `premul` before summing. dst may alias one of the sources.
void reduce(void* dst, const void* const* srcs, int n, size_t begin, size_t end, DataType t, RedOp op,
            double premul);

// The simulator's reductions: NCCL's arithmetic in NCCL's order (docs/simulator.md, "How
// reductions round"). Each operation is rounded to the element type as NCCL's device
// functions round it (fp16 and bf16 add and multiply pairwise in the type); avg on floats
// pre-multiplies each input by 1/n rounded to the type, on integers divides the sum
// (truncating); max and min drop a NaN operand; a NaN result is one canonical quiet NaN
// (0x7fff for fp16 and bf16, the default quiet NaN for float and double).
enum class NcclAlgo : uint8_t {
  Ring,      // rank order around the ring; see NcclOrder
  Nvls,      // NVLink SHARP: the switch sums with an fp32 accumulator (fp16, bf16), rounds once
  NvlsTree,  // NVLS inside each node, then the nodes' partials added in node order
  Tree,      // a chain inside each node (last GPU up to the first), then the nodes' partials
};
struct NcclOrder {
  NcclAlgo algo = NcclAlgo::Ring;
  // Ring. owner >= 0: every element's chain ends at `owner` and starts at owner + 1 (a
  // reduce-scatter's segment `owner`, a reduce's root). owner < 0: an all-reduce of `count`
  // elements, cut into n chunks of ceil(count / n); chunk c's chain starts at rank c + 1 and
  // ends at rank c, as NCCL's ring with one channel and one loop.
  int owner = -1;
  size_t count = 0;
  int ranks_per_node = 8;  // NvlsTree, Tree: ranks [g * ranks_per_node, ...) form node g
};
// dst[i] for i in [begin, end): the reduction of srcs[0..n)[i], where element i is element
// index0 + i of the collective's buffer (what the ring's chunks are cut from).
void reduce_nccl(void* dst, const void* const* srcs, int n, size_t begin, size_t end, DataType t, RedOp op,
                 double premul, const NcclOrder& order, size_t index0 = 0);
// NCCL's factor for avg over n ranks in type t, as its value (src/enqueue.cc: ncclAvg on a
// floating type is ncclDevPreMulSum with 1/n in the type: __float2half(1.0f/n) for fp16, the
// bfloat16 likewise, float(1/n), double 1/n). Multiplying every input by it, each product
// rounded to the type, then summing gives avg's bits; 1.0 for the integer types (NCCL divides
// their sum instead).
double avg_factor(DataType t, int n);
// Whether NCCL can run (t, op) on NVLink SHARP (ncclNvlsSupported, src/include/device.h):
// sum of int32/64, fp16, bf16, float, double; min and max of int32/64, fp16, bf16.
bool nvls_supported(DataType t, RedOp op);
// "nvls", "nvls_tree", "tree" as the cost model names them; anything else is the ring.
NcclAlgo nccl_algo(const std::string& algorithm);

// Validates an (op, type) pair; throws CommError(InvalidArgument) naming the problem.
void check_op(DataType t, RedOp op);
void check_dtype(DataType t);

}  // namespace accel::comm
