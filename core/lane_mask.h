// The mask of a 16-lane AVX-512 vector's first lanes (32-bit elements), for
// loops over rows whose last vector is partial:
//
//   for (int64_t j = 0; j < n; j += 16) {
//     const __mmask16 m = FirstLanes(n - j);
//     _mm512_mask_storeu_ps(out + j, m, f(_mm512_maskz_loadu_ps(m, in + j)));
//   }
#ifndef TPX_CORE_LANE_MASK_H_
#define TPX_CORE_LANE_MASK_H_

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

namespace tpx {

// The first `count` lanes: none for count <= 0, all from 16 on.
inline __mmask16 FirstLanes(int64_t count) {
  return count >= 16  ? static_cast<__mmask16>(0xffff)
         : count <= 0 ? static_cast<__mmask16>(0)
                      : static_cast<__mmask16>((1u << count) - 1u);
}

}  // namespace tpx

#endif  // defined(__x86_64__) && defined(__GNUC__)
#endif  // TPX_CORE_LANE_MASK_H_
