// The selection kernel's distance bins without a GPU (src/cuda/select/bins.h):
// bins grow with the key, stay in range, are exact near the best key, and
// select_bin_floor is exactly where a bin starts, which the kernel's ordered
// pass relies on (a floor one key too low overflows its kept list, one too
// high drops regions).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "step5/testing/cuda_internals.h"

namespace step5 {
namespace {

using cuda_testing::select_bin;
using cuda_testing::select_bin_floor;
using cuda_testing::select_bins;

// Best keys across the range the kernel sees (order keys of positive scores
// sit above 2^31), and small ones where every distance bin is cut off.
std::vector<uint32_t> some_best_keys(std::mt19937_64& rng) {
  std::vector<uint32_t> best = {0u, 1u, 63u, 64u, 65u, 1000u, 0x80000000u, 0xffffffffu};
  for (int i = 0; i < 200; ++i) best.push_back(static_cast<uint32_t>(rng()));
  for (int i = 0; i < 200; ++i) best.push_back(0x80000000u + static_cast<uint32_t>(rng() >> 40));
  return best;
}

TEST(SelectBins, GrowWithTheKeyAndStayInRange) {
  std::mt19937_64 rng(7);
  for (uint32_t best : some_best_keys(rng)) {
    for (int i = 0; i < 500; ++i) {
      const uint32_t a = static_cast<uint32_t>(rng());
      const uint32_t b =
          i % 2 ? static_cast<uint32_t>(rng()) : a + static_cast<uint32_t>(rng() % 97);
      const uint32_t lo = a < b ? a : b, hi = a < b ? b : a;
      const int bin_lo = select_bin(lo, best), bin_hi = select_bin(hi, best);
      ASSERT_LE(bin_lo, bin_hi) << "best " << best << " keys " << lo << " < " << hi;
      ASSERT_GE(bin_lo, 0);
      ASSERT_LT(bin_hi, select_bins());
    }
    // Keys at or above the best share the top bin.
    EXPECT_EQ(select_bin(best, best), select_bins() - 1);
  }
}

TEST(SelectBins, ExactForTheSixtyFourNearestDistances) {
  const uint32_t best = 0x80001234u;
  for (uint32_t d = 0; d < 64; ++d) {
    EXPECT_EQ(select_bin(best - d, best), select_bins() - 1 - static_cast<int>(d));
  }
  // Past them, 64 sub-bins per power of two: 64..127 are still one apart.
  EXPECT_EQ(select_bin(best - 64, best), select_bins() - 1 - 64);
  EXPECT_EQ(select_bin(best - 127, best), select_bins() - 1 - 127);
  EXPECT_EQ(select_bin(best - 128, best), select_bin(best - 129, best));
}

TEST(SelectBins, FloorIsWhereEachBinStarts) {
  std::mt19937_64 rng(11);
  for (uint32_t best : some_best_keys(rng)) {
    for (int bin = 0; bin < select_bins(); bin += 1 + static_cast<int>(rng() % 7)) {
      const uint32_t floor = select_bin_floor(bin, best);
      // The floor is in the bin or above; the key below it is below the bin.
      ASSERT_GE(select_bin(floor, best), bin) << "best " << best << " bin " << bin;
      if (floor > 0) {
        ASSERT_LT(select_bin(floor - 1, best), bin) << "best " << best << " bin " << bin;
      }
      // And any key: in the bin or above exactly when >= the floor.
      for (int i = 0; i < 8; ++i) {
        const uint32_t key =
            i % 2 ? static_cast<uint32_t>(rng()) : floor + static_cast<uint32_t>(rng() % 5) - 2u;
        ASSERT_EQ(select_bin(key, best) >= bin, key >= floor)
            << "best " << best << " bin " << bin << " key " << key << " floor " << floor;
      }
    }
  }
}

}  // namespace
}  // namespace step5
