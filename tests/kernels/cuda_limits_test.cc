// The CUDA kernels' shape limits are an error naming the limit before a model
// runs (kernels/cuda/cuda_backend.h), not an abort in its first op. Host code:
// runs wherever the build has CUDA, with or without a device.
#include <gtest/gtest.h>

#include <string>

#if defined(SBP_WITH_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace sbp {
namespace {

#if defined(SBP_WITH_CUDA)

TEST(CudaLimitsTest, HeadDimAndHeadCount) {
  EXPECT_TRUE(cuda::CheckAttentionShapeLimits(64, 32).ok());
  EXPECT_TRUE(cuda::CheckAttentionShapeLimits(128, 64).ok());
  EXPECT_TRUE(cuda::CheckAttentionShapeLimits(256, 65535).ok());
  const absl::Status wide = cuda::CheckAttentionShapeLimits(512, 8);
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(wide.message()).find("head_dim 512"), std::string::npos) << wide;
  EXPECT_NE(std::string(wide.message()).find("at most 256"), std::string::npos) << wide;
  EXPECT_FALSE(cuda::CheckAttentionShapeLimits(63, 8).ok());  // odd: RoPE pairs
  const absl::Status heads = cuda::CheckAttentionShapeLimits(64, 65536);
  EXPECT_EQ(heads.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(heads.message()).find("num_attention_heads 65536"), std::string::npos)
      << heads;
}

#else

TEST(CudaLimitsTest, HeadDimAndHeadCount) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace sbp
