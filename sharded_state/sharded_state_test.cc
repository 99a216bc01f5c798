// Single-process tests of the pieces: shard layouts (stride), slicing a full
// tensor, the safetensors reader/writer (every dtype, metadata, bad files)
// and the checkpoint metadata.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/compare_testutil.h"
#include "gtest/gtest.h"
#include "sharded_state/metadata.h"
#include "sharded_state/safetensors.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::sharded_state {
namespace {

std::string Tmp(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
std::string LengthPrefixed(const std::string& header) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header;
}

TEST(StridedPieces, InterleavesByStride) {
  // 12 rows, 2 ranks, stride 3: pieces of 2; rank 1 holds pieces 1, 3, 5.
  auto p = StridedPieces(12, 2, 1, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<ShardPiece>{{2, 0, 2}, {6, 2, 2}, {10, 4, 2}}));
  EXPECT_FALSE(StridedPieces(10, 2, 0, 3).ok());
  EXPECT_FALSE(StridedPieces(12, 2, 2, 1).ok());
}

TEST(ShardedTensor, ExtractAndAssignMatchTheStridedSlices) {
  Tensor full = RandomTensor({12, 3}, DType::kF32, 1);
  Tensor local = *Tensor::Zeros({6, 3});
  auto spec = ShardedTensor::Split("w", local, 0, /*tp_rank=*/1, /*tp_size=*/2, /*stride=*/3);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->global_shape, (Shape{12, 3}));
  ASSERT_TRUE(AssignFromFull(*spec, full).ok());
  const std::vector<float> f = full.ToVector<float>(), l = local.ToVector<float>();
  for (int piece = 0; piece < 3; ++piece) {
    for (int row = 0; row < 2; ++row) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(l[(piece * 2 + row) * 3 + c], f[((piece * 2 + 1) * 2 + row) * 3 + c]);
      }
    }
  }
  // Wrong full shape: error naming the tensor, nothing written.
  Tensor before = *local.Clone();
  absl::Status bad = AssignFromFull(*spec, *Tensor::Zeros({10, 3}));
  EXPECT_NE(bad.message().find("'w'"), std::string::npos) << bad;
  EXPECT_TRUE(TensorsClose(local, before, 0, 0));
  EXPECT_FALSE(AssignFromShard(*spec, *Tensor::Zeros({6, 3}, DType::kBF16)).ok());
}

TEST(ShardedTensor, WithTensorKeepsTheLayoutAndTakesTheNewDtype) {
  // A bf16 parameter's shard described over its f32 master copy.
  const Tensor local = RandomTensor({2, 4}, DType::kBF16, 3);
  auto spec = ShardedTensor::Split("w", local, 1, /*tp_rank=*/1, /*tp_size=*/2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const Tensor master = *local.To(DType::kF32);
  auto as_f32 = spec->WithTensor("w", master);
  ASSERT_TRUE(as_f32.ok()) << as_f32.status();
  EXPECT_EQ(as_f32->dtype, DType::kF32);
  EXPECT_EQ(as_f32->global_shape, spec->global_shape);
  EXPECT_EQ(as_f32->pieces, spec->pieces);
  EXPECT_EQ(as_f32->local.raw_data(), master.raw_data());
  auto wrong = spec->WithTensor("optimizer.exp_avg.w", RandomTensor({4, 2}, DType::kF32, 4));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("optimizer.exp_avg.w"), std::string::npos);
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  std::vector<Tensor> tensors = {RandomTensor({2, 3}, DType::kF32, 1),
                                 RandomTensor({5}, DType::kBF16, 2),
                                 RandomTensor({1, 1, 4}, DType::kF16, 3),
                                 *Tensor::FromVector<int32_t>({1, -2, 3}, {3}),
                                 *Tensor::FromVector<int64_t>({1ll << 40}, {}),
                                 *Tensor::FromVector<bool>({true, false}, {2}),
                                 *Tensor::Zeros({0, 4})};
  std::vector<SafetensorsTensorView> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    views.push_back({"t" + std::to_string(i), tensors[i].dtype(), tensors[i].shape(),
                     tensors[i].raw_data()});
  }
  const std::string path = Tmp("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, views, {{"step", "7"}}).ok());
  auto file = SafetensorsReader::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("step"), "7");
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = file->ReadTensor("t" + std::to_string(i));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), tensors[i].dtype());
    EXPECT_EQ(t->shape(), tensors[i].shape());
    EXPECT_EQ(std::memcmp(t->raw_data(), tensors[i].raw_data(), t->nbytes()), 0) << i;
  }
  // Partial reads (pread of a byte range).
  auto e = file->Find("t0");
  ASSERT_TRUE(e.ok());
  float second_row[3];
  ASSERT_TRUE(file->ReadBytes(**e, 12, 12, second_row).ok());
  EXPECT_EQ(second_row[0], tensors[0].ToVector<float>()[3]);
  EXPECT_FALSE(file->ReadBytes(**e, 12, 16, second_row).ok());
  EXPECT_FALSE(file->Find("nope").ok());
  // The data section starts 8-byte aligned, as other writers expect.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  // Duplicate and reserved names are refused.
  EXPECT_FALSE(WriteSafetensors(Tmp("dup"), {views[0], views[0]}, {}).ok());
  SafetensorsTensorView reserved = views[0];
  reserved.name = "__metadata__";
  EXPECT_FALSE(WriteSafetensors(Tmp("reserved"), {reserved}, {}).ok());
}

TEST(Safetensors, RejectsBadFilesNamingThem) {
  struct Bad {
    std::string name, bytes, message;
  };
  const std::string ok_entry = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<Bad> cases = {
      {"short", "abc", "too short"},
      {"huge_len", std::string(8, '\xff') + "{}", "header length"},
      {"not_json", LengthPrefixed("{nope"), "not a JSON object"},
      {"truncated", LengthPrefixed(ok_entry) + std::string(4, '\0'), "truncated"},
      {"bad_dtype", LengthPrefixed(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})") +
                        std::string(8, '\0'),
       "F64"},
      {"size_mismatch",
       LengthPrefixed(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})") +
           std::string(8, '\0'),
       "do not hold 3"},
      {"overlap",
       LengthPrefixed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})") +
           std::string(8, '\0'),
       "overlap"},
      {"missing_fields", LengthPrefixed(R"({"a":{"dtype":"F32"}})"), "needs dtype"},
  };
  for (const Bad& c : cases) {
    const std::string path = Tmp(c.name + ".safetensors");
    WriteBytes(path, c.bytes);
    auto file = SafetensorsReader::Open(path);
    ASSERT_FALSE(file.ok()) << c.name;
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status();
    EXPECT_NE(file.status().message().find(c.message), std::string::npos) << file.status();
  }
  auto missing = SafetensorsReader::Open(Tmp("no_such_file"));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

TEST(Metadata, RoundTripsAndRejectsOtherVersions) {
  CheckpointMetadata m;
  m.tp_size = 2;
  m.step = 9;
  m.user = {{"k", "v"}};
  m.tensors["w"] = TensorLayout{DType::kBF16, {4, 2}, 0, 1,
                                {{"tp00-of-02.safetensors", {{0, 0, 2}}},
                                 {"tp01-of-02.safetensors", {{2, 0, 2}}}}};
  m.tensors["b"] = TensorLayout{DType::kF32, {2}, -1, 1, {{"tp00-of-02.safetensors", {}}}};
  const std::string json = MetadataToJson(m);
  auto back = MetadataFromJson(json, "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tp_size, 2);
  EXPECT_EQ(back->step, 9);
  EXPECT_EQ(back->user, m.user);
  EXPECT_EQ(back->tensors.at("w").shards[1].pieces, m.tensors["w"].shards[1].pieces);
  EXPECT_EQ(back->tensors.at("w").dtype, DType::kBF16);
  std::string v2 = json;
  v2.replace(v2.find("\"format_version\":1"), 18, "\"format_version\":2");
  EXPECT_TRUE(absl::IsFailedPrecondition(MetadataFromJson(v2, "test").status()));
  std::string escape = json;
  escape.replace(escape.find("tp01-of-02"), 10, "../../etc/");
  EXPECT_FALSE(MetadataFromJson(escape, "test").ok());
  EXPECT_TRUE(absl::IsNotFound(ResolveCheckpointDir(Tmp("nothing_here")).status()));
}

}  // namespace
}  // namespace tpx::sharded_state
