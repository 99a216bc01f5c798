// Wire format of the TCP rendezvous store (comm/store/tcp_store.h): frames and an
// incremental, bounded frame reader used by both the server and the client.
//
//   std::string bytes = EncodeFrame({"S", "key", "value"});
//   FrameReader reader(/*max_frame_bytes=*/1 << 20);
//   reader.Append(bytes.data(), bytes.size());
//   std::vector<std::string> parts;
//   TPX_ASSIGN_OR_RETURN(bool complete, reader.Next(&parts));  // parts = {"S", "key", "value"}
//
// A frame is a u32 part count, then per part a u32 length and the bytes
// (host byte order: loopback and same-architecture clusters). The reader
// keeps its parse position across calls, so a frame arriving in many pieces
// and a stream of many small frames both cost time linear in their bytes,
// and it rejects a frame as soon as its declared size exceeds the bound.
#ifndef TPX_COMM_STORE_STORE_WIRE_H_
#define TPX_COMM_STORE_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpx::comm {

std::string EncodeFrame(absl::Span<const std::string> parts);

class FrameReader {
 public:
  explicit FrameReader(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // Frames above this many bytes (headers included) are rejected.
  void set_max_frame_bytes(size_t n) { max_frame_bytes_ = n; }
  size_t max_frame_bytes() const { return max_frame_bytes_; }

  void Append(const char* data, size_t n);

  // true: `parts` holds the next frame; false: more bytes are needed.
  // ResourceExhausted for a frame over the bound (the stream cannot be
  // resynchronised after an error; drop the connection).
  absl::StatusOr<bool> Next(std::vector<std::string>* parts);

  // Bytes received but not yet returned in a frame.
  size_t buffered() const { return buf_.size() - pos_ + pending_bytes_; }

 private:
  void Compact();

  size_t max_frame_bytes_;
  std::string buf_;
  size_t pos_ = 0;              // first unparsed byte of buf_
  int64_t parts_left_ = -1;     // -1: the next 4 bytes are a part count
  int64_t part_len_ = -1;       // -1: the next 4 bytes are a part length
  size_t frame_bytes_ = 0;      // bytes of the current frame parsed so far
  size_t pending_bytes_ = 0;    // bytes already moved into parts_
  std::vector<std::string> parts_;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_STORE_STORE_WIRE_H_
