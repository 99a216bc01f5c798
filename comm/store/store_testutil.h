// Shared gtest bodies every Store implementation must pass. A test file
// instantiates them with a factory for its store:
//
//   INSTANTIATE_TEST_SUITE_P(File, StoreConformance,
//                            ::testing::Values(StoreFactory{"file", &MakeFileStore}));
#ifndef TPX_COMM_STORE_STORE_TESTUTIL_H_
#define TPX_COMM_STORE_STORE_TESTUTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "comm/plugin_abi.h"
#include "comm/store/store.h"
#include "comm/store/store_abi.h"
#include "gtest/gtest.h"

namespace tpx::comm {

struct StoreFactory {
  std::string name;
  // Returns a fresh, empty store; may return several handles on one store
  // when called again within one test (index > 0 = another client).
  std::function<std::unique_ptr<Store>(int client_index)> make;
};

inline std::ostream& operator<<(std::ostream& os, const StoreFactory& f) { return os << f.name; }

class StoreConformance : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override { store_ = GetParam().make(0); ASSERT_NE(store_, nullptr); }
  std::unique_ptr<Store> store_;
};

TEST_P(StoreConformance, SetGetRoundTripsBinaryValues) {
  std::string value("a\0b\xff", 4);
  ASSERT_TRUE(store_->Set("k", value).ok());
  auto got = store_->Get("k", absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  ASSERT_TRUE(store_->Set("k", "").ok());
  EXPECT_EQ(*store_->Get("k", absl::Seconds(1)), "");
}

TEST_P(StoreConformance, GetTimesOutNamingTheKey) {
  auto got = store_->Get("never/set", absl::Milliseconds(50));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("never/set"), std::string::npos) << got.status();
}

TEST_P(StoreConformance, GetWaitsForALaterSetFromAnotherClient) {
  std::unique_ptr<Store> other = GetParam().make(1);
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(30));
    EXPECT_TRUE(other->Set("late", "v").ok());
  });
  auto got = store_->Get("late", absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST_P(StoreConformance, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(GetParam().make(t + 1));
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(clients[t]->Add("ctr", 1).ok());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(*store_->Add("ctr", 0), kThreads * kAdds);
  EXPECT_EQ(*store_->Get("ctr", absl::Seconds(1)), std::to_string(kThreads * kAdds));
  EXPECT_EQ(*store_->Add("ctr", -5), kThreads * kAdds - 5);
}

TEST_P(StoreConformance, AddOnNonIntegerIsInvalidArgument) {
  ASSERT_TRUE(store_->Set("text", "abc").ok());
  EXPECT_EQ(store_->Add("text", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreConformance, CompareSet) {
  EXPECT_EQ(*store_->CompareSet("cs", "x", "y"), "");  // absent, expected mismatch
  EXPECT_FALSE(*store_->Check("cs"));
  EXPECT_EQ(*store_->CompareSet("cs", "", "first"), "first");
  EXPECT_EQ(*store_->CompareSet("cs", "wrong", "second"), "first");
  EXPECT_EQ(*store_->CompareSet("cs", "first", "second"), "second");
  EXPECT_EQ(*store_->Get("cs", absl::Seconds(1)), "second");
}

TEST_P(StoreConformance, DeleteAndCheck) {
  ASSERT_TRUE(store_->Set("d", "1").ok());
  EXPECT_TRUE(*store_->Check("d"));
  EXPECT_TRUE(*store_->Delete("d"));
  EXPECT_FALSE(*store_->Check("d"));
  EXPECT_FALSE(*store_->Delete("d"));
}

TEST_P(StoreConformance, WaitReportsMissingKeys) {
  ASSERT_TRUE(store_->Set("w1", "1").ok());
  absl::Status s = store_->Wait({"w1", "w2"}, absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("w2"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("'w1'"), std::string::npos) << s;
  ASSERT_TRUE(store_->Set("w2", "2").ok());
  EXPECT_TRUE(store_->Wait({"w1", "w2"}, absl::Seconds(1)).ok());
}

TEST_P(StoreConformance, BoundsKeysAndValues) {
  EXPECT_EQ(store_->Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Set("big", std::string(kMaxStoreValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  std::string max_value(kMaxStoreValueBytes, 'v');
  ASSERT_TRUE(store_->Set("big", max_value).ok());
  EXPECT_EQ(store_->Get("big", absl::Seconds(5))->size(), kMaxStoreValueBytes);
}

TEST_P(StoreConformance, PrefixStoreSeparatesNamespaces) {
  PrefixStore a("a", store_.get()), b("b", store_.get());
  ASSERT_TRUE(a.Set("x", "from a").ok());
  ASSERT_TRUE(b.Set("x", "from b").ok());
  EXPECT_EQ(*a.Get("x", absl::Seconds(1)), "from a");
  EXPECT_EQ(*store_->Get("b/x", absl::Seconds(1)), "from b");
}

TEST_P(StoreConformance, AbiAdapterCallsThrough) {
  StoreAbi abi(store_.get());
  const tpx_store_v1_t* s = abi.get();
  tpx_error_t err{};
  ASSERT_EQ(s->set(s->ctx, "abi", "hello", 5, &err), TPX_OK) << err.message;
  char buf[8];
  size_t len = 0;
  ASSERT_EQ(s->get(s->ctx, "abi", buf, sizeof(buf), &len, 1000, &err), TPX_OK) << err.message;
  EXPECT_EQ(std::string(buf, len), "hello");
  EXPECT_EQ(s->get(s->ctx, "abi", buf, 2, &len, 1000, &err), TPX_ERR_FAILED_PRECONDITION);
  EXPECT_EQ(len, 5u);
  EXPECT_EQ(s->get(s->ctx, "absent", buf, sizeof(buf), &len, 20, &err),
            TPX_ERR_DEADLINE_EXCEEDED);
  EXPECT_NE(std::string(err.message).find("absent"), std::string::npos) << err.message;
  int64_t result = 0;
  ASSERT_EQ(s->add(s->ctx, "n", 7, &result, &err), TPX_OK);
  ASSERT_EQ(s->add(s->ctx, "n", 3, &result, &err), TPX_OK);
  EXPECT_EQ(result, 10);
}

}  // namespace tpx::comm

#endif  // TPX_COMM_STORE_STORE_TESTUTIL_H_
