// The shared-memory path of the UCX plugin (comm_ucx/shm_collectives.h) at
// world sizes 2-4: all_reduce, all_gather_v and reduce_scatter_v against
// single-process references at sizes around the path's thresholds (shrunk
// with TPX_UCX_SHM_BYTES, direct reads in several pieces) in f32, bf16,
// f16, i32 and i64, in place too; send buffers overwritten as soon as a
// call returns; results bitwise equal to the UCX path's; ranks that
// disagree on sizes or on the path get errors; the two-rank direct
// reduce_scatter_v with ranks laying out their inputs differently and the
// output over either block; a peer killed mid-collective is an error on the
// others, not a hang; and no segment is left in /dev/shm.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm_ucx/plugin_testutil.h"
#include "core/dtype.h"
#include "gtest/gtest.h"

namespace tpx::ucx::testing {
namespace {

// Small enough that a few KiB already take the direct-read path.
constexpr int64_t kShmBytes = 4096;
// Direct reads in pieces of this many bytes: blocks of a few KiB take
// several, the last one short.
constexpr int64_t kCmaChunkBytes = 3000;

RunOptions ShmOptions() {
  RunOptions options;
  options.env.push_back({"TPX_UCX_SHM_BYTES", std::to_string(kShmBytes)});
  options.env.push_back({"TPX_UCX_CMA_CHUNK_BYTES", std::to_string(kCmaChunkBytes)});
  return options;
}

size_t SizeOfDtype(tpx_dtype_t t) { return SizeOf(static_cast<DType>(t)); }

void Store(tpx_dtype_t t, char* p, double v) {
  switch (t) {
    case TPX_DTYPE_F32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case TPX_DTYPE_BF16: { uint16_t h = FloatToBF16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case TPX_DTYPE_F16: { uint16_t h = FloatToF16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case TPX_DTYPE_I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case TPX_DTYPE_I64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    default: break;
  }
}
double Load(tpx_dtype_t t, const char* p) {
  switch (t) {
    case TPX_DTYPE_F32: { float f; std::memcpy(&f, p, 4); return f; }
    case TPX_DTYPE_BF16: { uint16_t h; std::memcpy(&h, p, 2); return BF16ToFloat(h); }
    case TPX_DTYPE_F16: { uint16_t h; std::memcpy(&h, p, 2); return F16ToFloat(h); }
    case TPX_DTYPE_I32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case TPX_DTYPE_I64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    default: return 0;
  }
}
double Rounded(tpx_dtype_t t, double v) {
  char b[8];
  Store(t, b, v);
  return Load(t, b);
}

// Rank r's element i: small integers, exact in every dtype and in any sum
// of four of them.
double Value(int rank, int64_t i) { return ((rank * 7 + i) % 11) - 3; }

const tpx_dtype_t kDtypes[] = {TPX_DTYPE_F32, TPX_DTYPE_BF16, TPX_DTYPE_F16, TPX_DTYPE_I32,
                               TPX_DTYPE_I64};

std::string Fail(const std::string& what, int64_t i, double got, double want) {
  std::ostringstream os;
  os << what << ": element " << i << " is " << got << ", expected " << want;
  return os.str();
}

// Element counts whose byte sizes straddle the thresholds (kShmBytes per
// rank, the segment's slot) for `dtype`, plus empty and odd ones.
std::vector<int64_t> CountsAround(tpx_dtype_t t, int world) {
  const int64_t per = kShmBytes / SizeOfDtype(t);
  return {1, 7, per - 1, per, per + 1, per * world - 1, per * world + 3, 3 * per + 5};
}

std::string AllReduceCases(RankEnv& env) {
  for (tpx_dtype_t t : kDtypes) {
    const size_t esz = SizeOfDtype(t);
    for (int64_t count : CountsAround(t, env.world)) {
      for (tpx_reduce_op_t op : {TPX_REDUCE_SUM, TPX_REDUCE_MAX, TPX_REDUCE_AVG}) {
        if (op == TPX_REDUCE_AVG && (t == TPX_DTYPE_I32 || t == TPX_DTYPE_I64)) continue;
        for (bool in_place : {false, true}) {
          std::vector<char> send(count * esz), recv(count * esz);
          for (int64_t i = 0; i < count; ++i) Store(t, &send[i * esz], Value(env.rank, i));
          auto a = MakeArgs(TPX_COLL_ALL_REDUCE, t);
          a.op = op;
          a.count = count;
          a.send = send.data();
          a.recv = in_place ? send.data() : recv.data();
          const std::string what = "all_reduce dtype " + std::to_string(t) + " op " +
                                   std::to_string(op) + " count " + std::to_string(count) +
                                   (in_place ? " in place" : "");
          if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
          const char* out = static_cast<const char*>(a.recv);
          for (int64_t i = 0; i < count; ++i) {
            double sum = 0, mx = -1e300;
            for (int r = 0; r < env.world; ++r) {
              sum += Value(r, i);
              mx = std::max(mx, Value(r, i));
            }
            const float avg = static_cast<float>(sum) / static_cast<float>(env.world);
            const double want = op == TPX_REDUCE_SUM   ? Rounded(t, sum)
                                : op == TPX_REDUCE_MAX ? Rounded(t, mx)
                                                       : Rounded(t, avg);
            const double got = Load(t, out + i * esz);
            if (got != want) return Fail(what, i, got, want);
          }
        }
      }
    }
  }
  return "";
}

// Per-rank counts: uneven, rank 1 empty, scaled so that blocks straddle the
// thresholds.
std::vector<int64_t> UnevenCounts(int world, int64_t unit) {
  std::vector<int64_t> counts(world);
  for (int r = 0; r < world; ++r) counts[r] = r == 1 ? 0 : unit + r * 3;
  return counts;
}

// Offsets of blocks of `counts` elements laid out one after another with
// `gap` elements between them; *total: the elements the layout spans.
std::vector<int64_t> GappedDispls(const std::vector<int64_t>& counts, int64_t gap,
                                  int64_t* total) {
  std::vector<int64_t> displs(counts.size());
  *total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = *total;
    *total += counts[r] + gap;
  }
  return displs;
}

std::string AllGatherCases(RankEnv& env) {
  for (tpx_dtype_t t : kDtypes) {
    const size_t esz = SizeOfDtype(t);
    const int64_t per = kShmBytes / esz;
    // Around a quarter of the slot (direct reads above it where the ranks
    // can), half of it, and all of it.
    for (int64_t unit : {int64_t{1}, per / 4 - 4, per / 4 + 1, per / 2 - 4, per / 2 + 1, per - 4,
                         per, per + 1, 5 * per}) {
      for (bool uneven : {false, true}) {
        for (bool in_place : {false, true}) {
          std::vector<int64_t> counts =
              uneven ? UnevenCounts(env.world, unit) : std::vector<int64_t>(env.world, unit);
          // Blocks laid out with gaps, which must stay untouched.
          int64_t total = 0;
          const std::vector<int64_t> displs = GappedDispls(counts, 2, &total);
          std::vector<char> send(counts[env.rank] * esz + 1), recv(total * esz);
          for (int64_t i = 0; i < total; ++i) Store(t, &recv[i * esz], 99);
          // In place: this rank's block is already in recv.
          char* mine = in_place ? &recv[displs[env.rank] * esz] : send.data();
          for (int64_t i = 0; i < counts[env.rank]; ++i) {
            Store(t, mine + i * esz, Value(env.rank, i));
          }
          auto a = MakeArgs(TPX_COLL_ALL_GATHER_V, t);
          a.count = counts[env.rank];
          a.send = mine;
          a.recv = recv.data();
          a.recv_counts = counts.data();
          a.recv_displs = displs.data();
          const std::string what = "all_gather_v dtype " + std::to_string(t) + " unit " +
                                   std::to_string(unit) + (uneven ? " uneven" : "") +
                                   (in_place ? " in place" : "");
          if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
          for (int r = 0; r < env.world; ++r) {
            for (int64_t i = 0; i < counts[r] + 2; ++i) {
              const double want = i < counts[r] ? Value(r, i) : 99;
              const double got = Load(t, &recv[(displs[r] + i) * esz]);
              if (got != want) return Fail(what + " block " + std::to_string(r), i, got, want);
            }
          }
        }
      }
    }
  }
  return "";
}

// Back-to-back all-gathers whose callers overwrite their send buffer as
// soon as the call returns: a peer still reading it afterwards would
// gather the overwritten values.
std::string SendReusedAtOnceCases(RankEnv& env) {
  for (int64_t count : {int64_t{16}, 3 * kShmBytes / 4 + 5}) {
    std::vector<float> send(count), recv(count * env.world);
    std::vector<int64_t> counts(env.world, count), displs(env.world);
    for (int r = 0; r < env.world; ++r) displs[r] = r * count;
    for (int64_t i = 0; i < count; ++i) send[i] = static_cast<float>(Value(env.rank, i));
    for (int round = 0; round < 8; ++round) {
      auto a = MakeArgs(TPX_COLL_ALL_GATHER_V, TPX_DTYPE_F32);
      a.count = count;
      a.send = send.data();
      a.recv = recv.data();
      a.recv_counts = counts.data();
      a.recv_displs = displs.data();
      const std::string what =
          "all_gather_v count " + std::to_string(count) + " round " + std::to_string(round);
      if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
      for (int64_t i = 0; i < count; ++i) {
        send[i] = static_cast<float>(Value(env.rank, i + 1000 * (round + 1)));
      }
      for (int r = 0; r < env.world; ++r) {
        for (int64_t i = 0; i < count; ++i) {
          const double want = static_cast<float>(Value(r, i + 1000 * round));
          if (recv[r * count + i] != want) {
            return Fail(what + " block " + std::to_string(r), i, recv[r * count + i], want);
          }
        }
      }
    }
  }
  return "";
}

std::string ReduceScatterCases(RankEnv& env) {
  for (tpx_dtype_t t : kDtypes) {
    const size_t esz = SizeOfDtype(t);
    const int64_t per = kShmBytes / esz;
    for (int64_t unit : {int64_t{1}, per / env.world - 2, per / env.world, per, 3 * per}) {
      for (bool uneven : {false, true}) {
        for (bool in_place : {false, true}) {
          std::vector<int64_t> counts =
              uneven ? UnevenCounts(env.world, unit) : std::vector<int64_t>(env.world, unit);
          int64_t total = 0;  // gaps in the input
          const std::vector<int64_t> displs = GappedDispls(counts, 1, &total);
          // The result over this rank's own input block: the shared-memory
          // path allows it (it reads that block before writing).
          if (in_place && total * esz > kShmBytes) continue;
          // Element j of block b on rank r: Value(r, b * 1000 + j).
          std::vector<char> send(total * esz + 1), recv(counts[env.rank] * esz + 1);
          for (int b = 0; b < env.world; ++b) {
            for (int64_t j = 0; j < counts[b]; ++j) {
              Store(t, &send[(displs[b] + j) * esz], Value(env.rank, b * 1000 + j));
            }
          }
          auto a = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, t);
          a.count = counts[env.rank];
          a.send = send.data();
          a.recv = in_place ? &send[displs[env.rank] * esz] : recv.data();
          a.send_counts = counts.data();
          a.send_displs = displs.data();
          const std::string what = "reduce_scatter_v dtype " + std::to_string(t) + " unit " +
                                   std::to_string(unit) + (uneven ? " uneven" : "") +
                                   (in_place ? " in place" : "");
          if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
          const char* out = static_cast<const char*>(a.recv);
          for (int64_t j = 0; j < counts[env.rank]; ++j) {
            double sum = 0;
            for (int r = 0; r < env.world; ++r) sum += Value(r, env.rank * 1000 + j);
            const double want = Rounded(t, sum);
            const double got = Load(t, out + j * esz);
            if (got != want) return Fail(what, j, got, want);
          }
        }
      }
    }
  }
  return "";
}

// Two ranks above the slot size: each reads its block straight from the
// peer's input. The ranks lay their inputs out differently (rank 1 puts
// block 1 first, with gaps), and the output is this rank's own input block,
// a separate buffer, or the start of its input, which on rank 1 is where
// the peer's block lies: that block must still be read intact.
std::string TwoRankDirectReduceScatterCases(RankEnv& env) {
  for (tpx_dtype_t t : {TPX_DTYPE_F32, TPX_DTYPE_BF16, TPX_DTYPE_I64}) {
    const size_t esz = SizeOfDtype(t);
    const std::vector<int64_t> counts = {3 * (kShmBytes / static_cast<int64_t>(esz)) + 5,
                                         2 * (kShmBytes / static_cast<int64_t>(esz)) + 1};
    std::vector<int64_t> displs =
        env.rank == 0 ? std::vector<int64_t>{0, counts[0]}
                      : std::vector<int64_t>{counts[1] + 7, 0};
    const int64_t total = counts[0] + counts[1] + 7;
    for (const char* out_at : {"own block", "separate", "input start"}) {
      std::vector<char> send(total * esz), recv(counts[env.rank] * esz);
      for (int b = 0; b < 2; ++b) {
        for (int64_t j = 0; j < counts[b]; ++j) {
          Store(t, &send[(displs[b] + j) * esz], Value(env.rank, b * 1000 + j));
        }
      }
      auto a = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, t);
      a.count = counts[env.rank];
      a.send = send.data();
      a.send_counts = counts.data();
      a.send_displs = displs.data();
      const std::string where = out_at;
      a.recv = where == "own block"  ? &send[displs[env.rank] * esz]
               : where == "separate" ? recv.data()
                                     : send.data();
      const std::string what = "two-rank reduce_scatter_v dtype " + std::to_string(t) +
                               ", output at the " + where;
      if (std::string e = RunOp(env, a); !e.empty()) return what + ": " + e;
      const char* out = static_cast<const char*>(a.recv);
      for (int64_t j = 0; j < counts[env.rank]; ++j) {
        const double want =
            Rounded(t, Value(0, env.rank * 1000 + j) + Value(1, env.rank * 1000 + j));
        const double got = Load(t, out + j * esz);
        if (got != want) return Fail(what, j, got, want);
      }
    }
  }
  return "";
}

// Whether this process maps a shared-memory segment of the plugin.
bool MapsSegment() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/tpx-ucx-") != std::string::npos) return true;
  }
  return false;
}

// Names in /dev/shm of segments created by process `pid`.
std::vector<std::string> SegmentsOf(int pid) {
  std::vector<std::string> found;
  const std::string prefix = "tpx-ucx-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) found.push_back(e->d_name);
    }
    closedir(d);
  }
  return found;
}

std::string TempFile(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Runs `body` on `world` ranks; rank 0 records its pid so that the test
// can look for segments it left behind.
std::string RunRecordingPid(int world, const std::function<std::string(RankEnv&)>& body,
                            const RunOptions& options, int* rank0_pid) {
  const std::string pid_file = TempFile("rank0_pid_" + std::to_string(world));
  std::string failure = RunRanks(world, [&](RankEnv& env) -> std::string {
    if (env.rank == 0) std::ofstream(pid_file) << getpid();
    return body(env);
  }, options);
  std::ifstream(pid_file) >> *rank0_pid;
  return failure;
}

class ShmWorld : public ::testing::TestWithParam<int> {};

TEST_P(ShmWorld, CollectivesMatchReferences) {
  int pid = 0;
  EXPECT_EQ(RunRecordingPid(GetParam(), [](RankEnv& env) -> std::string {
              if (!MapsSegment()) return "no shared-memory segment mapped";
              for (auto* cases : {&AllReduceCases, &AllGatherCases, &SendReusedAtOnceCases,
                                  &ReduceScatterCases}) {
                if (std::string e = cases(env); !e.empty()) return e;
              }
              return "";
            }, ShmOptions(), &pid),
            "");
  EXPECT_TRUE(SegmentsOf(pid).empty()) << SegmentsOf(pid)[0];
}

// Random floats: the shared-memory path combines the ranks' values in the
// UCX path's order, so its results are the same bits.
TEST_P(ShmWorld, ResultsAreBitwiseThoseOfTheUcxPath) {
  const int world = GetParam();
  auto body = [world](const std::string& tag) {
    return [world, tag](RankEnv& env) -> std::string {
      if (MapsSegment() != (tag == "shm")) return "the segment is mapped only with TPX_UCX_SHM=1";
      std::mt19937 gen(1234 + env.rank);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::ofstream out(TempFile("bits_" + tag + "_" + std::to_string(world) + "_" +
                                 std::to_string(env.rank)),
                        std::ios::binary);
      // Sizes where both operations, one or none take the shared memory.
      const int64_t per_rank = kShmBytes / 4 / world - 1;
      for (int64_t count : {int64_t{3}, per_rank, int64_t{1000}, kShmBytes / 4 - 1}) {
        for (tpx_dtype_t t : {TPX_DTYPE_F32, TPX_DTYPE_BF16}) {
          const size_t esz = SizeOfDtype(t);
          std::vector<char> send(count * world * esz), recv(count * world * esz);
          for (int64_t i = 0; i < count * world; ++i) Store(t, &send[i * esz], dist(gen));
          auto a = MakeArgs(TPX_COLL_ALL_REDUCE, t);
          a.count = count;
          a.send = send.data();
          a.recv = recv.data();
          if (std::string e = RunOp(env, a); !e.empty()) return "all_reduce: " + e;
          out.write(recv.data(), count * esz);
          std::vector<int64_t> counts(world, count), displs(world);
          for (int r = 0; r < world; ++r) displs[r] = r * count;
          auto rs = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, t);
          rs.count = count;
          rs.send = send.data();
          rs.recv = recv.data();
          rs.send_counts = counts.data();
          rs.send_displs = displs.data();
          if (std::string e = RunOp(env, rs); !e.empty()) return "reduce_scatter_v: " + e;
          out.write(recv.data(), count * esz);
        }
      }
      return out.good() ? "" : "cannot write the results";
    };
  };
  RunOptions ucx = ShmOptions();
  ucx.env.push_back({"TPX_UCX_SHM", "0"});
  ASSERT_EQ(RunRanks(world, body("shm"), ShmOptions()), "");
  ASSERT_EQ(RunRanks(world, body("ucx"), ucx), "");
  for (int r = 0; r < world; ++r) {
    auto read = [&](const std::string& tag) {
      std::ifstream in(TempFile("bits_" + tag + "_" + std::to_string(world) + "_" +
                                std::to_string(r)),
                       std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string shm = read("shm"), via_ucx = read("ucx");
    EXPECT_FALSE(shm.empty());
    EXPECT_TRUE(shm == via_ucx) << "rank " << r << ": results differ between the paths";
  }
}

// Rank 0 gives another size than the others: every rank fails with a size
// mismatch, whether both sizes take the shared-memory path or only one.
TEST_P(ShmWorld, DisagreeingSizesFailEveryRank) {
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              if (!MapsSegment()) return "no shared-memory segment mapped";
              const int64_t count = env.rank == 0 ? 16 : 8;
              std::vector<float> x(count, 1.0f);
              auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
              a.count = count;
              a.send = a.recv = x.data();
              int code = TPX_OK;
              std::string e = RunOp(env, a, &code);
              if (code != TPX_ERR_FAILED_PRECONDITION && code != TPX_ERR_ABORTED) {
                return "expected a size mismatch, got '" + e + "'";
              }
              // The communicator stays failed.
              if (RunOp(env, a, &code).empty()) return "the next op succeeded";
              return "";
            }, ShmOptions()),
            "");
}

TEST_P(ShmWorld, OneRankOnTheOtherPathFailsEveryRank) {
  RunOptions options = ShmOptions();
  options.comm_timeout_ms = 60000;  // an error before it came from the check
  EXPECT_EQ(RunRanks(GetParam(), [](RankEnv& env) -> std::string {
              if (!MapsSegment()) return "no shared-memory segment mapped";
              // Rank 0's buffer is beyond the shared-memory threshold.
              const int64_t count = env.rank == 0 ? 4 * kShmBytes : 16;
              std::vector<float> x(count, 1.0f);
              auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
              a.count = count;
              a.send = a.recv = x.data();
              int code = TPX_OK;
              std::string e = RunOp(env, a, &code);
              if (code == TPX_OK || code == TPX_ERR_DEADLINE_EXCEEDED) {
                return "expected a fast error, got '" + e + "'";
              }
              return "";
            }, options),
            "");
}

TEST(ShmTwoRanks, DirectReduceScatterTakesAnyLayout) {
  EXPECT_EQ(RunRanks(2, [](RankEnv& env) -> std::string {
              if (!MapsSegment()) return "no shared-memory segment mapped";
              return TwoRankDirectReduceScatterCases(env);
            }, ShmOptions()),
            "");
}

// All-gather blocks between a quarter of a slot and a whole one: through
// the slots or read directly, as TPX_UCX_SHM_MID_ALLGATHER forces or as
// measured, and with rank 1 asking for the other path than rank 0 (rank
// 0's setting decides for both: a rank that went its own way would read a
// slot its peer never wrote, or wait for a peer that is not reading).
TEST(ShmTwoRanks, MidSizeAllGatherBlocksTakeEitherPath) {
  for (const char* rank0 : {"0", "1", "2"}) {
    for (const char* rank1 : {"0", "1", "2"}) {
      RunOptions options = ShmOptions();
      options.enter_rank_host = [&](int rank) -> std::string {
        return setenv("TPX_UCX_SHM_MID_ALLGATHER", rank == 0 ? rank0 : rank1, 1) == 0
                   ? ""
                   : "setenv failed";
      };
      EXPECT_EQ(RunRanks(
                    2,
                    [](RankEnv& env) -> std::string {
                      if (!MapsSegment()) return "no shared-memory segment mapped";
                      return AllGatherCases(env);
                    },
                    options),
                "")
          << "rank 0 mode " << rank0 << ", rank 1 mode " << rank1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmWorld, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "World" + std::to_string(info.param); });

// A rank killed while its peers wait for it in a shared-memory collective
// (small: slots; large: direct reads): the survivors fail within the
// liveness check's period, long before the communicator timeout, and no
// segment is left behind.
TEST(ShmFailure, PeerKilledMidCollectiveIsAnError) {
  for (int64_t count : {int64_t{64}, 64 * kShmBytes}) {
    RunOptions options = ShmOptions();
    options.comm_timeout_ms = 60000;
    options.may_die = {2};
    int pid = 0;
    EXPECT_EQ(RunRecordingPid(3, [count](RankEnv& env) -> std::string {
                if (!MapsSegment()) return "no shared-memory segment mapped";
                if (std::string e = RunOp(env, MakeArgs(TPX_COLL_BARRIER, TPX_DTYPE_F32));
                    !e.empty()) {
                  return "barrier: " + e;
                }
                std::vector<float> mine(count, 1.0f), all(3 * count);
                std::vector<int64_t> counts(3, count), displs = {0, count, 2 * count};
                auto a = MakeArgs(TPX_COLL_ALL_GATHER_V, TPX_DTYPE_F32);
                a.count = count;
                a.send = mine.data();
                a.recv = all.data();
                a.recv_counts = counts.data();
                a.recv_displs = displs.data();
                // Rank 2 posts its part of the first gather, dies in the second.
                for (int i = 0; i < 2; ++i) {
                  if (env.rank == 2 && i == 1) raise(SIGKILL);
                  int code = TPX_OK;
                  std::string e = RunOp(env, a, &code);
                  if (i == 0 && !e.empty()) return "first all_gather: " + e;
                  if (i == 1) {
                    if (code != TPX_ERR_UNAVAILABLE) return "expected UNAVAILABLE, got '" + e + "'";
                    if (e.find("rank 2") == std::string::npos) return "rank 2 not named: " + e;
                  }
                }
                return "";
              }, options, &pid),
              "")
        << "count " << count;
    EXPECT_TRUE(SegmentsOf(pid).empty());
  }
}

TEST(ShmFailure, PeerKilledInTwoRankAllReduceIsAnError) {
  for (int64_t count : {int64_t{64}, 64 * kShmBytes}) {
    RunOptions options = ShmOptions();
    options.comm_timeout_ms = 60000;
    options.may_die = {1};
    int pid = 0;
    EXPECT_EQ(RunRecordingPid(2, [count](RankEnv& env) -> std::string {
                if (!MapsSegment()) return "no shared-memory segment mapped";
                std::vector<float> x(count, 1.0f);
                auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
                a.count = count;
                a.send = a.recv = x.data();
                for (int i = 0; i < 2; ++i) {
                  if (env.rank == 1 && i == 1) raise(SIGKILL);
                  int code = TPX_OK;
                  std::string e = RunOp(env, a, &code);
                  if (i == 0 && !e.empty()) return "first all_reduce: " + e;
                  if (i == 1) {
                    if (code != TPX_ERR_UNAVAILABLE) return "expected UNAVAILABLE, got '" + e + "'";
                    if (e.find("all_reduce") == std::string::npos ||
                        e.find("rank 1") == std::string::npos) {
                      return "op or rank 1 not named: " + e;
                    }
                  }
                }
                return "";
              }, options, &pid),
              "")
        << "count " << count;
    EXPECT_TRUE(SegmentsOf(pid).empty());
  }
}

TEST(ShmFailure, PeerKilledInTwoRankReduceScatterIsAnError) {
  RunOptions options = ShmOptions();
  options.comm_timeout_ms = 60000;
  options.may_die = {1};
  int pid = 0;
  EXPECT_EQ(RunRecordingPid(2, [](RankEnv& env) -> std::string {
              if (!MapsSegment()) return "no shared-memory segment mapped";
              const int64_t count = 16 * kShmBytes;  // per rank: the direct-read path
              std::vector<float> x(2 * count, 1.0f), y(count);
              std::vector<int64_t> counts = {count, count}, displs = {0, count};
              auto a = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, TPX_DTYPE_F32);
              a.count = count;
              a.send = x.data();
              a.recv = y.data();
              a.send_counts = counts.data();
              a.send_displs = displs.data();
              for (int i = 0; i < 2; ++i) {
                if (env.rank == 1 && i == 1) raise(SIGKILL);
                int code = TPX_OK;
                std::string e = RunOp(env, a, &code);
                if (i == 0 && !e.empty()) return "first reduce_scatter_v: " + e;
                if (i == 1) {
                  if (code != TPX_ERR_UNAVAILABLE) return "expected UNAVAILABLE, got '" + e + "'";
                  if (e.find("reduce_scatter") == std::string::npos ||
                      e.find("rank 1") == std::string::npos) {
                    return "op or rank 1 not named: " + e;
                  }
                }
              }
              return "";
            }, options, &pid),
            "");
  EXPECT_TRUE(SegmentsOf(pid).empty());
}

}  // namespace
}  // namespace tpx::ucx::testing
