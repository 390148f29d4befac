#include "common/support/number_text.h"

#include <gtest/gtest.h>

namespace kvrl {
namespace {

TEST(NumberText, TakesOnlyTextThatIsWhollyANumber) {
  EXPECT_EQ(parse_integer("42"), 42);
  EXPECT_EQ(parse_integer("-7"), -7);
  EXPECT_EQ(parse_integer("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", " 1", "1 ", "1.5", "0x10", "12abc", "9223372036854775808", "+"}) {
    EXPECT_FALSE(parse_integer(bad).has_value()) << bad;
  }
  EXPECT_EQ(parse_number("0.25"), 0.25);
  EXPECT_EQ(parse_number("+1e-3"), 1e-3);
  EXPECT_EQ(parse_number(".5"), 0.5);
  EXPECT_EQ(parse_number("-2"), -2.0);
  for (const char* bad : {"", "nan", "inf", "-inf", "1e999", "0.1.2", "1,5", " 1"}) {
    EXPECT_FALSE(parse_number(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace kvrl
