#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cpu/loops.h"
#include "core/device_kernels.h"
#include "core/status_macros.h"

namespace tpx {
namespace {

absl::Status CheckShape(absl::Span<const int64_t> shape, const char* op) {
  for (int64_t s : shape) {
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": negative size in shape ", ShapeString(shape)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDefined(const Tensor& t, const char* op) {
  if (t.defined()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": tensor is undefined"));
}

// The kernels of a tensor's device; aborts if they are gone, which cannot
// happen for a tensor that was allocated through them.
DeviceKernels& KernelsOfExisting(const Tensor& t) {
  absl::StatusOr<DeviceKernels*> k = KernelsFor(t.device(), "Tensor");
  TPX_CHECK(k.ok()) << k.status();
  return **k;
}

// A CPU copy of t, for the accessors that cannot return a Status.
Tensor HostCopyOrDie(const Tensor& t, const char* op) {
  absl::StatusOr<Tensor> host = t.To(Device::CPU());
  TPX_CHECK(host.ok()) << op << ": copying " << t.ToString() << " from "
                       << t.device().ToString() << " failed: " << host.status();
  return *host;
}

template <typename T>
struct VectorValueType {
  using type = T;
};
template <>
struct VectorValueType<bool> {
  using type = uint8_t;  // std::vector<bool> has no data(); bool and uint8_t share layout here
};

}  // namespace

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape ContiguousStrides(absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

absl::StatusOr<int64_t> NormalizeDim(int64_t dim, int64_t rank, const char* op) {
  if (dim < -rank || dim >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", dim, " out of range for a ",
                                                   rank, "-d tensor"));
  }
  return dim < 0 ? dim + rank : dim;
}

Storage::~Storage() { allocator_->Deallocate(data_, nbytes_); }

// ---------------- Factories ----------------

absl::StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Device device) {
  TPX_ASSIGN_OR_RETURN(DeviceKernels * kernels, KernelsFor(device, "Tensor::Empty"));
  TPX_RETURN_IF_ERROR(CheckShape(shape, "Tensor::Empty"));
  const size_t nbytes = static_cast<size_t>(NumElements(shape)) * SizeOf(dtype);
  Allocator* allocator = &kernels->allocator(device.index);
  void* data = allocator->Allocate(nbytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("Tensor::Empty: cannot allocate ", nbytes,
                                                     " bytes for ", std::string(DTypeName(dtype)),
                                                     ShapeString(shape), " on ",
                                                     device.ToString()));
  }
  auto storage = std::make_shared<Storage>(data, nbytes, allocator);
  Shape strides = ContiguousStrides(shape);
  return Tensor(std::move(storage), std::move(shape), std::move(strides), 0, dtype, device);
}

absl::StatusOr<Tensor> Tensor::Zeros(Shape shape, DType dtype, Device device) {
  return Full(std::move(shape), 0.0, dtype, device);
}

absl::StatusOr<Tensor> Tensor::Ones(Shape shape, DType dtype, Device device) {
  return Full(std::move(shape), 1.0, dtype, device);
}

absl::StatusOr<Tensor> Tensor::Full(Shape shape, double value, DType dtype, Device device) {
  TPX_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype, device));
  TPX_RETURN_IF_ERROR(KernelsOfExisting(t).Fill(t, value));
  return t;
}

absl::StatusOr<Tensor> Tensor::Arange(double start, double end, double step, DType dtype,
                                      Device device) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::Arange: bad range start=", start,
                                                   " end=", end, " step=", step));
  }
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  TPX_ASSIGN_OR_RETURN(Tensor t, Empty({n}, dtype));
  cpu::DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = cpu::StoreAs<T>(start + step * static_cast<double>(i));
  });
  return t.To(device);
}

absl::StatusOr<Tensor> Tensor::Scalar(double value, DType dtype) { return Full({}, value, dtype); }

absl::StatusOr<Tensor> Tensor::FromRawValues(const void* values, DType value_type, Shape shape,
                                             DType dtype, const char* op) {
  TPX_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype));
  const int64_t n = t.numel();
  cpu::DispatchDType(dtype, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    cpu::DispatchDType(value_type, [&](auto src_tag) {
      using S = decltype(src_tag);
      D* d = static_cast<D*>(t.raw_data());
      const S* s = static_cast<const S*>(values);
      for (int64_t i = 0; i < n; ++i) d[i] = cpu::Convert<D>(s[i]);
    });
  });
  return t;
}

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(const std::vector<T>& values, Shape shape) {
  return FromVector<T>(values, std::move(shape),
                       std::is_same_v<T, double> ? DType::kF32 : kDTypeOf<
                           std::conditional_t<std::is_same_v<T, double>, float, T>>);
}

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(const std::vector<T>& values, Shape shape,
                                          DType dtype) {
  TPX_RETURN_IF_ERROR(CheckShape(shape, "Tensor::FromVector"));
  if (static_cast<int64_t>(values.size()) != NumElements(shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::FromVector: ", values.size(), " values do not fill shape ",
                     ShapeString(shape), " (", NumElements(shape), " elements)"));
  }
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return FromRawValues(bytes.data(), DType::kBool, std::move(shape), dtype,
                         "Tensor::FromVector");
  } else if constexpr (std::is_same_v<T, double>) {
    std::vector<float> floats(values.begin(), values.end());
    return FromRawValues(floats.data(), DType::kF32, std::move(shape), dtype,
                         "Tensor::FromVector");
  } else {
    return FromRawValues(values.data(), kDTypeOf<T>, std::move(shape), dtype,
                         "Tensor::FromVector");
  }
}

#define TPX_INSTANTIATE_FROM_VECTOR(T)                                                    \
  template absl::StatusOr<Tensor> Tensor::FromVector<T>(const std::vector<T>&, Shape);    \
  template absl::StatusOr<Tensor> Tensor::FromVector<T>(const std::vector<T>&, Shape, DType);
TPX_INSTANTIATE_FROM_VECTOR(float)
TPX_INSTANTIATE_FROM_VECTOR(double)
TPX_INSTANTIATE_FROM_VECTOR(int32_t)
TPX_INSTANTIATE_FROM_VECTOR(int64_t)
TPX_INSTANTIATE_FROM_VECTOR(bool)
#undef TPX_INSTANTIATE_FROM_VECTOR

// ---------------- Metadata and access ----------------

int64_t Tensor::size(int64_t d) const {
  const int64_t r = dim();
  TPX_CHECK(d >= -r && d < r) << "Tensor::size(" << d << ") on " << ToString();
  return shape_[d < 0 ? d + r : d];
}

int64_t Tensor::stride(int64_t d) const {
  const int64_t r = dim();
  TPX_CHECK(d >= -r && d < r) << "Tensor::stride(" << d << ") on " << ToString();
  return strides_[d < 0 ? d + r : d];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] == 1) continue;  // any stride is fine for a size-1 dim
    if (strides_[d] != expected) return numel() == 0;
    expected *= shape_[d];
  }
  return true;
}

std::string Tensor::ToString() const {
  if (!defined()) return "undefined";
  return absl::StrCat(std::string(DTypeName(dtype_)), ShapeString(shape_));
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(SizeOf(dtype_));
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  if (!defined()) return {};
  if (!device_.is_cpu()) return HostCopyOrDie(*this, "Tensor::ToVector").ToVector<T>();
  using V = typename VectorValueType<T>::type;
  std::vector<V> out(static_cast<size_t>(numel()));
  if (!out.empty()) {
    const Shape out_strides = ContiguousStrides(shape_);
    cpu::DispatchDType(dtype_, [&](auto tag) {
      using S = decltype(tag);
      cpu::ForEachRow<2>(shape_, {reinterpret_cast<char*>(out.data()),
                                  static_cast<char*>(raw_data())},
                         {out_strides, strides_}, {sizeof(V), sizeof(S)},
                         [](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) {
                             S v = *reinterpret_cast<const S*>(p[1] + i * s[1]);
                             if constexpr (std::is_same_v<T, double>) {
                               *reinterpret_cast<V*>(p[0] + i * s[0]) =
                                   static_cast<double>(cpu::Load(v));
                             } else {
                               *reinterpret_cast<V*>(p[0] + i * s[0]) =
                                   cpu::Convert<T>(v);
                             }
                           }
                         });
    });
  }
  if constexpr (std::is_same_v<T, bool>) {
    return std::vector<bool>(out.begin(), out.end());
  } else {
    return out;
  }
}

template std::vector<float> Tensor::ToVector<float>() const;
template std::vector<double> Tensor::ToVector<double>() const;
template std::vector<int32_t> Tensor::ToVector<int32_t>() const;
template std::vector<int64_t> Tensor::ToVector<int64_t>() const;
template std::vector<bool> Tensor::ToVector<bool>() const;

double Tensor::Item(absl::Span<const int64_t> index) const {
  TPX_CHECK(defined() && static_cast<int64_t>(index.size()) == dim())
      << "Tensor::Item with " << index.size() << " indices on " << ToString();
  if (!device_.is_cpu()) {
    int64_t element = offset_;
    for (size_t d = 0; d < index.size(); ++d) {
      TPX_CHECK(index[d] >= 0 && index[d] < shape_[d])
          << "Tensor::Item index " << index[d] << " out of range in dim " << d << " of "
          << ToString();
      element += index[d] * strides_[d];
    }
    return HostCopyOrDie(WithLayout({}, {}, element), "Tensor::Item").Item({});
  }
  int64_t off = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    TPX_CHECK(index[d] >= 0 && index[d] < shape_[d])
        << "Tensor::Item index " << index[d] << " out of range in dim " << d << " of "
        << ToString();
    off += index[d] * strides_[d];
  }
  const char* p = static_cast<const char*>(raw_data()) + off * int64_t(SizeOf(dtype_));
  return cpu::DispatchDType(dtype_, [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(cpu::Load(*reinterpret_cast<const T*>(p)));
  });
}

// ---------------- Views ----------------

Tensor Tensor::WithLayout(Shape shape, Shape strides, int64_t offset) const {
  return Tensor(storage_, std::move(shape), std::move(strides), offset, dtype_, device_);
}

absl::StatusOr<Tensor> Tensor::Narrow(int64_t dim, int64_t start, int64_t length) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Narrow"));
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, this->dim(), "Narrow"));
  if (start < 0 || length < 0 || start + length > shape_[d]) {
    return absl::InvalidArgumentError(absl::StrCat("Narrow: range [", start, ", ", start + length,
                                                   ") out of bounds for dim ", d, " of shape ",
                                                   ShapeString(shape_)));
  }
  Shape shape = shape_;
  shape[d] = length;
  return WithLayout(std::move(shape), strides_, offset_ + start * strides_[d]);
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t dim, int64_t start, int64_t end,
                                     int64_t step) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Slice"));
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, this->dim(), "Slice"));
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: step must be >= 1, got ", step));
  }
  const int64_t n = shape_[d];
  auto clamp = [n](int64_t i) {
    if (i < 0) i += n;
    return std::min(std::max<int64_t>(i, 0), n);
  };
  start = clamp(start);
  end = clamp(end);
  const int64_t length = end > start ? (end - start + step - 1) / step : 0;
  Shape shape = shape_;
  Shape strides = strides_;
  shape[d] = length;
  strides[d] *= step;
  return WithLayout(std::move(shape), std::move(strides), offset_ + start * strides_[d]);
}

namespace {

absl::StatusOr<Shape> InferShape(Shape shape, int64_t numel, absl::Span<const int64_t> from,
                                 const char* op) {
  int64_t infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1 && infer < 0) {
      infer = static_cast<int64_t>(d);
    } else if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": bad target shape ",
                                                     ShapeString(shape)));
    } else {
      known *= shape[d];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": cannot infer -1 in ",
                                                     ShapeString(shape), " from ",
                                                     ShapeString(from)));
    }
    shape[infer] = numel / known;
  } else if (known != numel) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": shape ", ShapeString(from), " (",
                                                   numel, " elements) cannot become ",
                                                   ShapeString(shape)));
  }
  return shape;
}

// Strides giving `shape` over the same memory as (old_shape, old_strides) in
// row-major order, or nullopt when no view exists. Old dims are grouped into
// chunks that are contiguous among themselves; each chunk can be re-split
// into new dims freely, but new dims may not straddle two chunks.
std::optional<Shape> ViewStrides(absl::Span<const int64_t> old_shape_in,
                                 absl::Span<const int64_t> old_strides_in,
                                 absl::Span<const int64_t> shape) {
  if (NumElements(old_shape_in) == 0) return ContiguousStrides(shape);
  Shape old_shape(old_shape_in.begin(), old_shape_in.end());
  Shape old_strides(old_strides_in.begin(), old_strides_in.end());
  if (old_shape.empty()) {  // 0-d: one element
    old_shape = {1};
    old_strides = {1};
  }
  Shape strides(shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    const bool chunk_ends =
        d == 0 ||
        (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

absl::StatusOr<Tensor> Tensor::View(Shape shape) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "View"));
  TPX_ASSIGN_OR_RETURN(shape, InferShape(std::move(shape), numel(), shape_, "View"));
  std::optional<Shape> strides = ViewStrides(shape_, strides_, shape);
  if (!strides) {
    return absl::InvalidArgumentError(absl::StrCat(
        "View: a tensor of shape ", ShapeString(shape_), " with strides ", ShapeString(strides_),
        " cannot be viewed as ", ShapeString(shape), "; use Reshape (copies)"));
  }
  return WithLayout(std::move(shape), *std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Reshape"));
  TPX_ASSIGN_OR_RETURN(shape, InferShape(std::move(shape), numel(), shape_, "Reshape"));
  if (std::optional<Shape> strides = ViewStrides(shape_, strides_, shape)) {
    return WithLayout(std::move(shape), *std::move(strides), offset_);
  }
  TPX_ASSIGN_OR_RETURN(Tensor copy, Clone());
  return copy.View(std::move(shape));
}

absl::StatusOr<Tensor> Tensor::Transpose(int64_t dim0, int64_t dim1) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Transpose"));
  TPX_ASSIGN_OR_RETURN(int64_t a, NormalizeDim(dim0, dim(), "Transpose"));
  TPX_ASSIGN_OR_RETURN(int64_t b, NormalizeDim(dim1, dim(), "Transpose"));
  Shape shape = shape_;
  Shape strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Permute(absl::Span<const int64_t> dims) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Permute"));
  if (static_cast<int64_t>(dims.size()) != dim()) {
    return absl::InvalidArgumentError(absl::StrCat("Permute: ", dims.size(),
                                                   " dims given for shape ", ShapeString(shape_)));
  }
  Shape shape(dims.size());
  Shape strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dims[i], dim(), "Permute"));
    if (seen[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Permute: dim ", d, " repeated in [",
                                                     absl::StrJoin(dims, ", "), "]"));
    }
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Unsqueeze(int64_t d) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Unsqueeze"));
  TPX_ASSIGN_OR_RETURN(int64_t pos, NormalizeDim(d, dim() + 1, "Unsqueeze"));
  Shape shape = shape_;
  Shape strides = strides_;
  const int64_t stride = pos < dim() ? strides_[pos] * shape_[pos] : 1;
  shape.insert(shape.begin() + pos, 1);
  strides.insert(strides.begin() + pos, stride);
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Squeeze(int64_t d) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Squeeze"));
  TPX_ASSIGN_OR_RETURN(int64_t pos, NormalizeDim(d, dim(), "Squeeze"));
  if (shape_[pos] != 1) {
    return absl::InvalidArgumentError(absl::StrCat("Squeeze: dim ", pos, " of shape ",
                                                   ShapeString(shape_), " has size ",
                                                   shape_[pos], ", not 1"));
  }
  Shape shape = shape_;
  Shape strides = strides_;
  shape.erase(shape.begin() + pos);
  strides.erase(strides.begin() + pos);
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

absl::StatusOr<Tensor> Tensor::Expand(Shape shape) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Expand"));
  if (shape.size() < shape_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Expand: cannot expand ", ShapeString(shape_),
                                                   " to fewer dims ", ShapeString(shape)));
  }
  const size_t lead = shape.size() - shape_.size();
  Shape strides(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < lead) {
      if (shape[d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("Expand: bad size in ",
                                                       ShapeString(shape)));
      }
      continue;
    }
    const int64_t old = shape_[d - lead];
    if (shape[d] == -1) shape[d] = old;
    if (shape[d] == old) {
      strides[d] = strides_[d - lead];
    } else if (old != 1 || shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Expand: cannot expand ",
                                                     ShapeString(shape_), " to ",
                                                     ShapeString(shape)));
    }
  }
  return WithLayout(std::move(shape), std::move(strides), offset_);
}

// ---------------- Copies ----------------

absl::StatusOr<Tensor> Tensor::Contiguous() const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Contiguous"));
  if (is_contiguous()) return *this;
  return Clone();
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "Clone"));
  TPX_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, device_));
  TPX_RETURN_IF_ERROR(KernelsOfExisting(out).Copy(out, *this));
  return out;
}

absl::StatusOr<Tensor> Tensor::To(DType dtype) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "To"));
  if (dtype == dtype_ && is_contiguous()) return *this;
  TPX_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype, device_));
  TPX_RETURN_IF_ERROR(KernelsOfExisting(out).Copy(out, *this));
  return out;
}

absl::StatusOr<Tensor> Tensor::To(Device device) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "To"));
  if (device == device_) return *this;
  TPX_ASSIGN_OR_RETURN(DeviceKernels * dst_kernels, KernelsFor(device, "To"));
  TPX_ASSIGN_OR_RETURN(Tensor src, Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, device));
  if (device_.is_cpu()) {
    TPX_RETURN_IF_ERROR(
        dst_kernels->CopyFromHost(out.raw_data(), src.raw_data(), nbytes(), device.index));
  } else if (device.is_cpu()) {
    TPX_RETURN_IF_ERROR(
        KernelsOfExisting(src).CopyToHost(out.raw_data(), src.raw_data(), nbytes(),
                                          device_.index));
  } else {  // between two accelerators: through the host
    TPX_ASSIGN_OR_RETURN(Tensor host, src.To(Device::CPU()));
    return host.To(device);
  }
  return out;
}

absl::Status Tensor::CopyFrom(const Tensor& src) const {
  TPX_RETURN_IF_ERROR(CheckDefined(*this, "CopyFrom"));
  TPX_RETURN_IF_ERROR(CheckDefined(src, "CopyFrom"));
  if (src.shape_ != shape_) {
    return absl::InvalidArgumentError(absl::StrCat("CopyFrom: source shape ",
                                                   ShapeString(src.shape_),
                                                   " differs from destination shape ",
                                                   ShapeString(shape_)));
  }
  // Across devices: move src's bytes over first, then convert and scatter
  // into this tensor's layout on its own device.
  TPX_ASSIGN_OR_RETURN(Tensor local, src.To(device_));
  return KernelsOfExisting(*this).Copy(*this, local);
}

absl::Status RequireCpu(const Tensor& t, const char* op) {
  if (!t.defined() || t.device().is_cpu()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(op, ": ", t.ToString(), " is on ",
                                                    t.device().ToString(),
                                                    "; this operation runs on CPU tensors only"));
}

}  // namespace tpx
