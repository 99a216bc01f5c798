// Element types of tpx tensors and the bf16/f16 <-> f32 conversions.
//
//   DType t = DType::kBF16;
//   size_t bytes = n * SizeOf(t);
//   uint16_t h = FloatToBF16(1.5f);  // round-to-nearest-even, NaN stays NaN
#ifndef TPX_CORE_DTYPE_H_
#define TPX_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tpx {

// The numeric values are part of the comm plugin ABI (comm/plugin_abi.h):
// never renumber, only append.
enum class DType : int32_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kI32 = 3,
  kI64 = 4,
  kBool = 5,
};

// Bytes per element.
size_t SizeOf(DType dtype);
// "f32", "bf16", ...
std::string_view DTypeName(DType dtype);
bool IsFloatingPoint(DType dtype);

// IEEE binary16 / bfloat16 stored as raw bits. Conversions from f32 round to
// nearest even; NaN maps to a quiet NaN, infinities and signed zeros are kept,
// f16 subnormals are produced and read exactly.
uint16_t FloatToBF16(float value);
float BF16ToFloat(uint16_t bits);
uint16_t FloatToF16(float value);
float F16ToFloat(uint16_t bits);

}  // namespace tpx

#endif  // TPX_CORE_DTYPE_H_
