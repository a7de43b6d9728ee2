// KV-cache decoding on CUDA against the CPU backend (label `gpu`; skips
// without a device): the same prompts through Generate on cuda:0 and on the
// CPU, greedy. In f32 the tokens are the CPU's and the log-probs agree to
// rounding; in bf16 (the training precision of GPU jobs) the first tokens
// agree and every log-prob is a finite log-probability.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/allocator.h"
#include "kernels/compute_device.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_info.h"
#include "tests/reference/golden_files.h"
#include "worker/engine/decode/generation.h"
#include "worker/engine/device_store.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"

namespace sbp {
namespace {

std::vector<GenerationRequest> Requests(int64_t vocab) {
  std::vector<GenerationRequest> out;
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(3 + 9 * i));
    for (size_t t = 0; t < prompt.size(); ++t) {
      prompt[t] = static_cast<int32_t>((31 * i + 7 * static_cast<int64_t>(t) + 1) % vocab);
    }
    out.push_back({prompt, SamplerStream(1, 0, static_cast<uint64_t>(i))});
  }
  return out;
}

TEST(DecodeGpuTest, GreedyDecodingOnCudaMatchesTheCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  for (const char* preset : {"tiny-qwen3", "tiny-llama"}) {
    SCOPED_TRACE(preset);
    CpuAllocator host_allocator;
    CpuBackend cpu(host_allocator);
    auto loaded = LoadModelDirectory(golden::GoldenDir(preset), host_allocator);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const ModelConfig config = loaded->config;
    auto host = ParameterStore::FromWeights(*loaded, host_allocator, "weights");
    ASSERT_TRUE(host.ok());
    GenerationOptions options;
    options.max_new_tokens = 16;
    options.sampling.temperature = 0;
    Decoder cpu_decoder(config, cpu, 5);
    auto expected = Generate(cpu_decoder, BindModelTensors(*host), Requests(config.vocab_size),
                             options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(DTypeName(dtype));
      auto device = OpenComputeDevice("cuda:0", dtype);
      ASSERT_TRUE(device.ok()) << device.status();
      Backend& backend = *device->backend;
      auto weights = CopyStoreToDevice(*host, backend, dtype, "weights");
      ASSERT_TRUE(weights.ok()) << weights.status();
      Decoder decoder(config, backend, 5);
      GenerationOptions batched = options;
      batched.max_batch = 3;
      auto got = Generate(decoder, BindModelTensors(*weights), Requests(config.vocab_size),
                          batched);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), expected->size());
      for (size_t r = 0; r < got->size(); ++r) {
        const Generation& a = (*got)[r];
        const Generation& b = (*expected)[r];
        ASSERT_EQ(a.ids.size(), b.ids.size());
        if (dtype == DType::kF32) {
          EXPECT_EQ(a.ids, b.ids) << "request " << r;
          for (size_t t = 0; t < a.ids.size() && a.ids == b.ids; ++t) {
            EXPECT_NEAR(a.logprobs[t], b.logprobs[t], 1e-3) << "request " << r << " token " << t;
          }
        } else {
          EXPECT_EQ(a.ids.front(), b.ids.front()) << "request " << r;
          for (float lp : a.logprobs) EXPECT_TRUE(std::isfinite(lp) && lp <= 0) << lp;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sbp
