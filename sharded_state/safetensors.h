// The safetensors file format (as written by Hugging Face's `safetensors`):
// an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the raw little-endian tensor bytes; offsets count from the end of the
// header. Any tool that reads safetensors opens these files.
//
//   TPX_RETURN_IF_ERROR(WriteSafetensors(path, {{"w", w.dtype(), w.shape(), w.raw_data()}}, {}));
//   TPX_ASSIGN_OR_RETURN(SafetensorsReader file, SafetensorsReader::Open(path));
//   TPX_ASSIGN_OR_RETURN(const SafetensorsEntry* e, file.Find("w"));
//   TPX_RETURN_IF_ERROR(file.ReadBytes(*e, /*offset=*/0, e->nbytes(), dst));   // pread
//
// Open reads only the header; data is read with pread, so a caller reads just
// the byte ranges it needs. Errors name the file (and the tensor).
// Thread-safety: a reader may be shared by threads (pread only).
#ifndef TPX_SHARDED_STATE_SAFETENSORS_H_
#define TPX_SHARDED_STATE_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tpx::sharded_state {

// "F32", "BF16", "F16", "I32", "I64", "BOOL".
absl::string_view SafetensorsDTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromSafetensorsName(absl::string_view name);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets from the start of the data section
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsReader {
 public:
  // Reads and checks the header: its length within the file, valid JSON,
  // known dtypes, data_offsets matching dtype x shape, inside the file and
  // not overlapping. Errors (NotFound, DataLoss) name the file.
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Error (NotFound) naming file and tensor.
  absl::StatusOr<const SafetensorsEntry*> Find(absl::string_view name) const;
  // Copies bytes [offset, offset + n) of the entry's data to dst.
  // Errors: a range outside the entry, a short read or an I/O error.
  absl::Status ReadBytes(const SafetensorsEntry& entry, uint64_t offset, uint64_t n,
                         void* dst) const;
  // The whole tensor as a new host tensor.
  absl::StatusOr<Tensor> ReadTensor(absl::string_view name) const;

 private:
  SafetensorsReader() = default;
  std::string path_;
  std::shared_ptr<int> fd_;  // closed when the last copy goes
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: contiguous little-endian bytes of dtype x shape.
struct SafetensorsTensorView {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;
};

struct SafetensorsWriteOptions {
  // fsync the file before returning.
  bool sync = true;
  // Called after each tensor's bytes are written (fault-injection tests).
  std::function<void(size_t tensors_written)> on_tensor_written;
};

// Writes (creates or truncates) `path`, tensors in the given order.
// Errors: duplicate or reserved names, I/O errors naming the file.
absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsTensorView> tensors,
                              const std::map<std::string, std::string>& metadata,
                              const SafetensorsWriteOptions& options = {});

// Low-level file helpers shared by the checkpoint writer and reader.
// Writes all of [data, data + n) at the current position (EINTR and short
// writes retried); error names `path`.
absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path);
// pread of exactly n bytes at `offset`; DataLoss naming `path` on a short read.
absl::Status PreadAll(int fd, void* dst, size_t n, uint64_t offset, const std::string& path);

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_SAFETENSORS_H_
