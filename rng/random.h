// Random tensor fills from a Generator, optionally for a shard of a larger tensor.
//
// A draw takes one stream from the generator (Generator::NextStream) and gives
// element i the Philox value of index i. With a ShardSpec, i is the element's
// index in the GLOBAL (unsharded, row-major) tensor, so every shard of a
// tensor gets exactly the slice of the numbers the whole tensor would get, at
// any number of shards, even or uneven — provided every rank draws with the
// same generator state (rng/tracker.h SeedMode::kTpInvariant).
//
//   rng::ShardSpec shard = rng::ShardOf({1024, 4096}, /*dim=*/0, tp_rank, tp_size);
//   TPX_ASSIGN_OR_RETURN(Tensor w, Tensor::Empty(shard.LocalShape()));
//   TPX_RETURN_IF_ERROR(rng::FillNormal(w, rng::ActiveGenerator(), 0.f, 0.02f, &shard));
#ifndef TPX_RNG_RANDOM_H_
#define TPX_RNG_RANDOM_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "rng/generator.h"

namespace tpx::rng {

// The local tensor is global_shape narrowed along `dim` to [offset, offset + length).
struct ShardSpec {
  Shape global_shape;
  int64_t dim = 0;
  int64_t offset = 0;
  int64_t length = 0;
  Shape LocalShape() const;
};

// Piece `rank` of `world` along dim, sized by ops::SplitSizes (uneven allowed).
absl::StatusOr<ShardSpec> ShardOf(Shape global_shape, int64_t dim, int64_t rank, int64_t world);

// Calls fn(local_start, global_start, length) for the runs of consecutive
// global indices covering a contiguous local tensor of the shard (one run when
// `shard` is null: (0, 0, numel)). Error: `local_shape` is not the shard's.
absl::Status ForEachGlobalRun(const Shape& local_shape, const ShardSpec* shard, const char* op,
                              const std::function<void(int64_t, int64_t, int64_t)>& fn);

// Fill a contiguous floating tensor (f32/bf16/f16; bf16/f16 round the f32
// value). Values are drawn on the host, so every device gets the same ones;
// other devices receive a copy. Errors: t undefined, strided or not floating;
// t's shape not the shard's. No stream is drawn on error.
absl::Status FillUniform(const Tensor& t, Generator& gen, float low = 0.f, float high = 1.f,
                         const ShardSpec* shard = nullptr);
absl::Status FillNormal(const Tensor& t, Generator& gen, float mean = 0.f, float stddev = 1.f,
                        const ShardSpec* shard = nullptr);

}  // namespace tpx::rng

#endif  // TPX_RNG_RANDOM_H_
