// Multi-process tests of the UCX plugin through its C ABI: every collective
// at world sizes 1-4 against closed-form expected values, uneven and empty
// contributions, bf16/f16 rounding, split communicators used concurrently,
// and failures (dead or stalled peer) turning into errors instead of hangs.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm_ucx/plugin_testutil.h"
#include "core/dtype.h"
#include "gtest/gtest.h"

namespace tpx::ucx::testing {
namespace {

size_t SizeOfDtype(tpx_dtype_t t) { return SizeOf(static_cast<DType>(t)); }

// Buffer of `n` elements of `dtype` holding values given as doubles.
struct Buffer {
  tpx_dtype_t dtype;
  std::vector<char> bytes;
  Buffer(tpx_dtype_t t, size_t n) : dtype(t), bytes(n * SizeOfDtype(t)) {}
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
  size_t size() const { return bytes.size() / SizeOfDtype(dtype); }
  void Set(size_t i, double v) {
    char* p = bytes.data() + i * SizeOfDtype(dtype);
    switch (dtype) {
      case TPX_DTYPE_F32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case TPX_DTYPE_BF16: { uint16_t h = FloatToBF16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case TPX_DTYPE_F16: { uint16_t h = FloatToF16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case TPX_DTYPE_I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
      case TPX_DTYPE_I64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
      case TPX_DTYPE_BOOL: { uint8_t x = v != 0; std::memcpy(p, &x, 1); break; }
    }
  }
  double Get(size_t i) const {
    const char* p = bytes.data() + i * SizeOfDtype(dtype);
    switch (dtype) {
      case TPX_DTYPE_F32: { float f; std::memcpy(&f, p, 4); return f; }
      case TPX_DTYPE_BF16: { uint16_t h; std::memcpy(&h, p, 2); return BF16ToFloat(h); }
      case TPX_DTYPE_F16: { uint16_t h; std::memcpy(&h, p, 2); return F16ToFloat(h); }
      case TPX_DTYPE_I32: { int32_t x; std::memcpy(&x, p, 4); return x; }
      case TPX_DTYPE_I64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
      case TPX_DTYPE_BOOL: { uint8_t x; std::memcpy(&x, p, 1); return x; }
    }
    return 0;
  }
};

// What a dtype stores for `v` (one rounding).
double Stored(tpx_dtype_t t, double v) {
  Buffer b(t, 1);
  b.Set(0, v);
  return b.Get(0);
}

// Contribution of `rank` at element i: small integers, exact in every dtype.
double Value(int rank, int64_t i) { return (rank + 1) + (i % 5); }

// The reduction over `world` ranks of Value(r, i), computed exactly and then
// rounded once into the dtype (avg: f32 division, as the plugin does).
double Expected(tpx_dtype_t t, tpx_reduce_op_t op, int world, int64_t i) {
  double sum = 0, prod = 1, mx = -1e300, mn = 1e300;
  for (int r = 0; r < world; ++r) {
    double v = Value(r, i);
    sum += v;
    prod *= v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case TPX_REDUCE_SUM: return Stored(t, sum);
    case TPX_REDUCE_AVG: return Stored(t, static_cast<float>(sum) / static_cast<float>(world));
    case TPX_REDUCE_PROD: return Stored(t, prod);
    case TPX_REDUCE_MAX: return Stored(t, mx);
    case TPX_REDUCE_MIN: return Stored(t, mn);
  }
  return 0;
}

std::string Mismatch(const std::string& what, int64_t i, double got, double want) {
  return what + ": element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
         std::to_string(want);
}

const tpx_dtype_t kDtypes[] = {TPX_DTYPE_F32, TPX_DTYPE_BF16, TPX_DTYPE_F16, TPX_DTYPE_I32,
                               TPX_DTYPE_I64};
const tpx_reduce_op_t kOps[] = {TPX_REDUCE_SUM, TPX_REDUCE_AVG, TPX_REDUCE_MAX, TPX_REDUCE_MIN,
                                TPX_REDUCE_PROD};

bool IsFloat(tpx_dtype_t t) {
  return t == TPX_DTYPE_F32 || t == TPX_DTYPE_BF16 || t == TPX_DTYPE_F16;
}

std::string Describe(const char* op, tpx_dtype_t t, int r, int64_t count) {
  return std::string(op) + " dtype " + std::to_string(t) + " redop " + std::to_string(r) +
         " count " + std::to_string(count);
}

// Counts for v-collectives: uneven, with rank 1 contributing nothing.
std::vector<int64_t> UnevenCounts(int world, int64_t unit) {
  std::vector<int64_t> counts(world);
  for (int r = 0; r < world; ++r) counts[r] = r == 1 ? 0 : (r + 1) * unit + r;
  return counts;
}
std::vector<int64_t> Displs(const std::vector<int64_t>& counts, int64_t gap = 0) {
  std::vector<int64_t> d(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = off;
    off += counts[i] + gap;
  }
  return d;
}
int64_t Total(const std::vector<int64_t>& counts, int64_t gap = 0) {
  int64_t t = 0;
  for (int64_t c : counts) t += c + gap;
  return t;
}

std::string AllReduceCases(RankEnv& env) {
  for (int64_t count : {0, 1, 5, 1000, 70001}) {
    for (tpx_dtype_t t : kDtypes) {
      for (tpx_reduce_op_t op : kOps) {
        if (op == TPX_REDUCE_AVG && !IsFloat(t)) continue;
        for (bool in_place : {false, true}) {
          Buffer send(t, count), recv(t, count);
          for (int64_t i = 0; i < count; ++i) send.Set(i, Value(env.rank, i));
          auto a = MakeArgs(TPX_COLL_ALL_REDUCE, t);
          a.op = op;
          a.count = count;
          a.send = send.data();
          a.recv = in_place ? send.data() : recv.data();
          std::string what = Describe("all_reduce", t, op, count);
          if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
          const Buffer& out = in_place ? send : recv;
          for (int64_t i = 0; i < count; ++i) {
            double want = Expected(t, op, env.world, i);
            if (out.Get(i) != want) return Mismatch(what, i, out.Get(i), want);
          }
        }
      }
    }
  }
  return "";
}

class WorldTest : public ::testing::TestWithParam<int> {};

TEST_P(WorldTest, AllReduceEveryOpAndDtype) {
  EXPECT_EQ(RunRanks(GetParam(), AllReduceCases), "");
}

TEST_P(WorldTest, AllReduceWithManySmallChunks) {
  RunOptions options;
  options.env.push_back({"TPX_UCX_CHUNK_BYTES", "4096"});
  options.env.push_back({"TPX_UCX_SMALL_BYTES", "64"});
  EXPECT_EQ(RunRanks(GetParam(), AllReduceCases, options), "");
}

TEST_P(WorldTest, HalfPrecisionSumsRoundOnlyOnce) {
  // 1 + (world-1) * 2^-9: each addend is below half an ulp of 1 in bf16, so
  // rounding after every addition would give exactly 1.
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              for (int64_t count : {3, 200000}) {
                Buffer x(TPX_DTYPE_BF16, count);
                for (int64_t i = 0; i < count; ++i) x.Set(i, env.rank == 0 ? 1.0 : 1.0 / 512);
                auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_BF16);
                a.count = count;
                a.send = a.recv = x.data();
                if (std::string e = RunOp(env, a); !e.empty()) return e;
                double want = Stored(TPX_DTYPE_BF16, 1.0 + (env.world - 1) / 512.0);
                for (int64_t i = 0; i < count; ++i) {
                  if (x.Get(i) != want) return Mismatch("bf16 sum", i, x.Get(i), want);
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, BroadcastFromEveryRoot) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              for (int root = 0; root < env.world; ++root) {
                for (int64_t count : {0, 3, 100003}) {
                  for (tpx_dtype_t t : {TPX_DTYPE_F32, TPX_DTYPE_BF16, TPX_DTYPE_BOOL}) {
                    auto want_at = [&](int64_t i) {
                      return t == TPX_DTYPE_BOOL ? (root + i) % 2 : Value(root, i);
                    };
                    Buffer x(t, count);
                    for (int64_t i = 0; i < count; ++i) {
                      x.Set(i, env.rank == root ? want_at(i) : 7);
                    }
                    auto a = MakeArgs(TPX_COLL_BROADCAST, t);
                    a.peer = root;
                    a.count = count;
                    a.send = a.recv = x.data();
                    std::string what = Describe("broadcast", t, root, count);
                    if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
                    for (int64_t i = 0; i < count; ++i) {
                      double want = want_at(i);
                      if (x.Get(i) != want) return Mismatch(what, i, x.Get(i), want);
                    }
                  }
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, ReduceToEveryRoot) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              for (int root = 0; root < env.world; ++root) {
                for (int64_t count : {1, 1000, 70001}) {
                  for (tpx_dtype_t t : {TPX_DTYPE_F32, TPX_DTYPE_BF16, TPX_DTYPE_I64}) {
                    for (tpx_reduce_op_t op : {TPX_REDUCE_SUM, TPX_REDUCE_MAX}) {
                      Buffer send(t, count), recv(t, count);
                      for (int64_t i = 0; i < count; ++i) send.Set(i, Value(env.rank, i));
                      auto a = MakeArgs(TPX_COLL_REDUCE, t);
                      a.op = op;
                      a.peer = root;
                      a.count = count;
                      a.send = send.data();
                      a.recv = env.rank == root ? recv.data() : nullptr;
                      std::string what = Describe("reduce", t, op, count);
                      if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
                      if (env.rank != root) continue;
                      for (int64_t i = 0; i < count; ++i) {
                        double want = Expected(t, op, env.world, i);
                        if (recv.Get(i) != want) return Mismatch(what, i, recv.Get(i), want);
                      }
                    }
                  }
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, AllGatherVUnevenAndInPlace) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              for (int64_t unit : {0, 3, 40000}) {
                for (bool in_place : {false, true}) {
                  tpx_dtype_t t = in_place ? TPX_DTYPE_F16 : TPX_DTYPE_I32;
                  auto counts = UnevenCounts(env.world, unit);
                  auto displs = Displs(counts, /*gap=*/2);
                  Buffer recv(t, Total(counts, 2)), send(t, counts[env.rank]);
                  char* mine = recv.bytes.data() + displs[env.rank] * SizeOfDtype(t);
                  for (int64_t i = 0; i < counts[env.rank]; ++i) send.Set(i, Value(env.rank, i));
                  if (in_place && !send.bytes.empty()) {
                    std::memcpy(mine, send.data(), send.bytes.size());
                  }
                  auto a = MakeArgs(TPX_COLL_ALL_GATHER_V, t);
                  a.count = counts[env.rank];
                  a.send = in_place ? mine : send.data();
                  a.recv = recv.data();
                  a.recv_counts = counts.data();
                  a.recv_displs = displs.data();
                  std::string what = Describe("all_gather_v", t, 0, unit);
                  if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
                  for (int r = 0; r < env.world; ++r) {
                    for (int64_t i = 0; i < counts[r]; ++i) {
                      double got = recv.Get(displs[r] + i);
                      if (got != Value(r, i)) return Mismatch(what, displs[r] + i, got, Value(r, i));
                    }
                  }
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, ReduceScatterVUneven) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              for (int64_t unit : {0, 3, 40000}) {
                for (tpx_dtype_t t : {TPX_DTYPE_F32, TPX_DTYPE_BF16, TPX_DTYPE_I32}) {
                  tpx_reduce_op_t op = t == TPX_DTYPE_I32 ? TPX_REDUCE_MAX : TPX_REDUCE_SUM;
                  auto counts = UnevenCounts(env.world, unit);
                  auto displs = Displs(counts, /*gap=*/1);
                  Buffer send(t, Total(counts, 1)), recv(t, counts[env.rank]);
                  for (int r = 0; r < env.world; ++r) {
                    for (int64_t i = 0; i < counts[r]; ++i) send.Set(displs[r] + i, Value(env.rank, i + r));
                  }
                  auto a = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, t);
                  a.op = op;
                  a.count = counts[env.rank];
                  a.send = send.data();
                  a.recv = recv.data();
                  a.send_counts = counts.data();
                  a.send_displs = displs.data();
                  std::string what = Describe("reduce_scatter_v", t, op, unit);
                  if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
                  for (int64_t i = 0; i < counts[env.rank]; ++i) {
                    double want = Expected(t, op, env.world, i + env.rank);
                    if (recv.Get(i) != want) return Mismatch(what, i, recv.Get(i), want);
                  }
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, GatherVAndScatterVAtEveryRoot) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              const tpx_dtype_t t = TPX_DTYPE_I64;
              for (int root = 0; root < env.world; ++root) {
                for (int64_t unit : {2, 30000}) {
                  auto counts = UnevenCounts(env.world, unit);
                  auto displs = Displs(counts);
                  const bool is_root = env.rank == root;
                  // gather_v
                  Buffer mine(t, counts[env.rank]), all(t, Total(counts));
                  for (int64_t i = 0; i < counts[env.rank]; ++i) mine.Set(i, Value(env.rank, i));
                  auto g = MakeArgs(TPX_COLL_GATHER_V, t);
                  g.peer = root;
                  g.count = counts[env.rank];
                  g.send = mine.data();
                  g.recv = is_root ? all.data() : nullptr;
                  g.recv_counts = is_root ? counts.data() : nullptr;
                  g.recv_displs = is_root ? displs.data() : nullptr;
                  if (std::string e = RunOp(env, g); !e.empty()) return "gather_v: " + e;
                  if (is_root) {
                    for (int r = 0; r < env.world; ++r) {
                      for (int64_t i = 0; i < counts[r]; ++i) {
                        if (all.Get(displs[r] + i) != Value(r, i)) {
                          return Mismatch("gather_v", displs[r] + i, all.Get(displs[r] + i), Value(r, i));
                        }
                      }
                    }
                  }
                  // scatter_v: the root sends block r = Value(r + 10, i).
                  Buffer src(t, Total(counts)), dst(t, counts[env.rank]);
                  for (int r = 0; r < env.world; ++r) {
                    for (int64_t i = 0; i < counts[r]; ++i) src.Set(displs[r] + i, Value(r + 10, i));
                  }
                  auto s = MakeArgs(TPX_COLL_SCATTER_V, t);
                  s.peer = root;
                  s.count = counts[env.rank];
                  s.send = is_root ? src.data() : nullptr;
                  s.recv = dst.data();
                  s.send_counts = is_root ? counts.data() : nullptr;
                  s.send_displs = is_root ? displs.data() : nullptr;
                  if (std::string e = RunOp(env, s); !e.empty()) return "scatter_v: " + e;
                  for (int64_t i = 0; i < counts[env.rank]; ++i) {
                    if (dst.Get(i) != Value(env.rank + 10, i)) {
                      return Mismatch("scatter_v", i, dst.Get(i), Value(env.rank + 10, i));
                    }
                  }
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, AllToAllVUneven) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              const tpx_dtype_t t = TPX_DTYPE_I32;
              const int n = env.world, me = env.rank;
              for (int64_t unit : {1, 20000}) {
                // Rank i sends (i + 2j) % 3 * unit elements to rank j.
                auto amount = [&](int from, int to) { return (from + 2 * to) % 3 * unit; };
                std::vector<int64_t> sc(n), rc(n);
                for (int j = 0; j < n; ++j) {
                  sc[j] = amount(me, j);
                  rc[j] = amount(j, me);
                }
                auto sd = Displs(sc), rd = Displs(rc, 1);
                Buffer send(t, Total(sc)), recv(t, Total(rc, 1));
                for (int j = 0; j < n; ++j) {
                  for (int64_t i = 0; i < sc[j]; ++i) send.Set(sd[j] + i, me * 1000 + j * 100 + i % 97);
                }
                auto a = MakeArgs(TPX_COLL_ALL_TO_ALL_V, t);
                a.send = send.data();
                a.recv = recv.data();
                a.send_counts = sc.data();
                a.send_displs = sd.data();
                a.recv_counts = rc.data();
                a.recv_displs = rd.data();
                if (std::string e = RunOp(env, a); !e.empty()) return "all_to_all_v: " + e;
                for (int j = 0; j < n; ++j) {
                  for (int64_t i = 0; i < rc[j]; ++i) {
                    double want = j * 1000 + me * 100 + i % 97;
                    if (recv.Get(rd[j] + i) != want) {
                      return Mismatch("all_to_all_v", rd[j] + i, recv.Get(rd[j] + i), want);
                    }
                  }
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, SendRecvExchangeMatchesByTag) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              const int n = env.world, me = env.rank;
              const int right = (me + 1) % n, left = (me + n - 1) % n;
              for (int64_t count : {0, 10, 1 << 20}) {
                // Two messages to the right (tags 1 then 2); receive them from
                // the left in the opposite order. Everything is posted before
                // waiting, so a rendezvous send must not block later receives.
                Buffer s1(TPX_DTYPE_F32, count), s2(TPX_DTYPE_F32, count);
                Buffer r1(TPX_DTYPE_F32, count), r2(TPX_DTYPE_F32, count);
                for (int64_t i = 0; i < count; ++i) {
                  s1.Set(i, me + i % 13);
                  s2.Set(i, -me - i % 11);
                }
                tpx_coll_args_v1_t ops[4] = {MakeArgs(TPX_COLL_SEND, TPX_DTYPE_F32),
                                             MakeArgs(TPX_COLL_SEND, TPX_DTYPE_F32),
                                             MakeArgs(TPX_COLL_RECV, TPX_DTYPE_F32),
                                             MakeArgs(TPX_COLL_RECV, TPX_DTYPE_F32)};
                void* bufs[4] = {s1.data(), s2.data(), r2.data(), r1.data()};
                int tags[4] = {1, 2, 2, 1};
                tpx_request_t reqs[4];
                tpx_error_t err{};
                for (int k = 0; k < 4; ++k) {
                  ops[k].peer = k < 2 ? right : left;
                  ops[k].tag = tags[k];
                  ops[k].count = count;
                  ops[k].send = bufs[k];
                  ops[k].recv = bufs[k];
                  if (env.plugin->post(env.comm, &ops[k], &reqs[k], &err) != TPX_OK) return err.message;
                }
                for (int k = 0; k < 4; ++k) {
                  int code = env.plugin->wait(reqs[k], -1, &err);
                  env.plugin->request_free(reqs[k]);
                  if (code != TPX_OK) return std::string("send/recv: ") + err.message;
                }
                for (int64_t i = 0; i < count; ++i) {
                  if (r1.Get(i) != left + i % 13) return Mismatch("recv tag 1", i, r1.Get(i), left + i % 13);
                  if (r2.Get(i) != -left - i % 11) return Mismatch("recv tag 2", i, r2.Get(i), -left - i % 11);
                }
              }
              return "";
            }),
            "");
}

TEST_P(WorldTest, BarrierWaitsForEveryRank) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              const tpx_store_v1_t* store = env.config->store;
              tpx_error_t err{};
              for (int round = 1; round <= 3; ++round) {
                if (env.rank == 0) usleep(20000);  // the others must wait for rank 0
                int64_t arrived = 0;
                store->add(store->ctx, "test/arrived", 1, &arrived, &err);
                if (std::string e = RunOp(env, MakeArgs(TPX_COLL_BARRIER, TPX_DTYPE_F32)); !e.empty()) {
                  return "barrier: " + e;
                }
                store->add(store->ctx, "test/arrived", 0, &arrived, &err);
                if (arrived < round * env.world) {
                  return "left barrier " + std::to_string(round) + " after only " +
                         std::to_string(arrived) + " arrivals";
                }
              }
              return "";
            }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, WorldTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

// Sum of `count` ones over the communicator, expected to equal its size.
std::string SumOnes(RankEnv& env, tpx_comm_t comm, int expected, int64_t count) {
  std::vector<float> x(count, 1.0f);
  auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
  a.count = count;
  a.send = a.recv = x.data();
  RankEnv sub = env;
  sub.comm = comm;
  for (int rep = 0; rep < 20; ++rep) {
    std::fill(x.begin(), x.end(), 1.0f);
    if (std::string e = RunOp(sub, a); !e.empty()) return e;
    for (int64_t i = 0; i < count; ++i) {
      if (x[i] != expected) return Mismatch("split all_reduce", i, x[i], expected);
    }
  }
  return "";
}

TEST(UcxPlugin, SplitCommunicatorsWorkConcurrentlyFromThreads) {
  EXPECT_EQ(RunRanks(4, [](RankEnv& env) -> std::string {
              // Colors: even and odd ranks.
              const int color = env.rank % 2;
              const int32_t members[2] = {color, color + 2};
              const std::string name = std::string("world/split0/c") + std::to_string(color);
              tpx_comm_config_v1_t config = *env.config;
              config.name = name.c_str();
              config.rank = env.rank / 2;
              config.size = 2;
              tpx_comm_t child = nullptr;
              tpx_error_t err{};
              if (env.plugin->comm_split(env.comm, color, env.rank, members, &config, &child, &err) !=
                  TPX_OK) {
                return std::string("comm_split: ") + err.message;
              }
              std::string child_result, parent_result;
              std::thread worker([&] { child_result = SumOnes(env, child, 2, 100000); });
              parent_result = SumOnes(env, env.comm, 4, 1000);
              worker.join();
              env.plugin->comm_destroy(child, &err);
              return child_result.empty() ? parent_result : "child: " + child_result;
            }),
            "");
}

// An all-reduce of (rank + 1) over `count` floats that this rank only
// polls with test(): the communicator's own thread must move the data. An
// error if it has not finished within `bound` (it is then waited for, so
// that nothing is left running).
std::string PolledAllReduce(RankEnv& env, int64_t count, std::chrono::seconds bound) {
  std::vector<float> x(count, static_cast<float>(env.rank + 1));
  auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
  a.count = count;
  a.send = a.recv = x.data();
  tpx_request_t req = nullptr;
  tpx_error_t err{};
  if (env.plugin->post(env.comm, &a, &req, &err) != TPX_OK) return err.message;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  int done = 0, code = TPX_OK;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    code = env.plugin->test(req, &done, &err);
    if (!done) usleep(100);
  }
  if (!done) {
    env.plugin->wait(req, -1, &err);
    env.plugin->request_free(req);
    return "an all_reduce that was only polled did not finish in " +
           std::to_string(bound.count()) + " s";
  }
  env.plugin->request_free(req);
  if (code != TPX_OK) return err.message;
  const float want = static_cast<float>(env.world * (env.world + 1) / 2);
  for (int64_t i = 0; i < count; ++i) {
    if (x[i] != want) return Mismatch("polled all_reduce", i, x[i], want);
  }
  return "";
}

TEST(UcxPlugin, OperationsProgressWithoutWait) {
  EXPECT_EQ(RunRanks(3, [](RankEnv& env) -> std::string {
              for (int64_t count : {16, 300000}) {
                const std::string e = PolledAllReduce(env, count, std::chrono::seconds(60));
                if (!e.empty()) return e;
              }
              return "";
            }),
            "");
}

TEST(UcxPlugin, OperationsProgressWithoutWaitOnABusyHost) {
  // As above while busy threads keep every CPU occupied: the executor then
  // ticks slowly (TPX_UCX_BUSY_TICK_US) but must still run work nobody
  // waits for. Bounded: the busy threads stop when the ops are done, or
  // after 10 s each, which fails the test.
  EXPECT_EQ(RunRanks(2, [](RankEnv& env) -> std::string {
              std::atomic<bool> stop{false};
              std::vector<std::thread> busy;
              const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
              for (unsigned i = 0; i < cpus; ++i) {
                busy.emplace_back([&stop] {
                  volatile uint64_t spin = 0;
                  while (!stop.load(std::memory_order_relaxed)) spin = spin + 1;
                });
              }
              std::string result;
              for (int64_t count : {16, 300000}) {
                result = PolledAllReduce(env, count, std::chrono::seconds(10));
                if (!result.empty()) break;
              }
              stop = true;
              for (std::thread& t : busy) t.join();
              return result;
            }),
            "");
}

TEST(UcxPlugin, OperationsLeftBehindByAWaitingThreadProgress) {
  // A waiting thread runs operations itself (the executor only watches);
  // those it leaves behind, or posts after it, must still progress while
  // the ranks only poll.
  EXPECT_EQ(RunRanks(2, [](RankEnv& env) -> std::string {
              for (int64_t count : {16, 300000}) {
                std::vector<float> x(count, static_cast<float>(env.rank + 1));
                std::vector<float> y(count, static_cast<float>(env.rank + 1));
                auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
                a.count = count;
                a.send = a.recv = x.data();
                auto b = a;
                b.send = b.recv = y.data();
                tpx_error_t err{};
                auto poll = [&](tpx_request_t req) -> std::string {
                  int done = 0, code = TPX_OK;
                  while (!done) {
                    code = env.plugin->test(req, &done, &err);
                    if (!done) usleep(100);
                  }
                  env.plugin->request_free(req);
                  return code == TPX_OK ? "" : err.message;
                };
                // Left behind: posted before the waited one finished.
                tpx_request_t ra = nullptr, rb = nullptr;
                if (env.plugin->post(env.comm, &a, &ra, &err) != TPX_OK) return err.message;
                if (env.plugin->post(env.comm, &b, &rb, &err) != TPX_OK) return err.message;
                const int waited = env.plugin->wait(ra, -1, &err);
                env.plugin->request_free(ra);
                if (waited != TPX_OK) return err.message;
                if (std::string e = poll(rb); !e.empty()) return e;
                // Posted after a run of waited operations.
                for (int i = 0; i < 20; ++i) {
                  if (std::string e = RunOp(env, a); !e.empty()) return e;
                }
                tpx_request_t rc = nullptr;
                if (env.plugin->post(env.comm, &b, &rc, &err) != TPX_OK) return err.message;
                if (std::string e = poll(rc); !e.empty()) return e;
                // x: 21 in-place sums over the ranks (3, doubled 20 times);
                // y: two (3, then 6).
                const float want_x = 3.0f * static_cast<float>(1 << 20), want_y = 6.0f;
                for (int64_t i = 0; i < count; ++i) {
                  if (x[i] != want_x) return Mismatch("waited all_reduce", i, x[i], want_x);
                  if (y[i] != want_y) return Mismatch("polled all_reduce", i, y[i], want_y);
                }
              }
              return "";
            }),
            "");
}

TEST(UcxPlugin, DeadPeerFailsPendingAndLaterOps) {
  RunOptions options;
  options.comm_timeout_ms = 3000;
  options.may_die = {2};
  EXPECT_EQ(RunRanks(3, [](RankEnv& env) -> std::string {
              // Everyone is connected before rank 2 dies.
              if (std::string e = RunOp(env, MakeArgs(TPX_COLL_BARRIER, TPX_DTYPE_F32)); !e.empty()) {
                return "barrier: " + e;
              }
              if (env.rank == 2) raise(SIGKILL);
              for (int64_t count : {16, 1 << 20}) {
                std::vector<float> x(count, 1.0f);
                auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
                a.count = count;
                a.send = a.recv = x.data();
                int code = TPX_OK;
                std::string e = RunOp(env, a, &code);
                if (code != TPX_ERR_UNAVAILABLE && code != TPX_ERR_DEADLINE_EXCEEDED) {
                  return "expected UNAVAILABLE or DEADLINE_EXCEEDED, got '" + e + "'";
                }
                if (e.find("all_reduce") == std::string::npos) return "message lacks the op: " + e;
              }
              return "";
            }, options),
            "");
}

TEST(UcxPlugin, PeerKilledDuringLargeTransfer) {
  // Rank 1 dies while rendezvous transfers of a large all-reduce are in
  // flight; the survivors must get an error, not a crash or a hang.
  RunOptions options;
  options.comm_timeout_ms = 3000;
  options.may_die = {1};
  EXPECT_EQ(RunRanks(3, [](RankEnv& env) -> std::string {
              const int64_t count = 16 << 20;
              std::vector<float> x(count, 1.0f);
              auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
              a.count = count;
              a.send = a.recv = x.data();
              if (std::string e = RunOp(env, MakeArgs(TPX_COLL_BARRIER, TPX_DTYPE_F32)); !e.empty()) {
                return "barrier: " + e;
              }
              tpx_request_t req = nullptr;
              tpx_error_t err{};
              if (env.plugin->post(env.comm, &a, &req, &err) != TPX_OK) return err.message;
              if (env.rank == 1) {
                usleep(3000);
                raise(SIGKILL);
              }
              int code = env.plugin->wait(req, -1, &err);
              env.plugin->request_free(req);
              if (code == TPX_OK) return "";  // finished before the peer died
              if (code != TPX_ERR_UNAVAILABLE && code != TPX_ERR_DEADLINE_EXCEEDED) {
                return "unexpected code " + std::to_string(code) + ": " + err.message;
              }
              return "";
            }, options),
            "");
}

TEST(UcxPlugin, StalledPeerTimesOutNamingIt) {
  RunOptions options;
  options.comm_timeout_ms = 1000;
  EXPECT_EQ(RunRanks(2, [](RankEnv& env) -> std::string {
              if (env.rank == 1) {
                usleep(2500 * 1000);  // never joins the collective
                return "";
              }
              std::vector<float> x(16, 1.0f);
              auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
              a.count = 16;
              a.send = a.recv = x.data();
              int code = TPX_OK;
              std::string e = RunOp(env, a, &code);
              if (code != TPX_ERR_DEADLINE_EXCEEDED) return "expected DEADLINE_EXCEEDED, got '" + e + "'";
              if (e.find("all_reduce") == std::string::npos || e.find("[1]") == std::string::npos) {
                return "message should name the op and rank 1: " + e;
              }
              // The communicator stays failed.
              code = TPX_OK;
              e = RunOp(env, a, &code);
              if (code == TPX_OK) return "second op on a failed communicator succeeded";
              return "";
            }, options),
            "");
}

}  // namespace
}  // namespace tpx::ucx::testing
