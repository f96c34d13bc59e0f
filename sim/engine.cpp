// The collective engine: reductions in rank order, gathers, broadcasts and copies.
#include "sim/engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "comm/kernels.h"

namespace accel::sim {

namespace {

// All-reduce: the scratch chunk (in cache) and the total output size from which the
// outputs are written with non-temporal stores (below it they are likely read again soon,
// from the caches).
constexpr size_t kChunkBytes = 64 << 10;
constexpr uint64_t kStreamMinBytes = 16ull << 20;

// Copies `bytes` from `src` to `dst` with non-temporal (streaming) stores where the CPU
// has them, plain ones elsewhere; stream_fence() orders them before the engine's threads
// finish.
void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), x3);
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace

template <class F>
void Engine::parallel_for(size_t count, size_t min_chunk, F&& body) const {
  const int threads = static_cast<int>(std::min<size_t>(threads_, std::max<size_t>(1, count / min_chunk)));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  std::vector<std::thread> pool;
  const size_t per = (count + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    size_t b = per * t, e = std::min(count, b + per);
    if (b < e) pool.emplace_back([&body, b, e] { body(b, e); });
  }
  body(0, std::min(count, per));
  for (auto& th : pool) th.join();
}

void Engine::collective(const Op& ref, const std::vector<OpPtr>& ops, comm::NcclOrder order) const {
  const int n = static_cast<int>(ops.size());
  const size_t es = comm::dtype_size(ref.t);
  std::vector<const void*> srcs(n);
  switch (ref.kind) {
    case OpKind::AllReduce: {
      order.owner = -1;
      order.count = ref.count;
      // Chunk by chunk: reduce the ranks' inputs (in NCCL's order) into a scratch chunk
      // that stays in cache, then copy it to every rank's output. The memory traffic is
      // then what an all-reduce in one address space cannot avoid: each input read once,
      // each output written once. Large outputs are written with non-temporal stores
      // (stream_copy): a plain store first reads each destination line from memory, a
      // third of the traffic again. Not in place: there the destination lines were just
      // read and are in cache, where plain stores were measured faster. In place is
      // safe: a chunk is read whole before any output of it is written.
      // (Nothing below allocates on the engine's threads, where an exception could not
      // be caught: the scratch chunk is on the stack, the per-thread source pointers are
      // allocated here, one row per thread parallel_for may start.)
      const bool stream = static_cast<uint64_t>(ref.count) * es * static_cast<uint64_t>(n) >= kStreamMinBytes;
      const size_t chunk = kChunkBytes / es;
      std::vector<const void*> rows(static_cast<size_t>(std::max(1, threads_)) * n);
      std::atomic<int> next_row{0};
      parallel_for(ref.count, 1 << 16, [&](size_t b, size_t end) {
        alignas(64) unsigned char scratch[kChunkBytes];
        const void** at = rows.data() + static_cast<size_t>(next_row.fetch_add(1)) * n;
        for (size_t c = b; c < end; c += chunk) {
          const size_t ce = std::min(end, c + chunk), bytes = (ce - c) * es;
          for (int q = 0; q < n; ++q) at[q] = static_cast<const char*>(ops[q]->send) + c * es;
          comm::reduce_nccl(scratch, at, n, 0, ce - c, ref.t, ref.op, ref.premul, order, c);
          for (int q = 0; q < n; ++q) {
            char* dst = static_cast<char*>(ops[q]->recv) + c * es;
            if (stream && ops[q]->recv != ops[q]->send)
              stream_copy(dst, scratch, bytes);
            else
              std::memcpy(dst, scratch, bytes);
          }
        }
        if (stream) stream_fence();
      });
      break;
    }
    case OpKind::ReduceScatter: {
      const size_t rc = ref.count;
      for (int r = 0; r < n; ++r) {
        order.owner = r;  // segment r's chain ends at rank r
        for (int q = 0; q < n; ++q) srcs[q] = static_cast<const char*>(ops[q]->send) + r * rc * es;
        // the reduce kernel indexes from each source's base: shift bases so index 0 is segment r
        parallel_for(rc, 1 << 16, [&](size_t b, size_t end) {
          comm::reduce_nccl(ops[r]->recv, srcs.data(), n, b, end, ref.t, ref.op, ref.premul, order);
        });
      }
      break;
    }
    case OpKind::AllGather: {
      const size_t bytes = ref.count * es;
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q) {
          char* dst = static_cast<char*>(ops[r]->recv) + q * bytes;
          if (dst != ops[q]->send) std::memmove(dst, ops[q]->send, bytes);
        }
      break;
    }
    case OpKind::Broadcast: {
      const void* src = ops[ref.root]->send;
      for (int r = 0; r < n; ++r)
        if (ops[r]->recv != src) std::memmove(ops[r]->recv, src, ref.count * es);
      break;
    }
    case OpKind::Reduce: {
      for (int q = 0; q < n; ++q) srcs[q] = ops[q]->send;
      void* out = ops[ref.root]->recv;
      order.owner = ref.root;  // the ring's chain starts at the root's successor
      parallel_for(ref.count, 1 << 16, [&](size_t b, size_t end) {
        comm::reduce_nccl(out, srcs.data(), n, b, end, ref.t, ref.op, ref.premul, order);
      });
      break;
    }
    case OpKind::Barrier:
    default:
      break;
  }
}

void Engine::p2p(const Op& send, const Op& recv) {
  const size_t bytes = send.bytes();
  if (bytes && send.send != recv.recv) std::memmove(recv.recv, send.send, bytes);
}

}  // namespace accel::sim
