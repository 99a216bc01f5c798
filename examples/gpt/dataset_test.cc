#include "examples/gpt/dataset.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tpx::gpt {
namespace {

TEST(ByteDataset, SplitsEntropyAndShiftedTargets) {
  auto d = ByteDataset::FromText("abababababcdcdcdcdcd", 0.25);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train(), "abababababcdcdc");
  EXPECT_EQ(d->validation(), "dcdcd");
  // Train bytes: a x5, b x5, c x3, d x2.
  double h = 0;
  for (double c : {5.0, 5.0, 3.0, 2.0}) h -= c / 15 * std::log(c / 15);
  EXPECT_NEAR(d->UnigramEntropyNats(), h, 1e-12);

  auto b = d->SampleBatch(Split::kTrain, 3, 4, /*seed=*/9);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->tokens.shape(), (Shape{4, 3}));
  std::vector<int64_t> tok = b->tokens.ToVector<int64_t>(), tgt = b->targets.ToVector<int64_t>();
  const std::string& text = d->train();
  for (int64_t j = 0; j < 3; ++j) {
    // Column j is a window of the text; targets are the next bytes.
    size_t start = text.find(Decode({tok[0 * 3 + j], tok[1 * 3 + j], tok[2 * 3 + j],
                                     tok[3 * 3 + j], tgt[3 * 3 + j]}));
    EXPECT_NE(start, std::string::npos) << j;
    for (int64_t t = 0; t + 1 < 4; ++t) EXPECT_EQ(tgt[t * 3 + j], tok[(t + 1) * 3 + j]);
  }
  auto again = d->SampleBatch(Split::kTrain, 3, 4, 9);
  EXPECT_EQ(again->tokens.ToVector<int64_t>(), tok);
  // Replicas taking sequences [1, 3) of the same global batch see columns 1 and 2.
  auto piece = d->SampleBatch(Split::kTrain, 2, 4, 9, /*first_sequence=*/1);
  ASSERT_TRUE(piece.ok());
  std::vector<int64_t> p = piece->tokens.ToVector<int64_t>();
  for (int64_t t = 0; t < 4; ++t) {
    EXPECT_EQ(p[t * 2 + 0], tok[t * 3 + 1]);
    EXPECT_EQ(p[t * 2 + 1], tok[t * 3 + 2]);
  }
  EXPECT_FALSE(d->SampleBatch(Split::kValidation, 1, 5, 0).ok());  // 5 bytes < 6
}

TEST(ByteDataset, BundledTextIsAFewHundredKiBOfEnglish) {
  auto d = ByteDataset::Load("examples/gpt/data/kjv_genesis_exodus.txt", 0.1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_GT(d->train().size(), 300000u);
  EXPECT_EQ(d->train().rfind("In the beginning God created the heaven and the earth.", 0), 0u);
  const double h = d->UnigramEntropyNats();
  EXPECT_GT(h, 2.5);  // English letters: about 4.1 bits = 2.9 nats
  EXPECT_LT(h, 3.3);
  EXPECT_EQ(Decode(Encode("Let there be light")), "Let there be light");
}

TEST(ByteDataset, RejectsBadInput) {
  EXPECT_FALSE(ByteDataset::FromText("abc", 0.5).ok());
  EXPECT_FALSE(ByteDataset::FromText("abcdefgh", 0.0).ok());
  EXPECT_FALSE(ByteDataset::Load("/nonexistent/file", 0.1).ok());
}

}  // namespace
}  // namespace tpx::gpt
