// The paged attention's split-KV partition without a GPU
// (src/cuda/attention/heuristics.h): the splits of a row cover its pages
// once, in order, with no split longer than the first, and the split the
// kernel picks to write a row's own K/V (an SWA decode launch carrying the
// K/V write) is the one whose copies read the row's last page, for 0..600
// pages (a K = 512 row has 513) and every split count up to max_splits() = 64.
#include <gtest/gtest.h>

#include <cstdint>

#include "step5/testing/cuda_internals.h"

namespace step5 {
namespace {

TEST(AttentionSplits, CoverEveryPageOnceInOrder) {
  for (int32_t pages = 0; pages <= 600; ++pages) {
    for (int splits = 1; splits <= 64; ++splits) {
      int32_t next = 0, first = -1;
      for (int split = 0; split < splits; ++split) {
        int32_t begin = -1, end = -1;
        cuda_testing::attention_split_pages(pages, splits, split, &begin, &end);
        ASSERT_EQ(begin, next) << pages << " pages, split " << split << " of " << splits;
        ASSERT_LE(begin, end) << pages << " pages, split " << split << " of " << splits;
        if (split == 0) first = end - begin;
        ASSERT_LE(end - begin, first) << pages << " pages, split " << split << " of " << splits;
        next = end;
      }
      ASSERT_EQ(next, pages) << pages << " pages in " << splits << " splits";
    }
  }
}

TEST(AttentionSplits, TheWriterSplitReadsTheLastPage) {
  for (int32_t pages = 1; pages <= 600; ++pages) {
    for (int splits = 1; splits <= 64; ++splits) {
      const int writer = cuda_testing::attention_last_page_split(pages, splits);
      ASSERT_GE(writer, 0);
      ASSERT_LT(writer, splits);
      int32_t begin = -1, end = -1;
      cuda_testing::attention_split_pages(pages, splits, writer, &begin, &end);
      EXPECT_TRUE(begin <= pages - 1 && pages - 1 < end)
          << pages << " pages in " << splits << " splits: split " << writer << " holds [" << begin
          << ", " << end << ")";
    }
  }
  // A row without pages (a faulted row) still has one writer.
  EXPECT_EQ(cuda_testing::attention_last_page_split(0, 7), 0);
}

}  // namespace
}  // namespace step5
