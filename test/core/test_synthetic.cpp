// SPDX-License-Identifier: MIT
// A hwloc synthetic description's size, read before hwloc builds it
// (lib/core/synthetic.c).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>

extern "C" {
#include "core/synthetic.h"
}

namespace {

TEST(Synthetic, CountsThePus)
{
	uint64_t n = 0;
	EXPECT_EQ(0, sd_synthetic_pus("pack:2 l3:4 core:8 pu:2", 1000, &n));
	EXPECT_EQ(128u, n);
	// Attribute groups carry no count.
	EXPECT_EQ(0, sd_synthetic_pus("pack:2(memory=1GB) core:3 pu:1", 1000, &n));
	EXPECT_EQ(6u, n);
	EXPECT_EQ(0, sd_synthetic_pus("  pu:1  ", 1000, &n));
	EXPECT_EQ(1u, n);
}

// Past the limit it saturates at limit + 1, without overflow, however
// many digits follow.
TEST(Synthetic, SaturatesAboveTheLimit)
{
	uint64_t n = 0;
	EXPECT_EQ(0, sd_synthetic_pus("pack:1000 core:1000 pu:1000", 65536, &n));
	EXPECT_EQ(65537u, n);
	EXPECT_EQ(0, sd_synthetic_pus("pack:99999999999999999999 pu:2", 65536, &n));
	EXPECT_EQ(65537u, n);
}

TEST(Synthetic, NotALevelListIsEinval)
{
	uint64_t n = 0;
	EXPECT_EQ(-EINVAL, sd_synthetic_pus("not a topology", 1000, &n));
	EXPECT_EQ(-EINVAL, sd_synthetic_pus("", 1000, &n));
	EXPECT_EQ(-EINVAL, sd_synthetic_pus("pack:0 pu:1", 1000, &n));
	EXPECT_EQ(-EINVAL, sd_synthetic_pus("pack:2(memory=1GB pu:1", 1000, &n));
}

}  // namespace
