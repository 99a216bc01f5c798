#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

// Wire format: a frame is a u32 part count, then per part a u32 length and
// the bytes (little-endian host order: loopback and same-arch clusters).
// Requests: [command, args...]; replies: [status code, payload].
constexpr uint32_t kMaxParts = 1u << 16;
constexpr uint32_t kMaxPartBytes = static_cast<uint32_t>(kMaxStoreValueBytes) + 4096;

void AppendU32(std::string& out, uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }

std::string EncodeFrame(const std::vector<std::string>& parts) {
  std::string out;
  AppendU32(out, static_cast<uint32_t>(parts.size()));
  for (const std::string& p : parts) {
    AppendU32(out, static_cast<uint32_t>(p.size()));
    out += p;
  }
  return out;
}

// Parses one frame from the front of `buf`. 1: done (consumed), 0: need more,
// -1: malformed.
int DecodeFrame(const std::string& buf, std::vector<std::string>* parts, size_t* consumed) {
  size_t pos = 0;
  auto read_u32 = [&](uint32_t* v) {
    if (buf.size() - pos < 4) return false;
    std::memcpy(v, buf.data() + pos, 4);
    pos += 4;
    return true;
  };
  uint32_t n;
  if (!read_u32(&n)) return 0;
  if (n > kMaxParts) return -1;
  parts->clear();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len;
    if (!read_u32(&len)) return 0;
    if (len > kMaxPartBytes) return -1;
    if (buf.size() - pos < len) return 0;
    parts->emplace_back(buf.data() + pos, len);
    pos += len;
  }
  *consumed = pos;
  return 1;
}

std::string Reply(const absl::Status& status, absl::string_view payload = "") {
  return EncodeFrame({absl::StrCat(static_cast<int>(status.code())),
                      status.ok() ? std::string(payload) : std::string(status.message())});
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

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

// ---------------------------------------------------------------- server

struct Waiter {
  int fd;
  bool is_get;  // get: reply with the value; wait: reply empty
  std::vector<std::string> keys;
  absl::Time deadline;
  absl::Duration timeout;
};

struct Client {
  std::string in, out;
};

class ServerState {
 public:
  // Handles one request; may queue a waiter instead of replying.
  void Handle(int fd, std::vector<std::string>& req, Client& client) {
    auto reply = [&](const absl::Status& s, absl::string_view payload = "") {
      client.out += Reply(s, payload);
    };
    if (req.empty()) return reply(absl::InvalidArgumentError("empty request"));
    const std::string& cmd = req[0];
    auto need = [&](size_t n) {
      if (req.size() < n) {
        reply(absl::InvalidArgumentError(absl::StrCat("malformed '", cmd, "' request")));
        return false;
      }
      return true;
    };
    if (cmd == "S") {
      if (!need(3)) return;
      data_[req[1]] = std::move(req[2]);
      changed_ = true;
      return reply(absl::OkStatus());
    }
    if (cmd == "A") {
      if (!need(3)) return;
      int64_t delta = 0;
      absl::StatusOr<int64_t> current = ParseStoreCounter(req[1], Lookup(req[1]));
      if (!current.ok() || !absl::SimpleAtoi(req[2], &delta)) {
        return reply(current.ok() ? absl::InvalidArgumentError("bad delta") : current.status());
      }
      int64_t value = *current + delta;
      data_[req[1]] = absl::StrCat(value);
      changed_ = true;
      return reply(absl::OkStatus(), absl::StrCat(value));
    }
    if (cmd == "C") {
      if (!need(4)) return;
      std::string now = Lookup(req[1]);
      if (now == req[2]) {
        now = req[3];
        data_[req[1]] = std::move(req[3]);
        changed_ = true;
      }
      return reply(absl::OkStatus(), now);
    }
    if (cmd == "D") {
      if (!need(2)) return;
      return reply(absl::OkStatus(), data_.erase(req[1]) ? "1" : "0");
    }
    if (cmd == "K") {
      if (!need(2)) return;
      return reply(absl::OkStatus(), data_.count(req[1]) ? "1" : "0");
    }
    if (cmd == "G" || cmd == "W") {
      if (!need(3)) return;
      int64_t timeout_ms = 0;
      if (!absl::SimpleAtoi(req[1], &timeout_ms)) {
        return reply(absl::InvalidArgumentError("bad timeout"));
      }
      Waiter w{fd, cmd == "G", std::vector<std::string>(req.begin() + 2, req.end()),
               absl::InfiniteFuture(), absl::InfiniteDuration()};
      if (timeout_ms >= 0) {
        w.timeout = absl::Milliseconds(timeout_ms);
        w.deadline = absl::Now() + w.timeout;
      }
      if (!TryFinish(w, client)) waiters_.push_back(std::move(w));
      return;
    }
    reply(absl::InvalidArgumentError(absl::StrCat("unknown command '", cmd, "'")));
  }

  // Answers waiters whose keys exist or whose deadline passed.
  void Sweep(std::map<int, Client>& clients) {
    absl::Time now = absl::Now();
    bool check_keys = changed_;
    changed_ = false;
    std::vector<Waiter> keep;
    for (Waiter& w : waiters_) {
      auto it = clients.find(w.fd);
      if (it == clients.end()) continue;  // client went away
      if (check_keys && TryFinish(w, it->second)) continue;
      if (now >= w.deadline) {
        std::vector<std::string> missing;
        for (const std::string& k : w.keys) {
          if (!data_.count(k)) missing.push_back(k);
        }
        it->second.out += Reply(absl::DeadlineExceededError(
            absl::StrCat("timed out after ", absl::FormatDuration(w.timeout),
                         " waiting for key(s) '", absl::StrJoin(missing, "', '"), "'")));
        continue;
      }
      keep.push_back(std::move(w));
    }
    waiters_ = std::move(keep);
  }

  // Time until the next waiter deadline, for poll().
  int PollTimeoutMs() const {
    absl::Time next = absl::InfiniteFuture();
    for (const Waiter& w : waiters_) next = std::min(next, w.deadline);
    if (next == absl::InfiniteFuture()) return -1;
    int64_t ms = absl::ToInt64Milliseconds(next - absl::Now()) + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 60000));
  }

 private:
  std::string Lookup(const std::string& key) const {
    auto it = data_.find(key);
    return it == data_.end() ? std::string() : it->second;
  }

  bool TryFinish(const Waiter& w, Client& client) {
    for (const std::string& k : w.keys) {
      if (!data_.count(k)) return false;
    }
    client.out += Reply(absl::OkStatus(), w.is_get ? data_[w.keys[0]] : std::string());
    return true;
  }

  std::map<std::string, std::string> data_;
  std::vector<Waiter> waiters_;
  bool changed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Listen(const std::string& host,
                                                                       int port) {
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
  if (::pipe2(server->wake_pipe_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("TcpStore: pipe(): ", strerror(errno)));
  }
  return server;
}

absl::Status TcpStoreServer::Start() {
  if (thread_.joinable()) return absl::FailedPreconditionError("TcpStoreServer already started");
  thread_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    char c = 1;
    (void)!::write(wake_pipe_[1], &c, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_pipe_[0], wake_pipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpStoreServer::Serve() {
  SetNonBlocking(listen_fd_);
  ServerState state;
  std::map<int, Client> clients;
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, client] : clients) {
      fds.push_back({fd, static_cast<short>(POLLIN | (client.out.empty() ? 0 : POLLOUT)), 0});
    }
    int n = ::poll(fds.data(), fds.size(), state.PollTimeoutMs());
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) break;  // stop requested
    if (fds[1].revents & POLLIN) {
      while (true) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        clients[fd];
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      Client& client = clients[fd];
      bool close_it = (fds[i].revents & (POLLERR | POLLNVAL)) != 0;
      if (!close_it && (fds[i].revents & (POLLIN | POLLHUP))) {
        char buf[65536];
        while (true) {
          ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
          if (got > 0) {
            client.in.append(buf, got);
            continue;
          }
          if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            close_it = true;
          }
          break;
        }
        std::vector<std::string> request;
        size_t consumed = 0;
        while (!close_it) {
          int rc = DecodeFrame(client.in, &request, &consumed);
          if (rc < 0) close_it = true;
          if (rc <= 0) break;
          client.in.erase(0, consumed);
          state.Handle(fd, request, client);
        }
      }
      if (close_it) {
        ::close(fd);
        clients.erase(fd);
      }
    }
    state.Sweep(clients);
    for (auto& [fd, client] : clients) {
      while (!client.out.empty()) {
        ssize_t sent = ::send(fd, client.out.data(), client.out.size(), MSG_NOSIGNAL);
        if (sent <= 0) break;
        client.out.erase(0, sent);
      }
    }
  }
  for (auto& [fd, client] : clients) ::close(fd);
}

// ---------------------------------------------------------------- client

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                            absl::Duration connect_timeout) {
  auto store = std::unique_ptr<TcpStore>(new TcpStore(host, port, connect_timeout));
  TPX_ASSIGN_OR_RETURN(int fd, store->Acquire());
  store->Release(fd);
  return store;
}

TcpStore::~TcpStore() {
  for (int fd : idle_) ::close(fd);
}

std::string TcpStore::address() const { return absl::StrCat(host_, ":", port_); }

absl::StatusOr<int> TcpStore::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  socklen_t len = 0;
  TPX_ASSIGN_OR_RETURN(sockaddr_storage addr, Resolve(host_, port_, &len));
  absl::Time deadline = absl::Now() + connect_timeout_;
  int last_errno = 0;
  while (true) {
    int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("TcpStore: socket(): ", strerror(errno)));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    last_errno = errno;
    ::close(fd);
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));  // the server may not be up yet
  }
  return absl::UnavailableError(absl::StrCat(
      "TcpStore: cannot connect to ", address(), " within ",
      absl::FormatDuration(connect_timeout_), ": ", strerror(last_errno),
      ". Is the store host (rank 0 or tpxrun) running, and do TPX_STORE_ADDR/TPX_STORE_PORT "
      "(or MASTER_ADDR/MASTER_PORT) point at it?"));
}

void TcpStore::Release(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(fd);
}

absl::StatusOr<std::string> TcpStore::Call(const std::vector<std::string>& request,
                                           absl::Duration reply_within) {
  TPX_ASSIGN_OR_RETURN(int fd, Acquire());
  auto broken = [&](absl::string_view what) {
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("TcpStore ", address(), ": ", what, " (did the store host exit?)"));
  };
  std::string frame = EncodeFrame(request);
  for (size_t off = 0; off < frame.size();) {
    ssize_t sent = ::send(fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return broken(absl::StrCat("send failed: ", strerror(errno)));
    off += sent;
  }
  // The server answers by its own deadline; allow slack for a busy machine.
  absl::Time deadline = reply_within == absl::InfiniteDuration()
                            ? absl::InfiniteFuture()
                            : absl::Now() + reply_within + absl::Seconds(30);
  std::string in;
  std::vector<std::string> reply;
  size_t consumed = 0;
  while (true) {
    int rc = DecodeFrame(in, &reply, &consumed);
    if (rc < 0) return broken("malformed reply");
    if (rc > 0) break;
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
    ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return broken("connection closed by the store server");
    in.append(buf, got);
  }
  Release(fd);
  if (reply.size() != 2) return absl::InternalError("TcpStore: malformed reply");
  int code = 0;
  absl::SimpleAtoi(reply[0], &code);
  if (code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat("TcpStore ", address(), ": ", reply[1]));
  }
  return std::move(reply[1]);
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
