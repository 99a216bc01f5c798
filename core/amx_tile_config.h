// The operand of AMX's ldtilecfg (palette 1: eight tiles of at most 16 rows
// of 64 bytes), for code that runs AMX tiles where the CPU has them
// (CpuHasAmxBf16(), core/cpu_features.h):
//
//   static const AmxTileConfig config = FullAmxTiles(8);
//   _tile_loadconfig(&config);
#ifndef TPX_CORE_AMX_TILE_CONFIG_H_
#define TPX_CORE_AMX_TILE_CONFIG_H_

#include <cstdint>

namespace tpx {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};  // of tiles 0-7; the rest stay 0
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

// Tiles [0, tiles) at their largest, 16 rows of 64 bytes: 16 x 16 f32
// accumulators, or 16 x 32 bf16 operands (16 x 16 pairs).
constexpr AmxTileConfig FullAmxTiles(int tiles) {
  AmxTileConfig config;
  for (int t = 0; t < tiles; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  return config;
}

}  // namespace tpx

#endif  // TPX_CORE_AMX_TILE_CONFIG_H_
