// Packing of SFT examples into long sequences (`data: {packing: true}`).
//
// Greedy and order-preserving: examples are taken in the order given and
// appended to the current sequence while it stays within `seq_len` tokens; the
// next one that does not fit starts a new sequence. The result depends only
// on the examples and seq_len, so every rank (which packs its own share of a
// step) and every resumed run packs the same way.
//
// Each example becomes a document of the packed sequence: doc_offsets records
// the boundaries (kernels/documents.h), so RoPE positions restart at 0 and
// attention never crosses a document. The first label of every document is
// set to -100: on its own, an example's label 0 is never a target (position t
// predicts label t + 1), and in a packed sequence it would be the target of
// the previous document's last token. The valid targets, and so the loss
// normaliser, are then exactly those of the separate examples.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/engine/batch.h"

namespace sbp {

// CHECKs seq_len > 0 and that every example is non-empty, one document, and
// at most seq_len tokens (the loaders guarantee it).
std::vector<TokenSequence> PackSequences(const std::vector<TokenSequence>& examples,
                                         int64_t seq_len);

// Lengths of the documents of `sequence` (one entry when it is not packed).
std::vector<int64_t> DocumentLengths(const TokenSequence& sequence);

// `sequence` cut into `count` consecutive examples of equal length (the
// first ones one token longer when it does not divide), for benchmarks of the
// same tokens packed and unpacked. CHECKs 0 < count <= its length.
std::vector<TokenSequence> SplitIntoExamples(const TokenSequence& sequence, int64_t count);

// Model FLOPs of a training step over `sequence`: TrainingFlops of each of
// its documents (attention stays inside them).
double PackedTrainingFlops(const ModelConfig& config, const TokenSequence& sequence);

}  // namespace sbp
