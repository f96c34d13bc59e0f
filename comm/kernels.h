// Element-wise reduction kernels shared by the backends that move bytes on the host
// (local, sim). Deterministic: inputs are combined in the order given.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"

namespace accel::comm {

// float16 / bfloat16 <-> float32, round-to-nearest-even, with inf/NaN/subnormals.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

// dst[i] = op(srcs[0][i], srcs[1][i], ..., srcs[n-1][i]) for i in [begin, end).
// Floating types accumulate in fp32 (fp16, bf16, fp32) or fp64 (fp64), in the order of
// `srcs`, and are rounded once to the type at the end; integers use wrapping arithmetic.
// Avg divides the sum by n (integer division for integer types, as NCCL). PreMulSum
// multiplies each input by `premul` before summing. dst may alias one of the sources.
void reduce(void* dst, const void* const* srcs, int n, size_t begin, size_t end, DataType t, RedOp op,
            double premul);

// Validates an (op, type) pair; throws CommError(InvalidArgument) naming the problem.
void check_op(DataType t, RedOp op);
void check_dtype(DataType t);

}  // namespace accel::comm
