// Weight initialisation drawing from a Generator, optionally for a shard.
//
// Fans come from the GLOBAL shape (shard->global_shape when sharded): a
// tensor-parallel weight gets the same distribution, and with a shared seed
// (SeedMode::kTpInvariant) the same values, as the unsharded weight.
// Shape convention as PyTorch: [fan_out, fan_in, receptive...].
//
//   TPX_RETURN_IF_ERROR(rng::InitXavierUniform(w, rng::ActiveGenerator()));
//   TPX_RETURN_IF_ERROR(rng::InitNormal(w, 0.02f, gen, &shard));
#ifndef TPX_RNG_INIT_H_
#define TPX_RNG_INIT_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "rng/generator.h"
#include "rng/random.h"

namespace tpx::rng {

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
// Error for tensors with fewer than 2 dims.
absl::StatusOr<Fans> ComputeFans(const Shape& shape);

absl::Status InitNormal(const Tensor& w, float stddev, Generator& gen,
                        const ShardSpec* shard = nullptr, float mean = 0.f);
absl::Status InitUniform(const Tensor& w, float low, float high, Generator& gen,
                         const ShardSpec* shard = nullptr);
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
absl::Status InitXavierUniform(const Tensor& w, Generator& gen, const ShardSpec* shard = nullptr,
                               float gain = 1.f);
// N(0, gain^2 * 2 / (fan_in + fan_out)).
absl::Status InitXavierNormal(const Tensor& w, Generator& gen, const ShardSpec* shard = nullptr,
                              float gain = 1.f);
// Kaiming (He) for leaky-ReLU slope a (0 = ReLU), fan_in mode:
// uniform U(-b, b), b = gain * sqrt(3 / fan_in); normal N(0, gain^2 / fan_in),
// gain = sqrt(2 / (1 + a^2)).
absl::Status InitKaimingUniform(const Tensor& w, Generator& gen, const ShardSpec* shard = nullptr,
                                float a = 0.f);
absl::Status InitKaimingNormal(const Tensor& w, Generator& gen, const ShardSpec* shard = nullptr,
                               float a = 0.f);

}  // namespace tpx::rng

#endif  // TPX_RNG_INIT_H_
