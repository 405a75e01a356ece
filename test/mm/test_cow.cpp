// SPDX-License-Identifier: MIT
// The zero page and copy-on-write (lib/mm/access.c: populate(), wp_fault()).
// A read of an anonymous page never written maps the shared zero page,
// write-protected, with no frame (do_anonymous_page()); the first write
// breaks it (wp_page_copy()): the PTE is cleared and flushed from every TLB
// of the mm before the new page is mapped (ptep_clear_flush()), so no CPU
// reads the zero page through its old entry once the write has returned.
// The oracle counts any access served by that entry afterwards, and the
// frame each CPU reads says which translation served it.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common.hpp"
extern "C" {
#include "core/ordering.h"
#include "hw/machine_state.h"
}

namespace {

using sdtest::Attached;
using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kVa = 0x40000000ull;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

uint64_t stat(sd_machine *m, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_snapshot(m, &s));
	return s.counter[id];
}

using sdtest::wait_for;

class Cow : public ::testing::TestWithParam<const char *> {};

// CPUs 1 and 2 read the page (the zero page, cached); CPU 0 writes it.
// Once CPU 0's write has returned, CPUs 1 and 2 read CPU 0's new frame,
// never the zero page through their old entries. Planted bug: the flush
// left out of wp_fault(): both read frame 0 and the oracle counts them.
TEST_P(Cow, WriteAfterReadsFlushesTheZeroPageEverywhere)
{
	const char *strategy = GetParam();
	sdtest::GuideStrategy user("cow_guide");
	Machine m(sdtest::config(3, strategy));
	ASSERT_NE(nullptr, m.m);
	struct Arg {
		sd_mm *mm = nullptr;
		std::atomic<unsigned> read{0};
		std::atomic<bool> written{false};
		std::atomic<unsigned> done{0};
		uint64_t before[3] = {1, 1, 1}, after[3] = {};
	} a;
	ASSERT_EQ(0, sd_mm_create(m.m, &a.mm));
	{
		Attached at(m.m, 0);
		ASSERT_EQ(0, sd_mmap(at.c, a.mm, kVa, 2 * P, RW));
	}
	sdtest::Watchdog w(std::string(strategy) + ": a copy-on-write break is stuck", 60);
	ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		const unsigned id = sd_cpu_id(c);
		EXPECT_EQ(0, sd_switch_mm(c, a->mm));
		EXPECT_EQ(0, sd_access(c, kVa, SD_READ, &a->before[id]));
		a->read.fetch_add(1);
		wait_for(c, [&] { return a->read.load() == 3; });
		if (id == 0) {
			EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, &a->after[0]));
			a->written.store(true);
		} else {
			wait_for(c, [&] { return a->written.load(); });
			EXPECT_EQ(0, sd_access(c, kVa, SD_READ, &a->after[id]));
		}
		a->done.fetch_add(1);
		wait_for(c, [&] { return a->done.load() == 3; });
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	}, &a)) << sd_last_error();
	for (unsigned i = 0; i < 3; i++)
		EXPECT_EQ(0u, a.before[i]) << "CPU " << i << "'s first read: the zero page";
	EXPECT_NE(0u, a.after[0]) << "the write got a frame of its own";
	EXPECT_EQ(a.after[0], a.after[1]) << "CPU 1 read the zero page after the write returned";
	EXPECT_EQ(a.after[0], a.after[2]) << "CPU 2 read the zero page after the write returned";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
	EXPECT_EQ(1u, stat(m.m, SD_STAT_ZERO_PAGE_FAULT)) << "the first read maps it, the others walk";
	EXPECT_EQ(1u, stat(m.m, SD_STAT_WP_FAULT));
	EXPECT_EQ(2u, stat(m.m, SD_STAT_PAGE_FAULT)) << "the zero-page fault and the break";
	EXPECT_EQ(0, sd_mm_destroy(a.mm));
}


// Two CPUs write the same zero page at once. CPU 0 is held in its break,
// the split lock taken and the PTE not yet cleared, until CPU 1 has
// started its write: CPU 1 finds the write-protected PTE, breaks too, and
// waits for the split lock, answering CPU 0's flush's IPIs as it waits.
// One break only: CPU 1 finds the PTE changed (pte_same()) and takes CPU
// 0's page. Planted bug: that check left out, so CPU 1 breaks the new page
// again (two wp_faults, two frames).
std::atomic<int> g_cpu1_writing{0};
std::atomic<bool> g_held{false};

void hold_the_break(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_WP_LOCKED || cpu != 0 || g_held.exchange(true))
		return;
	while (!g_cpu1_writing.load())
		std::this_thread::sleep_for(std::chrono::microseconds(50));
	// Long enough for CPU 1 to reach the split lock.
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(CowRace, ConcurrentBreaksOfOnePageAgree)
{
	for (const char *strategy : {"ipi", "broadcast"}) {
		SCOPED_TRACE(strategy);
		Machine m(sdtest::config(2, strategy));
		ASSERT_NE(nullptr, m.m);
		struct Arg {
			sd_mm *mm = nullptr;
			std::atomic<unsigned> read{0}, zero_read{0};
			uint64_t pfn[2] = {};
		} a;
		ASSERT_EQ(0, sd_mm_create(m.m, &a.mm));
		g_cpu1_writing = 0;
		g_held = false;
		sd_order_set_hook(hold_the_break);
		{
			sdtest::Watchdog w(std::string(strategy) +
					   ": a break held under its split lock never finished", 60);
			ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
				auto *a = static_cast<Arg *>(v);
				const unsigned id = sd_cpu_id(c);
				EXPECT_EQ(0, sd_switch_mm(c, a->mm));
				if (id == 0) {
					EXPECT_EQ(0, sd_mmap(c, a->mm, kVa, P, RW));
				}
				a->read.fetch_add(1);
				wait_for(c, [&] { return a->read.load() == 2; });
				EXPECT_EQ(0, sd_access(c, kVa, SD_READ, nullptr));
				a->zero_read.fetch_add(1);
				wait_for(c, [&] { return a->zero_read.load() == 2; });
				if (id == 1) {
					wait_for(c, [&] { return g_held.load(); });
					g_cpu1_writing = 1;
				}
				EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, &a->pfn[id]));
				EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			}, &a)) << sd_last_error();
		}
		sd_order_set_hook(nullptr);
		EXPECT_TRUE(g_held.load()) << "CPU 0 never took the split lock of its break";
		EXPECT_NE(0u, a.pfn[0]);
		EXPECT_EQ(a.pfn[0], a.pfn[1]) << "the two writers broke the page twice";
		EXPECT_EQ(1u, stat(m.m, SD_STAT_WP_FAULT));
		EXPECT_EQ(0u, sd_oracle_violations(m.m));
		EXPECT_EQ(0, sd_mm_destroy(a.mm));
	}
}

// One zero page for every mm: reads take no frame, in any mm; a write in
// one mm breaks only its own page; destroying the mms gives back exactly
// the frames the writes took (the zero page is never freed into the pool).
TEST(ZeroPage, SharedByEveryMmAndNeverFreed)
{
	Machine m(sdtest::config(1));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	sd_mm *x = nullptr, *y = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &x));
	ASSERT_EQ(0, sd_mm_create(m.m, &y));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		const uint64_t base = sd_frame_pool_in_use(pool);
		uint64_t pfn = 1;
		for (sd_mm *mm : {x, y}) {
			ASSERT_EQ(0, sd_switch_mm(c, mm));
			ASSERT_EQ(0, sd_mmap(c, mm, kVa, 64 * P, RW));
			for (unsigned i = 0; i < 64; i++) {
				ASSERT_EQ(0, sd_access(c, kVa + i * P, SD_READ, &pfn));
				EXPECT_EQ(0u, pfn);
			}
		}
		EXPECT_EQ(base, sd_frame_pool_in_use(pool)) << "a read took a frame";
		ASSERT_EQ(0, sd_switch_mm(c, x));
		ASSERT_EQ(0, sd_access(c, kVa, SD_WRITE, &pfn));
		EXPECT_NE(0u, pfn);
		ASSERT_EQ(0, sd_switch_mm(c, y));
		ASSERT_EQ(0, sd_access(c, kVa, SD_READ, &pfn));
		EXPECT_EQ(0u, pfn) << "y's page is still the zero page";
		// mprotect keeps the zero page write-protected: a write after
		// R and back to RW breaks it, never writes through it.
		ASSERT_EQ(0, sd_mprotect(c, y, kVa, 64 * P, SD_PROT_READ));
		ASSERT_EQ(0, sd_mprotect(c, y, kVa, 64 * P, RW));
		const uint64_t wp = stat(m.m, SD_STAT_WP_FAULT);
		ASSERT_EQ(0, sd_access(c, kVa + P, SD_WRITE, &pfn));
		EXPECT_NE(0u, pfn);
		EXPECT_EQ(wp + 1, stat(m.m, SD_STAT_WP_FAULT));
		// Reclaim leaves the zero page's PTEs alone (it is on no LRU),
		// and with them its cached entries, which stay as new as the
		// PTEs: a read afterwards hits, no fault and no violation. (The
		// reclaim raising the floors of its whole range, zero pages
		// included, made this hit a STALE violation in the fuzzer.)
		ASSERT_EQ(0, sd_access(c, kVa + 2 * P, SD_READ, &pfn));
		sd_tlbbatch *b = nullptr;
		ASSERT_EQ(0, sd_tlbbatch_create(m.m, &b));
		ASSERT_EQ(0, sd_reclaim(c, b, y, kVa + 2 * P, P));
		ASSERT_EQ(0, sd_tlbbatch_flush(c, b));
		const uint64_t faults = stat(m.m, SD_STAT_PAGE_FAULT), hits = stat(m.m, SD_STAT_TLB_HIT);
		ASSERT_EQ(0, sd_access(c, kVa + 2 * P, SD_READ, &pfn));
		EXPECT_EQ(0u, pfn);
		EXPECT_EQ(faults, stat(m.m, SD_STAT_PAGE_FAULT)) << "reclaim zapped the zero page";
		EXPECT_EQ(hits + 1, stat(m.m, SD_STAT_TLB_HIT)) << "the entry did not survive";
		EXPECT_EQ(0u, sd_oracle_violations(m.m)) << "a zero-page entry the reclaim left is stale";
		// A range of both: the frame goes, the zero page stays.
		ASSERT_EQ(0, sd_reclaim(c, b, y, kVa, 64 * P));
		ASSERT_EQ(0, sd_tlbbatch_flush(c, b));
		ASSERT_EQ(0, sd_tlbbatch_destroy(b));
		ASSERT_EQ(0, sd_access(c, kVa + 3 * P, SD_READ, &pfn));
		EXPECT_EQ(faults, stat(m.m, SD_STAT_PAGE_FAULT)) << "reclaim zapped the zero page";
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(x));
		EXPECT_EQ(0, sd_mm_destroy(y));
		EXPECT_LE(sd_frame_pool_in_use(pool), base + SD_FRAME_CACHE)
			<< "frames left out after both mms are gone";
	}
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "the pool lost or gained a frame";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// sd_mm_fork(): the child shares the parent's frames copy-on-write. A write
// in the child copies (a frame of its own, the parent's unchanged); the
// parent's write after it reuses its frame in place (no other mm maps it,
// no shootdown: a local flush of the page, counted as a flush); pages never populated stay so; the zero page stays shared;
// destroying the child gives its frames back and leaves the parent's.
TEST(Fork, ChildSharesCopyOnWriteAndBreaksApart)
{
	Machine m(sdtest::config(1));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	sd_mm *parent = nullptr, *child = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &parent));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		uint64_t pw[4] = {}, pfn = 0;
		ASSERT_EQ(0, sd_switch_mm(c, parent));
		ASSERT_EQ(0, sd_mmap(c, parent, kVa, 8 * P, RW));
		ASSERT_EQ(0, sd_mmap(c, parent, kVa + 16 * P, P, SD_PROT_READ));
		for (unsigned i = 0; i < 4; i++)
			ASSERT_EQ(0, sd_access(c, kVa + i * P, SD_WRITE, &pw[i]));
		ASSERT_EQ(0, sd_access(c, kVa + 4 * P, SD_READ, &pfn));     // the zero page
		const uint64_t in_use = sd_frame_pool_in_use(pool);
		const uint64_t flushes = stat(m.m, SD_STAT_FLUSH);
		ASSERT_EQ(0, sd_mm_fork(c, parent, &child)) << sd_last_error();
		EXPECT_EQ(flushes + 1, stat(m.m, SD_STAT_FLUSH)) << "the parent's TLB was not flushed";
		EXPECT_EQ(in_use, sd_frame_pool_in_use(pool)) << "fork took a frame";

		ASSERT_EQ(0, sd_switch_mm(c, child));
		for (unsigned i = 0; i < 4; i++) {
			ASSERT_EQ(0, sd_access(c, kVa + i * P, SD_READ, &pfn));
			EXPECT_EQ(pw[i], pfn) << "the child reads the parent's frame";
		}
		ASSERT_EQ(0, sd_access(c, kVa + 4 * P, SD_READ, &pfn));
		EXPECT_EQ(0u, pfn) << "the zero page stays shared";
		EXPECT_EQ(-EACCES, sd_access(c, kVa + 16 * P, SD_WRITE, nullptr)) << "protection copied";
		EXPECT_EQ(-EFAULT, sd_access(c, kVa + 8 * P, SD_READ, nullptr)) << "no mapping added";
		const uint64_t faults = stat(m.m, SD_STAT_PAGE_FAULT);
		ASSERT_EQ(0, sd_access(c, kVa + 5 * P, SD_READ, &pfn));
		EXPECT_EQ(faults + 1, stat(m.m, SD_STAT_PAGE_FAULT)) << "a page never populated stays so";

		// The child's write copies; the parent keeps its frame.
		uint64_t wp = stat(m.m, SD_STAT_WP_FAULT);
		ASSERT_EQ(0, sd_access(c, kVa, SD_WRITE, &pfn));
		EXPECT_NE(pw[0], pfn);
		EXPECT_NE(0u, pfn);
		EXPECT_EQ(wp + 1, stat(m.m, SD_STAT_WP_FAULT));

		// The parent's write after it reuses in place: no shootdown (arm64
		// since 6.19 flushes the page locally, test_spurious.cpp).
		ASSERT_EQ(0, sd_switch_mm(c, parent));
		const uint64_t tlbi = stat(m.m, SD_STAT_TLBI_OP);
		const uint64_t ipis = stat(m.m, SD_STAT_IPI_SENT);
		uint64_t fl = stat(m.m, SD_STAT_FLUSH);
		ASSERT_EQ(0, sd_access(c, kVa, SD_WRITE, &pfn));
		EXPECT_EQ(pw[0], pfn) << "the parent's frame, no longer shared, is reused";
		EXPECT_EQ(tlbi, stat(m.m, SD_STAT_TLBI_OP)) << "a reuse makes no shootdown";
		EXPECT_EQ(ipis, stat(m.m, SD_STAT_IPI_SENT)) << "a reuse makes no shootdown";
		EXPECT_EQ(fl + 1, stat(m.m, SD_STAT_FLUSH))
			<< "broadcast (arm64 since 6.19) flushes the reused page, locally";
		EXPECT_EQ(wp + 2, stat(m.m, SD_STAT_WP_FAULT));
		// A page both still share: the parent's write copies, with a flush.
		fl = stat(m.m, SD_STAT_FLUSH);
		ASSERT_EQ(0, sd_access(c, kVa + P, SD_WRITE, &pfn));
		EXPECT_NE(pw[1], pfn);
		EXPECT_EQ(fl + 1, stat(m.m, SD_STAT_FLUSH));

		// The child gone: its frames back, the parent's (and the one the
		// child keeps no more) kept.
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(child));
		ASSERT_EQ(0, sd_switch_mm(c, parent));
		for (unsigned i = 2; i < 4; i++) {
			ASSERT_EQ(0, sd_access(c, kVa + i * P, SD_WRITE, &pfn));
			EXPECT_EQ(pw[i], pfn) << "the last mapping of a frame is reused";
		}
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(parent));
	}
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "frames lost or freed twice";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// dup_mmap()'s flush_tlb_mm(): CPU 1 runs the parent and has a page cached
// writable; CPU 0 forks. Once the fork has returned, CPU 1's write must
// fault and copy (the child shares the frame), not write the shared frame
// through its old entry. Planted bug: the parent's flush left out: CPU 1
// writes the shared frame (the same pfn) and the oracle counts it.
TEST_P(Cow, ForkFlushesTheParentsWritableEntries)
{
	const char *strategy = GetParam();
	sdtest::GuideStrategy user("cow_guide");
	Machine m(sdtest::config(2, strategy));
	ASSERT_NE(nullptr, m.m);
	struct Arg {
		sd_mm *mm = nullptr, *child = nullptr;
		std::atomic<int> step{0};
		uint64_t before = 0, after = 0;
	} a;
	ASSERT_EQ(0, sd_mm_create(m.m, &a.mm));
	sdtest::Watchdog w(std::string(strategy) + ": a fork or a break is stuck", 60);
	ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		EXPECT_EQ(0, sd_switch_mm(c, a->mm));
		if (sd_cpu_id(c) == 1) {
			wait_for(c, [&] { return a->step.load() == 1; });
			EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, &a->before));
			a->step = 2;
			wait_for(c, [&] { return a->step.load() == 3; });
			EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, &a->after));
		} else {
			EXPECT_EQ(0, sd_mmap(c, a->mm, kVa, 2 * P, RW));
			a->step = 1;
			wait_for(c, [&] { return a->step.load() == 2; });
			EXPECT_EQ(0, sd_mm_fork(c, a->mm, &a->child)) << sd_last_error();
			a->step = 3;
		}
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	}, &a)) << sd_last_error();
	EXPECT_NE(0u, a.before);
	EXPECT_NE(a.before, a.after) << "CPU 1 wrote the frame it shares with the child";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
	EXPECT_EQ(0, sd_mm_destroy(a.child));
	EXPECT_EQ(0, sd_mm_destroy(a.mm));
}

INSTANTIATE_TEST_SUITE_P(Strategies, Cow,
			 ::testing::Values("broadcast", "local", "ipi", "gbcast", "cow_guide"));

}  // namespace
