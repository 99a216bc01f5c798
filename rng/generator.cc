#include "rng/generator.h"

namespace tpx::rng {

Generator& DefaultGenerator() {
  static Generator* const gen = new Generator(0);
  return *gen;
}

}  // namespace tpx::rng
