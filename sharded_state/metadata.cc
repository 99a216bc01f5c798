#include "sharded_state/metadata.h"

#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "core/status_macros.h"
#include "sharded_state/safetensors.h"

namespace tpx::sharded_state {
namespace {

using Json = nlohmann::json;
constexpr char kFormatName[] = "tpx-sharded-state";

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return !in.bad();
}

}  // namespace

Shape TensorLayout::StoredShape(const StoredShard& shard) const {
  Shape shape = global_shape;
  if (split_dim < 0 || shard.pieces.empty()) return shape;
  int64_t n = 0;
  for (const ShardPiece& p : shard.pieces) n += p.length;
  shape[static_cast<size_t>(split_dim)] = n;
  return shape;
}

std::string MetadataToJson(const CheckpointMetadata& m) {
  Json tensors = Json::object();
  for (const auto& [name, t] : m.tensors) {
    Json shards = Json::array();
    for (const StoredShard& s : t.shards) {
      Json pieces = Json::array();
      for (const ShardPiece& p : s.pieces) {
        pieces.push_back({p.global_offset, p.local_offset, p.length});
      }
      shards.push_back({{"file", s.file}, {"pieces", pieces}});
    }
    tensors[name] = {{"dtype", SafetensorsDTypeName(t.dtype)}, {"shape", t.global_shape},
                     {"split_dim", t.split_dim}, {"stride", t.stride}, {"shards", shards}};
  }
  Json j = {{"format", kFormatName}, {"format_version", m.format_version},
            {"tp_size", m.tp_size},  {"dp_size", m.dp_size},
            {"step", m.step},        {"user", m.user},
            {"tensors", tensors}};
  return j.dump();
}

absl::StatusOr<CheckpointMetadata> MetadataFromJson(absl::string_view text,
                                                    const std::string& source) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("checkpoint metadata ", source, ": ", what));
  };
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  if (!j.contains("format") || j["format"] != kFormatName) {
    return bad(absl::StrCat("not a ", kFormatName, " file"));
  }
  if (!j.contains("format_version") || !j["format_version"].is_number_integer()) {
    return bad("format_version missing");
  }
  CheckpointMetadata m;
  m.format_version = j["format_version"].get<int>();
  if (m.format_version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint metadata ", source, ": format_version ", m.format_version,
        " is not supported (this build reads version ", kFormatVersion, ")"));
  }
  for (const char* key : {"tp_size", "dp_size", "step"}) {
    if (!j.contains(key) || !j[key].is_number_integer()) return bad(absl::StrCat(key, " missing"));
  }
  m.tp_size = j["tp_size"].get<int>();
  m.dp_size = j["dp_size"].get<int>();
  m.step = j["step"].get<int64_t>();
  if (j.contains("user")) {
    if (!j["user"].is_object()) return bad("user is not an object");
    for (auto it = j["user"].begin(); it != j["user"].end(); ++it) {
      if (!it.value().is_string())
        return bad(absl::StrCat("user entry '", it.key(), "' is not a string"));
      m.user[it.key()] = it.value().get<std::string>();
    }
  }
  if (!j.contains("tensors") || !j["tensors"].is_object()) return bad("tensors missing");
  for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it) {
    const Json& v = it.value();
    auto bad_tensor = [&](absl::string_view what) {
      return bad(absl::StrCat("tensor '", it.key(), "': ", what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() || !v.contains("split_dim") ||
        !v["split_dim"].is_number_integer() || !v.contains("stride") ||
        !v["stride"].is_number_integer() || !v.contains("shards") || !v["shards"].is_array()) {
      return bad_tensor("needs dtype, shape, split_dim, stride and shards");
    }
    TensorLayout t;
    auto dtype = DTypeFromSafetensorsName(v["dtype"].get<std::string>());
    if (!dtype.ok()) return bad_tensor(dtype.status().message());
    t.dtype = *dtype;
    for (const Json& d : v["shape"]) {
      if (!d.is_number_unsigned()) return bad_tensor("shape holds a value that is not a size");
      t.global_shape.push_back(d.get<int64_t>());
    }
    t.split_dim = v["split_dim"].get<int64_t>();
    t.stride = v["stride"].get<int64_t>();
    if (t.split_dim < -1 || t.split_dim >= static_cast<int64_t>(t.global_shape.size())) {
      return bad_tensor("split_dim out of range");
    }
    for (const Json& s : v["shards"]) {
      if (!s.is_object() || !s.contains("file") || !s["file"].is_string() ||
          !s.contains("pieces") || !s["pieces"].is_array()) {
        return bad_tensor("a shard needs file and pieces");
      }
      StoredShard shard;
      shard.file = s["file"].get<std::string>();
      if (shard.file.empty() || shard.file.find('/') != std::string::npos || shard.file[0] == '.') {
        return bad_tensor(absl::StrCat("shard file name '", shard.file, "' is not a plain name"));
      }
      int64_t local_end = 0;
      for (const Json& p : s["pieces"]) {
        if (!p.is_array() || p.size() != 3 || !p[0].is_number_unsigned() ||
            !p[1].is_number_unsigned() || !p[2].is_number_unsigned()) {
          return bad_tensor("a piece is not [global_offset, local_offset, length]");
        }
        ShardPiece piece{p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>()};
        if (t.split_dim < 0 ||
            piece.global_offset + piece.length > t.global_shape[static_cast<size_t>(t.split_dim)] ||
            piece.local_offset != local_end) {
          return bad_tensor("a piece lies outside the tensor or out of order");
        }
        local_end += piece.length;
        shard.pieces.push_back(piece);
      }
      t.shards.push_back(std::move(shard));
    }
    if (t.shards.empty()) return bad_tensor("no shards");
    m.tensors[it.key()] = std::move(t);
  }
  return m;
}

absl::StatusOr<CheckpointMetadata> ReadMetadata(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kMetadataFileName);
  std::string text;
  if (!ReadFile(path, &text)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " has no readable ",
                                            kMetadataFileName, " (missing or incomplete save)"));
  }
  return MetadataFromJson(text, path);
}

absl::StatusOr<std::string> ResolveCheckpointDir(const std::string& path) {
  std::string text;
  if (std::ifstream(absl::StrCat(path, "/", kMetadataFileName)).good()) return path;
  if (!ReadFile(absl::StrCat(path, "/", kLatestFileName), &text)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at ", path, ": neither ",
                                            kMetadataFileName, " nor a '", kLatestFileName,
                                            "' file is there"));
  }
  const std::string tag(absl::StripAsciiWhitespace(text));
  if (tag.empty() || tag.find('/') != std::string::npos || tag[0] == '.') {
    return absl::DataLossError(absl::StrCat("checkpoint root ", path, ": '", kLatestFileName,
                                            "' names '", tag, "', not a checkpoint directory"));
  }
  return absl::StrCat(path, "/", tag);
}

}  // namespace tpx::sharded_state
