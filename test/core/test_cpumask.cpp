// SPDX-License-Identifier: MIT
// The atomic CPU bitmap (lib/core/cpumask.h): per-bit operations, weight,
// setall at word boundaries, for_each, and concurrent RMWs on one word.
#include "common.hpp"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

extern "C" {
#include "core/cpumask.h"
}

namespace {

class CpumaskSizes : public ::testing::TestWithParam<unsigned> {};

std::set<unsigned> visited(const sd_cpumask *mask)
{
	std::set<unsigned> out;
	unsigned cpu;
	unsigned calls = 0;

	sd_cpumask_for_each(cpu, mask) {
		EXPECT_TRUE(out.insert(cpu).second) << "for_each visited " << cpu << " twice";
		calls++;
	}
	EXPECT_EQ(calls, out.size());
	return out;
}

TEST_P(CpumaskSizes, StartsEmpty)
{
	const unsigned n = GetParam();
	sd_cpumask m;
	ASSERT_EQ(0, sd_cpumask_init(&m, n));
	EXPECT_EQ(n, m.nbits);
	EXPECT_EQ((n + 63) / 64, sd_cpumask_nwords(&m));
	EXPECT_EQ(0u, sd_cpumask_weight(&m));
	for (unsigned i = 0; i < n; i++)
		EXPECT_FALSE(sd_cpumask_test(&m, i)) << i;
	EXPECT_TRUE(visited(&m).empty());
	sd_cpumask_destroy(&m);
	EXPECT_EQ(nullptr, m.words);
}

TEST_P(CpumaskSizes, SetClearTestAndClear)
{
	const unsigned n = GetParam();
	sd_cpumask m;
	ASSERT_EQ(0, sd_cpumask_init(&m, n));

	// Bits at every word edge that exists for this size, plus some others.
	std::set<unsigned> want;
	for (unsigned b : {0u, 1u, 31u, 62u, 63u, 64u, 65u, 127u, 128u, 129u})
		if (b < n)
			want.insert(b);
	want.insert(n - 1);
	for (unsigned b : want) {
		sd_cpumask_set(&m, b);
		sd_cpumask_set(&m, b);   // idempotent
	}
	EXPECT_EQ(want.size(), sd_cpumask_weight(&m));
	for (unsigned i = 0; i < n; i++)
		EXPECT_EQ(want.count(i) != 0, sd_cpumask_test(&m, i)) << "bit " << i;
	EXPECT_EQ(want, visited(&m));

	// test_and_clear returns the old value and clears only that bit.
	unsigned first = *want.begin();
	EXPECT_TRUE(sd_cpumask_test_and_clear(&m, first));
	EXPECT_FALSE(sd_cpumask_test(&m, first));
	EXPECT_FALSE(sd_cpumask_test_and_clear(&m, first));
	want.erase(first);
	EXPECT_EQ(want.size(), sd_cpumask_weight(&m));
	EXPECT_EQ(want, visited(&m));

	// clear of a clear bit is a no-op; clear of a set bit touches only it.
	sd_cpumask_clear(&m, first);
	if (!want.empty()) {
		unsigned last = *want.rbegin();
		sd_cpumask_clear(&m, last);
		want.erase(last);
		EXPECT_FALSE(sd_cpumask_test(&m, last));
	}
	EXPECT_EQ(want, visited(&m));
	EXPECT_EQ(want.size(), sd_cpumask_weight(&m));

	sd_cpumask_clearall(&m);
	EXPECT_EQ(0u, sd_cpumask_weight(&m));
	EXPECT_TRUE(visited(&m).empty());
	sd_cpumask_destroy(&m);
}

TEST_P(CpumaskSizes, SetallSetsExactlyNbits)
{
	const unsigned n = GetParam();
	sd_cpumask m;
	ASSERT_EQ(0, sd_cpumask_init(&m, n));
	sd_cpumask_setall(&m);
	EXPECT_EQ(n, sd_cpumask_weight(&m));
	std::set<unsigned> all;
	for (unsigned i = 0; i < n; i++) {
		EXPECT_TRUE(sd_cpumask_test(&m, i)) << i;
		all.insert(i);
	}
	EXPECT_EQ(all, visited(&m));
	// No bit past nbits in the last word (for_each and weight would count it).
	unsigned nw = sd_cpumask_nwords(&m);
	uint64_t last = atomic_load(&m.words[nw - 1]);
	unsigned in_last = n - (nw - 1) * 64;
	uint64_t allowed = in_last == 64 ? ~UINT64_C(0) : (UINT64_C(1) << in_last) - 1;
	EXPECT_EQ(0u, last & ~allowed);

	// setall keeps working after a partial clear and is idempotent.
	sd_cpumask_clear(&m, n / 2);
	EXPECT_EQ(n - 1, sd_cpumask_weight(&m));
	sd_cpumask_setall(&m);
	sd_cpumask_setall(&m);
	EXPECT_EQ(n, sd_cpumask_weight(&m));
	sd_cpumask_destroy(&m);
}

TEST_P(CpumaskSizes, RandomAgainstReferenceModel)
{
	const unsigned n = GetParam();
	std::mt19937_64 rng(sdtest::seed() ^ n);
	sd_cpumask m;
	ASSERT_EQ(0, sd_cpumask_init(&m, n));
	std::vector<bool> ref(n);
	for (int step = 0; step < 2000; step++) {
		unsigned b = (unsigned)(rng() % n);
		switch (rng() % 3) {
		case 0:
			sd_cpumask_set(&m, b);
			ref[b] = true;
			break;
		case 1:
			sd_cpumask_clear(&m, b);
			ref[b] = false;
			break;
		default:
			EXPECT_EQ((bool)ref[b], sd_cpumask_test_and_clear(&m, b)) << "bit " << b;
			ref[b] = false;
		}
		if (step % 97 == 0) {
			std::set<unsigned> want;
			for (unsigned i = 0; i < n; i++)
				if (ref[i])
					want.insert(i);
			ASSERT_EQ(want, visited(&m)) << "step " << step;
			ASSERT_EQ(want.size(), sd_cpumask_weight(&m));
		}
	}
	sd_cpumask_destroy(&m);
}

INSTANTIATE_TEST_SUITE_P(Sizes, CpumaskSizes, ::testing::Values(1u, 63u, 64u, 65u, 130u));

// Two threads set and clear distinct bits of one word at the same time; an
// update done as load / modify / store instead of an atomic RMW loses bits.
TEST(Cpumask, ConcurrentSetClearOnOneWordLosesNothing)
{
	sd_cpumask m;
	ASSERT_EQ(0, sd_cpumask_init(&m, 64));
	constexpr int kIters = 200000;
	std::atomic<int> go{0};
	std::atomic<long> bad{0};

	// Thread t owns the bits {t, t+2, t+4, ...} of word 0.
	auto body = [&](unsigned t) {
		while (!go.load())
			std::this_thread::yield();
		for (int i = 0; i < kIters; i++) {
			unsigned b = t + 2 * (unsigned)(i % 32);
			sd_cpumask_set(&m, b);
			if (!sd_cpumask_test(&m, b))
				bad++;
			if (!sd_cpumask_test_and_clear(&m, b))
				bad++;   // our own set was lost
			if (i & 1) {
				sd_cpumask_set(&m, b);
				sd_cpumask_clear(&m, b);
				if (sd_cpumask_test(&m, b))
					bad++;
			}
		}
		for (unsigned k = t; k < 64; k += 2)
			sd_cpumask_set(&m, k);
	};
	std::thread a(body, 0u), b(body, 1u);
	go = 1;
	a.join();
	b.join();
	EXPECT_EQ(0, bad.load());
	EXPECT_EQ(64u, sd_cpumask_weight(&m));

	// And the reverse: both clear their bits concurrently from full.
	std::atomic<long> lost{0};
	auto clr = [&](unsigned t) {
		for (int r = 0; r < 20000; r++) {
			for (unsigned k = t; k < 64; k += 2)
				if (!sd_cpumask_test_and_clear(&m, k))
					lost++;
			for (unsigned k = t; k < 64; k += 2)
				sd_cpumask_set(&m, k);
		}
	};
	std::thread c(clr, 0u), d(clr, 1u);
	c.join();
	d.join();
	EXPECT_EQ(0, lost.load());
	EXPECT_EQ(64u, sd_cpumask_weight(&m));
	sd_cpumask_destroy(&m);
}

} // namespace
