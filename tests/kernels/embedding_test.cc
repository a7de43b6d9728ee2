#include "kernels/cpu/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

// out[t, :] = table[ids[t], :] in double.
Vec EmbeddingReference(const Vec& table, const std::vector<int32_t>& ids, int64_t hidden) {
  Vec out;
  for (int32_t id : ids) {
    for (int64_t c = 0; c < hidden; ++c) out.push_back(table[id * hidden + c]);
  }
  return out;
}

std::vector<int32_t> IdsOf(const Tensor& ids) {
  return std::vector<int32_t>(ids.data<int32_t>(), ids.data<int32_t>() + ids.numel());
}

TEST(Embedding, ForwardCopiesRows) {
  const int64_t vocab = 7, hidden = 5, tokens = 9;
  Tensor table = op_test::RandomTensor({vocab, hidden}, 1);
  Tensor ids = op_test::FromInts({tokens}, {3, 0, 6, 3, 3, 1, 6, 2, 0});
  Tensor out = op_test::NewTensor({tokens, hidden});
  cpu::EmbeddingForward(table, ids, out);
  EXPECT_EQ(op_test::ToDouble(out),
            EmbeddingReference(op_test::ToDouble(table), IdsOf(ids), hidden));
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t vocab = 6, hidden = 4, tokens = 10;
  Tensor table = op_test::RandomTensor({vocab, hidden}, 2);
  Tensor ids = op_test::FromInts({tokens}, {5, 1, 1, 0, 5, 5, 2, 1, 3, 3});  // 4 unused
  Tensor dout = op_test::RandomTensor({tokens, hidden}, 3);
  const Vec r = op_test::ToDouble(dout);
  auto loss = [&](const Vec& t) {
    return op_test::Dot(EmbeddingReference(t, IdsOf(ids), hidden), r);
  };
  const Vec numeric = op_test::NumericGradient(loss, op_test::ToDouble(table));

  Tensor dtable = op_test::RandomTensor({vocab, hidden}, 4);
  const Vec before = op_test::ToDouble(dtable);
  cpu::EmbeddingBackward(ids, dout, dtable);
  EXPECT_LT(op_test::RelErr(op_test::Sub(op_test::ToDouble(dtable), before), numeric),
            op_test::kGradTol);
  // Row 4 is never looked up: untouched.
  for (int64_t c = 0; c < hidden; ++c) {
    EXPECT_EQ(dtable.data<float>()[4 * hidden + c], static_cast<float>(before[4 * hidden + c]));
  }
}

TEST(Embedding, LargeBackwardIsDeterministicAcrossThreadCounts) {
  const int64_t vocab = 50, hidden = 300, tokens = 700;  // parallel path, repeated ids
  Tensor ids = op_test::RandomInts({tokens}, 5, 0, vocab);
  Tensor dout = op_test::RandomTensor({tokens, hidden}, 6);
  Tensor table = op_test::RandomTensor({vocab, hidden}, 7);

  Tensor out = op_test::NewTensor({tokens, hidden});
  cpu::EmbeddingForward(table, ids, out);
  EXPECT_EQ(op_test::ToDouble(out),
            EmbeddingReference(op_test::ToDouble(table), IdsOf(ids), hidden));

  Vec want(static_cast<size_t>(vocab * hidden), 0.0);
  const Vec g = op_test::ToDouble(dout);
  const std::vector<int32_t> id = IdsOf(ids);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < hidden; ++c) want[id[t] * hidden + c] += g[t * hidden + c];
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor one = op_test::NewTensor({vocab, hidden});
  cpu::EmbeddingBackward(ids, dout, one);
  omp_set_num_threads(2);
  Tensor two = op_test::NewTensor({vocab, hidden});
  cpu::EmbeddingBackward(ids, dout, two);
  omp_set_num_threads(saved);
  EXPECT_TRUE(op_test::BitwiseEqual(one, two));
  EXPECT_LT(op_test::RelErr(two, want), 1e-6);
}

TEST(EmbeddingDeathTest, OutOfRangeIdNamesIdAndVocab) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor table = op_test::RandomTensor({7, 3}, 8);
  Tensor ids = op_test::FromInts({3}, {1, 9, 2});
  Tensor out = op_test::NewTensor({3, 3});
  EXPECT_DEATH(cpu::EmbeddingForward(table, ids, out), "token id 9 .*vocabulary of size 7");
  Tensor negative = op_test::FromInts({3}, {1, -1, 2});
  EXPECT_DEATH(cpu::EmbeddingBackward(negative, out, table), "token id -1 .*vocabulary of size 7");
}

TEST(EmbeddingDeathTest, ShapeMismatchNamesShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor table = op_test::RandomTensor({7, 3}, 9);
  Tensor ids = op_test::FromInts({2}, {1, 2});
  Tensor out = op_test::NewTensor({2, 4});
  EXPECT_DEATH(cpu::EmbeddingForward(table, ids, out), "f32\\[2, 4\\].*f32\\[7, 3\\]");
}

}  // namespace
}  // namespace sbp
