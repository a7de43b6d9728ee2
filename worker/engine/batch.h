// Token sequences and the Hugging Face causal-LM loss over a batch of them.
// Position t predicts token t+1: targets[t] = labels[t+1], the last position
// has no target. Labels of -100 are ignored. The loss is the mean over every
// valid target of the whole batch, so the normaliser (the count) is fixed
// before any sequence or chunk runs — chunking and batching stay exact.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"

namespace sbp {

inline constexpr int32_t kIgnoreIndex = -100;

struct TokenSequence {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;  // same length; kIgnoreIndex where no loss
  // Packed documents (kernels/documents.h): {0, end of document 1, ..., size};
  // empty for one document. A packer masks each document's first label, so
  // no position predicts the next document's first token.
  std::vector<int32_t> doc_offsets;
};

std::vector<int32_t> ShiftedTargets(const TokenSequence& sequence);
int64_t CountValidTargets(const TokenSequence& sequence);
int64_t CountValidTargets(const std::vector<TokenSequence>& batch);

// InvalidArgument naming `where`, the position and the value when an id or
// label is outside the vocabulary or the lengths differ.
absl::Status ValidateSequence(const TokenSequence& sequence, int64_t vocab_size,
                              absl::string_view where);

// A sequence's token ids and shifted targets as i32 tensors on the engine's
// device (views of the host vectors on a host backend, copies otherwise).
struct SequenceTensors {
  std::vector<int32_t> ids, targets, docs;  // host values (the tensors may view them)
  Tensor ids_t, targets_t, docs_t;          // docs_t undefined for one document
  const Tensor* documents() const { return docs_t.defined() ? &docs_t : nullptr; }
};
absl::StatusOr<SequenceTensors> SequenceOnDevice(Backend& backend, const TokenSequence& sequence);

struct BatchResult {
  double loss = 0;  // mean over valid targets
  int64_t valid_targets = 0;
  int64_t tokens = 0;
};

// Loss and gradients (accumulated into `grads`) of the mean causal-LM loss
// over `batch`, one sequence at a time. `normaliser` overrides the count of
// valid targets (for a global count over micro-batches or ranks); 0 uses this
// batch's count.
absl::StatusOr<BatchResult> SftForwardBackward(Engine& engine, const ModelTensors& weights,
                                               const std::vector<TokenSequence>& batch,
                                               ModelTensors& grads, int64_t normaliser = 0);

// The same loss without gradients.
absl::StatusOr<BatchResult> SftForward(Engine& engine, const ModelTensors& weights,
                                       const std::vector<TokenSequence>& batch,
                                       int64_t normaliser = 0);

}  // namespace sbp
