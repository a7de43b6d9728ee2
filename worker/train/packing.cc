#include "worker/train/packing.h"

#include "common/check.h"

namespace sbp {

std::vector<TokenSequence> PackSequences(const std::vector<TokenSequence>& examples,
                                         int64_t seq_len) {
  CHECK_GT(seq_len, 0) << "packing needs a positive seq_len";
  std::vector<TokenSequence> packed;
  for (const TokenSequence& example : examples) {
    const int64_t n = static_cast<int64_t>(example.input_ids.size());
    CHECK(n > 0 && n <= seq_len) << "an example of " << n << " tokens cannot be packed into "
                                 << seq_len;
    CHECK(example.doc_offsets.empty()) << "an example to pack is already packed";
    CHECK_EQ(example.labels.size(), example.input_ids.size());
    if (packed.empty() || static_cast<int64_t>(packed.back().input_ids.size()) + n > seq_len) {
      packed.emplace_back();
      packed.back().doc_offsets.push_back(0);
    }
    TokenSequence& s = packed.back();
    s.input_ids.insert(s.input_ids.end(), example.input_ids.begin(), example.input_ids.end());
    s.labels.push_back(kIgnoreIndex);
    s.labels.insert(s.labels.end(), example.labels.begin() + 1, example.labels.end());
    s.doc_offsets.push_back(static_cast<int32_t>(s.input_ids.size()));
  }
  return packed;
}

std::vector<TokenSequence> SplitIntoExamples(const TokenSequence& sequence, int64_t count) {
  const int64_t n = static_cast<int64_t>(sequence.input_ids.size());
  CHECK(count > 0 && count <= n) << "cannot cut " << n << " tokens into " << count << " examples";
  std::vector<TokenSequence> out;
  int64_t begin = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t end = begin + n / count + (i < n % count ? 1 : 0);
    TokenSequence e;
    e.input_ids.assign(sequence.input_ids.begin() + begin, sequence.input_ids.begin() + end);
    e.labels.assign(sequence.labels.begin() + begin, sequence.labels.begin() + end);
    out.push_back(std::move(e));
    begin = end;
  }
  return out;
}

double PackedTrainingFlops(const ModelConfig& config, const TokenSequence& sequence) {
  double flops = 0;
  for (int64_t length : DocumentLengths(sequence)) flops += TrainingFlops(config, length);
  return flops;
}

std::vector<int64_t> DocumentLengths(const TokenSequence& sequence) {
  if (sequence.doc_offsets.size() < 2) {
    return {static_cast<int64_t>(sequence.input_ids.size())};
  }
  std::vector<int64_t> lengths;
  for (size_t i = 1; i < sequence.doc_offsets.size(); ++i) {
    lengths.push_back(sequence.doc_offsets[i] - sequence.doc_offsets[i - 1]);
  }
  return lengths;
}

}  // namespace sbp
