// SPDX-License-Identifier: MIT
// The global ASID pool of AMD INVLPGB alone (lib/arch/global_asid.{h,c};
// the kernel's arch/x86/mm/tlb.c): allocate_global_asid(), reset_global_asid_space() and
// mm_free_global_asid(), with a counting stand-in for
// invlpgb_flush_all_nonglobals().
//
// What the rules are for: a freed global ASID may still tag entries in any
// TLB, so handing it out again before the wrap-around flush would let the
// next mm hit the old one's translations. Hence: next-fit from `first`, a
// freed ASID waits in the freed bitmap, and only the wrap (one flush, then
// used &= ~freed) makes it allocatable again.
#include "common.hpp"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

extern "C" {
#include "arch/global_asid.h"
}

namespace {

constexpr unsigned kFirst = 6;  // TLB_NR_DYN_ASIDS

// The wrap-around flush, counted; it runs under the pool's lock, so it also
// records what the pool looked like then.
struct FlushCounter {
	std::atomic<unsigned> calls{ 0 };
	sd_global_asid *g = nullptr;
	unsigned available_at_last_call = ~0u;
	static void cb(void *arg)
	{
		auto *f = static_cast<FlushCounter *>(arg);
		f->calls++;
		if (f->g)
			f->available_at_last_call = f->g->available;
	}
};

struct Pool {
	sd_global_asid g{};
	FlushCounter flush;
	explicit Pool(unsigned pool, unsigned first = kFirst)
	{
		flush.g = &g;
		EXPECT_EQ(0, sd_global_asid_init(&g, first, pool, FlushCounter::cb, &flush));
	}
	~Pool() { sd_global_asid_fini(&g); }
	uint16_t alloc() { return sd_global_asid_alloc(&g); }
	void free(uint16_t a) { sd_global_asid_free(&g, a); }
	unsigned available() const { return sd_global_asid_available(&g); }
	unsigned flushes() const { return flush.calls.load(); }
};

TEST(GlobalAsid, InitRejectsEmptyAndOversizePools)
{
	sd_global_asid g{};
	FlushCounter f;

	EXPECT_EQ(-EINVAL, sd_global_asid_init(&g, kFirst, 0, FlushCounter::cb, &f));
	// The space [0, first + pool + 1) must fit 16 bits (max <= 0xffff).
	EXPECT_EQ(-EINVAL, sd_global_asid_init(&g, kFirst, 0xffffu - kFirst, FlushCounter::cb, &f));
	EXPECT_EQ(-EINVAL, sd_global_asid_init(&g, kFirst, 0x10000u, FlushCounter::cb, &f));
	EXPECT_EQ(-EINVAL, sd_global_asid_init(&g, 0xfff0u, 0x10u, FlushCounter::cb, &f));
	EXPECT_EQ(0u, f.calls.load());

	// The largest pool that fits: every ASID up to 0xfffd, none past it.
	ASSERT_EQ(0, sd_global_asid_init(&g, kFirst, 0xffffu - kFirst - 1, FlushCounter::cb, &f));
	EXPECT_EQ(0xffffu - kFirst - 1, sd_global_asid_available(&g));
	EXPECT_EQ(0u, f.calls.load()) << "init must not flush";
	uint16_t a = 0, last = 0;
	unsigned n = 0;
	while ((a = sd_global_asid_alloc(&g)) != 0) {
		if (n == 0)
			EXPECT_EQ(kFirst, a);
		else
			EXPECT_EQ(last + 1u, a);
		last = a;
		n++;
	}
	EXPECT_EQ(0xffffu - kFirst - 1, n);
	EXPECT_EQ(0xfffdu, last);
	EXPECT_EQ(0u, sd_global_asid_available(&g));
	sd_global_asid_fini(&g);

	// The kernel's default: 4087 above the 6 dynamic slots.
	Pool kernel(4087);
	EXPECT_EQ(4087u, kernel.available());
}

// The size check once computed `first + pool + 1` in unsigned and wrapped,
// so a pool near UINT_MAX passed as a tiny (or empty) space and the first
// allocation read past a 0-byte bitmap (ASan: heap-buffer-overflow).
TEST(GlobalAsid, InitRejectsPoolsThatWrapTheSizeCheck)
{
	for (unsigned pool : { ~0u, 0u - kFirst - 1, 0u - kFirst }) {
		sd_global_asid g{};
		int err = sd_global_asid_init(&g, kFirst, pool, nullptr, nullptr);
		EXPECT_EQ(-EINVAL, err) << "pool " << pool << " accepted";
		if (!err)
			sd_global_asid_fini(&g);
	}
}

TEST(GlobalAsid, NextFitFromFirstAndTheFirstAllocationResets)
{
	Pool p(8);
	EXPECT_EQ(8u, p.available());
	EXPECT_EQ(0u, p.flushes());
	// last_global_asid starts at MAX: the very first allocation wraps, so
	// the space starts clean (one flush), then hands out `first`.
	EXPECT_EQ(kFirst, p.alloc());
	EXPECT_EQ(1u, p.flushes());
	EXPECT_EQ(1u, p.g.resets);
	for (unsigned i = 1; i < 8; i++)
		EXPECT_EQ(kFirst + i, p.alloc()) << "next-fit, in order";
	EXPECT_EQ(0u, p.available());
	EXPECT_EQ(1u, p.flushes()) << "no further wrap while the pool was filling up";

	// Another first: still next-fit from there.
	Pool q(3, 100);
	EXPECT_EQ(100u, q.alloc());
	EXPECT_EQ(101u, q.alloc());
	EXPECT_EQ(102u, q.alloc());
	EXPECT_EQ(0u, q.alloc());
}

TEST(GlobalAsid, ExhaustionReturnsZeroWithoutFlushing)
{
	Pool p(4);
	std::set<uint16_t> got;
	for (unsigned i = 0; i < 4; i++)
		got.insert(p.alloc());
	EXPECT_EQ(4u, got.size());
	EXPECT_EQ(0u, got.count(0));
	EXPECT_EQ(0u, p.available());
	unsigned flushes = p.flushes();
	for (int i = 0; i < 3; i++) {
		EXPECT_EQ(0u, p.alloc()) << "\"Ran out of global ASIDs\"";
		EXPECT_EQ(0u, p.available());
	}
	EXPECT_EQ(flushes, p.flushes()) << "running out must not cost a fabric-wide flush";

	// Freeing ASID 0 (an mm that never got one) changes nothing.
	p.free(0);
	EXPECT_EQ(0u, p.available());
	EXPECT_EQ(0u, p.alloc());

	// Under the caller's lock, the same.
	sd_global_asid_lock(&p.g);
	EXPECT_EQ(0u, sd_global_asid_alloc_locked(&p.g));
	sd_global_asid_unlock(&p.g);
}

TEST(GlobalAsid, FreedAsidWaitsForTheWrapAround)
{
	Pool p(8);
	// 6, 7, 8, 9 in use; 6 and 7 freed: their entries may still be cached.
	for (unsigned i = 0; i < 4; i++)
		ASSERT_EQ(kFirst + i, p.alloc());
	p.free(kFirst);
	p.free(kFirst + 1);
	EXPECT_EQ(6u, p.available()) << "a freed ASID counts as available at once";
	unsigned flushes = p.flushes();

	// The rest of the space first: never 6 or 7 before the wrap.
	for (unsigned i = 4; i < 8; i++) {
		uint16_t a = p.alloc();
		EXPECT_EQ(kFirst + i, a);
		EXPECT_NE(kFirst, a);
		EXPECT_NE(kFirst + 1, a);
	}
	EXPECT_EQ(flushes, p.flushes());
	EXPECT_EQ(2u, p.available());

	// Only freed ASIDs are left, behind us: one wrap, one flush, and the
	// freed ones come back in order.
	EXPECT_EQ(kFirst, p.alloc());
	EXPECT_EQ(flushes + 1, p.flushes());
	EXPECT_EQ(2u, p.flush.available_at_last_call) << "the flush runs before the reuse";
	EXPECT_EQ(kFirst + 1, p.alloc());
	EXPECT_EQ(flushes + 1, p.flushes()) << "one flush per wrap, not per reused ASID";
	EXPECT_EQ(0u, p.available());
	EXPECT_EQ(0u, p.alloc());
}

TEST(GlobalAsid, WrapRecyclesOnlyWhatWasFreedBeforeIt)
{
	Pool p(4);   // ASIDs 6..9
	for (unsigned i = 0; i < 4; i++)
		ASSERT_EQ(kFirst + i, p.alloc());
	ASSERT_EQ(1u, p.flushes());

	// Free 8: the wrap makes it reusable, 6, 7 and 9 stay taken.
	p.free(kFirst + 2);
	EXPECT_EQ(kFirst + 2, p.alloc());
	EXPECT_EQ(2u, p.flushes());
	EXPECT_EQ(2u, p.g.resets);

	// Free 6 and then 8 again; next-fit goes on from 8 first, finds 9 taken,
	// and wraps once more: both come back, 6 first.
	p.free(kFirst);
	p.free(kFirst + 2);
	EXPECT_EQ(kFirst, p.alloc());
	EXPECT_EQ(3u, p.flushes());
	EXPECT_EQ(kFirst + 2, p.alloc());
	EXPECT_EQ(3u, p.flushes());

	// A free after the wrap waits for the next one, even if it is "ahead"
	// of last: 9 freed now, last is 8, yet 9 is not handed out unflushed.
	p.free(kFirst + 3);
	EXPECT_EQ(1u, p.available());
	EXPECT_EQ(kFirst + 3, p.alloc());
	EXPECT_EQ(4u, p.flushes()) << "9 was reused without a wrap-around flush";
}

TEST(GlobalAsid, NoCallbackIsFine)
{
	sd_global_asid g{};
	ASSERT_EQ(0, sd_global_asid_init(&g, kFirst, 1, nullptr, nullptr));
	EXPECT_EQ(kFirst, sd_global_asid_alloc(&g));
	EXPECT_EQ(0u, sd_global_asid_alloc(&g));
	sd_global_asid_free(&g, kFirst);
	EXPECT_EQ(kFirst, sd_global_asid_alloc(&g));
	EXPECT_EQ(2u, g.resets);
	sd_global_asid_fini(&g);
}

// Many threads allocating and freeing: an ASID is never held by two at once,
// the count of available ones comes back to the pool size, and every reuse
// of a freed ASID was preceded by a flush.
TEST(GlobalAsid, ConcurrentAllocFreeNeverSharesAnAsid)
{
	constexpr unsigned kPool = 8, kThreads = 4, kRounds = 4000;
	Pool p(kPool);
	std::vector<std::atomic<int>> holders(kFirst + kPool);
	// Per ASID: the flush count when it was last freed; a reuse must see a
	// larger one.
	std::vector<std::atomic<unsigned>> freed_at(kFirst + kPool);
	std::atomic<unsigned> shared{ 0 }, unflushed_reuse{ 0 }, out_of_range{ 0 }, got{ 0 };
	for (auto &h : holders)
		h = 0;
	for (auto &f : freed_at)
		f = ~0u;

	std::vector<std::thread> ts;
	for (unsigned t = 0; t < kThreads; t++) {
		ts.emplace_back([&] {
			std::vector<uint16_t> mine;
			for (unsigned r = 0; r < kRounds; r++) {
				if (mine.size() < 3) {
					uint16_t a = p.alloc();
					if (!a)
						continue;
					got++;
					if (a < kFirst || a >= kFirst + kPool) {
						out_of_range++;
						continue;
					}
					unsigned f = freed_at[a].load();
					if (f != ~0u && p.flushes() <= f)
						unflushed_reuse++;
					if (holders[a].fetch_add(1) != 0)
						shared++;
					mine.push_back(a);
				} else {
					uint16_t a = mine[r % mine.size()];
					mine.erase(mine.begin() + (long)(r % mine.size()));
					holders[a].fetch_sub(1);
					freed_at[a] = p.flushes();
					p.free(a);
				}
			}
			for (uint16_t a : mine) {
				holders[a].fetch_sub(1);
				p.free(a);
			}
		});
	}
	for (auto &t : ts)
		t.join();
	EXPECT_EQ(0u, shared.load());
	EXPECT_EQ(0u, out_of_range.load());
	EXPECT_EQ(0u, unflushed_reuse.load());
	EXPECT_EQ(kPool, p.available());
	EXPECT_GT(got.load(), kPool) << "no reuse happened";
	EXPECT_GT(p.flushes(), 1u);
	EXPECT_EQ(p.flushes(), p.g.resets);
}

} // namespace
