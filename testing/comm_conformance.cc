#include "testing/comm_conformance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/collective.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace tpx::testing {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using comm::Work;

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                             ReduceOp::kProd};

std::string Name(DType d) { return std::string(DTypeName(d)); }

// Small integers: exact in every dtype, sums of a few ranks too.
double Input(int rank, int64_t i, int salt = 0) {
  return static_cast<double>((rank * 7 + i * 3 + salt * 5) % 11) - 5.0;
}
// Inputs for prod: magnitudes <= 2 so products of 4 ranks stay exact.
double ProdInput(int rank, int64_t i) {
  static const double kValues[] = {-2, -1, 1, 2};
  return kValues[(rank + i) % 4];
}

// A host buffer of `n` elements of `dtype`, read and written as doubles.
class Buffer {
 public:
  Buffer(DType dtype, int64_t n)
      : dtype_(dtype), n_(n), bytes_(std::max<int64_t>(n, 1) * SizeOf(dtype)) {}
  Buffer(DType dtype, int64_t n, const std::function<double(int64_t)>& value) : Buffer(dtype, n) {
    for (int64_t i = 0; i < n; ++i) Set(i, value(i));
  }
  void* data() { return bytes_.data(); }
  char* at(int64_t i) { return reinterpret_cast<char*>(bytes_.data()) + i * SizeOf(dtype_); }
  int64_t size() const { return n_; }

  void Set(int64_t i, double v) {
    char* p = at(i);
    switch (dtype_) {
      case DType::kF32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::kBF16: {
        uint16_t h = FloatToBF16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kF16: {
        uint16_t h = FloatToF16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
      case DType::kI64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
      case DType::kBool: { uint8_t b = v != 0; std::memcpy(p, &b, 1); break; }
    }
  }
  double Get(int64_t i) {
    const char* p = at(i);
    switch (dtype_) {
      case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return BF16ToFloat(h); }
      case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return F16ToFloat(h); }
      case DType::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
      case DType::kI64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
      case DType::kBool: { uint8_t b; std::memcpy(&b, p, 1); return b; }
    }
    return 0;
  }

 private:
  DType dtype_;
  int64_t n_;
  std::vector<unsigned char> bytes_;
};

bool Near(DType dtype, double got, double want) {
  const double scale = std::max(1.0, std::fabs(want));
  switch (dtype) {
    case DType::kF32: return std::fabs(got - want) <= 1e-5 * scale;
    case DType::kF16: return std::fabs(got - want) <= 2e-3 * scale;
    case DType::kBF16: return std::fabs(got - want) <= 1.6e-2 * scale;
    default: return got == want;
  }
}

// Compares elements [offset, offset+n) with want(i - offset); reports the
// first mismatch only.
bool Expect(Buffer& buf, DType dtype, int64_t offset, int64_t n,
            const std::function<double(int64_t)>& want, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    double got = buf.Get(offset + i), w = want(i);
    if (!Near(dtype, got, w)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected " << w;
      return false;
    }
  }
  return true;
}

double Reduce(ReduceOp op, int size, const std::function<double(int)>& of_rank) {
  double acc = of_rank(0);
  for (int r = 1; r < size; ++r) {
    double v = of_rank(r);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kProd: acc *= v; break;
    }
  }
  return op == ReduceOp::kAvg ? acc / size : acc;
}

bool Supported(DType dtype, ReduceOp op) {
  return op != ReduceOp::kAvg || IsFloatingPoint(dtype);
}

std::function<double(int, int64_t)> InputFor(ReduceOp op, int salt) {
  if (op == ReduceOp::kProd) return [](int r, int64_t i) { return ProdInput(r, i); };
  return [salt](int r, int64_t i) { return Input(r, i, salt); };
}

#define TPX_EXPECT_OK(work_expr, what)                          \
  do {                                                          \
    absl::Status tpx_s_ = (work_expr).Wait();                   \
    if (!tpx_s_.ok()) {                                         \
      ADD_FAILURE() << (what) << ": " << tpx_s_;                \
      return;                                                   \
    }                                                           \
  } while (0)

// Uneven per-rank counts with zeros: rank r gets (r * 3 + 1 + salt) % 4.
std::vector<int64_t> UnevenCounts(int size, int salt) {
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = (r * 3 + 1 + salt) % 4;
  return counts;
}

// Packed displacements with a gap of `gap` elements after each block.
std::vector<int64_t> Displs(const std::vector<int64_t>& counts, int64_t gap) {
  std::vector<int64_t> displs(counts.size());
  int64_t off = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = off;
    off += counts[r] + gap;
  }
  return displs;
}

int64_t Extent(const std::vector<int64_t>& counts, const std::vector<int64_t>& displs) {
  int64_t e = 0;
  for (size_t r = 0; r < counts.size(); ++r) e = std::max(e, displs[r] + counts[r]);
  return e;
}

}  // namespace

void AllReduceConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (!Supported(dtype, op)) continue;
      auto input = InputFor(op, 1);
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
        for (bool in_place : {false, true}) {
          std::string what = absl::StrCat("all_reduce ", Name(dtype), " ",
                                          comm::ReduceOpName(op), " count ", count,
                                          in_place ? " in place" : "");
          Buffer send(dtype, count, [&](int64_t i) { return input(rank, i); });
          Buffer recv(dtype, count);
          if (in_place) {
            TPX_EXPECT_OK(ctx.comm.AllReduce(send.data(), count, dtype, op), what);
          } else {
            TPX_EXPECT_OK(ctx.comm.AllReduce(send.data(), recv.data(), count, dtype, op), what);
          }
          Expect(in_place ? send : recv, dtype, 0, count,
                 [&](int64_t i) { return Reduce(op, size, [&](int r) { return input(r, i); }); },
                 what);
        }
      }
    }
  }
}

void BroadcastConformance(RankContext& ctx) {
  for (DType dtype : kDTypes) {
    for (int root = 0; root < ctx.size; ++root) {
      for (int64_t count : {int64_t{0}, int64_t{5}, int64_t{1000}}) {
        std::string what = absl::StrCat("broadcast ", Name(dtype), " root ", root, " count ",
                                        count);
        Buffer buf(dtype, count, [&](int64_t i) { return Input(ctx.rank, i); });
        TPX_EXPECT_OK(ctx.comm.Broadcast(buf.data(), count, dtype, root), what);
        Expect(buf, dtype, 0, count, [&](int64_t i) { return Input(root, i); }, what);
      }
    }
  }
}

void ReduceConformance(RankContext& ctx) {
  for (DType dtype : kDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProd, ReduceOp::kAvg}) {
      if (!Supported(dtype, op)) continue;
      auto input = InputFor(op, 2);
      for (int root = 0; root < ctx.size; ++root) {
        for (bool in_place : {false, true}) {
          const int64_t count = 33;
          std::string what = absl::StrCat("reduce ", Name(dtype), " ", comm::ReduceOpName(op),
                                          " root ", root, in_place ? " in place" : "");
          Buffer send(dtype, count, [&](int64_t i) { return input(ctx.rank, i); });
          Buffer recv(dtype, count);
          if (in_place) {
            TPX_EXPECT_OK(ctx.comm.Reduce(send.data(), count, dtype, op, root), what);
          } else {
            TPX_EXPECT_OK(ctx.comm.Reduce(send.data(), recv.data(), count, dtype, op, root),
                          what);
          }
          if (ctx.rank == root) {
            Expect(in_place ? send : recv, dtype, 0, count,
                   [&](int64_t i) {
                     return Reduce(op, ctx.size, [&](int r) { return input(r, i); });
                   },
                   what);
          } else if (!in_place) {
            // The send buffer of a non-root is left alone.
            Expect(send, dtype, 0, count, [&](int64_t i) { return input(ctx.rank, i); },
                   what + " (send buffer untouched)");
          }
        }
      }
    }
  }
}

void AllGatherConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  for (DType dtype : kDTypes) {
    for (int64_t count : {int64_t{0}, int64_t{3}, int64_t{500}}) {
      for (bool in_place : {false, true}) {
        std::string what = absl::StrCat("all_gather ", Name(dtype), " count ", count,
                                        in_place ? " in place" : "");
        Buffer recv(dtype, size * count, [](int64_t) { return -99.0; });
        Buffer send(dtype, count, [&](int64_t i) { return Input(rank, i); });
        if (in_place) {
          for (int64_t i = 0; i < count; ++i) recv.Set(rank * count + i, Input(rank, i));
          TPX_EXPECT_OK(ctx.comm.AllGather(recv.data(), count, dtype), what);
        } else {
          TPX_EXPECT_OK(ctx.comm.AllGather(send.data(), recv.data(), count, dtype), what);
        }
        for (int r = 0; r < size; ++r) {
          Expect(recv, dtype, r * count, count, [&](int64_t i) { return Input(r, i); },
                 absl::StrCat(what, " block ", r));
        }
      }
    }
    // Uneven, zero-length and gapped blocks.
    for (int64_t gap : {0, 2}) {
      for (bool in_place : {false, true}) {
        std::vector<int64_t> counts = UnevenCounts(size, 0);
        std::vector<int64_t> displs = Displs(counts, gap);
        std::string what = absl::StrCat("all_gather_v ", Name(dtype), " gap ", gap,
                                        in_place ? " in place" : "");
        // Room for the gap after the last block too, to check it stays untouched.
        Buffer recv(dtype, Extent(counts, displs) + gap, [](int64_t) { return -99.0; });
        Buffer send(dtype, counts[rank], [&](int64_t i) { return Input(rank, i, 3); });
        const void* src = send.data();
        if (in_place) {
          for (int64_t i = 0; i < counts[rank]; ++i) recv.Set(displs[rank] + i, Input(rank, i, 3));
          src = recv.at(displs[rank]);
        }
        TPX_EXPECT_OK(ctx.comm.AllGatherV(src, recv.data(), counts,
                                          gap ? displs : std::vector<int64_t>{}, dtype),
                      what);
        for (int r = 0; r < size; ++r) {
          Expect(recv, dtype, displs[r], counts[r], [&](int64_t i) { return Input(r, i, 3); },
                 absl::StrCat(what, " block ", r));
          if (gap > 0) {
            Expect(recv, dtype, displs[r] + counts[r], gap, [](int64_t) { return -99.0; },
                   absl::StrCat(what, " gap after block ", r, " untouched"));
          }
        }
      }
    }
  }
}

void ReduceScatterConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kAvg, ReduceOp::kProd}) {
      if (!Supported(dtype, op)) continue;
      auto input = InputFor(op, 4);
      // Fixed-size blocks.
      for (int64_t count : {int64_t{0}, int64_t{9}}) {
        std::string what = absl::StrCat("reduce_scatter ", Name(dtype), " ",
                                        comm::ReduceOpName(op), " count ", count);
        Buffer send(dtype, size * count, [&](int64_t i) { return input(rank, i); });
        Buffer recv(dtype, count);
        TPX_EXPECT_OK(ctx.comm.ReduceScatter(send.data(), recv.data(), count, dtype, op), what);
        Expect(recv, dtype, 0, count,
               [&](int64_t i) {
                 return Reduce(op, size, [&](int r) { return input(r, rank * count + i); });
               },
               what);
      }
      // Uneven blocks with gaps; in place writes the result over this rank's block.
      for (bool in_place : {false, true}) {
        std::vector<int64_t> counts = UnevenCounts(size, 1);
        std::vector<int64_t> displs = Displs(counts, 1);
        std::string what = absl::StrCat("reduce_scatter_v ", Name(dtype), " ",
                                        comm::ReduceOpName(op), in_place ? " in place" : "");
        Buffer send(dtype, Extent(counts, displs), [&](int64_t i) { return input(rank, i); });
        Buffer recv(dtype, counts[rank]);
        void* dst = in_place ? send.at(displs[rank]) : recv.data();
        TPX_EXPECT_OK(ctx.comm.ReduceScatterV(send.data(), dst, counts, displs, dtype, op), what);
        Expect(in_place ? send : recv, dtype, in_place ? displs[rank] : 0, counts[rank],
               [&](int64_t i) {
                 return Reduce(op, size, [&](int r) { return input(r, displs[rank] + i); });
               },
               what);
      }
    }
  }
}

void GatherScatterConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  for (DType dtype : kDTypes) {
    for (int root = 0; root < size; ++root) {
      const int64_t count = 6;
      // Gather (fixed), out of place and in place at the root.
      for (bool in_place : {false, true}) {
        std::string what = absl::StrCat("gather ", Name(dtype), " root ", root,
                                        in_place ? " in place" : "");
        Buffer send(dtype, count, [&](int64_t i) { return Input(rank, i, 5); });
        Buffer recv(dtype, size * count, [](int64_t) { return -99.0; });
        const void* src = send.data();
        if (in_place && rank == root) {
          for (int64_t i = 0; i < count; ++i) recv.Set(root * count + i, Input(rank, i, 5));
          src = recv.at(root * count);
        }
        TPX_EXPECT_OK(ctx.comm.Gather(src, recv.data(), count, dtype, root), what);
        if (rank == root) {
          for (int r = 0; r < size; ++r) {
            Expect(recv, dtype, r * count, count, [&](int64_t i) { return Input(r, i, 5); },
                   absl::StrCat(what, " block ", r));
          }
        }
      }
      // GatherV, uneven with zeros and gaps.
      {
        std::vector<int64_t> counts = UnevenCounts(size, 2);
        std::vector<int64_t> displs = Displs(counts, 1);
        std::string what = absl::StrCat("gather_v ", Name(dtype), " root ", root);
        Buffer send(dtype, counts[rank], [&](int64_t i) { return Input(rank, i, 6); });
        Buffer recv(dtype, Extent(counts, displs), [](int64_t) { return -99.0; });
        TPX_EXPECT_OK(ctx.comm.GatherV(send.data(), counts[rank], recv.data(), counts, displs,
                                       dtype, root),
                      what);
        if (rank == root) {
          for (int r = 0; r < size; ++r) {
            Expect(recv, dtype, displs[r], counts[r], [&](int64_t i) { return Input(r, i, 6); },
                   absl::StrCat(what, " block ", r));
          }
        }
      }
      // Scatter (fixed), out of place and in place at the root.
      for (bool in_place : {false, true}) {
        std::string what = absl::StrCat("scatter ", Name(dtype), " root ", root,
                                        in_place ? " in place" : "");
        Buffer send(dtype, size * count, [&](int64_t i) { return Input(rank, i, 7); });
        Buffer recv(dtype, count, [](int64_t) { return -99.0; });
        void* dst = recv.data();
        if (in_place && rank == root) dst = send.at(root * count);
        TPX_EXPECT_OK(ctx.comm.Scatter(send.data(), dst, count, dtype, root), what);
        Buffer& out = in_place && rank == root ? send : recv;
        Expect(out, dtype, in_place && rank == root ? root * count : 0, count,
               [&](int64_t i) { return Input(root, rank * count + i, 7); }, what);
      }
      // ScatterV, uneven with zeros and gaps.
      {
        std::vector<int64_t> counts = UnevenCounts(size, 3);
        std::vector<int64_t> displs = Displs(counts, 2);
        std::string what = absl::StrCat("scatter_v ", Name(dtype), " root ", root);
        Buffer send(dtype, Extent(counts, displs), [&](int64_t i) { return Input(rank, i, 8); });
        Buffer recv(dtype, counts[rank], [](int64_t) { return -99.0; });
        TPX_EXPECT_OK(ctx.comm.ScatterV(send.data(), counts, displs, recv.data(), counts[rank],
                                        dtype, root),
                      what);
        Expect(recv, dtype, 0, counts[rank],
               [&](int64_t i) { return Input(root, displs[rank] + i, 8); }, what);
      }
    }
  }
}

void AllToAllConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  // Element i of the block rank s sends to rank d: a closed form of (s, d, i).
  auto value = [](int s, int d, int64_t i) { return Input(s, i + 13 * d, 9); };
  for (DType dtype : kDTypes) {
    for (int64_t count : {int64_t{0}, int64_t{4}, int64_t{300}}) {
      std::string what = absl::StrCat("all_to_all ", Name(dtype), " count ", count);
      Buffer send(dtype, size * count, [&](int64_t i) {
        return value(rank, i / std::max<int64_t>(count, 1), i % std::max<int64_t>(count, 1));
      });
      Buffer recv(dtype, size * count);
      TPX_EXPECT_OK(ctx.comm.AllToAll(send.data(), recv.data(), count, dtype), what);
      for (int s = 0; s < size; ++s) {
        Expect(recv, dtype, s * count, count, [&](int64_t i) { return value(s, rank, i); },
               absl::StrCat(what, " from rank ", s));
      }
    }
    // Per-pair counts c(s -> d) = (s + 2d) % 3, zeros included; gapped layouts.
    auto pair = [](int s, int d) { return static_cast<int64_t>((s + 2 * d) % 3); };
    std::vector<int64_t> send_counts(size), recv_counts(size);
    for (int j = 0; j < size; ++j) {
      send_counts[j] = pair(rank, j);
      recv_counts[j] = pair(j, rank);
    }
    std::vector<int64_t> send_displs = Displs(send_counts, 1), recv_displs = Displs(recv_counts, 2);
    std::string what = absl::StrCat("all_to_all_v ", Name(dtype));
    Buffer send(dtype, Extent(send_counts, send_displs), [](int64_t) { return -7.0; });
    for (int d = 0; d < size; ++d) {
      for (int64_t i = 0; i < send_counts[d]; ++i) send.Set(send_displs[d] + i, value(rank, d, i));
    }
    Buffer recv(dtype, Extent(recv_counts, recv_displs), [](int64_t) { return -99.0; });
    TPX_EXPECT_OK(ctx.comm.AllToAllV(send.data(), send_counts, send_displs, recv.data(),
                                     recv_counts, recv_displs, dtype),
                  what);
    for (int s = 0; s < size; ++s) {
      Expect(recv, dtype, recv_displs[s], recv_counts[s],
             [&](int64_t i) { return value(s, rank, i); }, absl::StrCat(what, " from rank ", s));
    }
  }
}

void SendRecvConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  if (size < 2) return;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (DType dtype : kDTypes) {
    for (int64_t count : {int64_t{0}, int64_t{17}, int64_t{100000}}) {
      std::string what = absl::StrCat("send/recv ring ", Name(dtype), " count ", count);
      // Two messages per pair with different tags, received in the opposite order.
      Buffer out1(dtype, count, [&](int64_t i) { return Input(rank, i, 1); });
      Buffer out2(dtype, count, [&](int64_t i) { return Input(rank, i, 2); });
      Buffer in1(dtype, count), in2(dtype, count);
      Work s1 = ctx.comm.Send(out1.data(), count, dtype, next, /*tag=*/1);
      Work s2 = ctx.comm.Send(out2.data(), count, dtype, next, /*tag=*/2);
      Work r2 = ctx.comm.Recv(in2.data(), count, dtype, prev, /*tag=*/2);
      Work r1 = ctx.comm.Recv(in1.data(), count, dtype, prev, /*tag=*/1);
      TPX_EXPECT_OK(s1, what);
      TPX_EXPECT_OK(s2, what);
      TPX_EXPECT_OK(r2, what);
      TPX_EXPECT_OK(r1, what);
      Expect(in1, dtype, 0, count, [&](int64_t i) { return Input(prev, i, 1); }, what + " tag 1");
      Expect(in2, dtype, 0, count, [&](int64_t i) { return Input(prev, i, 2); }, what + " tag 2");
    }
  }
}

void BarrierConformance(RankContext& ctx) {
  for (int round = 0; round < 5; ++round) {
    // A late rank: everybody else must still be inside the barrier.
    if (ctx.rank == round % ctx.size) absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(ctx.store.Set(absl::StrCat("barrier/", round, "/", ctx.rank), "in").ok());
    TPX_EXPECT_OK(ctx.comm.Barrier(), absl::StrCat("barrier round ", round));
    for (int r = 0; r < ctx.size; ++r) {
      auto arrived = ctx.store.Check(absl::StrCat("barrier/", round, "/", r));
      ASSERT_TRUE(arrived.ok());
      EXPECT_TRUE(*arrived) << "left barrier round " << round << " before rank " << r
                            << " entered it";
    }
  }
}

void SplitConformance(RankContext& ctx) {
  const int rank = ctx.rank, size = ctx.size;
  // Family A: parity, ordered by descending rank. Family B: halves.
  auto a = ctx.comm.Split(rank % 2, -rank);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ctx.comm.Split(rank < (size + 1) / 2 ? 0 : 1, rank);
  ASSERT_TRUE(b.ok()) << b.status();
  // Rank 0 opts out of family C.
  auto c = ctx.comm.Split(rank == 0 ? -1 : 7, rank);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c == nullptr, rank == 0);

  std::vector<int> members_a, members_b;
  for (int r = size - 1; r >= 0; --r) {
    if (r % 2 == rank % 2) members_a.push_back(r);
  }
  for (int r = 0; r < size; ++r) {
    if ((r < (size + 1) / 2) == (rank < (size + 1) / 2)) members_b.push_back(r);
  }
  Communicator& ca = **a;
  Communicator& cb = **b;
  ASSERT_EQ(ca.size(), static_cast<int>(members_a.size()));
  EXPECT_EQ(members_a[ca.rank()], rank);
  ASSERT_EQ(cb.size(), static_cast<int>(members_b.size()));
  EXPECT_EQ(members_b[cb.rank()], rank);

  // Interleave work on both subgroups and the parent before waiting on any.
  std::vector<Work> works;
  const int64_t n = 1000;
  std::vector<int64_t> xa(n), xb(n), xw(n);
  std::vector<int64_t> ga(ca.size());
  for (int round = 0; round < 5; ++round) {
    for (int64_t i = 0; i < n; ++i) {
      xa[i] = rank * 1000 + i;
      xb[i] = rank + 1;
      xw[i] = 1;
    }
    works.clear();
    works.push_back(ca.AllReduce(xa.data(), n, DType::kI64, ReduceOp::kSum));
    works.push_back(cb.AllReduce(xb.data(), n, DType::kI64, ReduceOp::kProd));
    works.push_back(ctx.comm.AllReduce(xw.data(), n, DType::kI64, ReduceOp::kSum));
    int64_t mine = rank;
    works.push_back(ca.AllGather(&mine, ga.data(), 1, DType::kI64));
    for (Work& w : works) ASSERT_TRUE(w.Wait().ok()) << w.Wait();
    int64_t sum_a = 0, prod_b = 1;
    for (int r : members_a) sum_a += r * 1000;
    for (int r : members_b) prod_b *= r + 1;
    EXPECT_EQ(xa[5], sum_a + static_cast<int64_t>(members_a.size()) * 5);
    EXPECT_EQ(xb[999], prod_b);
    EXPECT_EQ(xw[0], size);
    for (int r = 0; r < ca.size(); ++r) EXPECT_EQ(ga[r], members_a[r]);
  }
  // The same subgroups from two threads at once.
  std::thread ta([&] {
    for (int i = 0; i < 20; ++i) {
      int32_t v = 1;
      EXPECT_TRUE(ca.AllReduce(&v, 1, DType::kI32, ReduceOp::kSum).Wait().ok());
      EXPECT_EQ(v, ca.size());
    }
  });
  for (int i = 0; i < 20; ++i) {
    int32_t v = 2;
    EXPECT_TRUE(cb.AllReduce(&v, 1, DType::kI32, ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(v, 2 * cb.size());
  }
  ta.join();
  if (*c != nullptr) {
    EXPECT_EQ((*c)->size(), size - 1);
    EXPECT_EQ((*c)->rank(), rank - 1);
    TPX_EXPECT_OK((*c)->Barrier(), "barrier on split without rank 0");
  }
}

void BackToBackConformance(RankContext& ctx) {
  constexpr int kOps = 1000;
  std::vector<float> values(kOps);
  std::vector<Work> works;
  works.reserve(kOps);
  for (int i = 0; i < kOps; ++i) {
    values[i] = static_cast<float>(ctx.rank + i);
    works.push_back(ctx.comm.AllReduce(&values[i], 1, DType::kF32, ReduceOp::kSum));
  }
  for (int i = 0; i < kOps; ++i) {
    absl::Status s = works[i].Wait();
    if (!s.ok()) {
      ADD_FAILURE() << "all_reduce " << i << ": " << s;
      return;
    }
  }
  const float ranks_sum = ctx.size * (ctx.size - 1) / 2.0f;
  for (int i = 0; i < kOps; ++i) {
    if (values[i] != ranks_sum + static_cast<float>(ctx.size) * i) {
      ADD_FAILURE() << "all_reduce " << i << " gave " << values[i];
      return;
    }
  }
}

void LargeAllReduceConformance(RankContext& ctx) {
  const int64_t n = int64_t{64} << 20 >> 2;  // 64 MiB of f32
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(ctx.rank + i % 5);
  TPX_EXPECT_OK(ctx.comm.AllReduce(x.data(), n, DType::kF32, ReduceOp::kSum), "64 MiB all_reduce");
  const float base = ctx.size * (ctx.size - 1) / 2.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] != base + static_cast<float>(ctx.size) * (i % 5)) {
      ADD_FAILURE() << "64 MiB all_reduce: element " << i << " is " << x[i];
      return;
    }
  }
}

namespace {

void ExpectInvalid(Work work, const std::vector<std::string>& fragments) {
  EXPECT_TRUE(work.IsCompleted()) << "a rejected call must complete at once";
  absl::Status s = work.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos) << "'" << f << "' missing in: " << s;
  }
}

}  // namespace

void InvalidArgumentConformance(RankContext& ctx) {
  Communicator& c = ctx.comm;
  const std::string on_rank = absl::StrCat("rank ", ctx.rank);
  std::vector<float> x(64);
  std::vector<int64_t> bad_counts(ctx.size + 1, 1);
  ExpectInvalid(c.AllReduce(x.data(), -1, DType::kF32, ReduceOp::kSum),
                {"all_reduce", on_rank, "'count'"});
  ExpectInvalid(c.AllReduce(nullptr, x.data(), 4, DType::kF32, ReduceOp::kSum),
                {"all_reduce", "'send'", "null"});
  ExpectInvalid(c.AllReduce(x.data(), 4, DType::kBool, ReduceOp::kSum), {"bool"});
  ExpectInvalid(c.AllReduce(x.data(), 4, DType::kI32, ReduceOp::kAvg), {"avg"});
  ExpectInvalid(c.AllReduce(x.data(), 4, static_cast<DType>(99), ReduceOp::kSum), {"'dtype'"});
  ExpectInvalid(c.Broadcast(x.data(), 4, DType::kF32, ctx.size), {"broadcast", "'root'"});
  ExpectInvalid(c.Reduce(x.data(), 4, DType::kF32, ReduceOp::kSum, -1), {"reduce", "'root'"});
  ExpectInvalid(c.AllGatherV(x.data(), x.data() + 32, bad_counts, {}, DType::kF32),
                {"all_gather_v", "'recv_counts'"});
  std::vector<int64_t> negative(ctx.size, 1);
  negative[0] = -2;
  ExpectInvalid(c.ReduceScatterV(x.data(), x.data() + 32, negative, {}, DType::kF32,
                                 ReduceOp::kSum),
                {"reduce_scatter_v", "'send_counts[0]'", "-2"});
  ExpectInvalid(c.Gather(x.data(), x.data(), 4, DType::kF32, ctx.size + 3), {"gather", "'root'"});
  ExpectInvalid(c.AllToAll(x.data(), x.data(), 1, DType::kF32), {"all_to_all", "in place"});
  ExpectInvalid(c.Send(x.data(), 4, DType::kF32, ctx.rank), {"send", "'peer'"});
  ExpectInvalid(c.Recv(x.data(), 4, DType::kF32, -1), {"recv", "'peer'"});
  ExpectInvalid(c.Recv(nullptr, 4, DType::kF32, (ctx.rank + 1) % ctx.size), {"recv"});
  // The communicator is still in step on every rank.
  int32_t v = ctx.rank;
  TPX_EXPECT_OK(c.AllReduce(&v, 1, DType::kI32, ReduceOp::kMax), "all_reduce after bad calls");
  EXPECT_EQ(v, ctx.size - 1);
}

namespace {

// The Tensor-form checks on tensors of `device`. Results are read with
// ToVector, which waits for the device's current stream: for CUDA tensors
// that is exactly what Work::Wait() ordered after the collective.
void TensorChecks(RankContext& ctx, Device device) {
  const int rank = ctx.rank, size = ctx.size;
  Communicator& c = ctx.comm;
  auto filled = [device](Shape shape, const std::function<float(int64_t)>& f) {
    std::vector<float> v(NumElements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<int64_t>(i));
    return *Tensor::FromVector<float>(v, shape)->To(device);
  };
  auto zeros = [device](Shape shape, DType dtype = DType::kF32) {
    return *Tensor::Zeros(std::move(shape), dtype, device);
  };
  // AllReduce in place on a [2, 3] tensor, and out of place in bf16.
  Tensor x = filled({2, 3}, [&](int64_t i) { return static_cast<float>(rank + i); });
  TPX_EXPECT_OK(c.AllReduce(x, ReduceOp::kSum), "tensor all_reduce");
  std::vector<float> got = x.ToVector<float>();
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(got[i], size * (size - 1) / 2.0f + size * i);
  Tensor xb =
      *filled({4}, [&](int64_t i) { return static_cast<float>(rank * i); }).To(DType::kBF16);
  Tensor yb = zeros({4}, DType::kBF16);
  TPX_EXPECT_OK(c.AllReduce(xb, yb, ReduceOp::kMax), "tensor all_reduce bf16");
  EXPECT_EQ(yb.ToVector<float>()[3], 3.0f * (size - 1));

  // AllGather: [2, 3] per rank -> [size * 2, 3].
  Tensor in = filled({2, 3}, [&](int64_t i) { return static_cast<float>(100 * rank + i); });
  Tensor out = zeros({size * 2, 3});
  TPX_EXPECT_OK(c.AllGather(in, out), "tensor all_gather");
  got = out.ToVector<float>();
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(got[r * 6 + i], 100.0f * r + i);
  }
  // AllGatherV: rank r contributes r rows of width 2.
  std::vector<int64_t> rows(size);
  std::iota(rows.begin(), rows.end(), 0);
  Tensor vin = filled({rank, 2}, [&](int64_t i) { return static_cast<float>(10 * rank + i); });
  Tensor vout = zeros({size * (size - 1) / 2, 2});
  TPX_EXPECT_OK(c.AllGatherV(vin, vout, rows), "tensor all_gather_v");
  got = vout.ToVector<float>();
  for (int r = 0, off = 0; r < size; off += 2 * r, ++r) {
    for (int64_t i = 0; i < 2 * r; ++i) EXPECT_EQ(got[off + i], 10.0f * r + i);
  }
  // ReduceScatter: [size * 2, 2] -> [2, 2].
  Tensor rs_in = filled({size * 2, 2}, [&](int64_t i) { return static_cast<float>(i + rank); });
  Tensor rs_out = zeros({2, 2});
  TPX_EXPECT_OK(c.ReduceScatter(rs_in, rs_out, ReduceOp::kSum), "tensor reduce_scatter");
  got = rs_out.ToVector<float>();
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i], size * static_cast<float>(rank * 4 + i) + size * (size - 1) / 2.0f);
  }
  // Gather / Scatter / Broadcast at the last rank.
  const int root = size - 1;
  Tensor g_out = zeros({size, 3});
  Tensor g_in = filled({1, 3}, [&](int64_t i) { return static_cast<float>(rank * 3 + i); });
  TPX_EXPECT_OK(c.Gather(g_in, rank == root ? g_out : Tensor(), root), "tensor gather");
  if (rank == root) {
    got = g_out.ToVector<float>();
    for (int64_t i = 0; i < size * 3; ++i) EXPECT_EQ(got[i], static_cast<float>(i));
  }
  Tensor s_in = rank == root ? filled({size, 2}, [](int64_t i) { return static_cast<float>(i); })
                             : Tensor();
  Tensor s_out = zeros({1, 2});
  TPX_EXPECT_OK(c.Scatter(s_in, s_out, root), "tensor scatter");
  EXPECT_EQ(s_out.ToVector<float>()[1], static_cast<float>(rank * 2 + 1));
  // GatherV / ScatterV with rank r holding r rows of width 2 (rank 0 none).
  Tensor gv_out = rank == root ? zeros({size * (size - 1) / 2, 2}) : Tensor();
  TPX_EXPECT_OK(c.GatherV(vin, gv_out, rows, root), "tensor gather_v");
  if (rank == root) {
    got = gv_out.ToVector<float>();
    for (int r = 0, off = 0; r < size; off += 2 * r, ++r) {
      for (int64_t i = 0; i < 2 * r; ++i) EXPECT_EQ(got[off + i], 10.0f * r + i);
    }
  }
  Tensor sv_in = rank == root ? filled({size * (size - 1) / 2, 2},
                                       [](int64_t i) { return static_cast<float>(i); })
                              : Tensor();
  Tensor sv_out = zeros({rank, 2});
  TPX_EXPECT_OK(c.ScatterV(sv_in, sv_out, rows, root), "tensor scatter_v");
  got = sv_out.ToVector<float>();
  for (int64_t i = 0; i < 2 * rank; ++i) {
    EXPECT_EQ(got[i], static_cast<float>(rank * (rank - 1) + i));  // rows before: r(r-1)/2
  }
  EXPECT_FALSE(c.GatherV(vin, gv_out, std::vector<int64_t>(size + 1, 0), root).Wait().ok());
  Tensor b = filled({3}, [&](int64_t i) { return static_cast<float>(rank + i); });
  TPX_EXPECT_OK(c.Broadcast(b, root), "tensor broadcast");
  EXPECT_EQ(b.ToVector<float>()[2], static_cast<float>(root + 2));
  // AllToAll: block j of [size, 2] goes to rank j.
  Tensor a_in = filled({size, 2}, [&](int64_t i) { return static_cast<float>(rank * 100 + i); });
  Tensor a_out = zeros({size, 2});
  TPX_EXPECT_OK(c.AllToAll(a_in, a_out), "tensor all_to_all");
  got = a_out.ToVector<float>();
  for (int s = 0; s < size; ++s) EXPECT_EQ(got[s * 2 + 1], s * 100.0f + rank * 2 + 1);
  // Send/Recv around a ring.
  if (size > 1) {
    Tensor msg = filled({2, 2}, [&](int64_t i) { return static_cast<float>(rank * 10 + i); });
    Tensor recv = zeros({2, 2});
    Work s = c.Send(msg, (rank + 1) % size, 5);
    Work r = c.Recv(recv, (rank + size - 1) % size, 5);
    TPX_EXPECT_OK(s, "tensor send");
    TPX_EXPECT_OK(r, "tensor recv");
    EXPECT_EQ(recv.ToVector<float>()[3], ((rank + size - 1) % size) * 10.0f + 3);
  }
  // Shape and layout errors, never reaching the backend.
  Tensor wrong = zeros({size * 2 + 1, 3});
  absl::Status st = c.AllGather(in, wrong).Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("all_gather on rank " + std::to_string(rank)), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("'output'"), std::string::npos) << st;
  EXPECT_NE(st.message().find(ShapeString({size * 2, 3})), std::string::npos) << st;
  st = c.AllReduce(x, zeros({2, 3}, DType::kI32), ReduceOp::kSum).Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("dtypes must match"), std::string::npos) << st;
  st = c.AllReduce(*x.Transpose(0, 1), ReduceOp::kSum).Wait();
  EXPECT_NE(st.message().find("not contiguous"), std::string::npos) << st;
  st = c.Broadcast(Tensor(), 0).Wait();
  EXPECT_NE(st.message().find("undefined"), std::string::npos) << st;
  // Still in step.
  TPX_EXPECT_OK(c.Barrier(), "barrier after tensor errors");
}

}  // namespace

void TensorConformance(RankContext& ctx) { TensorChecks(ctx, Device::CPU()); }

void DeviceTensorConformance(RankContext& ctx) {
  Communicator& c = ctx.comm;
  ASSERT_TRUE(c.device_memory()) << c.backend() << " does not take device memory";
  const Device device = Device::CUDA(c.device() >= 0 ? c.device() : ctx.rank);
  absl::StatusOr<Tensor> probe = Tensor::Empty({1}, DType::kF32, device);
  ASSERT_TRUE(probe.ok()) << "cannot make tensors on " << device.ToString() << ": "
                          << probe.status();
  TensorChecks(ctx, device);

  // Wait() only orders the stream; the host sees completion by polling.
  const int64_t n = 1 << 16;
  Tensor big = *Tensor::Full({n}, 1.0, DType::kF32, device);
  Work w = c.AllReduce(big, ReduceOp::kSum);
  TPX_EXPECT_OK(w, "device all_reduce");
  absl::Status polled = w.Wait(absl::Seconds(60));
  EXPECT_TRUE(polled.ok()) << polled;
  EXPECT_TRUE(w.IsCompleted());
  EXPECT_EQ(big.ToVector<float>()[n - 1], static_cast<float>(ctx.size));
  // Several in flight on the device, then one stream-ordered read.
  std::vector<Tensor> parts;
  std::vector<Work> works;
  for (int i = 0; i < 8; ++i) {
    parts.push_back(*Tensor::Full({4}, i + ctx.rank, DType::kI32, device));
    works.push_back(c.AllReduce(parts.back(), ReduceOp::kMax));
  }
  for (int i = 7; i >= 0; --i) TPX_EXPECT_OK(works[i], "device all_reduce in flight");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(parts[i].ToVector<int32_t>()[3], i + ctx.size - 1);

  // Device errors: mixed devices, and (with a second GPU) another device.
  Tensor host = *Tensor::Zeros({4});
  Tensor on_device = *Tensor::Zeros({4}, DType::kF32, device);
  absl::Status st = c.AllReduce(host, on_device, ReduceOp::kSum).Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("one device"), std::string::npos) << st;
  if (ctx.size > 1) {
    const Device other = Device::CUDA((device.index + 1) % ctx.size);
    Tensor elsewhere = *Tensor::Zeros({4}, DType::kF32, other);
    st = c.Broadcast(elsewhere, 0).Wait();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("uses " + device.ToString()), std::string::npos) << st;
  }
  TPX_EXPECT_OK(c.Barrier(), "barrier after device tensor errors");
}

void WorkConformance(RankContext& ctx) {
  if (ctx.size < 2) return;
  // The last rank joins late, so the others' all-reduce is still running.
  int32_t x = ctx.rank;
  if (ctx.rank == ctx.size - 1) {
    ASSERT_TRUE(ctx.store.Wait({"work/checked"}, absl::Seconds(30)).ok());
  }
  Work w = ctx.comm.AllReduce(&x, 1, DType::kI32, ReduceOp::kSum);
  if (ctx.rank == 0) {
    EXPECT_FALSE(w.IsCompleted());
    absl::Status s = w.Wait(absl::Milliseconds(5));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("still running"), std::string::npos) << s;
    ASSERT_TRUE(ctx.store.Set("work/checked", "1").ok());
  }
  EXPECT_TRUE(w.Wait().ok());
  EXPECT_TRUE(w.IsCompleted());
  EXPECT_TRUE(w.Wait().ok()) << "waiting again returns the same status";
  EXPECT_EQ(x, ctx.size * (ctx.size - 1) / 2);
  // Several in flight, waited on in reverse order.
  std::vector<int32_t> v(8);
  std::vector<Work> works;
  for (int i = 0; i < 8; ++i) {
    v[i] = i;
    works.push_back(ctx.comm.AllReduce(&v[i], 1, DType::kI32, ReduceOp::kSum));
  }
  for (int i = 7; i >= 0; --i) {
    ASSERT_TRUE(works[i].Wait().ok());
    EXPECT_EQ(v[i], i * ctx.size);
  }
}

}  // namespace tpx::testing
