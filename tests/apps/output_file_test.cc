// The output-file rules' JSON numbers (src/apps/output_file.h): a metrics or benchmark line
// stays valid JSON when a loss diverges (printf's "nan" / "inf" are not JSON).
#include <cmath>
#include <limits>

#include "apps/output_file.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

TEST(JsonNumberTest, FiniteValuesKeepTheirDecimals) {
  EXPECT_EQ(JsonNumber(6.884512, 5), "6.88451");
  EXPECT_EQ(JsonNumber(-0.5, 2), "-0.50");
  EXPECT_EQ(JsonNumber(0.0, 0), "0");
}

TEST(JsonNumberTest, NonFiniteValuesAreNull) {
  EXPECT_EQ(JsonNumber(std::nan(""), 5), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity(), 6), "null");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity(), 6), "null");
}

}  // namespace
}  // namespace colonnade
