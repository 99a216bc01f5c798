// Generator: a Philox4x32-10 random stream source with state (seed, offset).
//
// Each draw (one tensor fill, one dropout mask) takes a fresh stream: the
// current offset, which then advances by one. The numbers of the draw are
// rng/philox.h functions of (seed, stream, element index), so a draw can be
// reproduced by restoring the state, on any device and for any sharding.
//
//   tpx::rng::Generator gen(1234);
//   uint64_t stream = gen.NextStream();                   // 0; offset is now 1
//   float u = tpx::rng::UniformAt(gen.seed(), stream, i);
//   tpx::rng::GeneratorState s = gen.state();             // save ...
//   gen.set_state(s);                                     // ... and replay
//
// Not synchronised: one thread draws from a generator at a time.
#ifndef TPX_RNG_GENERATOR_H_
#define TPX_RNG_GENERATOR_H_

#include <cstdint>

namespace tpx::rng {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}

  uint64_t seed() const { return state_.seed; }
  uint64_t offset() const { return state_.offset; }
  const GeneratorState& state() const { return state_; }
  void set_state(const GeneratorState& state) { state_ = state; }
  // New seed, offset back to 0.
  void ManualSeed(uint64_t seed) { state_ = GeneratorState{seed, 0}; }
  // The stream of the next draw; advances the offset.
  uint64_t NextStream() { return state_.offset++; }

 private:
  GeneratorState state_;
};

// The process-wide generator used outside any tracker fork (seed 0 until seeded).
Generator& DefaultGenerator();

}  // namespace tpx::rng

#endif  // TPX_RNG_GENERATOR_H_
