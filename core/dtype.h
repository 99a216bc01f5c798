// Element types of tpx tensors and the bf16/f16 <-> f32 conversions.
//
//   DType t = DType::kBF16;
//   size_t bytes = n * SizeOf(t);
//   uint16_t h = FloatToBF16(1.5f);  // round-to-nearest-even, NaN stays NaN
#ifndef TPX_CORE_DTYPE_H_
#define TPX_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
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
// Defined inline below: they sit in the inner loops of every bf16/f16 kernel.
inline uint16_t FloatToBF16(float value);
inline float BF16ToFloat(uint16_t bits);
inline uint16_t FloatToF16(float value);
inline float F16ToFloat(uint16_t bits);

// Element types for typed access to bf16/f16 tensor memory (Tensor::data<BF16>()).
// They hold raw bits; arithmetic goes through float.
struct BF16 {
  uint16_t bits;
  static BF16 FromFloat(float f) { return BF16{FloatToBF16(f)}; }
  float ToFloat() const { return BF16ToFloat(bits); }
};
struct F16 {
  uint16_t bits;
  static F16 FromFloat(float f) { return F16{FloatToF16(f)}; }
  float ToFloat() const { return F16ToFloat(bits); }
};
static_assert(sizeof(BF16) == 2 && sizeof(F16) == 2);

// The DType whose elements have C++ type T: kDTypeOf<float> == DType::kF32.
template <typename T>
struct DTypeOfImpl;
template <> struct DTypeOfImpl<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOfImpl<BF16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOfImpl<F16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOfImpl<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOfImpl<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOfImpl<bool> { static constexpr DType value = DType::kBool; };
template <typename T>
inline constexpr DType kDTypeOf = DTypeOfImpl<T>::value;

namespace dtype_internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace dtype_internal

inline uint16_t FloatToBF16(float value) {
  using namespace dtype_internal;
  uint32_t u = FloatBits(value);
  // Round to nearest even on the 16 dropped bits.
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (u >> 16) | 0x0040u;  // keeps the sign
  // A select, not a branch, so conversion loops vectorise.
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float BF16ToFloat(uint16_t bits) {
  return dtype_internal::BitsFloat(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t FloatToF16(float value) {
  using namespace dtype_internal;
  uint32_t u = FloatBits(value);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is an f16 subnormal (or zero): value * 2^24 rounded to an integer.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent;  // in [14, 24]
    uint32_t half_mantissa = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
    return sign | static_cast<uint16_t>(half_mantissa);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  uint32_t rebased = abs - 0x38000000u;
  uint32_t rounding_bias = 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + rounding_bias) >> 13);
}

inline float F16ToFloat(uint16_t bits) {
  using namespace dtype_internal;
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return BitsFloat(sign);
    float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace tpx

#endif  // TPX_CORE_DTYPE_H_
