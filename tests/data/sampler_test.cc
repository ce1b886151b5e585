#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "gtest/gtest.h"

namespace colonnade::data {
namespace {

TEST(SamplerTest, PermutationIsAPermutationAndDependsOnlyOnSeedAndEpoch) {
  std::vector<int64_t> p = EpochPermutation(1000, 42, 3);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, EpochPermutation(1000, 42, 3));
  EXPECT_NE(p, EpochPermutation(1000, 42, 4));
  EXPECT_NE(p, EpochPermutation(1000, 43, 3));
  // Not the identity, and roughly uniform: the mean position of small indices is central.
  std::vector<int64_t> ident(1000);
  std::iota(ident.begin(), ident.end(), 0);
  EXPECT_NE(p, ident);
  double first_half_pos = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    if (p[i] < 500) first_half_pos += i;
  }
  EXPECT_NEAR(first_half_pos / 500, 500, 60);
}

TEST(SamplerTest, RankSlicesConcatenateToTheGlobalBatch) {
  for (int64_t count : {128, 100, 7, 3}) {
    for (int dp : {1, 2, 4, 8}) {
      int64_t expect_begin = 0;
      for (int r = 0; r < dp; ++r) {
        int64_t b, e;
        RankSlice(count, r, dp, &b, &e);
        EXPECT_EQ(b, expect_begin);
        EXPECT_GE(e, b);
        expect_begin = e;
      }
      EXPECT_EQ(expect_begin, count);
    }
  }
  int64_t b, e;
  RankSlice(128, 1, 4, &b, &e);
  EXPECT_EQ(b, 32);
  EXPECT_EQ(e, 64);
}

TEST(SamplerTest, CursorAdvanceDropLastAndKeepLast) {
  Sampler drop(10, 4, 1, true, /*drop_last=*/true);
  EXPECT_EQ(drop.batches_per_epoch(), 2);
  Cursor c{0, 0};
  c = drop.Advance(c);
  EXPECT_EQ(c, (Cursor{0, 4}));
  c = drop.Advance(c);
  EXPECT_EQ(c, (Cursor{1, 0}));  // positions 8, 9 dropped
  EXPECT_EQ(drop.Normalize(Cursor{2, 8}), (Cursor{3, 0}));
  EXPECT_EQ(drop.Normalize(Cursor{2, 6}), (Cursor{2, 6}));

  Sampler keep(10, 4, 1, false, /*drop_last=*/false);
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  c = Cursor{0, 8};
  EXPECT_EQ(keep.BatchCount(c), 2);
  EXPECT_EQ(keep.Advance(c), (Cursor{1, 0}));
  EXPECT_EQ(keep.IndexAt(5, 7), 7);  // no shuffle: identity
  EXPECT_EQ(keep.Order(0), nullptr);

  Sampler shuf(10, 4, 9, true, true);
  EXPECT_EQ(shuf.IndexAt(2, 5), EpochPermutation(10, 9, 2)[5]);
}

TEST(SamplerTest, CursorSerialisesExactly) {
  Cursor c{12, 34567};
  EXPECT_EQ(c.ToString(), "12:34567");
  absl::StatusOr<Cursor> back = Cursor::Parse(c.ToString());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, c);
  EXPECT_FALSE(Cursor::Parse("12").ok());
  EXPECT_FALSE(Cursor::Parse("a:3").ok());
  EXPECT_FALSE(Cursor::Parse("-1:3").ok());
}

}  // namespace
}  // namespace colonnade::data
