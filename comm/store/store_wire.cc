#include "comm/store/store_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tpx::comm {
namespace {

void AppendU32(std::string& out, uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }

absl::Status TooLarge(size_t declared, size_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat("store frame of at least ", declared,
                                                   " bytes exceeds the limit of ", limit,
                                                   " bytes"));
}

}  // namespace

std::string EncodeFrame(absl::Span<const std::string> parts) {
  size_t total = 4;
  for (const std::string& p : parts) total += 4 + p.size();
  std::string out;
  out.reserve(total);
  AppendU32(out, static_cast<uint32_t>(parts.size()));
  for (const std::string& p : parts) {
    AppendU32(out, static_cast<uint32_t>(p.size()));
    out += p;
  }
  return out;
}

void FrameReader::Append(const char* data, size_t n) {
  Compact();
  buf_.append(data, n);
}

void FrameReader::Compact() {
  // Dropping the parsed prefix only once it is at least half the buffer keeps
  // the total copying linear in the bytes received.
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ >= 4096 && pos_ * 2 >= buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

absl::StatusOr<bool> FrameReader::Next(std::vector<std::string>* parts) {
  auto read_u32 = [&](uint32_t* v) {
    if (buf_.size() - pos_ < 4) return false;
    std::memcpy(v, buf_.data() + pos_, 4);
    pos_ += 4;
    return true;
  };
  if (parts_left_ < 0) {
    uint32_t n;
    if (!read_u32(&n)) return false;
    frame_bytes_ = 4;
    // Every part costs at least its 4-byte length.
    if (4 + 4 * static_cast<uint64_t>(n) > max_frame_bytes_) {
      return TooLarge(4 + 4 * static_cast<uint64_t>(n), max_frame_bytes_);
    }
    parts_left_ = n;
    part_len_ = -1;
    parts_.clear();
    pending_bytes_ = 0;
  }
  while (parts_left_ > 0) {
    if (part_len_ < 0) {
      uint32_t len;
      if (!read_u32(&len)) return false;
      frame_bytes_ += 4;
      const uint64_t at_least = frame_bytes_ + static_cast<uint64_t>(len) + 4 * (parts_left_ - 1);
      if (at_least > max_frame_bytes_) return TooLarge(at_least, max_frame_bytes_);
      part_len_ = len;
    }
    if (buf_.size() - pos_ < static_cast<size_t>(part_len_)) return false;
    parts_.emplace_back(buf_.data() + pos_, static_cast<size_t>(part_len_));
    pos_ += part_len_;
    frame_bytes_ += part_len_;
    pending_bytes_ += 4 + part_len_;
    part_len_ = -1;
    --parts_left_;
  }
  *parts = std::move(parts_);
  parts_.clear();
  parts_left_ = -1;
  pending_bytes_ = 0;
  Compact();
  return true;
}

}  // namespace tpx::comm
