// KV-cache decoding against the full-sequence forward: the logits the
// decoder gives for every position (prefill's last row, then one decode step
// per token, several sequences at different positions in one step) equal the
// chunked training forward's logits at that position to fp32 rounding, for
// Qwen3 (q/k norm), Llama (tied head) and Qwen2 (q/k/v bias).
#include "worker/engine/decode/decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/reference/golden_files.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"

namespace sbp {
namespace {

constexpr double kTolerance = 2e-5;  // relative, per row

double RowRelativeError(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

class DecoderTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto loaded = LoadModelDirectory(golden::GoldenDir(GetParam()), allocator_);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    config_ = loaded->config;
    auto store = ParameterStore::FromWeights(*loaded, allocator_, "weights");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    weights_ = BindModelTensors(store_);
  }

  std::vector<int32_t> RandomIds(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config_.vocab_size) - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& x : ids) x = id(rng);
    return ids;
  }

  // Logits [T, V] of the chunked training forward over `ids`.
  Tensor ForwardLogits(const std::vector<int32_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size());
    auto logits = Tensor::Empty(allocator_, {T, config_.vocab_size}, DType::kF32);
    EXPECT_TRUE(logits.ok());
    std::vector<int32_t> in = ids, targets(ids.size(), -100);
    golden::CaptureLogits capture(*logits);
    Engine engine(config_, backend_, {BackwardMode::kStream, 4, 3});
    EXPECT_TRUE(engine
                    .Forward(weights_, Tensor::Wrap(in.data(), {T}, DType::kI32),
                             Tensor::Wrap(targets.data(), {T}, DType::kI32), capture)
                    .ok());
    return *logits;
  }

  CpuAllocator allocator_;
  CpuBackend backend_{allocator_};
  ModelConfig config_;
  ParameterStore store_;
  ModelTensors weights_;
};

TEST_P(DecoderTest, PrefillAndStepsEqualTheFullForwardAtEveryPosition) {
  const int64_t V = config_.vocab_size;
  const std::vector<int32_t> sequence = RandomIds(23, 7);
  const Tensor expected = ForwardLogits(sequence);
  for (int64_t prompt : {1, 5, 11}) {
    for (int64_t chunk : {int64_t{0}, int64_t{2}, int64_t{4}}) {
      Decoder decoder(config_, backend_, chunk);
      auto cache = KvCache::Allocate(backend_, config_, static_cast<int64_t>(sequence.size()));
      ASSERT_TRUE(cache.ok()) << cache.status();
      auto logits = Tensor::Empty(allocator_, {1, V}, DType::kF32);
      ASSERT_TRUE(logits.ok());
      const std::vector<int32_t> head(sequence.begin(), sequence.begin() + prompt);
      ASSERT_TRUE(decoder.Prefill(weights_, head, *cache, *logits).ok());
      EXPECT_LE(
          RowRelativeError(logits->data<float>(), expected.data<float>() + (prompt - 1) * V, V),
          kTolerance)
          << "prefill of " << prompt << " tokens, chunk " << chunk;
      for (size_t t = static_cast<size_t>(prompt); t < sequence.size(); ++t) {
        ASSERT_TRUE(decoder.Step(weights_, {sequence[t]}, {&*cache}, *logits).ok());
        EXPECT_LE(RowRelativeError(logits->data<float>(),
                                   expected.data<float>() + static_cast<int64_t>(t) * V, V),
                  kTolerance)
            << "position " << t << " after a prompt of " << prompt;
      }
      EXPECT_EQ(cache->length, static_cast<int64_t>(sequence.size()));
    }
  }
}

TEST_P(DecoderTest, OneStepAdvancesSequencesAtDifferentPositions) {
  const int64_t V = config_.vocab_size;
  const std::vector<std::vector<int32_t>> sequences = {RandomIds(9, 1), RandomIds(14, 2),
                                                       RandomIds(6, 3)};
  const std::vector<int64_t> prompts = {3, 10, 1};
  std::vector<Tensor> expected;
  std::vector<KvCache> caches;
  Decoder decoder(config_, backend_);
  auto one = Tensor::Empty(allocator_, {1, V}, DType::kF32);
  ASSERT_TRUE(one.ok());
  for (size_t s = 0; s < sequences.size(); ++s) {
    expected.push_back(ForwardLogits(sequences[s]));
    auto cache = KvCache::Allocate(backend_, config_, 16);
    ASSERT_TRUE(cache.ok());
    const std::vector<int32_t> head(sequences[s].begin(), sequences[s].begin() + prompts[s]);
    ASSERT_TRUE(decoder.Prefill(weights_, head, *cache, *one).ok());
    caches.push_back(std::move(*cache));
  }
  // Steps over whichever sequences still have tokens, all in one batch.
  for (int step = 0;; ++step) {
    std::vector<int32_t> tokens;
    std::vector<KvCache*> batch;
    std::vector<size_t> which;
    for (size_t s = 0; s < sequences.size(); ++s) {
      const int64_t pos = caches[s].length;
      if (pos >= static_cast<int64_t>(sequences[s].size())) continue;
      tokens.push_back(sequences[s][static_cast<size_t>(pos)]);
      batch.push_back(&caches[s]);
      which.push_back(s);
    }
    if (tokens.empty()) break;
    const int64_t B = static_cast<int64_t>(tokens.size());
    auto logits = Tensor::Empty(allocator_, {B, V}, DType::kF32);
    ASSERT_TRUE(logits.ok());
    std::vector<int64_t> positions;
    for (KvCache* c : batch) positions.push_back(c->length);
    ASSERT_TRUE(decoder.Step(weights_, tokens, batch, *logits).ok());
    for (int64_t r = 0; r < B; ++r) {
      const size_t s = which[static_cast<size_t>(r)];
      EXPECT_LE(RowRelativeError(logits->data<float>() + r * V,
                                 expected[s].data<float>() + positions[r] * V, V),
                kTolerance)
          << "sequence " << s << " position " << positions[r] << " in a batch of " << B;
    }
  }
}

TEST_P(DecoderTest, BadInputIsAnErrorNotACrash) {
  Decoder decoder(config_, backend_);
  auto cache = KvCache::Allocate(backend_, config_, 4);
  ASSERT_TRUE(cache.ok());
  auto logits = Tensor::Empty(allocator_, {1, config_.vocab_size}, DType::kF32);
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(decoder.Prefill(weights_, {}, *cache, *logits).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.Prefill(weights_, {1, 2, 3, 4, 5}, *cache, *logits).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status bad_id =
      decoder.Prefill(weights_, {1, static_cast<int32_t>(config_.vocab_size)}, *cache, *logits);
  EXPECT_EQ(bad_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.message().find("outside the vocabulary"), std::string::npos) << bad_id;
  ASSERT_TRUE(decoder.Prefill(weights_, {1, 2, 3}, *cache, *logits).ok());
  ASSERT_TRUE(decoder.Step(weights_, {4}, {&*cache}, *logits).ok());
  const absl::Status full = decoder.Step(weights_, {5}, {&*cache}, *logits);
  EXPECT_EQ(full.code(), absl::StatusCode::kOutOfRange) << full;
  EXPECT_EQ(KvCache::Allocate(backend_, config_, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Presets, DecoderTest,
                         ::testing::Values("tiny-qwen3", "tiny-llama", "tiny-qwen2"));

}  // namespace
}  // namespace sbp
