// Fuzzes the TCP store's request path (comm/store/store_wire.h frames into
// comm/store/store_service.h) with small limits so that every bound is reached.
// Input: one control byte (read chunk size), then the bytes of a request
// stream, as a client would send them; requests alternate between four
// connections and simulated time advances between them.
// Checks: no crash or UB, the limits hold, every reply is a well-formed frame.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "comm/store/store_service.h"
#include "comm/store/store_wire.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Every reply is exactly one [code, payload] frame with a valid code.
void CheckReplies(const std::string& bytes) {
  tpx::comm::FrameReader reader(tpx::comm::kMaxStoreValueBytes + 65536);
  reader.Append(bytes.data(), bytes.size());
  std::vector<std::string> reply;
  while (true) {
    absl::StatusOr<bool> got = reader.Next(&reply);
    Check(got.ok());
    if (!*got) break;
    Check(reply.size() == 2);
    Check(!reply[0].empty() && reply[0].size() <= 2);
  }
  Check(reader.buffered() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  tpx::comm::StoreLimits limits;
  limits.max_value_bytes = 256;
  limits.max_keys = 8;
  limits.max_total_bytes = 1024;
  tpx::comm::StoreService service(limits);
  tpx::comm::FrameReader reader(2048);
  absl::Time now = absl::UnixEpoch();
  int conn = 0;
  for (size_t off = 1; off < size; off += chunk) {
    reader.Append(reinterpret_cast<const char*>(data) + off, std::min(chunk, size - off));
    std::vector<std::string> request;
    while (true) {
      absl::StatusOr<bool> got = reader.Next(&request);
      if (!got.ok()) return 0;  // the server drops such a connection
      if (!*got) break;
      std::string out;
      tpx::comm::StoreService::Outcome o = service.Handle(conn, request, now, &out);
      Check((o == tpx::comm::StoreService::Outcome::kParked) == out.empty());
      CheckReplies(out);
      conn = (conn + 1) % 4;
      now += absl::Milliseconds(7);
      service.Sweep(now, [](int c, std::string reply) {
        Check(c >= 0 && c < 4);
        CheckReplies(reply);
      });
      Check(service.keys() <= limits.max_keys);
      Check(service.stored_bytes() <= limits.max_total_bytes);
    }
  }
  for (int c = 0; c < 4; ++c) service.Forget(c);
  return 0;
}
