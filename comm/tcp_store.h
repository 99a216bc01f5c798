// TcpStore: the rendezvous Store over TCP. One process (rank 0 or tpxrun)
// runs a TcpStoreServer; every rank connects a TcpStore client to it.
//
//   // rank 0 (or the launcher):
//   TPX_ASSIGN_OR_RETURN(auto server, TcpStoreServer::Listen("127.0.0.1", 29500));
//   TPX_RETURN_IF_ERROR(server->Start());
//   // every rank:
//   TPX_ASSIGN_OR_RETURN(auto store, TcpStore::Connect("127.0.0.1", 29500, absl::Seconds(60)));
//   TPX_RETURN_IF_ERROR(store->Set("k", "v"));
//
// The server is one thread around poll(2): it answers set/add/compare-set/
// delete/check at once and parks get/wait requests until their keys appear
// or their timeout passes (the server then answers DeadlineExceeded naming
// the missing keys). The client keeps a small pool of connections so that a
// thread blocked in Get does not block other threads. Errors name host:port.
#ifndef TPX_COMM_TCP_STORE_H_
#define TPX_COMM_TCP_STORE_H_

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/store.h"

namespace tpx::comm {

class TcpStoreServer {
 public:
  // Binds and listens on host:port (port 0 picks a free port; see port()).
  // Connections queue until Start(); so a parent may Listen, fork children
  // that connect, and only then Start the serving thread.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Listen(const std::string& host,
                                                                int port);
  ~TcpStoreServer();  // stops serving and closes every connection

  absl::Status Start();
  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  TcpStoreServer() = default;
  void Serve();

  std::string host_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port, retrying until `connect_timeout` passes (the
  // server may start later). Unavailable naming host:port on failure.
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                           absl::Duration connect_timeout);
  ~TcpStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::string_view key) override;

  std::string address() const;

 private:
  TcpStore(std::string host, int port, absl::Duration connect_timeout)
      : host_(std::move(host)), port_(port), connect_timeout_(connect_timeout) {}
  // Sends one request and returns the payload of a successful reply.
  absl::StatusOr<std::string> Call(const std::vector<std::string>& request,
                                   absl::Duration reply_within);
  absl::StatusOr<int> Acquire();
  void Release(int fd);

  std::string host_;
  int port_;
  absl::Duration connect_timeout_;
  std::mutex mu_;
  std::vector<int> idle_;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_TCP_STORE_H_
