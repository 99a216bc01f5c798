#include "comm/store/store_wire.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

using Parts = std::vector<std::string>;

TEST(FrameReader, RoundTripsFramesFedOneByteAtATime) {
  const std::vector<Parts> frames = {{"S", "key", std::string("a\0b", 3)}, {}, {"", ""}, {"W"}};
  std::string bytes;
  for (const Parts& f : frames) bytes += EncodeFrame(f);
  FrameReader reader(1024);
  std::vector<Parts> got;
  for (char c : bytes) {
    reader.Append(&c, 1);
    Parts parts;
    while (true) {
      absl::StatusOr<bool> r = reader.Next(&parts);
      ASSERT_TRUE(r.ok()) << r.status();
      if (!*r) break;
      got.push_back(parts);
    }
  }
  EXPECT_EQ(got, frames);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameReader, ManySmallFramesInOneBuffer) {
  // 200k empty frames in one append: each is consumed without moving the rest.
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes += EncodeFrame({});
  FrameReader reader(64);
  reader.Append(bytes.data(), bytes.size());
  Parts parts{"x"};
  int count = 0;
  while (*reader.Next(&parts)) {
    EXPECT_TRUE(parts.empty());
    ++count;
  }
  EXPECT_EQ(count, 200000);
}

TEST(FrameReader, RejectsAFrameOverTheLimitFromItsHeader) {
  // A part count that cannot fit, before any of its bytes arrive.
  uint32_t huge_count = 1u << 30;
  FrameReader reader(4096);
  reader.Append(reinterpret_cast<const char*>(&huge_count), 4);
  Parts parts;
  absl::StatusOr<bool> r = reader.Next(&parts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("4096"), std::string::npos) << r.status();

  // A part length that cannot fit.
  std::string header = EncodeFrame({"S"}).substr(0, 4);
  uint32_t len = 5000;
  header.append(reinterpret_cast<const char*>(&len), 4);
  FrameReader reader2(4096);
  reader2.Append(header.data(), header.size());
  r = reader2.Next(&parts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TEST(FrameReader, LimitCanBeRaised) {
  std::string frame = EncodeFrame({std::string(100, 'v')});
  FrameReader reader(64);
  reader.Append(frame.data(), frame.size());
  reader.set_max_frame_bytes(4096);
  Parts parts;
  ASSERT_TRUE(*reader.Next(&parts));
  EXPECT_EQ(parts, Parts{std::string(100, 'v')});
}

}  // namespace
}  // namespace tpx::comm
