#include "rng/random.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "rng/philox.h"

namespace tpx::rng {

Shape ShardSpec::LocalShape() const {
  Shape s = global_shape;
  if (dim >= 0 && dim < static_cast<int64_t>(s.size())) s[dim] = length;
  return s;
}

absl::StatusOr<ShardSpec> ShardOf(Shape global_shape, int64_t dim, int64_t rank, int64_t world) {
  const int64_t nd = static_cast<int64_t>(global_shape.size());
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardOf: rank ", rank, " of world ", world, " is out of range"));
  }
  auto d = NormalizeDim(dim, nd, "ShardOf");
  if (!d.ok()) return d.status();
  const std::vector<int64_t> sizes = ops::SplitSizes(global_shape[*d], world);
  int64_t offset = 0;
  for (int64_t r = 0; r < rank; ++r) offset += sizes[r];
  return ShardSpec{std::move(global_shape), *d, offset, sizes[rank]};
}

absl::Status ForEachGlobalRun(const Shape& local_shape, const ShardSpec* shard, const char* op,
                              const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t n = NumElements(local_shape);
  if (shard == nullptr) {
    if (n > 0) fn(0, 0, n);
    return absl::OkStatus();
  }
  const Shape& g = shard->global_shape;
  const int64_t nd = static_cast<int64_t>(g.size());
  if (shard->dim < 0 || shard->dim >= nd || shard->offset < 0 || shard->length < 0 ||
      shard->offset + shard->length > g[shard->dim] || shard->LocalShape() != local_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": tensor shape ", ShapeString(local_shape), " is not the shard [",
        shard->offset, ", ", shard->offset + shard->length, ") along dim ", shard->dim,
        " of global shape ", ShapeString(g)));
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < shard->dim; ++i) outer *= g[i];
  for (int64_t i = shard->dim + 1; i < nd; ++i) inner *= g[i];
  const int64_t run = shard->length * inner;
  if (run == 0) return absl::OkStatus();
  for (int64_t o = 0; o < outer; ++o) {
    fn(o * run, (o * g[shard->dim] + shard->offset) * inner, run);
  }
  return absl::OkStatus();
}

namespace {

// Fills t run by run via fill_f32(out, n, stream, first_index).
template <typename FillF32>
absl::Status FillTensor(const Tensor& t, Generator& gen, const ShardSpec* shard, const char* op,
                        FillF32 fill_f32) {
  if (!t.defined() || !t.is_contiguous() || !IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": needs a defined contiguous floating tensor, got ",
                     t.defined() ? t.ToString() : std::string("undefined")));
  }
  if (!t.device().is_cpu()) {
    // Drawn on the host (the same values on every device), then copied over.
    TPX_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(t.shape(), t.dtype()));
    TPX_RETURN_IF_ERROR(FillTensor(host, gen, shard, op, fill_f32));
    return t.CopyFrom(host);
  }
  const uint64_t stream = gen.NextStream();
  std::vector<float> tmp;
  return ForEachGlobalRun(t.shape(), shard, op, [&](int64_t local, int64_t global, int64_t n) {
    switch (t.dtype()) {
      case DType::kF32:
        fill_f32(t.data<float>() + local, n, stream, static_cast<uint64_t>(global));
        break;
      case DType::kBF16: {
        tmp.resize(n);
        fill_f32(tmp.data(), n, stream, static_cast<uint64_t>(global));
        BF16* out = t.data<BF16>() + local;
        for (int64_t i = 0; i < n; ++i) out[i] = BF16::FromFloat(tmp[i]);
        break;
      }
      default: {
        tmp.resize(n);
        fill_f32(tmp.data(), n, stream, static_cast<uint64_t>(global));
        F16* out = t.data<F16>() + local;
        for (int64_t i = 0; i < n; ++i) out[i] = F16::FromFloat(tmp[i]);
        break;
      }
    }
  });
}

}  // namespace

absl::Status FillUniform(const Tensor& t, Generator& gen, float low, float high,
                         const ShardSpec* shard) {
  const uint64_t seed = gen.seed();
  return FillTensor(t, gen, shard, "FillUniform",
                    [&](float* out, int64_t n, uint64_t stream, uint64_t first) {
                      rng::FillUniform(out, n, seed, stream, first, low, high);
                    });
}

absl::Status FillNormal(const Tensor& t, Generator& gen, float mean, float stddev,
                        const ShardSpec* shard) {
  const uint64_t seed = gen.seed();
  return FillTensor(t, gen, shard, "FillNormal",
                    [&](float* out, int64_t n, uint64_t stream, uint64_t first) {
                      rng::FillNormal(out, n, seed, stream, first, mean, stddev);
                    });
}

}  // namespace tpx::rng
