// Branch-free float math that the compiler can vectorise in plain loops
// (libm's expf is a scalar call per element). Internal to the CPU kernels.
#ifndef TPX_CORE_CPU_VEC_MATH_H_
#define TPX_CORE_CPU_VEC_MATH_H_

#include <bit>
#include <cstdint>

namespace tpx::cpu {

// e^x with at most ~2 ulp error over the float range (Cody-Waite range
// reduction, degree-6 minimax polynomial on [-ln2/2, ln2/2]). Correct
// limits: e^-inf = 0, e^+inf = +inf, overflow to +inf above ~88.72,
// gradual underflow to subnormals and 0, NaN in gives NaN out.
inline float Exp(float x) {
  // Clamp so 2^n below stays within two normal-exponent factors; the clamp
  // keeps NaN (both comparisons are false).
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  // n = round(x / ln2) via the 1.5 * 2^23 trick (exact for |n| < 2^22).
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;
  float n = (xc * kLog2e + kRound) - kRound;
  n = xc == xc ? n : 0.0f;  // keep the integer conversion below defined for NaN
  // r = x - n ln2 in two steps for accuracy.
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // Multiply by 2^n as 2^n1 * 2^n2 so n in [-150, 129] never leaves the
  // normal exponent range of either factor.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni / 2;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  const float result = p * s1 * s2;
  return x == x ? result : x;  // NaN in, NaN out
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_VEC_MATH_H_
