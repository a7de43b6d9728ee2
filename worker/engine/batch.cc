#include "worker/engine/batch.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {

std::vector<int32_t> ShiftedTargets(const TokenSequence& sequence) {
  const size_t n = sequence.input_ids.size();
  std::vector<int32_t> targets(n, kIgnoreIndex);
  for (size_t t = 0; t + 1 < n; ++t) targets[t] = sequence.labels[t + 1];
  return targets;
}

int64_t CountValidTargets(const TokenSequence& sequence) {
  int64_t count = 0;
  for (size_t t = 1; t < sequence.labels.size(); ++t) count += sequence.labels[t] != kIgnoreIndex;
  return count;
}

int64_t CountValidTargets(const std::vector<TokenSequence>& batch) {
  int64_t count = 0;
  for (const TokenSequence& s : batch) count += CountValidTargets(s);
  return count;
}

absl::Status ValidateSequence(const TokenSequence& sequence, int64_t vocab_size,
                              absl::string_view where) {
  if (sequence.input_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": field 'input_ids' is empty"));
  }
  if (sequence.labels.size() != sequence.input_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field 'labels' has ", sequence.labels.size(),
                     " entries but 'input_ids' has ", sequence.input_ids.size()));
  }
  for (size_t t = 0; t < sequence.input_ids.size(); ++t) {
    const int32_t id = sequence.input_ids[t];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": input_ids[", t, "] = ", id,
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
    const int32_t label = sequence.labels[t];
    if (label != kIgnoreIndex && (label < 0 || label >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": labels[", t, "] = ", label, " is neither -100 nor in [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// `host` itself on a host backend, else a copy on the backend's device.
absl::StatusOr<Tensor> OnBackendDevice(Backend& backend, const Tensor& host, const char* what) {
  if (backend.device().is_cpu()) return host;
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(backend.allocator(), host.shape(), host.dtype(), what));
  backend.Copy(host, t);
  return t;
}

}  // namespace

absl::StatusOr<SequenceTensors> SequenceOnDevice(Backend& backend, const TokenSequence& sequence) {
  SequenceTensors out;
  out.ids = sequence.input_ids;
  out.targets = ShiftedTargets(sequence);
  const int64_t n = static_cast<int64_t>(out.ids.size());
  ASSIGN_OR_RETURN(
      out.ids_t,
      OnBackendDevice(backend, Tensor::Wrap(out.ids.data(), {n}, DType::kI32), "token ids"));
  ASSIGN_OR_RETURN(
      out.targets_t,
      OnBackendDevice(backend, Tensor::Wrap(out.targets.data(), {n}, DType::kI32), "targets"));
  if (!sequence.doc_offsets.empty()) {
    out.docs = sequence.doc_offsets;
    const int64_t count = static_cast<int64_t>(out.docs.size());
    ASSIGN_OR_RETURN(out.docs_t,
                     OnBackendDevice(backend, Tensor::Wrap(out.docs.data(), {count}, DType::kI32),
                                     "document offsets"));
  }
  return out;
}

namespace {

absl::StatusOr<BatchResult> RunBatch(Engine& engine, const ModelTensors& weights,
                                     const std::vector<TokenSequence>& batch, ModelTensors* grads,
                                     int64_t normaliser) {
  BatchResult result;
  result.valid_targets = CountValidTargets(batch);
  const int64_t count = normaliser > 0 ? normaliser : result.valid_targets;
  CrossEntropyTokenLoss loss(count > 0 ? 1.0 / static_cast<double>(count) : 0.0);
  for (const TokenSequence& sequence : batch) {
    result.tokens += static_cast<int64_t>(sequence.input_ids.size());
    // A sequence without valid targets contributes neither loss nor gradient
    // (exactly 0: it still runs under ZeRO-3, whose passes every rank joins).
    if (CountValidTargets(sequence) == 0 && engine.weight_source() == nullptr) continue;
    ASSIGN_OR_RETURN(const SequenceTensors t, SequenceOnDevice(engine.backend(), sequence));
    double contribution = 0;
    if (grads != nullptr) {
      ASSIGN_OR_RETURN(contribution, engine.ForwardBackward(weights, t.ids_t, t.targets_t, loss,
                                                            *grads, t.documents()));
    } else {
      ASSIGN_OR_RETURN(contribution,
                       engine.Forward(weights, t.ids_t, t.targets_t, loss, t.documents()));
    }
    result.loss += contribution;
  }
  return result;
}

}  // namespace

absl::StatusOr<BatchResult> SftForwardBackward(Engine& engine, const ModelTensors& weights,
                                               const std::vector<TokenSequence>& batch,
                                               ModelTensors& grads, int64_t normaliser) {
  return RunBatch(engine, weights, batch, &grads, normaliser);
}

absl::StatusOr<BatchResult> SftForward(Engine& engine, const ModelTensors& weights,
                                       const std::vector<TokenSequence>& batch,
                                       int64_t normaliser) {
  return RunBatch(engine, weights, batch, nullptr, normaliser);
}

}  // namespace sbp
