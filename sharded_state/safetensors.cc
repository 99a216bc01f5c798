#include "sharded_state/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::sharded_state {
namespace {

using Json = nlohmann::json;

// Headers beyond this are refused: a corrupt length must not make us
// allocate gigabytes (Hugging Face's reader uses the same bound).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr char kMetadataKey[] = "__metadata__";

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("safetensors file ", path, ": ", what));
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

absl::StatusOr<DType> DTypeFromSafetensorsName(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64,
                  DType::kBool}) {
    if (SafetensorsDTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported safetensors dtype '", name, "'"));
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Bounded chunks: some kernels cap a single write at 2 GiB.
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", Errno()));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status PreadAll(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30),
                              static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", Errno()));
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat("file ", path, " ends at byte ", offset,
                                              ", before the data it should hold"));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("safetensors file ", path, " does not exist"));
    }
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", Errno()));
  }
  SafetensorsReader reader;
  reader.path_ = path;
  reader.fd_ = std::shared_ptr<int>(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", Errno()));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    return Corrupt(path,
                   absl::StrCat("only ", file_size, " bytes, too short for the header length"));
  }
  unsigned char len_bytes[8];
  TPX_RETURN_IF_ERROR(PreadAll(fd, len_bytes, 8, 0, path));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > file_size - 8 || header_len > kMaxHeaderBytes) {
    return Corrupt(path, absl::StrCat("header length ", header_len, " does not fit the file (",
                                      file_size, " bytes)"));
  }
  std::string header(header_len, '\0');
  TPX_RETURN_IF_ERROR(PreadAll(fd, header.data(), header_len, 8, path));
  reader.data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - reader.data_start_;

  Json json = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Corrupt(path, "header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == kMetadataKey) {
      if (!v.is_object()) return Corrupt(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return Corrupt(path,
                         absl::StrCat("__metadata__ value of '", m.key(), "' is not a string"));
        }
        reader.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](absl::string_view what) {
      return Corrupt(path, absl::StrCat("tensor '", name, "': ", what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return bad("needs dtype, shape and data_offsets");
    }
    SafetensorsEntry e;
    e.name = name;
    if (!v["dtype"].is_string()) return bad("dtype is not a string");
    auto dtype = DTypeFromSafetensorsName(v["dtype"].get<std::string>());
    if (!dtype.ok()) return bad(dtype.status().message());
    e.dtype = *dtype;
    const Json& shape = v["shape"];
    if (!shape.is_array()) return bad("shape is not an array");
    uint64_t numel = 1;
    for (const Json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 48)) {
        return bad("shape holds a value that is not a size");
      }
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > (uint64_t{1} << 48)) return bad("shape is too large");
    }
    const Json& offsets = v["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return bad("data_offsets is not a pair of offsets");
    }
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    if (e.begin > e.end || e.end - e.begin != numel * SizeOf(e.dtype)) {
      return bad(absl::StrCat("data_offsets [", e.begin, ", ", e.end, ") do not hold ", numel,
                              " ", SafetensorsDTypeName(e.dtype), " elements"));
    }
    if (e.end > data_size) {
      return bad(absl::StrCat("data_offsets end ", e.end, " is past the end of the data (",
                              data_size, " bytes): the file is truncated"));
    }
    ranges.emplace_back(e.begin, e.end);
    reader.entries_[name] = std::move(e);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return Corrupt(path, "tensor data ranges overlap");
  }
  return reader;
}

absl::StatusOr<const SafetensorsEntry*> SafetensorsReader::Find(absl::string_view name) const {
  auto it = entries_.find(std::string(name));
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("safetensors file ", path_, " has no tensor '", name, "'"));
  }
  return &it->second;
}

absl::Status SafetensorsReader::ReadBytes(const SafetensorsEntry& entry, uint64_t offset,
                                          uint64_t n, void* dst) const {
  if (offset > entry.nbytes() || n > entry.nbytes() - offset) {
    return absl::OutOfRangeError(absl::StrCat("safetensors file ", path_, " tensor '", entry.name,
                                              "': bytes [", offset, ", ", offset + n,
                                              ") outside its ", entry.nbytes(), " bytes"));
  }
  return PreadAll(*fd_, dst, n, data_start_ + entry.begin + offset, path_);
}

absl::StatusOr<Tensor> SafetensorsReader::ReadTensor(absl::string_view name) const {
  TPX_ASSIGN_OR_RETURN(const SafetensorsEntry* e, Find(name));
  TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(e->shape, e->dtype));
  TPX_RETURN_IF_ERROR(ReadBytes(*e, 0, e->nbytes(), t.raw_data()));
  return t;
}

absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsTensorView> tensors,
                              const std::map<std::string, std::string>& metadata,
                              const SafetensorsWriteOptions& options) {
  Json header = Json::object();
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const SafetensorsTensorView& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || header.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("WriteSafetensors ", path, ": tensor name '",
                                                     t.name, "' is empty, reserved or repeated"));
    }
    const uint64_t n = static_cast<uint64_t>(NumElements(t.shape)) * SizeOf(t.dtype);
    if (t.data == nullptr && n > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteSafetensors ", path, ": tensor '", t.name, "' has no data"));
    }
    header[t.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    sizes.push_back(n);
    offset += n;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (as the reference writer does).
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", Errno()));
  absl::Status status = WriteAll(fd, len_bytes, 8, path);
  if (status.ok()) status = WriteAll(fd, text.data(), text.size(), path);
  for (size_t i = 0; status.ok() && i < tensors.size(); ++i) {
    status = WriteAll(fd, tensors[i].data, sizes[i], path);
    if (status.ok() && options.on_tensor_written) options.on_tensor_written(i + 1);
  }
  if (status.ok() && options.sync && ::fsync(fd) != 0) {
    status = absl::InternalError(absl::StrCat("cannot fsync ", path, ": ", Errno()));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat("cannot close ", path, ": ", Errno()));
  }
  return status;
}

}  // namespace tpx::sharded_state
