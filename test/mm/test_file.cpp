// SPDX-License-Identifier: MIT
// Files and shared mappings (lib/mm/file.c, the file paths of access.c's
// populate() and wp_fault(), change.c's fork and zaps, vma.c's merges).
// Frames say which translation served an access: every mapping of a
// shared page uses the file's cached frame, a private mapping's write a
// frame of its own, and nothing leaks once the mappings and the file go.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include <shootdown/file.h>
#include <shootdown/tlbbatch.h>
extern "C" {
#include "core/ordering.h"
#include "hw/machine_state.h"
}

// Test accessor of lib/mm/vma.c (not exported: the test links the static
// layers).
extern "C" uint64_t sd_mm_nr_vmas(sd_mm *mm);

namespace {

using sdtest::Attached;
using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kVa = 0x40000000ull;
constexpr uint64_t kVb = 0x80000000ull;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

uint64_t stat(sd_machine *m, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_snapshot(m, &s));
	return s.counter[id];
}

uint64_t touch(sd_cpu *c, uint64_t va, sd_access_kind kind)
{
	uint64_t pfn = ~0ull;
	EXPECT_EQ(0, sd_access(c, va, kind, &pfn)) << sd_last_error();
	return pfn;
}

// Two mms map one file shared: a page written through one is the frame the
// other reads; a zap (madvise, munmap) drops the translation and keeps the
// page cached, so the next access maps the same frame. Closing the file
// while mapped keeps it until the last mapping goes; then every frame is
// back in the pool.
TEST(SharedFile, EveryMappingUsesTheCachedFrame)
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
		sd_file *f = nullptr;
		ASSERT_EQ(0, sd_file_create(m.m, 8 * P, &f));
		ASSERT_EQ(0, sd_mmap_file(c, x, kVa, 8 * P, RW, SD_MAP_SHARED, f, 0));
		// y maps pages 2..5 at another address.
		ASSERT_EQ(0, sd_mmap_file(c, y, kVb, 4 * P, RW, SD_MAP_SHARED, f, 2 * P));
		ASSERT_EQ(0, sd_switch_mm(c, x));
		const uint64_t p2 = touch(c, kVa + 2 * P, SD_WRITE);
		EXPECT_NE(0u, p2);
		EXPECT_EQ(1u, sd_file_cached_pages(f));
		ASSERT_EQ(0, sd_switch_mm(c, y));
		EXPECT_EQ(p2, touch(c, kVb, SD_READ)) << "y's page 2 is not the file's";
		EXPECT_EQ(p2, touch(c, kVb, SD_WRITE)) << "a shared write copied the page";
		const uint64_t p3 = touch(c, kVb + P, SD_READ);
		EXPECT_NE(p2, p3);
		EXPECT_NE(0u, p3) << "a shared read mapped the zero page";
		EXPECT_EQ(2u, sd_file_cached_pages(f));
		// madvise drops y's translations; the pages stay cached.
		const uint64_t flushes = stat(m.m, SD_STAT_FLUSH);
		ASSERT_EQ(0, sd_madvise_dontneed(c, y, kVb, 4 * P));
		EXPECT_GT(stat(m.m, SD_STAT_FLUSH), flushes);
		EXPECT_EQ(2u, sd_file_cached_pages(f));
		EXPECT_EQ(p3, touch(c, kVb + P, SD_WRITE));
		ASSERT_EQ(0, sd_switch_mm(c, x));
		EXPECT_EQ(p3, touch(c, kVa + 3 * P, SD_READ));
		// Closed while mapped: the mappings keep it.
		EXPECT_EQ(0, sd_file_close(f));
		EXPECT_EQ(p2, touch(c, kVa + 2 * P, SD_READ));
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(x));
		EXPECT_GT(sd_frame_pool_in_use(pool), base) << "y still maps the file";
		EXPECT_EQ(0, sd_mm_destroy(y));
		EXPECT_LE(sd_frame_pool_in_use(pool), base + SD_FRAME_CACHE)
			<< "frames left out after the file and its mappings are gone";
	}
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "the pool lost or gained a frame";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// A private mapping of a file (will-it-scale's tlb_flush1): a read maps the
// cached frame write-protected; a write copies it (do_cow_fault(), or
// do_wp_page() after a read), never writing the cache; madvise frees the
// copy, and the next read maps the cached frame again.
TEST(PrivateFile, WritesCopyAndMadviseGoesBackToTheFile)
{
	Machine m(sdtest::config(1));
	ASSERT_NE(nullptr, m.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		sd_file *f = nullptr;
		ASSERT_EQ(0, sd_file_create(m.m, 4 * P, &f));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa, 4 * P, RW, SD_MAP_PRIVATE, f, 0));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		const uint64_t cached = touch(c, kVa, SD_READ);
		EXPECT_NE(0u, cached) << "a file's read mapped the zero page";
		EXPECT_EQ(1u, sd_file_cached_pages(f));
		const uint64_t wp = stat(m.m, SD_STAT_WP_FAULT);
		const uint64_t copy = touch(c, kVa, SD_WRITE);
		EXPECT_NE(cached, copy) << "a private write went to the file's frame";
		EXPECT_EQ(wp + 1, stat(m.m, SD_STAT_WP_FAULT));
		// A write first: the page is read into the cache and copied.
		const uint64_t copy1 = touch(c, kVa + P, SD_WRITE);
		EXPECT_EQ(2u, sd_file_cached_pages(f));
		ASSERT_EQ(0, sd_madvise_dontneed(c, mm, kVa, 2 * P));
		EXPECT_EQ(cached, touch(c, kVa, SD_READ)) << "after madvise, not the file's page";
		const uint64_t again = touch(c, kVa + P, SD_READ);
		EXPECT_NE(copy1, again);
		EXPECT_NE(0u, again);
		// A second private mapping of the same page reads the same frame.
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVb, P, SD_PROT_READ, SD_MAP_PRIVATE, f, 0));
		EXPECT_EQ(cached, touch(c, kVb, SD_READ));
		EXPECT_EQ(0, sd_file_close(f));
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
	}
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// fork: a shared mapping's pages stay on one frame and writable in both
// (no copy-on-write); a private one's become copy-on-write, and an
// anonymous shared mapping (MAP_SHARED|MAP_ANONYMOUS, stress-ng's buffer)
// is shared by the child with no file named. The shmem file goes with its
// last mapping.
TEST(SharedFile, ForkSharesSharedPagesAndCopiesPrivateOnes)
{
	Machine m(sdtest::config(1));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	sd_mm *parent = nullptr, *child = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &parent));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		const uint64_t base = sd_frame_pool_in_use(pool);
		ASSERT_EQ(0, sd_mmap_file(c, parent, kVa, 4 * P, RW, SD_MAP_SHARED, nullptr, 0));
		ASSERT_EQ(0, sd_mmap(c, parent, kVb, 4 * P, RW));
		ASSERT_EQ(0, sd_switch_mm(c, parent));
		const uint64_t shared = touch(c, kVa, SD_WRITE);
		const uint64_t priv = touch(c, kVb, SD_WRITE);
		ASSERT_EQ(0, sd_mm_fork(c, parent, &child));
		ASSERT_EQ(0, sd_switch_mm(c, child));
		const uint64_t wp = stat(m.m, SD_STAT_WP_FAULT);
		EXPECT_EQ(shared, touch(c, kVa, SD_WRITE)) << "the child's shared write copied";
		EXPECT_EQ(wp, stat(m.m, SD_STAT_WP_FAULT)) << "a shared page was write-protected";
		EXPECT_NE(priv, touch(c, kVb, SD_WRITE)) << "the child's private write did not copy";
		// A page first touched by the child is the parent's too.
		const uint64_t late = touch(c, kVa + P, SD_WRITE);
		ASSERT_EQ(0, sd_switch_mm(c, parent));
		// Filled again after the fork's flush, then hit: the entry is
		// as new as the floor the fork raised (a parent PTE left at
		// its old version made this hit a stale violation).
		EXPECT_EQ(shared, touch(c, kVa, SD_WRITE));
		EXPECT_EQ(shared, touch(c, kVa, SD_READ));
		EXPECT_EQ(0u, sd_oracle_violations(m.m));
		EXPECT_EQ(late, touch(c, kVa + P, SD_READ));
		EXPECT_EQ(priv, touch(c, kVb, SD_WRITE)) << "the parent's page moved";
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(child));
		EXPECT_EQ(0, sd_mm_destroy(parent));
		EXPECT_LE(sd_frame_pool_in_use(pool), base + SD_FRAME_CACHE)
			<< "the anonymous shared memory's frames outlived its mappings";
	}
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool));
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// Fault-around (do_fault_around()): a read fault of a file mapping maps the
// cached pages of its 16-page window that no PTE maps yet, within the VMA.
// In a shared mapping they are writable (a write then hits: no fault); in a
// private one write-protected (a write copies). Pages not cached stay
// unmapped. Planted bug: the window not clamped to the VMA maps the next
// VMA's pages at the first one's offsets (the wrong frame).
TEST(FaultAround, AReadMapsTheCachedWindow)
{
	Machine m(sdtest::config(1));
	ASSERT_NE(nullptr, m.m);
	sd_mm *mm = nullptr, *warm = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	ASSERT_EQ(0, sd_mm_create(m.m, &warm));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		sd_file *f = nullptr;
		ASSERT_EQ(0, sd_file_create(m.m, 32 * P, &f));
		// Cache every page but 12 and 13 through another mm.
		ASSERT_EQ(0, sd_mmap_file(c, warm, kVb, 32 * P, RW, SD_MAP_SHARED, f, 0));
		ASSERT_EQ(0, sd_switch_mm(c, warm));
		for (unsigned i = 0; i < 32; i++)
			if (i != 12 && i != 13)
				touch(c, kVb + i * P, SD_WRITE);
		ASSERT_EQ(30u, sd_file_cached_pages(f));
		const uint64_t file30 = touch(c, kVb + 30 * P, SD_READ);
		// Shared, file pages 0..13 at kVa; the window's last two pages
		// another VMA, file pages 30 and 31 (offsets apart: no merge).
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa, 14 * P, RW, SD_MAP_SHARED, f, 0));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa + 14 * P, 2 * P, RW, SD_MAP_SHARED, f, 30 * P));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa + 16 * P, 16 * P, RW, SD_MAP_PRIVATE, f, 16 * P));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		const uint64_t around = stat(m.m, SD_STAT_FAULT_AROUND);
		touch(c, kVa + 5 * P, SD_READ);
		EXPECT_EQ(around + 11, stat(m.m, SD_STAT_FAULT_AROUND))
			<< "pages 0..11 but 5 are cached and mapped; 12, 13 are not cached, 14 and 15 "
			   "are another VMA's";
		EXPECT_EQ(file30, touch(c, kVa + 14 * P, SD_READ))
			<< "the window crossed into the next VMA with the first one's offsets";
		uint64_t faults = stat(m.m, SD_STAT_PAGE_FAULT);
		for (unsigned i = 0; i < 12; i++)
			touch(c, kVa + i * P, SD_WRITE);
		EXPECT_EQ(faults, stat(m.m, SD_STAT_PAGE_FAULT)) << "a shared neighbour was not writable";
		touch(c, kVa + 12 * P, SD_READ);
		EXPECT_EQ(faults + 1, stat(m.m, SD_STAT_PAGE_FAULT)) << "page 12 was mapped uncached";
		// Private: the window maps write-protected; a write copies.
		const uint64_t cached17 = touch(c, kVa + 17 * P, SD_READ);
		faults = stat(m.m, SD_STAT_PAGE_FAULT);
		const uint64_t wp = stat(m.m, SD_STAT_WP_FAULT);
		ASSERT_EQ(0, sd_switch_mm(c, warm));
		const uint64_t file18 = touch(c, kVb + 18 * P, SD_READ);
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(file18, touch(c, kVa + 18 * P, SD_READ)) << "the neighbour is not the file's";
		EXPECT_EQ(faults, stat(m.m, SD_STAT_PAGE_FAULT)) << "page 18 was not mapped around";
		EXPECT_NE(file18, touch(c, kVa + 18 * P, SD_WRITE)) << "a private write reached the file";
		EXPECT_EQ(wp + 1, stat(m.m, SD_STAT_WP_FAULT));
		EXPECT_NE(0u, cached17);
		// Writes never fault around.
		const uint64_t before_write = stat(m.m, SD_STAT_FAULT_AROUND);
		ASSERT_EQ(0, sd_madvise_dontneed(c, mm, kVa + 16 * P, 16 * P));
		touch(c, kVa + 20 * P, SD_WRITE);
		EXPECT_EQ(before_write, stat(m.m, SD_STAT_FAULT_AROUND));
		EXPECT_EQ(0u, sd_oracle_violations(m.m));
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_file_close(f));
	}
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_mm_destroy(warm));
}

// Merges and splits keep the file offset: mappings of one file at
// continuing offsets merge into one VMA, others do not; the tail of a
// split maps the page its offset names.
TEST(SharedFile, MergesAndSplitsFollowTheOffset)
{
	Machine m(sdtest::config(1));
	ASSERT_NE(nullptr, m.m);
	sd_mm *mm = nullptr, *ref = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	ASSERT_EQ(0, sd_mm_create(m.m, &ref));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		sd_file *f = nullptr, *g = nullptr;
		ASSERT_EQ(0, sd_file_create(m.m, 16 * P, &f));
		ASSERT_EQ(0, sd_file_create(m.m, 16 * P, &g));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa, 4 * P, RW, SD_MAP_SHARED, f, 0));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa + 4 * P, 4 * P, RW, SD_MAP_SHARED, f, 4 * P));
		EXPECT_EQ(1u, sd_mm_nr_vmas(mm)) << "continuing offsets did not merge";
		// Not continuing, another file, private, anonymous: four more.
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa + 8 * P, P, RW, SD_MAP_SHARED, f, 12 * P));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa + 9 * P, P, RW, SD_MAP_SHARED, g, 13 * P));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa + 10 * P, P, RW, SD_MAP_PRIVATE, g, 14 * P));
		ASSERT_EQ(0, sd_mmap(c, mm, kVa + 11 * P, P, RW));
		EXPECT_EQ(5u, sd_mm_nr_vmas(mm));
		// Split: unmap page 2; page 5 of the tail is f's page 5.
		ASSERT_EQ(0, sd_munmap(c, mm, kVa + 2 * P, P));
		EXPECT_EQ(6u, sd_mm_nr_vmas(mm));
		ASSERT_EQ(0, sd_mmap_file(c, ref, kVb, 16 * P, RW, SD_MAP_SHARED, f, 0));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		const uint64_t p5 = touch(c, kVa + 5 * P, SD_WRITE);
		const uint64_t p12 = touch(c, kVa + 8 * P, SD_WRITE);
		ASSERT_EQ(0, sd_switch_mm(c, ref));
		EXPECT_EQ(p5, touch(c, kVb + 5 * P, SD_READ)) << "the split's tail lost its offset";
		EXPECT_EQ(p12, touch(c, kVb + 12 * P, SD_READ));
		// mprotect of the middle splits, and back merges, offsets kept.
		ASSERT_EQ(0, sd_mprotect(c, ref, kVb + 6 * P, 2 * P, SD_PROT_READ));
		EXPECT_EQ(3u, sd_mm_nr_vmas(ref));
		ASSERT_EQ(0, sd_mprotect(c, ref, kVb + 6 * P, 2 * P, RW));
		EXPECT_EQ(1u, sd_mm_nr_vmas(ref));
		EXPECT_EQ(p5, touch(c, kVb + 5 * P, SD_WRITE));
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_file_close(f));
		EXPECT_EQ(0, sd_file_close(g));
	}
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_mm_destroy(ref));
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// Two CPUs fault one absent page of a file at once, each in its own mm.
// CPU 0 is held with its frame taken and the page not yet inserted until
// CPU 1 has read the page in and returned: CPU 0's insert fails, it gives
// its frame back and maps CPU 1's. Planted bug: the loser keeps its frame
// (a leak the pool's count shows).
std::atomic<bool> g_inserted{false};
std::atomic<bool> g_held{false};

void hold_the_insert(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_FILE_ALLOCATED || cpu != 0 || g_held.exchange(true))
		return;
	while (!g_inserted.load())
		std::this_thread::sleep_for(std::chrono::microseconds(50));
}

TEST(FileRace, TheInsertsLoserGivesItsFrameBack)
{
	Machine m(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	struct Arg {
		sd_file *f = nullptr;
		sd_mm *mm[2] = {};
		uint64_t pfn[2] = {};
	} a;
	ASSERT_EQ(0, sd_file_create(m.m, P, &a.f));
	for (auto &mm : a.mm)
		ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	{
		Attached at(m.m, 0);
		for (auto *mm : a.mm)
			ASSERT_EQ(0, sd_mmap_file(at.c, mm, kVa, P, RW, SD_MAP_SHARED, a.f, 0));
	}
	g_inserted = false;
	g_held = false;
	sd_order_set_hook(hold_the_insert);
	{
		sdtest::Watchdog w("a fault held before its page-cache insert never finished", 60);
		ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
			auto *a = static_cast<Arg *>(v);
			const unsigned id = sd_cpu_id(c);
			EXPECT_EQ(0, sd_switch_mm(c, a->mm[id]));
			if (id == 1)
				sdtest::wait_for(c, [&] { return g_held.load(); });
			EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, &a->pfn[id]));
			if (id == 1)
				g_inserted = true;
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		}, &a)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_held.load()) << "CPU 0 never reached the insert";
	EXPECT_NE(0u, a.pfn[0]);
	EXPECT_EQ(a.pfn[0], a.pfn[1]) << "two frames for one page of the file";
	EXPECT_EQ(1u, sd_file_cached_pages(a.f));
	EXPECT_EQ(0, sd_file_close(a.f));
	for (auto *mm : a.mm)
		EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "the insert's loser kept its frame";
}

// sd_file_evict() takes out of the cache only what nothing holds: a page a
// PTE maps stays, as does one whose unmap a batch has not yet flushed; an
// unmapped page goes, its frame back in the pool (no frame lost or freed
// twice: the pool's count ends at 0); the next access reads it in again.
TEST(FileEvict, EvictsOnlyWhatNothingMaps)
{
	Machine m(sdtest::config(1, "ipi"));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	{
		Attached at(m.m, 0);
		sd_cpu *c = at.c;
		sd_file *f = nullptr;
		sd_tlbbatch *batch = nullptr;
		ASSERT_EQ(0, sd_tlbbatch_create(m.m, &batch));
		ASSERT_EQ(0, sd_file_create(m.m, 4 * P, &f));
		ASSERT_EQ(0, sd_mmap_file(c, mm, kVa, 4 * P, SD_PROT_READ, SD_MAP_SHARED, f, 0));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		touch(c, kVa, SD_READ);
		touch(c, kVa + P, SD_READ);
		EXPECT_EQ(2u, sd_file_cached_pages(f));
		EXPECT_EQ(0, sd_file_evict(c, f, 0, 4 * P)) << "a mapped page was evicted";
		// A zap's flush done: page 0 goes.
		ASSERT_EQ(0, sd_madvise_dontneed(c, mm, kVa, P));
		EXPECT_EQ(1, sd_file_evict(c, f, 0, 4 * P));
		EXPECT_EQ(1u, sd_file_cached_pages(f));
		// A reclaim whose flush is owed: page 1 stays until the flush.
		ASSERT_EQ(0, sd_reclaim(c, batch, mm, kVa + P, P));
		EXPECT_EQ(0, sd_file_evict(c, f, P, P)) << "evicted before the batch's flush";
		ASSERT_EQ(0, sd_tlbbatch_flush(c, batch));
		EXPECT_EQ(1, sd_file_evict(c, f, P, P));
		EXPECT_EQ(0u, sd_file_cached_pages(f));
		// Read in again: a new page of the cache, mapped.
		EXPECT_NE(0u, touch(c, kVa, SD_READ));
		EXPECT_EQ(1u, sd_file_cached_pages(f));
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_tlbbatch_destroy(batch));
		// The frames went back to the pool (this CPU's cache of free
		// ones goes back at the detach): every count ends at 0 below.
		EXPECT_EQ(0, sd_file_close(f));
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "the pool lost or gained a frame";
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
}

// A fault that has found a cached page holds it for its PTE from the
// look-up on: CPU 0 is held there while CPU 1 evicts the whole file, which
// must keep the page. Planted bug: the PTE's hold taken at the install (as
// before eviction existed): the eviction frees the frame and CPU 0 maps a
// freed frame (the cache then holds no page while a PTE maps one).
std::atomic<bool> g_looked_up{false}, g_evicted{false};

void hold_the_lookup(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_FILE_LOOKED_UP || cpu != 0 || g_looked_up.exchange(true))
		return;
	while (!g_evicted.load())
		std::this_thread::sleep_for(std::chrono::microseconds(50));
}

TEST(FileRace, AnEvictionKeepsAPageAFaultIsMapping)
{
	Machine m(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	struct Arg {
		sd_file *f = nullptr;
		sd_mm *mm[2] = {};
		uint64_t pfn = 0;
		int evicted = -1;
	} a;
	ASSERT_EQ(0, sd_file_create(m.m, P, &a.f));
	for (auto &mm : a.mm)
		ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	{
		Attached at(m.m, 1);
		for (auto *mm : a.mm)
			ASSERT_EQ(0, sd_mmap_file(at.c, mm, kVa, P, SD_PROT_READ, SD_MAP_SHARED, a.f, 0));
		// The page cached, then unmapped: nothing holds it.
		ASSERT_EQ(0, sd_switch_mm(at.c, a.mm[1]));
		touch(at.c, kVa, SD_READ);
		ASSERT_EQ(0, sd_switch_mm(at.c, nullptr));
		ASSERT_EQ(0, sd_madvise_dontneed(at.c, a.mm[1], kVa, P));
	}
	g_looked_up = false;
	g_evicted = false;
	sd_order_set_hook(hold_the_lookup);
	{
		sdtest::Watchdog w("a fault held at its look-up never finished", 60);
		ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
			auto *a = static_cast<Arg *>(v);
			if (sd_cpu_id(c) == 0) {
				EXPECT_EQ(0, sd_switch_mm(c, a->mm[0]));
				EXPECT_EQ(0, sd_access(c, kVa, SD_READ, &a->pfn));
				EXPECT_EQ(0, sd_switch_mm(c, nullptr));
				return;
			}
			sdtest::wait_for(c, [&] { return g_looked_up.load(); });
			a->evicted = sd_file_evict(c, a->f, 0, P);
			g_evicted = true;
		}, &a)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_looked_up.load()) << "CPU 0 never reached its look-up";
	EXPECT_EQ(0, a.evicted) << "the eviction took a page a fault was mapping";
	EXPECT_EQ(1u, sd_file_cached_pages(a.f)) << "a PTE maps a page the cache let go";
	EXPECT_NE(0u, a.pfn);
	EXPECT_EQ(0, sd_file_close(a.f));
	for (auto *mm : a.mm)
		EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "the pool lost or gained a frame";
}

// Many CPUs fault one absent page of a file at once, each through its own
// mm's mapping: one frame goes into the cache (the losers of the insert
// give theirs back), every mapping gets it, and none leaks.
class FileStress : public ::testing::TestWithParam<const char *> {};

TEST_P(FileStress, RacingFaultsAgreeOnOneFrameAndTheOracleStaysQuiet)
{
	constexpr unsigned N = 4, kPages = 64;
	Machine m(sdtest::config(N, GetParam()));
	ASSERT_NE(nullptr, m.m);
	sd_frame_pool *pool = &m.m->frames;
	struct Arg {
		sd_file *f = nullptr;
		sd_mm *shared_mm = nullptr;
		sd_mm *mm[N] = {};
		uint64_t pfn[N][kPages] = {};
		std::atomic<unsigned> ready{0};
	} a;
	ASSERT_EQ(0, sd_file_create(m.m, kPages * P, &a.f));
	ASSERT_EQ(0, sd_mm_create(m.m, &a.shared_mm));
	for (auto &mm : a.mm)
		ASSERT_EQ(0, sd_mm_create(m.m, &mm));
	{
		Attached at(m.m, 0);
		for (auto *mm : a.mm)
			ASSERT_EQ(0, sd_mmap_file(at.c, mm, kVa, kPages * P, RW, SD_MAP_SHARED, a.f, 0));
		ASSERT_EQ(0, sd_mmap_file(at.c, a.shared_mm, kVa, kPages * P, RW, SD_MAP_SHARED, a.f, 0));
	}
	sdtest::Watchdog w(std::string(GetParam()) + ": a file fault is stuck", 60);
	ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		const unsigned id = sd_cpu_id(c);
		EXPECT_EQ(0, sd_switch_mm(c, a->mm[id]));
		a->ready.fetch_add(1);
		sdtest::wait_for(c, [&] { return a->ready.load() == N; });
		for (unsigned i = 0; i < kPages; i++)
			EXPECT_EQ(0, sd_access(c, kVa + i * P, i % 2 ? SD_READ : SD_WRITE, &a->pfn[id][i]));
		// Then all in one mm: write, madvise, read again, under the
		// oracle (tlb_flush3's loop on one page each).
		EXPECT_EQ(0, sd_switch_mm(c, a->shared_mm));
		for (unsigned k = 0; k < 20; k++) {
			const uint64_t va = kVa + ((id * 7 + k) % kPages) * P;
			uint64_t before = 0, after = 0;
			EXPECT_EQ(0, sd_access(c, va, SD_WRITE, &before));
			EXPECT_EQ(0, sd_madvise_dontneed(c, a->shared_mm, va, P));
			EXPECT_EQ(0, sd_access(c, va, SD_READ, &after));
			EXPECT_EQ(before, after) << "a shared page changed frame across madvise";
		}
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	}, &a)) << sd_last_error();
	for (unsigned i = 0; i < kPages; i++)
		for (unsigned id = 1; id < N; id++)
			EXPECT_EQ(a.pfn[0][i], a.pfn[id][i]) << "page " << i << " cpu " << id;
	EXPECT_EQ(kPages, sd_file_cached_pages(a.f));
	EXPECT_EQ(0u, sd_oracle_violations(m.m));
	EXPECT_EQ(0, sd_file_close(a.f));
	for (auto *mm : a.mm)
		EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_mm_destroy(a.shared_mm));
	// The per-CPU frame caches were drained at detach.
	EXPECT_EQ(0u, sd_frame_pool_in_use(pool)) << "a racing fault leaked its frame";
}

INSTANTIATE_TEST_SUITE_P(Strategies, FileStress,
			 ::testing::Values("broadcast", "local", "ipi", "gbcast", "rar", "riscv"));

} // namespace
