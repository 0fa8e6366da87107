#include "common/units.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

TEST(ParseSize, AcceptsUnitsUsersWrite) {
  EXPECT_EQ(*ParseSize("500G"), 500ull << 30);
  EXPECT_EQ(*ParseSize("1.5TiB"), 3ull << 39);
  EXPECT_EQ(*ParseSize("200MiB"), 200ull << 20);
  EXPECT_EQ(*ParseSize("4Mi"), 4ull << 20);
  EXPECT_EQ(*ParseSize("64k"), 64ull << 10);
  EXPECT_EQ(*ParseSize("12345"), 12345u);
  EXPECT_EQ(*ParseSize(" 2 GB "), 2ull << 30);
  EXPECT_EQ(*ParseSize("0"), 0u);
}

TEST(ParseSize, RejectsGarbageNamingTheValue) {
  for (const char* bad : {"", "G", "12X", "1.2.3G", "-5G", "1.5", "5 GiBs", "1e30T"}) {
    auto r = ParseSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(FormatSize, IsReadable) {
  EXPECT_EQ(FormatSize(512), "512 B");
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatSize(3ull << 30), "3.0 GiB");
}

TEST(FluidSize, IsFluidsTwoDecimalsWithoutASpace) {
  EXPECT_EQ(FluidSize(0), "0B");
  EXPECT_EQ(FluidSize(1023), "1023B");
  EXPECT_EQ(FluidSize(1536), "1.50KiB");
  EXPECT_EQ(FluidSize(3ull << 30), "3.00GiB");
}

TEST(FormatPercent, OneDecimal) {
  EXPECT_EQ(FormatPercent(0.125), "12.5%");
  EXPECT_EQ(FormatPercent(1.0), "100.0%");
  EXPECT_EQ(FormatPercent(0.0), "0.0%");
}

TEST(ParseDuration, AcceptsCommonUnits) {
  using namespace std::chrono;
  EXPECT_EQ(*ParseDuration("10ms"), milliseconds(10));
  EXPECT_EQ(*ParseDuration("500us"), microseconds(500));
  EXPECT_EQ(*ParseDuration("2s"), seconds(2));
  EXPECT_EQ(*ParseDuration("1.5m"), seconds(90));
  EXPECT_EQ(*ParseDuration("2h"), hours(2));
  EXPECT_EQ(*ParseDuration("3"), seconds(3));
  EXPECT_FALSE(ParseDuration("soon").ok());
  EXPECT_FALSE(ParseDuration("10 parsecs").ok());
}

TEST(SplitList, TrimsItemsAndDropsEmptyOnes) {
  EXPECT_EQ(SplitList("a,b , c", ','), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(SplitList("/x::/y/z:", ':'), (std::vector<std::string>{"/x", "/y/z"}));
  EXPECT_TRUE(SplitList("", ',').empty());
  EXPECT_TRUE(SplitList(" , ", ',').empty());
}

}  // namespace
}  // namespace granary
