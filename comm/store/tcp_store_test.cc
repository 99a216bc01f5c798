#include "comm/store/tcp_store.h"

#include "comm/store/store_testutil.h"

namespace tpx::comm {
namespace {

std::unique_ptr<Store> MakeTcpStore(int client_index) {
  static std::unique_ptr<TcpStoreServer> server;
  if (client_index == 0) {
    server.reset();
    auto listening = TcpStoreServer::Listen("127.0.0.1", 0);
    EXPECT_TRUE(listening.ok()) << listening.status();
    server = std::move(*listening);
    EXPECT_TRUE(server->Start().ok());
  }
  auto store = TcpStore::Connect("127.0.0.1", server->port(), absl::Seconds(5));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

INSTANTIATE_TEST_SUITE_P(Tcp, StoreConformance,
                         ::testing::Values(StoreFactory{"tcp", &MakeTcpStore}));

TEST(TcpStore, ConnectFailureNamesHostAndPort) {
  // Bind a port, then close the server so nothing listens there.
  int port;
  {
    auto server = TcpStoreServer::Listen("127.0.0.1", 0);
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }
  auto store = TcpStore::Connect("127.0.0.1", port, absl::Milliseconds(100));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << store.status();
}

TEST(TcpStore, ClientsQueueUntilTheServerStarts) {
  auto server = TcpStoreServer::Listen("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto store = TcpStore::Connect("127.0.0.1", (*server)->port(), absl::Seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE((*server)->Start().ok());
  });
  EXPECT_TRUE((*store)->Set("k", "v").ok());
  starter.join();
  EXPECT_EQ(*(*store)->Get("k", absl::Seconds(1)), "v");
}

TEST(TcpStore, ServerExitTurnsIntoUnavailable) {
  auto server = TcpStoreServer::Listen("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Start().ok());
  auto store = TcpStore::Connect("127.0.0.1", (*server)->port(), absl::Milliseconds(200));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  server->reset();
  absl::Status s = (*store)->Set("k", "w");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace tpx::comm
