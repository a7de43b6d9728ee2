#include "kernels/cpu/embedding_rows.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

// The dense kernel into a zeroed table, micro-batch after micro-batch.
Tensor DenseGradient(int64_t vocab, int64_t hidden, const std::vector<Tensor>& ids,
                     const std::vector<Tensor>& douts) {
  Tensor dense = op_test::NewTensor({vocab, hidden});
  op_test::FillWith(dense, 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) cpu::EmbeddingBackward(ids[i], douts[i], dense);
  return dense;
}

Tensor RowsToDense(const cpu::EmbeddingRowGradient& rows) {
  Tensor dense = op_test::NewTensor({rows.vocab(), rows.hidden()});
  op_test::FillWith(dense, 0.0f);
  rows.CopyRowsInto(dense);
  return dense;
}

TEST(EmbeddingRows, KeepsOnlyTouchedRows) {
  CpuAllocator allocator;
  cpu::EmbeddingRowGradient rows(allocator, 1000, 16);
  Tensor ids = op_test::FromInts({6}, {4, 1, 4, 7, 1, 4});
  Tensor dout = op_test::RandomTensor({6, 16}, 1);
  ASSERT_TRUE(rows.Accumulate(ids, dout).ok());
  EXPECT_EQ(rows.row_ids(), (std::vector<int32_t>{1, 4, 7}));
  EXPECT_EQ(rows.values().shape(), (Shape{3, 16}));
  EXPECT_LT(allocator.current_bytes(), 1024);  // the rows, not [1000, 16]
  EXPECT_TRUE(op_test::BitwiseEqual(RowsToDense(rows), DenseGradient(1000, 16, {ids}, {dout})));
  rows.Clear();
  EXPECT_EQ(rows.rows(), 0);
  EXPECT_EQ(allocator.current_bytes(), 0);
}

// Bit-identical to the dense scatter-add over several micro-batches (rows
// repeating within and across them), whatever the thread count, at sizes
// on both sides of the parallel threshold.
TEST(EmbeddingRows, BitIdenticalToDenseOverMicroBatchesAndThreads) {
  for (const int64_t hidden : {5, 64, 333}) {
    for (const int64_t tokens : {1, 17, 700}) {
      const int64_t vocab = 400;
      std::vector<Tensor> ids, douts;
      for (int mb = 0; mb < 3; ++mb) {
        ids.push_back(op_test::RandomInts({tokens}, 10 + mb, 0, tokens < 50 ? 12 : 300));
        douts.push_back(op_test::RandomTensor({tokens, hidden}, 20 + mb));
      }
      const Tensor want = DenseGradient(vocab, hidden, ids, douts);
      for (const int threads : {1, 2, 3}) {
        SCOPED_TRACE(testing::Message()
                     << "hidden " << hidden << " tokens " << tokens << " threads " << threads);
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        CpuAllocator allocator;
        cpu::EmbeddingRowGradient rows(allocator, vocab, hidden);
        for (size_t i = 0; i < ids.size(); ++i) ASSERT_TRUE(rows.Accumulate(ids[i], douts[i]).ok());
        omp_set_num_threads(saved);
        EXPECT_TRUE(op_test::BitwiseEqual(RowsToDense(rows), want));
        EXPECT_LE(rows.rows(), std::min<int64_t>(vocab, 3 * tokens));
      }
    }
  }
}

TEST(EmbeddingRows, GrowingPastTheBudgetFailsAndKeepsTheRows) {
  CpuAllocator allocator;
  cpu::EmbeddingRowGradient rows(allocator, 100, 4);
  Tensor first = op_test::FromInts({2}, {3, 5});
  Tensor dout = op_test::RandomTensor({2, 4}, 7);
  ASSERT_TRUE(rows.Accumulate(first, dout).ok());
  allocator.set_budget_bytes(allocator.current_bytes() + 16);
  Tensor more = op_test::FromInts({2}, {8, 9});
  const absl::Status grown = rows.Accumulate(more, dout);
  EXPECT_EQ(grown.code(), absl::StatusCode::kResourceExhausted) << grown;
  EXPECT_EQ(rows.row_ids(), (std::vector<int32_t>{3, 5}));
  // Known rows need no memory.
  EXPECT_TRUE(rows.Accumulate(first, dout).ok());
}

// Reserved room holds the step's rows without another allocation, is kept
// by Clear, and a step that brings more rows grows it (same values).
TEST(EmbeddingRows, ReservedRoomIsAllocatedOnceAndKept) {
  CpuAllocator allocator;
  const int64_t vocab = 300, hidden = 8;
  cpu::EmbeddingRowGradient rows(allocator, vocab, hidden);
  ASSERT_TRUE(rows.Reserve(40).ok());
  const int64_t reserved_bytes = allocator.current_bytes();
  EXPECT_GE(reserved_bytes, 40 * hidden * 4);
  EXPECT_EQ(rows.capacity(), 40);
  std::vector<Tensor> ids, douts;
  for (int mb = 0; mb < 2; ++mb) {
    ids.push_back(op_test::RandomInts({20}, 30 + mb, 0, vocab));
    douts.push_back(op_test::RandomTensor({20, hidden}, 40 + mb));
    ASSERT_TRUE(rows.Accumulate(ids.back(), douts.back()).ok());
  }
  EXPECT_EQ(allocator.current_bytes(), reserved_bytes);
  EXPECT_EQ(allocator.peak_bytes(), reserved_bytes);
  EXPECT_EQ(rows.values().shape(), (Shape{rows.rows(), hidden}));
  EXPECT_TRUE(op_test::BitwiseEqual(RowsToDense(rows), DenseGradient(vocab, hidden, ids, douts)));
  rows.Clear();
  EXPECT_EQ(rows.rows(), 0);
  EXPECT_EQ(allocator.current_bytes(), reserved_bytes);

  // 60 new rows in one call: past the room, which grows to fit them.
  std::vector<int32_t> many(60);
  for (int i = 0; i < 60; ++i) many[i] = 3 * i;
  Tensor wide = op_test::FromInts({60}, many);
  Tensor wide_dout = op_test::RandomTensor({60, hidden}, 50);
  ASSERT_TRUE(rows.Accumulate(wide, wide_dout).ok());
  EXPECT_EQ(rows.capacity(), 60);
  EXPECT_TRUE(
      op_test::BitwiseEqual(RowsToDense(rows), DenseGradient(vocab, hidden, {wide}, {wide_dout})));
}

// The optimizer's reads of the rows: the dense table's sum of squares and
// AdamW update, bit for bit, over tables of several SumSquares blocks with
// rows that straddle blocks (cols not a multiple of 8) and repeat.
TEST(EmbeddingRows, SumOfSquaresAndAdamWFromTheRowsAreTheDenseOnes) {
  for (const int64_t hidden : {5, 64, 333}) {
    const int64_t vocab = 2000;  // 10,000 to 666,000 elements: 1 to 41 blocks
    SCOPED_TRACE(testing::Message() << "hidden " << hidden);
    CpuAllocator allocator;
    cpu::EmbeddingRowGradient rows(allocator, vocab, hidden);
    std::vector<Tensor> ids, douts;
    for (int mb = 0; mb < 2; ++mb) {
      ids.push_back(op_test::RandomInts({300}, 60 + mb, 0, vocab));
      douts.push_back(op_test::RandomTensor({300, hidden}, 70 + mb));
      ASSERT_TRUE(rows.Accumulate(ids.back(), douts.back()).ok());
    }
    const Tensor dense = DenseGradient(vocab, hidden, ids, douts);
    const double want = cpu::SumSquares(dense);
    const double got = cpu::SumSquaresOfRows(vocab, hidden, rows.sorted_rows(), rows.values_data());
    EXPECT_EQ(std::memcmp(&want, &got, sizeof(double)), 0) << want << " " << got;

    AdamWParams params;
    params.lr = 1e-2;
    params.weight_decay = 0.1;
    params.step = 3;
    params.grad_scale = 0.7f;
    Tensor p_dense = op_test::RandomTensor({vocab, hidden}, 80);
    Tensor m_dense = op_test::RandomTensor({vocab, hidden}, 81);
    Tensor v_dense = op_test::RandomTensor({vocab, hidden}, 82);
    Tensor p_rows = op_test::RandomTensor({vocab, hidden}, 80);  // the same values
    Tensor m_rows = op_test::RandomTensor({vocab, hidden}, 81);
    Tensor v_rows = op_test::RandomTensor({vocab, hidden}, 82);
    for (Tensor* t : {&v_dense, &v_rows}) {  // second moments are non-negative
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = std::abs(t->data<float>()[i]);
    }
    cpu::AdamW(p_dense, dense, m_dense, v_dense, params);
    cpu::AdamWRows(p_rows, rows.sorted_rows(), rows.values_data(), m_rows, v_rows, params);
    EXPECT_TRUE(op_test::BitwiseEqual(p_rows, p_dense));
    EXPECT_TRUE(op_test::BitwiseEqual(m_rows, m_dense));
    EXPECT_TRUE(op_test::BitwiseEqual(v_rows, v_dense));
  }
}

TEST(EmbeddingRowsDeathTest, RejectsIdsOutsideTheVocabulary) {
  CpuAllocator allocator;
  cpu::EmbeddingRowGradient rows(allocator, 4, 2);
  Tensor ids = op_test::FromInts({2}, {1, 4});
  Tensor dout = op_test::RandomTensor({2, 2}, 1);
  EXPECT_DEATH((void)rows.Accumulate(ids, dout), "outside the vocabulary of size 4");
}

}  // namespace
}  // namespace sbp
