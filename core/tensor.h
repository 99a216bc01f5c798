// Tensor: an n-dimensional strided view of refcounted storage.
//
// A Tensor is a cheap handle (shape, strides in elements, element offset,
// dtype, device, shared Storage). Copying a Tensor copies the handle; views
// (Narrow, Transpose, Reshape of contiguous data, ...) share memory with their
// source, and writes through one are seen by the other. Clone() copies data.
//
//   TPX_ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
//   TPX_ASSIGN_OR_RETURN(Tensor col, x.Narrow(1, 1, 2));     // [2, 2] view, shares memory
//   TPX_ASSIGN_OR_RETURN(Tensor xt, x.Transpose(0, 1));      // [3, 2] view, not contiguous
//   TPX_ASSIGN_OR_RETURN(Tensor b, xt.To(DType::kBF16));     // converted copy
//   std::vector<float> v = b.ToVector<float>();              // {1, 4, 2, 5, 3, 6}
//
// Errors: every function that can fail on its arguments (bad shapes, dims out
// of range, wrong dtype, unusable device) returns absl::Status naming the function
// and the shapes. Negative dims count from the end, as in PyTorch.
// Thread-safety: a Tensor handle is not synchronised; concurrent reads are fine.
#ifndef TPX_CORE_TENSOR_H_
#define TPX_CORE_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/log.h"

namespace tpx {

using Shape = std::vector<int64_t>;

// "[2, 3]"; "[]" for a 0-d tensor.
std::string ShapeString(absl::Span<const int64_t> shape);
// Product of the sizes (1 for a 0-d shape).
int64_t NumElements(absl::Span<const int64_t> shape);
// Row-major strides of a contiguous tensor of this shape.
Shape ContiguousStrides(absl::Span<const int64_t> shape);
// Maps a possibly negative dim into [0, rank); error names `op` otherwise.
absl::StatusOr<int64_t> NormalizeDim(int64_t dim, int64_t rank, const char* op);

// A block of memory owned through its allocator; freed with the last Tensor.
class Storage {
 public:
  Storage(void* data, size_t nbytes, Allocator* allocator)
      : data_(data), nbytes_(nbytes), allocator_(allocator) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return allocator_->device(); }

 private:
  void* data_;
  size_t nbytes_;
  Allocator* allocator_;
};

class Tensor {
 public:
  // An undefined tensor (defined() == false), e.g. "no bias".
  Tensor() = default;

  // ---- Factories. Errors: negative sizes; a device whose kernels are not
  // linked in (CUDA: depend on //core/cuda) or that is not visible. ----
  static absl::StatusOr<Tensor> Empty(Shape shape, DType dtype = DType::kF32,
                                      Device device = Device());
  static absl::StatusOr<Tensor> Zeros(Shape shape, DType dtype = DType::kF32,
                                      Device device = Device());
  static absl::StatusOr<Tensor> Ones(Shape shape, DType dtype = DType::kF32,
                                     Device device = Device());
  // `value` is converted to dtype (rounded for bf16/f16, truncated for ints).
  static absl::StatusOr<Tensor> Full(Shape shape, double value, DType dtype = DType::kF32,
                                     Device device = Device());
  // 1-D [start, start+step, ...) below `end` (above it for negative step).
  static absl::StatusOr<Tensor> Arange(double start, double end, double step = 1.0,
                                       DType dtype = DType::kI64, Device device = Device());
  static absl::StatusOr<Tensor> Arange(int64_t end, DType dtype = DType::kI64) {
    return Arange(0.0, static_cast<double>(end), 1.0, dtype);
  }
  // Copies `values` (row-major) into a new tensor of `shape`. T is float,
  // double, int32_t, int64_t or bool; the tensor has dtype kDTypeOf<T> (f32
  // for double) unless `dtype` says otherwise (e.g. float values stored as
  // bf16/f16). Error if values.size() != NumElements(shape).
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(const std::vector<T>& values, Shape shape);
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(const std::vector<T>& values, Shape shape,
                                           DType dtype);
  // A 0-d tensor holding `value`.
  static absl::StatusOr<Tensor> Scalar(double value, DType dtype = DType::kF32);

  // ---- Metadata. ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  // in elements, into storage
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  // Size of dim d (negative counts from the end). Programming error if out of range.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;
  // "f32[2, 3]" for messages.
  std::string ToString() const;
  // True when both tensors view the same Storage.
  bool SharesStorageWith(const Tensor& other) const { return storage_ == other.storage_; }

  // ---- Data access. ----
  // Pointer to element [0, ..., 0] in device()'s memory (a device pointer
  // for CUDA tensors: not readable on the host). T must match dtype() (float,
  // BF16, F16, int32_t, int64_t, bool): a mismatch is a programming error and
  // aborts.
  template <typename T>
  T* data() const {
    TPX_CHECK(dtype_ == kDTypeOf<T>) << "Tensor::data<" << DTypeName(kDTypeOf<T>)
                                     << ">() on a " << ToString() << " tensor";
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  // All elements in row-major order, converted to T (float, double, int32_t,
  // int64_t or bool). Works for any strides and devices (copying to the host
  // first; a failing device copy is fatal here: use To(Device::CPU()) to get
  // a Status). Empty for an undefined tensor.
  template <typename T>
  std::vector<T> ToVector() const;
  // Single element at a (non-negative) multi-index, converted to double
  // (copied from the device like ToVector).
  double Item(absl::Span<const int64_t> index = {}) const;

  // ---- Views: share storage, no copy. ----
  // Elements [start, start+length) along dim.
  absl::StatusOr<Tensor> Narrow(int64_t dim, int64_t start, int64_t length) const;
  // Elements start, start+step, ... below end along dim; step >= 1; start/end
  // may be negative (from the end) and are clamped like Python slices.
  absl::StatusOr<Tensor> Slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Same data, new shape; one size may be -1 (inferred). Requires strides
  // compatible with the new shape (always true for contiguous tensors).
  absl::StatusOr<Tensor> View(Shape shape) const;
  // Like View, but copies when the strides do not allow a view.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;
  absl::StatusOr<Tensor> Transpose(int64_t dim0, int64_t dim1) const;
  // dims is a permutation of [0, dim()).
  absl::StatusOr<Tensor> Permute(absl::Span<const int64_t> dims) const;
  // Inserts a size-1 dim at position d in [-(dim()+1), dim()].
  absl::StatusOr<Tensor> Unsqueeze(int64_t d) const;
  // Removes dim d, which must have size 1.
  absl::StatusOr<Tensor> Squeeze(int64_t d) const;
  // Broadcasts size-1 dims (stride 0) and prepends dims to reach `shape`;
  // -1 keeps a size. Writing through an expanded view is undefined.
  absl::StatusOr<Tensor> Expand(Shape shape) const;

  // ---- Copies. ----
  // This tensor if already contiguous (shared), else a contiguous copy.
  absl::StatusOr<Tensor> Contiguous() const;
  // Always a new contiguous copy.
  absl::StatusOr<Tensor> Clone() const;
  // A contiguous copy converted to dtype (a shared handle if dtype matches and
  // the tensor is contiguous).
  absl::StatusOr<Tensor> To(DType dtype) const;
  // A contiguous copy on `device` (this tensor itself if already there).
  // CUDA tensors: the copy waits for work queued on the device.
  absl::StatusOr<Tensor> To(Device device) const;
  // Copies src into this tensor's elements, converting dtype; both may be
  // strided and on different devices. Error unless shapes are equal.
  absl::Status CopyFrom(const Tensor& src) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
         DType dtype, Device device)
      : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)),
        offset_(offset), dtype_(dtype), device_(device) {}
  Tensor WithLayout(Shape shape, Shape strides, int64_t offset) const;
  static absl::StatusOr<Tensor> FromRawValues(const void* values, DType value_type, Shape shape,
                                              DType dtype, const char* op);

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::kF32;
  Device device_;
};

// OK for an undefined or CPU tensor; FailedPrecondition naming `op` for a
// tensor on another device. For code whose loops read tensors on the host.
absl::Status RequireCpu(const Tensor& t, const char* op);

}  // namespace tpx

#endif  // TPX_CORE_TENSOR_H_
