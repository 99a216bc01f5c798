// TcpStoreServer under hostile or careless clients: floods, oversized
// frames and values, too many keys, bytes or connections, silent
// connections, wrong secrets, and shutdown while clients misbehave. Raw
// sockets play the hostile clients; TcpStore plays the job's ranks.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "comm/store/store_wire.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

std::unique_ptr<TcpStoreServer> StartServer(TcpStoreServerOptions options = {}) {
  auto server = TcpStoreServer::Listen("127.0.0.1", 0, std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->Start().ok());
  return std::move(*server);
}

std::unique_ptr<TcpStore> Client(const TcpStoreServer& server, const std::string& secret = "") {
  auto store = TcpStore::Connect("127.0.0.1", server.port(), absl::Seconds(10), secret);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

// A client speaking the wire protocol by hand.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawConn() { ::close(fd_); }

  // Sends all of `bytes` (blocking); false if the server closed the connection.
  bool Send(const std::string& bytes) {
    for (size_t off = 0; off < bytes.size();) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += n;
    }
    return true;
  }
  // Sends without blocking until all of `bytes` went out or the socket is
  // full; returns the bytes sent.
  size_t SendWhileAccepted(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n <= 0) break;
      sent += n;
    }
    return sent;
  }
  // The next reply frame, or {} after EOF / 20 s of silence.
  std::vector<std::string> Read() {
    std::vector<std::string> parts;
    while (true) {
      absl::StatusOr<bool> got = reader_.Next(&parts);
      if (!got.ok()) return {};
      if (*got) return parts;
      if (!Fill()) return {};
    }
  }
  // True once the server closed the connection (reading and discarding
  // replies until then, for at most 20 s of silence).
  bool ClosedByServer() {
    while (Fill()) {
    }
    return eof_;
  }

 private:
  bool Fill() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 20000) <= 0) return false;
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    reader_.Append(buf, n);
    return true;
  }

  int fd_ = -1;
  bool eof_ = false;
  FrameReader reader_{1u << 26};
};

std::string Hello(const std::string& secret = "") { return EncodeFrame({"H", secret}); }

// Replies are [code, payload]; code 0 is OK.
void ExpectOk(const std::vector<std::string>& reply) {
  ASSERT_EQ(reply.size(), 2u);
  EXPECT_EQ(reply[0], "0") << reply[1];
}

TEST(TcpStoreLimits, ZeroByteFrameFloodDoesNotStallOtherClients) {
  auto server = StartServer();
  auto store = Client(*server);
  RawConn flood(server->port());
  ASSERT_TRUE(flood.Send(Hello()));
  // 4 MiB of empty frames, never reading a reply.
  const std::string chunk(64 << 10, '\0');
  std::thread flooder([&] {
    for (int i = 0; i < 64; ++i) {
      if (!flood.Send(chunk)) break;
    }
  });
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(store->Set("k" + std::to_string(i), "v").ok());
    auto got = store->Get("k" + std::to_string(i), absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << got.status();
  }
  flooder.join();
  ExpectOk(flood.Read());  // the handshake
  std::vector<std::string> refusal = flood.Read();
  ASSERT_EQ(refusal.size(), 2u);
  EXPECT_EQ(refusal[0], std::to_string(static_cast<int>(absl::StatusCode::kInvalidArgument)));
  EXPECT_NE(refusal[1].find("malformed store request"), std::string::npos) << refusal[1];
  EXPECT_TRUE(flood.ClosedByServer());
}

TEST(TcpStoreLimits, ClientThatNeverReadsItsRepliesHoldsBoundedOutput) {
  // 2000 requests for a 4 MiB value, never read (8 GB of replies): the
  // server stops reading from that client instead of queueing them.
  auto server = StartServer();
  auto store = Client(*server);
  const size_t value_bytes = 4 << 20;
  ASSERT_TRUE(store->Set("big", std::string(value_bytes, 'x')).ok());
  RawConn hog(server->port());
  std::string requests = Hello();
  for (int i = 0; i < 2000; ++i) requests += EncodeFrame({"G", "1000", "big"});
  ASSERT_TRUE(hog.Send(requests));  // fits in the socket buffers
  // Wait (bounded) until the server has queued replies the kernel could not take.
  for (int i = 0; i < 2000 && server->stats().buffered_bytes == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(server->stats().buffered_bytes, 0u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store->Set("other", std::to_string(i)).ok());
    EXPECT_EQ(*store->Get("other", absl::Seconds(10)), std::to_string(i));
  }
  // At most: what was queued before the unsent output passed its
  // high-water mark (1 MiB, so one 4 MiB reply), plus unparsed requests.
  EXPECT_LT(server->stats().buffered_bytes, 2 * value_bytes);
}

TEST(TcpStoreLimits, FrameOverTheLimitIsRefusedNamingIt) {
  TcpStoreServerOptions options;
  options.max_frame_bytes = 64 << 10;
  auto server = StartServer(options);
  auto store = Client(*server);
  absl::Status s = store->Set("k", std::string(100 << 10, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("limit of 65536 bytes"), std::string::npos) << s;
  // The store still serves this client on a new connection.
  EXPECT_TRUE(store->Set("k", "small").ok());
  EXPECT_EQ(*store->Get("k", absl::Seconds(10)), "small");
}

TEST(TcpStoreLimits, ValueOverTheLimitIsRefusedAndNothingStored) {
  TcpStoreServerOptions options;
  options.limits.max_value_bytes = 10;
  auto server = StartServer(options);
  auto store = Client(*server);
  absl::Status s = store->Set("k", std::string(11, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("limit of 10 bytes per value"), std::string::npos) << s;
  EXPECT_FALSE(*store->Check("k"));
  EXPECT_TRUE(store->Set("k", std::string(10, 'v')).ok());
  auto cas = store->CompareSet("k", std::string(10, 'v'), std::string(11, 'w'));
  EXPECT_EQ(cas.status().code(), absl::StatusCode::kResourceExhausted) << cas.status();
  EXPECT_EQ(*store->Get("k", absl::Seconds(1)), std::string(10, 'v'));
}

TEST(TcpStoreLimits, KeyCountIsBounded) {
  TcpStoreServerOptions options;
  options.limits.max_keys = 3;
  auto server = StartServer(options);
  auto store = Client(*server);
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(store->Set(k, "1").ok());
  absl::Status s = store->Set("d", "1");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("limit of 3 keys"), std::string::npos) << s;
  EXPECT_EQ(store->Add("e", 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store->Set("a", "replaced").ok());  // existing keys may change
  ASSERT_TRUE(*store->Delete("b"));
  EXPECT_TRUE(store->Set("d", "1").ok());
}

TEST(TcpStoreLimits, StoredBytesAreBounded) {
  TcpStoreServerOptions options;
  options.limits.max_total_bytes = 100;
  auto server = StartServer(options);
  auto store = Client(*server);
  ASSERT_TRUE(store->Set("a", std::string(60, 'x')).ok());  // 61 bytes
  absl::Status s = store->Set("b", std::string(60, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("limit of 100 bytes"), std::string::npos) << s;
  EXPECT_TRUE(store->Set("a", std::string(90, 'x')).ok());  // replacing counts the new size only
  ASSERT_TRUE(*store->Delete("a"));
  EXPECT_TRUE(store->Set("b", std::string(60, 'x')).ok());
}

TEST(TcpStoreLimits, ConnectionsAreBounded) {
  TcpStoreServerOptions options;
  options.max_connections = 2;
  auto server = StartServer(options);
  ASSERT_EQ(server->max_connections(), 2);
  auto hold1 = std::make_unique<RawConn>(server->port());
  RawConn hold2(server->port());
  // Once both handshakes are answered, both connections are registered.
  ASSERT_TRUE(hold1->Send(Hello()) && hold2.Send(Hello()));
  ExpectOk(hold1->Read());
  ExpectOk(hold2.Read());
  auto store = Client(*server);
  absl::Status s = store->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("limit of 2 connections"), std::string::npos) << s;
  // After one holder leaves, a client gets in (the server notices the close
  // on its next round: retry a bounded number of times).
  hold1.reset();
  absl::Status later;
  for (int attempt = 0; attempt < 500; ++attempt) {
    later = store->Set("k", "v");
    if (later.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(later.ok()) << later;
}

TEST(TcpStoreLimits, UnauthenticatedConnectionsCannotCrowdOutTheJob) {
  TcpStoreServerOptions options;
  options.max_connections = 4;
  auto server = StartServer(options);
  std::vector<std::unique_ptr<RawConn>> squatters;
  for (int i = 0; i < 4; ++i) squatters.push_back(std::make_unique<RawConn>(server->port()));
  // Wait (bounded) until the server has accepted all four.
  for (int i = 0; i < 2000 && server->stats().connections < 4; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(server->stats().connections, 4);
  auto store = Client(*server);
  ASSERT_TRUE(store->Set("k", "v").ok());
  EXPECT_EQ(*store->Get("k", absl::Seconds(10)), "v");
  EXPECT_TRUE(squatters[0]->ClosedByServer());  // the oldest made room
}

TEST(TcpStoreLimits, SilentConnectionsAreClosed) {
  TcpStoreServerOptions options;
  options.handshake_timeout = absl::Milliseconds(50);
  options.idle_timeout = absl::Milliseconds(50);
  auto server = StartServer(options);
  RawConn silent(server->port());  // never says hello
  EXPECT_TRUE(silent.ClosedByServer());
  RawConn idle(server->port());
  ASSERT_TRUE(idle.Send(Hello()));
  ExpectOk(idle.Read());
  EXPECT_TRUE(idle.ClosedByServer());
}

TEST(TcpStoreLimits, ClientsSurviveTheServerClosingIdleConnections) {
  TcpStoreServerOptions options;
  options.idle_timeout = absl::Milliseconds(1);
  auto server = StartServer(options);
  auto store = Client(*server);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store->Set("k", std::to_string(i)).ok());
    auto n = store->Add("n", 1);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, i + 1);  // a retried request never applies twice
  }
  // A parked get is not idle.
  std::thread late([&] { EXPECT_TRUE(Client(*server)->Set("late", "x").ok()); });
  EXPECT_EQ(*store->Get("late", absl::Seconds(30)), "x");
  late.join();
}

TEST(TcpStoreLimits, SecretIsCheckedOnConnect) {
  TcpStoreServerOptions options;
  options.secret = "job-secret";
  auto server = StartServer(options);
  auto good = Client(*server, "job-secret");
  ASSERT_TRUE(good->Set("k", "v").ok());
  for (const char* wrong : {"", "job-secreT", "job-secret-longer"}) {
    auto intruder = Client(*server, wrong);
    EXPECT_EQ(intruder->Get("k", absl::Seconds(1)).status().code(),
              absl::StatusCode::kPermissionDenied)
        << wrong;
    absl::Status s = intruder->Set("k", "overwritten");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find("TPX_STORE_SECRET"), std::string::npos) << s;
  }
  // A request without the handshake is refused and the connection closed.
  RawConn raw(server->port());
  ASSERT_TRUE(raw.Send(EncodeFrame({"D", "k"})));
  std::vector<std::string> reply = raw.Read();
  ASSERT_EQ(reply.size(), 2u);
  EXPECT_NE(reply[1].find("handshake"), std::string::npos) << reply[1];
  EXPECT_TRUE(raw.ClosedByServer());
  EXPECT_EQ(*good->Get("k", absl::Seconds(1)), "v");
}

TEST(TcpStoreLimits, AddOverflowIsAnError) {
  auto server = StartServer();
  auto store = Client(*server);
  ASSERT_TRUE(store->Set("n", "9223372036854775807").ok());
  auto r = store->Add("n", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << r.status();
  EXPECT_EQ(*store->Get("n", absl::Seconds(1)), "9223372036854775807");
}

TEST(TcpStoreLimits, ShutdownDoesNotWaitForStuckClients) {
  auto server = StartServer();
  auto store = Client(*server);
  // One client is half-way through a large frame, one floods without
  // reading, one is parked in a Get without a timeout.
  RawConn partial(server->port());
  ASSERT_TRUE(partial.Send(Hello() + EncodeFrame({"S", "k", std::string(1 << 20, 'v')})
                                         .substr(0, 1000)));
  RawConn flood(server->port());
  ASSERT_TRUE(flood.Send(Hello()));
  std::string checks;
  for (int i = 0; i < 100000; ++i) checks += EncodeFrame({"K", "k"});
  flood.SendWhileAccepted(checks);
  absl::Status parked;
  std::thread getter([&] { parked = store->Get("never", absl::InfiniteDuration()).status(); });
  ASSERT_TRUE(Client(*server)->Set("sync", "1").ok());
  server.reset();  // must return
  getter.join();
  EXPECT_EQ(parked.code(), absl::StatusCode::kUnavailable) << parked;
}

TEST(TcpStoreLimits, VanishedStoreHostIsReportedWithoutWaitingTheConnectTimeout) {
  auto server = StartServer();
  auto store = TcpStore::Connect("127.0.0.1", server->port(), absl::Hours(1));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  server.reset();
  // Reconnecting would otherwise retry for the full hour.
  absl::Status s = (*store)->Get("k", absl::Hours(1)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  s = (*store)->Set("k", "w");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("has gone away"), std::string::npos) << s;
}

}  // namespace
}  // namespace tpx::comm
