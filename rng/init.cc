#include "rng/init.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::rng {
namespace {

const Shape& GlobalShape(const Tensor& w, const ShardSpec* shard) {
  return shard != nullptr ? shard->global_shape : w.shape();
}

float KaimingGain(float a) { return std::sqrt(2.f / (1.f + a * a)); }

}  // namespace

absl::StatusOr<Fans> ComputeFans(const Shape& shape) {
  if (shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight init: fan in/out need at least 2 dims, got shape ", ShapeString(shape)));
  }
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return Fans{shape[1] * receptive, shape[0] * receptive};
}

absl::Status InitNormal(const Tensor& w, float stddev, Generator& gen, const ShardSpec* shard,
                        float mean) {
  return FillNormal(w, gen, mean, stddev, shard);
}

absl::Status InitUniform(const Tensor& w, float low, float high, Generator& gen,
                         const ShardSpec* shard) {
  return FillUniform(w, gen, low, high, shard);
}

absl::Status InitXavierUniform(const Tensor& w, Generator& gen, const ShardSpec* shard,
                               float gain) {
  TPX_ASSIGN_OR_RETURN(Fans f, ComputeFans(GlobalShape(w, shard)));
  const float a = gain * std::sqrt(6.f / static_cast<float>(f.fan_in + f.fan_out));
  return FillUniform(w, gen, -a, a, shard);
}

absl::Status InitXavierNormal(const Tensor& w, Generator& gen, const ShardSpec* shard,
                              float gain) {
  TPX_ASSIGN_OR_RETURN(Fans f, ComputeFans(GlobalShape(w, shard)));
  return FillNormal(w, gen, 0.f, gain * std::sqrt(2.f / static_cast<float>(f.fan_in + f.fan_out)),
                    shard);
}

absl::Status InitKaimingUniform(const Tensor& w, Generator& gen, const ShardSpec* shard,
                                float a) {
  TPX_ASSIGN_OR_RETURN(Fans f, ComputeFans(GlobalShape(w, shard)));
  const float b = KaimingGain(a) * std::sqrt(3.f / static_cast<float>(f.fan_in));
  return FillUniform(w, gen, -b, b, shard);
}

absl::Status InitKaimingNormal(const Tensor& w, Generator& gen, const ShardSpec* shard, float a) {
  TPX_ASSIGN_OR_RETURN(Fans f, ComputeFans(GlobalShape(w, shard)));
  return FillNormal(w, gen, 0.f, KaimingGain(a) / std::sqrt(static_cast<float>(f.fan_in)), shard);
}

}  // namespace tpx::rng
