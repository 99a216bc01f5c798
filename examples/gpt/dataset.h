// Byte-level text dataset for the GPT example: the bytes of a text file are
// the tokens (vocabulary 256), split into a training part and a validation
// tail, with deterministic random batches.
//
//   TPX_ASSIGN_OR_RETURN(ByteDataset data, ByteDataset::Load(path, /*val_fraction=*/0.1));
//   double h = data.UnigramEntropyNats();    // the loss of a model that ignores context
//   TPX_ASSIGN_OR_RETURN(Batch b, data.SampleBatch(Split::kTrain, 8, 64, /*seed=*/step));
//
// Batches are laid out sequence-major ([T, B], as the model wants it), and
// targets are the inputs shifted by one byte.
#ifndef TPX_EXAMPLES_GPT_DATASET_H_
#define TPX_EXAMPLES_GPT_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tpx::gpt {

enum class Split { kTrain, kValidation };

struct Batch {
  Tensor tokens;   // i64 [T, B]
  Tensor targets;  // i64 [T, B]
};

class ByteDataset {
 public:
  static constexpr int64_t kVocabSize = 256;

  // Errors: unreadable file, val_fraction outside (0, 1), or a part shorter
  // than 2 bytes.
  static absl::StatusOr<ByteDataset> Load(const std::string& path, double val_fraction);
  static absl::StatusOr<ByteDataset> FromText(std::string text, double val_fraction);

  const std::string& train() const { return train_; }
  const std::string& validation() const { return val_; }

  // Entropy (nats per byte) of the training part's byte frequencies.
  double UnigramEntropyNats() const;

  // `batch` windows of seq_len + 1 bytes. Window j is sequence
  // first_sequence + j of the global batch drawn from `seed`, so replicas
  // that take consecutive pieces of one global batch see exactly the
  // sequences one process with the whole batch would.
  // Error: the split is shorter than seq_len + 1.
  absl::StatusOr<Batch> SampleBatch(Split split, int64_t batch, int64_t seq_len, uint64_t seed,
                                    int64_t first_sequence = 0) const;

 private:
  ByteDataset(std::string train, std::string val) : train_(std::move(train)), val_(std::move(val)) {}
  std::string train_;
  std::string val_;
};

// Token ids of a string, and bytes back to text (for prompts and samples).
std::vector<int64_t> Encode(const std::string& text);
std::string Decode(const std::vector<int64_t>& tokens);

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_DATASET_H_
