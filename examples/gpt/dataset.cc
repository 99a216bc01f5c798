#include "examples/gpt/dataset.h"

#include <array>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::gpt {

absl::StatusOr<ByteDataset> ByteDataset::Load(const std::string& path, double val_fraction) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("ByteDataset: cannot open '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return FromText(buffer.str(), val_fraction);
}

absl::StatusOr<ByteDataset> ByteDataset::FromText(std::string text, double val_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ByteDataset: val_fraction must lie in (0, 1), got ", val_fraction));
  }
  const size_t n_val = static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  if (n_val < 2 || text.size() - n_val < 2) {
    return absl::InvalidArgumentError(absl::StrCat("ByteDataset: a text of ", text.size(),
                                                   " bytes is too short to split"));
  }
  std::string val = text.substr(text.size() - n_val);
  text.resize(text.size() - n_val);
  return ByteDataset(std::move(text), std::move(val));
}

double ByteDataset::UnigramEntropyNats() const {
  std::array<int64_t, 256> counts{};
  for (unsigned char c : train_) ++counts[c];
  const double n = static_cast<double>(train_.size());
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) h -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  }
  return h;
}

absl::StatusOr<Batch> ByteDataset::SampleBatch(Split split, int64_t batch, int64_t seq_len,
                                               uint64_t seed, int64_t first_sequence) const {
  const std::string& text = split == Split::kTrain ? train_ : val_;
  if (batch < 1 || seq_len < 1 || static_cast<int64_t>(text.size()) < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SampleBatch: batch ", batch, " x seq_len ", seq_len, " from a split of ", text.size(),
        " bytes"));
  }
  // mt19937_64's output sequence is fixed by the standard, so batches are the
  // same on every platform (distributions are not, hence the modulo).
  const uint64_t range = text.size() - static_cast<uint64_t>(seq_len);
  std::vector<int64_t> tokens(seq_len * batch), targets(seq_len * batch);
  for (int64_t b = 0; b < batch; ++b) {
    std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull +
                        static_cast<uint64_t>(first_sequence + b) * 0xD1B54A32D192ED03ull + 12345);
    const uint64_t start = gen() % range;
    for (int64_t t = 0; t < seq_len; ++t) {
      tokens[t * batch + b] = static_cast<unsigned char>(text[start + t]);
      targets[t * batch + b] = static_cast<unsigned char>(text[start + t + 1]);
    }
  }
  TPX_ASSIGN_OR_RETURN(Tensor tok, Tensor::FromVector<int64_t>(tokens, {seq_len, batch}));
  TPX_ASSIGN_OR_RETURN(Tensor tgt, Tensor::FromVector<int64_t>(targets, {seq_len, batch}));
  return Batch{tok, tgt};
}

std::vector<int64_t> Encode(const std::string& text) {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string Decode(const std::vector<int64_t>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) out.push_back(static_cast<char>(t & 0xff));
  return out;
}

}  // namespace tpx::gpt
