#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/store/store_wire.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

// The first frame on every connection: ["H", secret].
constexpr char kHello[] = "H";
// Frames before authentication are tiny (the hello).
constexpr size_t kHandshakeFrameBytes = 4096;
// A connection is not read while this much of its output is unsent.
constexpr size_t kOutputHighWater = 1u << 20;
// Bytes read ahead of the current frame.
constexpr size_t kReadAhead = 64u << 10;
// Frames handled per connection per poll round (fairness between clients).
constexpr int kFramesPerRound = 256;
// Replies may carry a full value.
constexpr size_t kMaxReplyFrameBytes = kMaxStoreValueBytes + (64u << 10);
// Once a store was reached, how long a refused reconnect is retried before
// the host is reported gone.
constexpr absl::Duration kReconnectGrace = absl::Seconds(1);

absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("TcpStore: cannot resolve ", host, ":", port,
                                                   ": ", ::gai_strerror(rc)));
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, result->ai_addr, result->ai_addrlen);
  *len = result->ai_addrlen;
  ::freeaddrinfo(result);
  return addr;
}

// Constant-time comparison: the secret must not leak through timing.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

// ---------------------------------------------------------------- server

struct Conn {
  explicit Conn(absl::Time now) : in(kHandshakeFrameBytes), accepted_at(now), last_active(now) {}
  FrameReader in;
  std::string out;
  size_t out_pos = 0;  // first unsent byte of `out`
  bool authenticated = false;
  bool closing = false;  // send what is queued, then close
  bool peer_closed = false;
  uint64_t serial = 0;  // accept order
  absl::Time accepted_at;
  absl::Time last_active;

  size_t unsent() const { return out.size() - out_pos; }
  void Queue(std::string bytes) {
    if (out_pos == out.size()) {
      out.clear();
      out_pos = 0;
    }
    out += bytes;
  }
};

// Sends what the connection can take now; false on a broken connection.
bool Flush(int fd, Conn& c, absl::Time now) {
  while (c.unsent() > 0) {
    ssize_t sent = ::send(fd, c.out.data() + c.out_pos, c.unsent(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      c.out_pos += sent;
      c.last_active = now;
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    return false;
  }
  c.out.clear();
  c.out_pos = 0;
  return true;
}

int OpenFileLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Listen(
    const std::string& host, int port, TcpStoreServerOptions options) {
  if (options.max_connections < 1 || options.max_frame_bytes < kHandshakeFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TcpStoreServer: max_connections must be >= 1 (got ", options.max_connections,
        ") and max_frame_bytes >= ", kHandshakeFrameBytes, " (got ", options.max_frame_bytes,
        ")"));
  }
  // Keep room under the open-file limit for the rest of the process, so
  // that accepting never fails with EMFILE while legitimate clients wait.
  options.max_connections =
      std::max(1, std::min(options.max_connections, OpenFileLimit() / 2 - 16));
  socklen_t len = 0;
  TPX_ASSIGN_OR_RETURN(sockaddr_storage addr, Resolve(host, port, &len));
  int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("TcpStore: socket(): ", strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 1024) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("TcpStore: cannot listen on ", host, ":", port,
                                               ": ", strerror(err),
                                               err == EADDRINUSE ? " (choose another port)" : ""));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  auto server = std::unique_ptr<TcpStoreServer>(new TcpStoreServer());
  server->host_ = host;
  server->port_ = ntohs(bound.ss_family == AF_INET6
                            ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->listen_fd_ = fd;
  server->options_ = std::move(options);
  if (::pipe2(server->wake_pipe_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("TcpStore: pipe(): ", strerror(errno)));
  }
  return server;
}

TcpStoreServerStats TcpStoreServer::stats() const {
  TcpStoreServerStats s;
  s.connections = stat_connections_.load(std::memory_order_relaxed);
  s.keys = stat_keys_.load(std::memory_order_relaxed);
  s.stored_bytes = stat_stored_bytes_.load(std::memory_order_relaxed);
  s.buffered_bytes = stat_buffered_bytes_.load(std::memory_order_relaxed);
  return s;
}

absl::Status TcpStoreServer::Start() {
  if (thread_.joinable()) return absl::FailedPreconditionError("TcpStoreServer already started");
  thread_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    char c = 1;
    (void)!::write(wake_pipe_[1], &c, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_pipe_[0], wake_pipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpStoreServer::Serve() {
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  const TcpStoreServerOptions& opt = options_;
  StoreService service(opt.limits);
  std::map<int, Conn> conns;
  std::vector<pollfd> fds;
  absl::Time accept_paused_until = absl::InfinitePast();
  bool more_work = false;  // a connection still has buffered frames
  uint64_t accepted_total = 0;

  // Handles buffered frames of one connection while it may take more.
  auto process = [&](int fd, Conn& c, absl::Time now) {
    for (int handled = 0; !c.closing && !service.Parked(fd) && c.unsent() < kOutputHighWater;
         ++handled) {
      if (handled == kFramesPerRound) {
        more_work = true;
        return;
      }
      std::vector<std::string> request;
      absl::StatusOr<bool> got = c.in.Next(&request);
      if (!got.ok()) {
        c.Queue(StoreService::Reply(got.status()));
        c.closing = true;
        return;
      }
      if (!*got) return;
      if (!c.authenticated) {
        if (request.size() != 2 || request[0] != kHello) {
          c.Queue(StoreService::Reply(absl::InvalidArgumentError(
              "malformed store request: a connection must start with the store handshake")));
          c.closing = true;
        } else if (!SameSecret(request[1], opt.secret)) {
          c.Queue(StoreService::Reply(absl::PermissionDeniedError(
              "the store rejected this client's secret: the store belongs to another job, or "
              "TPX_STORE_SECRET differs between this process and the store host")));
          c.closing = true;
        } else {
          c.authenticated = true;
          c.in.set_max_frame_bytes(opt.max_frame_bytes);
          c.Queue(StoreService::Reply(absl::OkStatus()));
        }
        continue;
      }
      std::string reply;
      StoreService::Outcome outcome = service.Handle(fd, request, now, &reply);
      c.Queue(std::move(reply));
      if (outcome == StoreService::Outcome::kProtocolError) c.closing = true;
    }
  };
  auto wants_read = [&](int fd, const Conn& c) {
    return !c.closing && !service.Parked(fd) && c.unsent() < kOutputHighWater &&
           c.in.buffered() < c.in.max_frame_bytes() + kReadAhead;
  };

  while (!stop_.load(std::memory_order_acquire)) {
    absl::Time now = absl::Now();
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    absl::Time wake_at = std::min(service.NextDeadline(),
                                  accepting ? absl::InfiniteFuture() : accept_paused_until);
    for (auto& [fd, c] : conns) {
      short events = POLLRDHUP;
      if (wants_read(fd, c)) events |= POLLIN;
      if (c.unsent() > 0) events |= POLLOUT;
      fds.push_back({fd, events, 0});
      const bool parked = service.Parked(fd);
      absl::Time limit = !c.authenticated ? c.accepted_at + opt.handshake_timeout
                         : parked         ? absl::InfiniteFuture()
                                          : c.last_active + opt.idle_timeout;
      wake_at = std::min(wake_at, limit);
    }
    int timeout_ms = -1;
    if (more_work) {
      timeout_ms = 0;
    } else if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(wake_at - now) + 1, 0, 60000));
    }
    more_work = false;
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) break;  // stop requested
    now = absl::Now();

    if (fds[1].revents & POLLIN) {
      size_t evicting = 0;  // shut down this round, closed at its end (no fd reuse meanwhile)
      for (int accepted = 0; accepted < 64; ++accepted) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
            accept_paused_until = now + absl::Milliseconds(100);
          }
          break;
        }
        if (static_cast<int>(conns.size() - evicting) >= opt.max_connections) {
          // Connections that have not presented the secret yet cannot
          // crowd out the job's ranks: the oldest of them makes room.
          Conn* oldest = nullptr;
          int oldest_fd = -1;
          for (auto& [other_fd, other] : conns) {
            if (!other.authenticated && !other.closing &&
                (oldest == nullptr || other.serial < oldest->serial)) {
              oldest = &other;
              oldest_fd = other_fd;
            }
          }
          if (oldest != nullptr) {
            ::shutdown(oldest_fd, SHUT_RDWR);
            oldest->closing = true;
            oldest->out.clear();
            oldest->out_pos = 0;
            ++evicting;
          }
        }
        if (static_cast<int>(conns.size() - evicting) >= opt.max_connections) {
          std::string refusal = StoreService::Reply(absl::ResourceExhaustedError(
              absl::StrCat("the store serves its limit of ", opt.max_connections,
                           " connections (TcpStoreServerOptions::max_connections); try "
                           "again later")));
          (void)!::send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          ::close(fd);
          continue;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conns.emplace(fd, Conn(now)).first->second.serial = ++accepted_total;
      }
    }

    for (size_t i = 2; i < fds.size() && !stop_.load(std::memory_order_relaxed); ++i) {
      const int fd = fds[i].fd;
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      bool broken = (fds[i].revents & (POLLERR | POLLNVAL)) != 0;
      if (!broken && (fds[i].revents & POLLIN)) {
        char buf[65536];
        while (wants_read(fd, c)) {
          ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
          if (got > 0) {
            c.in.Append(buf, got);
            c.last_active = now;
            process(fd, c, now);
            continue;
          }
          if (got == 0) {
            c.peer_closed = true;
          } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            broken = true;
          }
          break;
        }
      }
      if (fds[i].revents & (POLLRDHUP | POLLHUP)) c.peer_closed = true;
      if (!broken && (fds[i].revents & POLLOUT)) broken = !Flush(fd, c, now);
      if (!broken) process(fd, c, now);
      // A peer that hung up gets no more replies; what it sent before was handled.
      if (broken || c.peer_closed) {
        service.Forget(fd);
        ::close(fd);
        conns.erase(it);
      }
    }

    service.Sweep(now, [&](int fd, std::string reply) {
      auto it = conns.find(fd);
      if (it != conns.end()) it->second.Queue(std::move(reply));
    });
    size_t buffered = 0;
    for (auto it = conns.begin(); it != conns.end();) {
      const int fd = it->first;
      Conn& c = it->second;
      process(fd, c, now);  // a connection whose request was just answered may have more
      bool drop = !Flush(fd, c, now);
      // A refused client gets its reason, unless it will not even read it.
      if (c.closing && (c.unsent() == 0 || now - c.last_active >= opt.handshake_timeout)) {
        drop = true;
      }
      if (!c.authenticated && now - c.accepted_at >= opt.handshake_timeout) drop = true;
      if (c.authenticated && !service.Parked(fd) && now - c.last_active >= opt.idle_timeout) {
        drop = true;
      }
      if (drop) {
        service.Forget(fd);
        ::close(fd);
        it = conns.erase(it);
      } else {
        buffered += c.in.buffered() + c.unsent();
        ++it;
      }
    }
    stat_connections_.store(static_cast<int>(conns.size()), std::memory_order_relaxed);
    stat_keys_.store(service.keys(), std::memory_order_relaxed);
    stat_stored_bytes_.store(service.stored_bytes(), std::memory_order_relaxed);
    stat_buffered_bytes_.store(buffered, std::memory_order_relaxed);
  }
  for (auto& [fd, c] : conns) ::close(fd);
}

absl::StatusOr<std::string> NewStoreSecret() {
  char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("getrandom for the store secret: ",
                                                 strerror(errno)));
    }
    got += n;
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

// ---------------------------------------------------------------- client

namespace {
bool IsOkReply(const std::vector<std::string>& reply) {
  return reply.size() == 2 && reply[0] == "0";
}
}  // namespace

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                            absl::Duration connect_timeout,
                                                            std::string secret) {
  auto store =
      std::unique_ptr<TcpStore>(new TcpStore(host, port, connect_timeout, std::move(secret)));
  TPX_ASSIGN_OR_RETURN(int fd, store->NewConnection());
  // Not yet introduced: the handshake travels with this connection's first request.
  std::lock_guard<std::mutex> lock(store->mu_);
  store->fresh_.push_back(fd);
  return store;
}

TcpStore::~TcpStore() {
  for (int fd : idle_) ::close(fd);
  for (int fd : fresh_) ::close(fd);
}

std::string TcpStore::address() const { return absl::StrCat(host_, ":", port_); }

absl::StatusOr<int> TcpStore::NewConnection() {
  socklen_t len = 0;
  TPX_ASSIGN_OR_RETURN(sockaddr_storage addr, Resolve(host_, port_, &len));
  const bool was_connected = ever_connected_.load(std::memory_order_acquire);
  const absl::Duration patience =
      was_connected ? std::min(connect_timeout_, kReconnectGrace) : connect_timeout_;
  const absl::Time deadline = absl::Now() + patience;
  int last_errno = 0;
  while (true) {
    int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("TcpStore: socket(): ", strerror(errno)));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      // A store host whose machine vanished (no FIN, no RST) is noticed in
      // about 10 s even while a Get waits without a timeout.
      int idle = 5, interval = 2, count = 3;
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
      ever_connected_.store(true, std::memory_order_release);
      return fd;
    }
    last_errno = errno;
    ::close(fd);
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));  // the server may not be up yet
  }
  if (was_connected) {
    return absl::UnavailableError(absl::StrCat(
        "TcpStore: the store host at ", address(), " has gone away (", strerror(last_errno),
        "; it was reachable before): did rank 0 or tpxrun exit?"));
  }
  return absl::UnavailableError(absl::StrCat(
      "TcpStore: cannot connect to ", address(), " within ",
      absl::FormatDuration(connect_timeout_), ": ", strerror(last_errno),
      ". Is the store host (rank 0 or tpxrun) running, and do TPX_STORE_ADDR/TPX_STORE_PORT "
      "(or MASTER_ADDR/MASTER_PORT) point at it?"));
}

absl::StatusOr<int> TcpStore::Acquire(bool* reused, bool* fresh) {
  // Anything readable on a connection with no request in flight means the
  // server closed it (idle or handshake timeout): replace it.
  auto still_open = [](int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 0;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::vector<int>* pool : {&idle_, &fresh_}) {
      while (!pool->empty()) {
        int fd = pool->back();
        pool->pop_back();
        if (still_open(fd)) {
          *reused = true;  // made before this call: the server may close it any time
          *fresh = pool == &fresh_;
          return fd;
        }
        ::close(fd);
      }
    }
  }
  *reused = false;
  *fresh = true;
  return NewConnection();
}

void TcpStore::Release(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(fd);
}

absl::StatusOr<std::vector<std::string>> TcpStore::Exchange(int fd, const std::string& request,
                                                            bool fresh, absl::Time deadline,
                                                            bool* replied) {
  auto broken = [&](absl::string_view what) {
    return absl::UnavailableError(
        absl::StrCat("TcpStore ", address(), ": ", what, " (did the store host exit?)"));
  };
  *replied = false;
  FrameReader in(kMaxReplyFrameBytes);
  std::vector<std::string> reply;
  bool send_failed = false;
  // A new connection presents the secret in the same write as its first
  // request, so connecting costs no extra round trip.
  const std::string frame = fresh ? EncodeFrame({kHello, secret_}) + request : request;
  int replies_left = fresh ? 2 : 1;
  for (size_t off = 0; off < frame.size();) {
    ssize_t sent = ::send(fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) {
      // A server that refuses this connection has already sent why: read it.
      send_failed = true;
      break;
    }
    off += sent;
  }
  while (true) {
    absl::StatusOr<bool> got = in.Next(&reply);
    if (!got.ok()) return broken(absl::StrCat("malformed reply: ", got.status().message()));
    if (*got) {
      // The handshake's reply comes first; a refusal ends the exchange.
      if (--replies_left == 0 || !IsOkReply(reply)) break;
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    int64_t wait_ms = deadline == absl::InfiniteFuture()
                          ? 1000
                          : std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(wait_ms, 1000)));
    if (ready < 0 && errno != EINTR) return broken(absl::StrCat("poll: ", strerror(errno)));
    if (ready == 0) {
      if (absl::Now() >= deadline) return broken("no reply from the store server");
      continue;
    }
    char buf[65536];
    ssize_t got_bytes = ::recv(fd, buf, sizeof(buf), 0);
    if (got_bytes < 0 && errno == EINTR) continue;
    if (got_bytes <= 0) {
      return broken(send_failed ? absl::StrCat("send failed: ", strerror(errno))
                                : std::string("connection closed by the store server"));
    }
    *replied = true;
    in.Append(buf, got_bytes);
  }
  int code = 0;
  if (reply.size() != 2 || !absl::SimpleAtoi(reply[0], &code) || code < 0 || code > 16) {
    return broken("malformed reply");
  }
  if (code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat("TcpStore ", address(), ": ", reply[1]));
  }
  return reply;
}

absl::StatusOr<std::string> TcpStore::Call(const std::vector<std::string>& request,
                                           absl::Duration reply_within) {
  const std::string frame = EncodeFrame(request);
  // The server answers by its own deadline; allow slack for a busy machine.
  const absl::Time deadline = reply_within == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + reply_within + absl::Seconds(30);
  for (int attempt = 0;; ++attempt) {
    bool reused = false, fresh = false;
    TPX_ASSIGN_OR_RETURN(int fd, Acquire(&reused, &fresh));
    bool replied = false;
    absl::StatusOr<std::vector<std::string>> reply = Exchange(fd, frame, fresh, deadline, &replied);
    if (reply.ok()) {
      Release(fd);
      return std::move((*reply)[1]);
    }
    ::close(fd);
    // A pooled connection the server closed before reading this request
    // (idle timeout) carried nothing: retry once on a new connection.
    const bool stale = reused && !replied && reply.status().code() == absl::StatusCode::kUnavailable;
    if (!stale || attempt > 0) return reply.status();
  }
}

namespace {
std::string TimeoutText(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? "-1"
                                             : absl::StrCat(absl::ToInt64Milliseconds(timeout));
}
}  // namespace

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  TPX_RETURN_IF_ERROR(ValidateStoreValue(key, value.size()));
  return Call({"S", std::string(key), std::string(value)}, absl::ZeroDuration()).status();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key, absl::Duration timeout) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  return Call({"G", TimeoutText(timeout), std::string(key)}, timeout);
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  TPX_ASSIGN_OR_RETURN(std::string value,
                       Call({"A", std::string(key), absl::StrCat(delta)}, absl::ZeroDuration()));
  return ParseStoreCounter(key, value);
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  TPX_RETURN_IF_ERROR(ValidateStoreValue(key, desired.size()));
  return Call({"C", std::string(key), std::string(expected), std::string(desired)},
              absl::ZeroDuration());
}

namespace {

// The server answers yes/no questions with "1" or "0".
absl::StatusOr<bool> IsTrueReply(const absl::StatusOr<std::string>& reply) {
  if (!reply.ok()) return reply.status();
  return *reply == "1";
}

}  // namespace

absl::StatusOr<bool> TcpStore::Delete(absl::string_view key) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  return IsTrueReply(Call({"D", std::string(key)}, absl::ZeroDuration()));
}

absl::StatusOr<bool> TcpStore::Check(absl::string_view key) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  return IsTrueReply(Call({"K", std::string(key)}, absl::ZeroDuration()));
}

absl::Status TcpStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> request = {"W", TimeoutText(timeout)};
  for (const std::string& key : keys) {
    TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
    request.push_back(key);
  }
  if (keys.empty()) return absl::OkStatus();
  return Call(request, timeout).status();
}

}  // namespace tpx::comm
