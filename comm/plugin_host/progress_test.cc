#include "comm/plugin_host/progress.h"

#include <cstdlib>
#include <string>

#include "comm/store/file_store.h"
#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

std::unique_ptr<FileStore> OpenStore(const std::string& name) {
  auto store = FileStore::Open(std::string(std::getenv("TEST_TMPDIR")) + "/" + name);
  EXPECT_TRUE(store.ok());
  return std::move(*store);
}

TEST(ProgressTracker, NamesRanksThatNeverEnteredAndWhatTheyCompleted) {
  auto store = OpenStore("progress1");
  ProgressTracker r0(store.get(), "world", 0, 4, absl::Milliseconds(20));
  ProgressTracker r1(store.get(), "world", 1, 4, absl::Milliseconds(20));
  ProgressTracker r2(store.get(), "world", 2, 4, absl::Milliseconds(20));
  ProgressTracker r3(store.get(), "world", 3, 4, absl::Milliseconds(20));
  r0.Entered(7);
  r0.Completed(6);
  r1.Entered(7);
  r1.Completed(7);
  r2.Entered(5);
  r2.Completed(5);
  // r3 stays at its initial "0 0".
  ASSERT_TRUE(r1.Publish().ok());
  ASSERT_TRUE(r2.Publish().ok());
  EXPECT_EQ(r0.Explain(7, absl::Milliseconds(10)),
            "ranks 2 and 3 never entered it; rank 2 last completed #5, rank 3 completed none");
}

TEST(ProgressTracker, EveryRankEntered) {
  auto store = OpenStore("progress2");
  ProgressTracker r0(store.get(), "c", 0, 3, absl::Milliseconds(20));
  ProgressTracker r1(store.get(), "c", 1, 3, absl::Milliseconds(20));
  ProgressTracker r2(store.get(), "c", 2, 3, absl::Milliseconds(20));
  for (ProgressTracker* t : {&r0, &r1, &r2}) t->Entered(3);
  r2.Completed(3);
  ASSERT_TRUE(r1.Publish().ok());
  ASSERT_TRUE(r2.Publish().ok());
  EXPECT_EQ(r0.Explain(3, absl::Milliseconds(10)), "every rank entered it; rank 1 had not completed it");
}

TEST(ProgressTracker, HeartbeatPublishesChanges) {
  auto store = OpenStore("progress3");
  ProgressTracker t(store.get(), "hb", 0, 1, absl::Milliseconds(5));
  t.Entered(12);
  t.Completed(11);
  // The background thread publishes within a few periods; Get waits for it.
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string value;
  while (absl::Now() < deadline && value != "12 11") {
    value = *store->Get("hb/tpx_progress/0", absl::Seconds(1));
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(value, "12 11");
}

TEST(FormatRankList, Forms) {
  EXPECT_EQ(FormatRankList({3}), "rank 3");
  EXPECT_EQ(FormatRankList({3, 5}), "ranks 3 and 5");
  EXPECT_EQ(FormatRankList({1, 2, 7}), "ranks 1, 2 and 7");
}

}  // namespace
}  // namespace tpx::comm
