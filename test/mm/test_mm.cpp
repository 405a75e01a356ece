// SPDX-License-Identifier: MIT
// Address spaces: population on first touch, TLB hits, protection changes,
// madvise(DONTNEED), munmap, frame accounting (through a deliberately tiny
// frame pool, so a leaked or double-handed frame shows up as -ENOMEM or a
// duplicate frame number), context switches between mms, idle.
#include "common.hpp"

#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

// Internal: the frame pool's count of frames handed out (mapped pages plus
// what sits in per-CPU frame caches).
extern "C" {
#include "hw/machine_state.h"
}

namespace {

using sdtest::Attached;
using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

sd_machine_config cfg(unsigned cpus, uint64_t frames = 0)
{
	sd_machine_config c = sdtest::config(cpus, "broadcast");
	c.nr_frames = frames;
	return c;
}

uint64_t counter(sd_machine *m, unsigned cpu, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_cpu(m, cpu, &s));
	return s.counter[id];
}

// One attached CPU (the test thread) with one mm loaded.
class MmTest : public ::testing::Test {
protected:
	sd_machine *m = nullptr;
	sd_cpu *c = nullptr;
	sd_mm *mm = nullptr;

	void start(const sd_machine_config &config)
	{
		ASSERT_EQ(0, sd_machine_create(&config, &m)) << sd_last_error();
		ASSERT_EQ(0, sd_cpu_attach(m, 0, &c)) << sd_last_error();
		ASSERT_EQ(0, sd_mm_create(m, &mm));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
	}
	void SetUp() override
	{
		start(cfg(2));
	}
	void TearDown() override
	{
		if (c) {
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			if (mm) {
				EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
			}
			EXPECT_EQ(0, sd_cpu_detach(c));
		}
		if (m) {
			EXPECT_EQ(0u, sd_oracle_violations(m));
			EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
		}
	}
	uint64_t stat(sd_stat id)
	{
		return counter(m, 0, id);
	}
	uint64_t pfn_of(uint64_t va, sd_access_kind kind = SD_READ)
	{
		uint64_t pfn = 0;
		EXPECT_EQ(0, sd_access(c, va, kind, &pfn)) << std::hex << va;
		return pfn;
	}
};

TEST_F(MmTest, FirstAccessPopulatesSecondHits)
{
	const uint64_t va = 0x1000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, 4 * P, RW));
	EXPECT_EQ(0u, stat(SD_STAT_PAGE_FAULT)) << "mmap populates nothing";
	EXPECT_EQ(0u, stat(SD_STAT_FLUSH)) << "mmap of free pages needs no flush";

	uint64_t faults = stat(SD_STAT_PAGE_FAULT), hits = stat(SD_STAT_TLB_HIT),
		 misses = stat(SD_STAT_TLB_MISS);
	uint64_t pfn = 0;
	ASSERT_EQ(0, sd_access(c, va + P, SD_WRITE, &pfn));
	EXPECT_NE(0u, pfn);
	EXPECT_EQ(faults + 1, stat(SD_STAT_PAGE_FAULT));
	EXPECT_EQ(misses + 1, stat(SD_STAT_TLB_MISS));
	EXPECT_EQ(hits, stat(SD_STAT_TLB_HIT));

	uint64_t pfn2 = 0;
	ASSERT_EQ(0, sd_access(c, va + P, SD_READ, &pfn2));
	EXPECT_EQ(pfn, pfn2);
	EXPECT_EQ(faults + 1, stat(SD_STAT_PAGE_FAULT)) << "second access faulted again";
	EXPECT_EQ(hits + 1, stat(SD_STAT_TLB_HIT));
	EXPECT_EQ(misses + 1, stat(SD_STAT_TLB_MISS));

	// A NULL pfn pointer is allowed.
	EXPECT_EQ(0, sd_access(c, va + P, SD_READ, nullptr));
	// Other pages get other frames.
	std::set<uint64_t> pfns{pfn};
	for (uint64_t i : {0, 2, 3})
		pfns.insert(pfn_of(va + i * P, SD_WRITE));
	EXPECT_EQ(4u, pfns.size());
	EXPECT_EQ(faults + 4, stat(SD_STAT_PAGE_FAULT));
	// Any offset inside the page is the same page.
	EXPECT_EQ(pfn, pfn_of(va + P + 123));
	EXPECT_EQ(pfn, pfn_of(va + 2 * P - 1));
}

TEST_F(MmTest, MprotectReadOnlyThenReadWrite)
{
	const uint64_t va = 0x2000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, 2 * P, RW));
	uint64_t pfn = pfn_of(va, SD_WRITE);
	uint64_t flushes = stat(SD_STAT_FLUSH);

	ASSERT_EQ(0, sd_mprotect(c, mm, va, 2 * P, SD_PROT_READ));
	EXPECT_EQ(flushes + 1, stat(SD_STAT_FLUSH)) << "a populated page changed: one flush";
	EXPECT_EQ(-EACCES, sd_access(c, va, SD_WRITE, nullptr));
	EXPECT_EQ(pfn, pfn_of(va)) << "mprotect keeps the frame";
	EXPECT_EQ(-EACCES, sd_access(c, va + P, SD_WRITE, nullptr))
		<< "the unpopulated page got the new protection too";

	ASSERT_EQ(0, sd_mprotect(c, mm, va, 2 * P, RW));
	EXPECT_EQ(0, sd_access(c, va, SD_WRITE, nullptr));
	EXPECT_EQ(pfn, pfn_of(va, SD_WRITE));
	EXPECT_EQ(0, sd_access(c, va + P, SD_WRITE, nullptr));

	ASSERT_EQ(0, sd_mprotect(c, mm, va, P, SD_PROT_NONE));
	EXPECT_EQ(-EACCES, sd_access(c, va, SD_READ, nullptr));
	EXPECT_EQ(-EACCES, sd_access(c, va, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, va + P, SD_WRITE, nullptr)) << "only the first page changed";
	ASSERT_EQ(0, sd_mprotect(c, mm, va, P, SD_PROT_READ));
	EXPECT_EQ(pfn, pfn_of(va));
}

TEST_F(MmTest, MprotectOfUnpopulatedPagesNeedsNoFlush)
{
	const uint64_t va = 0x3000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, 8 * P, RW));
	uint64_t flushes = stat(SD_STAT_FLUSH);
	ASSERT_EQ(0, sd_mprotect(c, mm, va, 8 * P, SD_PROT_READ));
	EXPECT_EQ(flushes, stat(SD_STAT_FLUSH));
	EXPECT_EQ(-EACCES, sd_access(c, va, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, va, SD_READ, nullptr));
}

TEST_F(MmTest, MadviseDontneedGivesAFreshFrameAndKeepsTheMapping)
{
	const uint64_t va = 0x4000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, 4 * P, RW));
	uint64_t pfn = pfn_of(va, SD_WRITE);
	EXPECT_NE(0u, pfn);
	uint64_t faults = stat(SD_STAT_PAGE_FAULT), flushes = stat(SD_STAT_FLUSH);
	ASSERT_EQ(0, sd_madvise_dontneed(c, mm, va, 4 * P));
	EXPECT_EQ(flushes + 1, stat(SD_STAT_FLUSH));
	// The mapping stays: a read maps the zero page, a write a frame.
	EXPECT_EQ(0u, pfn_of(va)) << "a read after the zap maps the zero page";
	EXPECT_EQ(faults + 1, stat(SD_STAT_PAGE_FAULT)) << "the next access populates again";
	EXPECT_NE(0u, pfn_of(va, SD_WRITE));
	EXPECT_EQ(faults + 2, stat(SD_STAT_PAGE_FAULT)) << "the write breaks copy-on-write";
	// madvise keeps the protection: a read-only page stays read-only.
	const uint64_t ro = va + 8 * P;
	ASSERT_EQ(0, sd_mmap(c, mm, ro, P, SD_PROT_READ));
	EXPECT_EQ(0u, pfn_of(ro));
	ASSERT_EQ(0, sd_madvise_dontneed(c, mm, ro, P));
	EXPECT_EQ(-EACCES, sd_access(c, ro, SD_WRITE, nullptr)) << "madvise kept the protection";
	EXPECT_EQ(0u, pfn_of(ro));
	// Pages never populated are untouched by madvise; nothing to flush for them.
	flushes = stat(SD_STAT_FLUSH);
	ASSERT_EQ(0, sd_madvise_dontneed(c, mm, va + 2 * P, 2 * P));
	EXPECT_EQ(flushes, stat(SD_STAT_FLUSH));
	EXPECT_EQ(-EEXIST, sd_mmap(c, mm, va, P, RW)) << "still mapped";
}

TEST_F(MmTest, MunmapThenAccessFaults)
{
	const uint64_t va = 0x5000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, 4 * P, RW));
	for (int i = 0; i < 4; i++)
		pfn_of(va + i * P, SD_WRITE);
	uint64_t flushes = stat(SD_STAT_FLUSH);
	ASSERT_EQ(0, sd_munmap(c, mm, va + P, 2 * P));
	EXPECT_EQ(flushes + 1, stat(SD_STAT_FLUSH));
	EXPECT_EQ(0, sd_access(c, va, SD_READ, nullptr));
	EXPECT_EQ(-EFAULT, sd_access(c, va + P, SD_READ, nullptr));
	EXPECT_EQ(-EFAULT, sd_access(c, va + 2 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, va + 3 * P, SD_READ, nullptr));
	// The hole can be mapped again, with another protection.
	ASSERT_EQ(0, sd_mmap(c, mm, va + P, 2 * P, SD_PROT_READ));
	EXPECT_EQ(0, sd_access(c, va + P, SD_READ, nullptr));
	EXPECT_EQ(-EACCES, sd_access(c, va + P, SD_WRITE, nullptr));
	// Unmapping never-populated pages needs no flush.
	flushes = stat(SD_STAT_FLUSH);
	ASSERT_EQ(0, sd_munmap(c, mm, va + 2 * P, P));
	EXPECT_EQ(flushes, stat(SD_STAT_FLUSH));
	ASSERT_EQ(0, sd_munmap(c, mm, va, 4 * P));
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(-EFAULT, sd_access(c, va + i * P, SD_READ, nullptr));
}

TEST_F(MmTest, RangesAcrossTablesAndTheTopOfTheVaSpace)
{
	// 2 MiB leaf boundary, 1 GiB and 512 GiB boundaries, the last page.
	const uint64_t bases[] = {0x200000 - 2 * P, 0x40000000 - 2 * P, 0x8000000000 - 2 * P,
				  SD_VA_END - 4 * P};
	for (uint64_t b : bases) {
		ASSERT_EQ(0, sd_mmap(c, mm, b, 4 * P, RW)) << std::hex << b;
		std::set<uint64_t> pfns;
		for (int i = 0; i < 4; i++)
			pfns.insert(pfn_of(b + i * P, SD_WRITE));
		EXPECT_EQ(4u, pfns.size());
		ASSERT_EQ(0, sd_mprotect(c, mm, b + P, 2 * P, SD_PROT_READ));
		EXPECT_EQ(0, sd_access(c, b, SD_WRITE, nullptr));
		EXPECT_EQ(-EACCES, sd_access(c, b + P, SD_WRITE, nullptr));
		EXPECT_EQ(-EACCES, sd_access(c, b + 2 * P, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_access(c, b + 3 * P, SD_WRITE, nullptr));
		ASSERT_EQ(0, sd_munmap(c, mm, b, 4 * P));
		for (int i = 0; i < 4; i++)
			EXPECT_EQ(-EFAULT, sd_access(c, b + i * P, SD_READ, nullptr));
		// Tables were freed (or not): mapping again works either way.
		ASSERT_EQ(0, sd_mmap(c, mm, b, 4 * P, SD_PROT_READ));
		EXPECT_EQ(0, sd_access(c, b + 3 * P, SD_READ, nullptr));
	}
	// One range over the first two (1 GiB, mostly holes).
	EXPECT_EQ(0, sd_munmap(c, mm, 0, 0x40000000 + 2 * P));
	for (uint64_t b : bases)
		EXPECT_EQ(b == bases[0] || b == bases[1] ? -EFAULT : 0,
			  sd_access(c, b + 3 * P, SD_READ, nullptr))
			<< std::hex << b;
}

// munmap(2) takes any range: one over 16 TiB (2^32 pages, nearly all holes)
// must be about as cheap as the tables it visits (a few ms here unchecked).
// Run in a child process with an alarm, so a library that takes minutes (or
// eats memory in proportion to the range) fails this test instead of hanging
// the suite.
constexpr uint64_t kHuge = UINT64_C(1) << 44;

void unmap_huge(sd_oracle_mode mode)
{
	alarm(4);
	sd_machine_config c = sdtest::config(1, "broadcast");
	c.oracle = mode;
	sd_machine *m = nullptr;
	sd_cpu *cpu = nullptr;
	sd_mm *mm = nullptr;
	if (sd_machine_create(&c, &m) || sd_cpu_attach(m, 0, &cpu) || sd_mm_create(m, &mm) ||
	    sd_switch_mm(cpu, mm))
		_exit(2);
	if (sd_mmap(cpu, mm, 0x1000, 4 * P, RW) || sd_mmap(cpu, mm, kHuge - P, P, RW) ||
	    sd_access(cpu, 0x1000, SD_WRITE, nullptr) || sd_access(cpu, kHuge - P, SD_WRITE, nullptr))
		_exit(3);
	if (sd_munmap(cpu, mm, 0, kHuge))
		_exit(4);
	if (sd_access(cpu, 0x1000, SD_READ, nullptr) != -EFAULT ||
	    sd_access(cpu, kHuge - P, SD_READ, nullptr) != -EFAULT)
		_exit(5);
	if (sd_switch_mm(cpu, nullptr) || sd_mm_destroy(mm) || sd_cpu_detach(cpu) ||
	    sd_machine_destroy(m))
		_exit(6);
	_exit(0);
}

TEST(MmDeathTest, HugeMunmapUnchecked)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	EXPECT_EXIT(unmap_huge(SD_ORACLE_OFF), ::testing::ExitedWithCode(0), "");
}

TEST(MmDeathTest, HugeMunmapChecked)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	EXPECT_EXIT(unmap_huge(SD_ORACLE_CHECKED), ::testing::ExitedWithCode(0), "")
		<< "library bug: in checked mode the oracle raises a floor for every page "
		   "of the flushed range (2^32 pages here, a 16 KiB floor node per 4096 of them)";
}

TEST_F(MmTest, IdleThenSwitchBack)
{
	const uint64_t va = 0x6000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, P, RW));
	uint64_t pfn = pfn_of(va, SD_WRITE);
	ASSERT_EQ(0, sd_cpu_idle(c));
	EXPECT_EQ(mm, sd_cpu_current_mm(c)) << "idle keeps the mm (lazy TLB)";
	EXPECT_EQ(-ESRCH, sd_access(c, va, SD_READ, nullptr));
	// (Destroying it now would succeed: lazy users are shot, test_lifecycle.)
	// Mapping changes still work from an idle CPU (they name the mm).
	ASSERT_EQ(0, sd_mprotect(c, mm, va, P, SD_PROT_READ));
	ASSERT_EQ(0, sd_cpu_idle(c)) << "idle twice is fine";
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	EXPECT_EQ(pfn, pfn_of(va));
	EXPECT_EQ(-EACCES, sd_access(c, va, SD_WRITE, nullptr)) << "change made while idle lost";
}

TEST_F(MmTest, MmIdsAreUniqueAndNeverReused)
{
	std::set<uint64_t> ids{sd_mm_id(mm)};
	EXPECT_NE(0u, sd_mm_id(mm));
	for (int i = 0; i < 10; i++) {
		sd_mm *x = nullptr;
		ASSERT_EQ(0, sd_mm_create(m, &x));
		EXPECT_TRUE(ids.insert(sd_mm_id(x)).second) << "mm id reused";
		ASSERT_EQ(0, sd_mm_destroy(x));
	}
}

TEST_F(MmTest, ContextSwitchKeepsTranslationsSeparate)
{
	const uint64_t va = 0x7000000, only1 = 0x7100000;
	sd_mm *mm2 = nullptr;
	ASSERT_EQ(0, sd_mm_create(m, &mm2));
	EXPECT_NE(sd_mm_id(mm), sd_mm_id(mm2));
	ASSERT_EQ(0, sd_mmap(c, mm, va, P, RW));
	ASSERT_EQ(0, sd_mmap(c, mm, only1, P, RW));
	ASSERT_EQ(0, sd_mmap(c, mm2, va, P, SD_PROT_READ));

	uint64_t p1 = pfn_of(va, SD_WRITE);
	pfn_of(only1, SD_WRITE);
	uint64_t switches = stat(SD_STAT_CTX_SWITCH);
	ASSERT_EQ(0, sd_switch_mm(c, mm2));
	EXPECT_EQ(switches + 1, stat(SD_STAT_CTX_SWITCH));
	EXPECT_EQ(mm2, sd_cpu_current_mm(c));
	uint64_t p2 = pfn_of(va);
	EXPECT_NE(p1, p2) << "same va, different mm: different frame";
	EXPECT_EQ(-EACCES, sd_access(c, va, SD_WRITE, nullptr))
		<< "mm1's RW translation leaked into mm2";
	EXPECT_EQ(-EFAULT, sd_access(c, only1, SD_READ, nullptr))
		<< "a page mapped only in mm1 is visible in mm2";

	ASSERT_EQ(0, sd_switch_mm(c, mm));
	EXPECT_EQ(p1, pfn_of(va, SD_WRITE));
	EXPECT_EQ(0, sd_access(c, only1, SD_READ, nullptr));

	// Changes in mm2 leave mm1 alone.
	ASSERT_EQ(0, sd_munmap(c, mm2, va, P));
	EXPECT_EQ(p1, pfn_of(va, SD_WRITE));
	ASSERT_EQ(0, sd_switch_mm(c, mm2));
	EXPECT_EQ(-EFAULT, sd_access(c, va, SD_READ, nullptr));
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	ASSERT_EQ(0, sd_mm_destroy(mm2));
	EXPECT_EQ(p1, pfn_of(va, SD_WRITE));
}

TEST_F(MmTest, SwitchToSameMmAndToNull)
{
	const uint64_t va = 0x8000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, P, RW));
	uint64_t pfn = pfn_of(va);
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	EXPECT_EQ(pfn, pfn_of(va));
	EXPECT_EQ(-EBUSY, sd_mm_destroy(mm)) << "switching to the same mm twice is one user";
	ASSERT_EQ(0, sd_switch_mm(c, nullptr));
	EXPECT_EQ(nullptr, sd_cpu_current_mm(c));
	EXPECT_EQ(-ESRCH, sd_access(c, va, SD_READ, nullptr));
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	EXPECT_EQ(pfn, pfn_of(va));
}

// ---- frame accounting with a tiny pool ----

class TinyPool : public MmTest {
protected:
	static constexpr unsigned kFrames = 64;
	void SetUp() override
	{
		start(cfg(1, kFrames));
	}
};

TEST_F(TinyPool, ExactlyAsManyFramesAsMapped)
{
	const uint64_t va = 0x10000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, (kFrames + 1) * P, RW));
	std::set<uint64_t> pfns;
	for (unsigned i = 0; i < kFrames; i++) {
		uint64_t pfn = 0;
		ASSERT_EQ(0, sd_access(c, va + i * P, SD_WRITE, &pfn)) << "page " << i;
		EXPECT_GE(pfn, 1u);
		EXPECT_LE(pfn, (uint64_t)kFrames);
		EXPECT_TRUE(pfns.insert(pfn).second) << "frame " << pfn << " handed out twice";
	}
	uint64_t faults = stat(SD_STAT_PAGE_FAULT);
	EXPECT_EQ(-ENOMEM, sd_access(c, va + kFrames * P, SD_WRITE, nullptr))
		<< "a 65th frame out of 64";
	EXPECT_EQ(faults, stat(SD_STAT_PAGE_FAULT));
	// Freeing one page lets the 65th page in, with the freed frame.
	uint64_t freed = pfn_of(va + 7 * P);
	ASSERT_EQ(0, sd_munmap(c, mm, va + 7 * P, P));
	uint64_t got = 0;
	ASSERT_EQ(0, sd_access(c, va + kFrames * P, SD_WRITE, &got));
	EXPECT_EQ(freed, got);
	// And the pool is dry again: a write finds no frame, a read needs
	// none (the zero page), and the write after it none either.
	ASSERT_EQ(0, sd_mmap(c, mm, va + 7 * P, P, RW));
	EXPECT_EQ(-ENOMEM, sd_access(c, va + 7 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, va + 7 * P, SD_READ, nullptr));
	EXPECT_EQ(-ENOMEM, sd_access(c, va + 7 * P, SD_WRITE, nullptr))
		<< "a copy-on-write break needs a frame";
}

TEST_F(TinyPool, MunmapRecyclesFrames)
{
	// 200 rounds of map, touch, unmap: with any leak the pool runs dry.
	const uint64_t va = 0x20000000;
	std::set<uint64_t> all;
	for (int round = 0; round < 200; round++) {
		uint64_t base = va + (uint64_t)(round % 7) * 0x200000;
		ASSERT_EQ(0, sd_mmap(c, mm, base, 16 * P, RW));
		std::set<uint64_t> pfns;
		for (unsigned i = 0; i < 16; i++) {
			uint64_t pfn = 0;
			ASSERT_EQ(0, sd_access(c, base + i * P, SD_WRITE, &pfn))
				<< "round " << round << " page " << i << ": frames leak";
			EXPECT_TRUE(pfns.insert(pfn).second) << "frame handed out twice";
			all.insert(pfn);
		}
		ASSERT_EQ(0, sd_munmap(c, mm, base, 16 * P));
	}
	EXPECT_LE(all.size(), (size_t)kFrames);
}

TEST_F(TinyPool, MadviseRecyclesFrames)
{
	const uint64_t va = 0x30000000;
	ASSERT_EQ(0, sd_mmap(c, mm, va, kFrames * P, RW));
	for (int round = 0; round < 20; round++) {
		std::set<uint64_t> pfns;
		for (unsigned i = 0; i < kFrames; i++) {
			uint64_t pfn = 0;
			ASSERT_EQ(0, sd_access(c, va + i * P, SD_WRITE, &pfn))
				<< "round " << round << " page " << i;
			EXPECT_TRUE(pfns.insert(pfn).second);
		}
		ASSERT_EQ(0, sd_madvise_dontneed(c, mm, va, kFrames * P));
	}
}

TEST_F(TinyPool, MmDestroyFreesFrames)
{
	const uint64_t va = 0x40000000;
	std::set<uint64_t> ids;
	for (int round = 0; round < 6; round++) {
		sd_mm *x = nullptr;
		ASSERT_EQ(0, sd_mm_create(m, &x));
		ids.insert(sd_mm_id(x));
		ASSERT_EQ(0, sd_switch_mm(c, x));
		// Spread over several tables so the teardown walks a real tree.
		for (int part = 0; part < 4; part++)
			ASSERT_EQ(0, sd_mmap(c, x, va + part * 0x40000000ull, (kFrames / 4) * P, RW));
		for (int part = 0; part < 4; part++)
			for (unsigned i = 0; i < kFrames / 4; i++)
				ASSERT_EQ(0, sd_access(c, va + part * 0x40000000ull + i * P, SD_WRITE,
						       nullptr))
					<< "round " << round << ": frames of destroyed mms leaked";
		ASSERT_EQ(0, sd_switch_mm(c, mm));
		ASSERT_EQ(0, sd_mm_destroy(x)) << sd_last_error();
	}
	EXPECT_EQ(6u, ids.size());
}

TEST(MmFrames, FreedFrameIsNotSeenThroughAStaleTranslation)
{
	// One frame in the whole machine: CPU 1 caches it through page A; CPU 0
	// unmaps A, and once that returned, maps B and gets the same frame. CPU 1
	// must not reach it through A any more.
	Machine mach(cfg(2, 1));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	const uint64_t A = 0x1000, B = 0x2000;
	std::atomic<int> step{0};
	std::atomic<uint64_t> pfn_a{0};
	std::atomic<int> after{1};
	std::thread cpu1([&] {
		Attached a(mach.m, 1);
		if (!a.c) {
			step = 100;
			return;
		}
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		while (step.load() < 1)
			std::this_thread::yield();
		uint64_t pfn = 0;
		EXPECT_EQ(0, sd_access(a.c, A, SD_WRITE, &pfn));
		pfn_a = pfn;
		step = 2;
		while (step.load() < 3)
			std::this_thread::yield();
		after = sd_access(a.c, A, SD_READ, nullptr);
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	});
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		ASSERT_EQ(0, sd_mmap(a.c, mm, A, P, RW));
		ASSERT_EQ(0, sd_mmap(a.c, mm, B, P, RW));
		step = 1;
		while (step.load() < 2)
			std::this_thread::yield();
		EXPECT_EQ(-ENOMEM, sd_access(a.c, B, SD_WRITE, nullptr)) << "the only frame is A's";
		ASSERT_EQ(0, sd_munmap(a.c, mm, A, P));
		uint64_t pfn_b = 0;
		ASSERT_EQ(0, sd_access(a.c, B, SD_WRITE, &pfn_b));
		EXPECT_EQ(pfn_a.load(), pfn_b);
		step = 3;
		ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	cpu1.join();
	EXPECT_EQ(-EFAULT, after.load());
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(MmAsid, ManyMmsThroughFewAsids)
{
	// 4-bit ASIDs (15 usable) and 40 mms, each with the same va on its own
	// frame: every access must see its own mm's frame across rollovers.
	sd_machine_config c = cfg(2);
	c.asid_bits = 4;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	constexpr int kMms = 40;
	const uint64_t va = 0x123456000;
	std::vector<sd_mm *> mms(kMms, nullptr);
	std::vector<uint64_t> pfn(kMms, 0);
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		for (int i = 0; i < kMms; i++) {
			ASSERT_EQ(0, sd_mm_create(mach.m, &mms[i]));
			ASSERT_EQ(0, sd_mmap(a.c, mms[i], va, P, RW));
		}
		for (int round = 0; round < 3; round++) {
			for (int i = 0; i < kMms; i++) {
				ASSERT_EQ(0, sd_switch_mm(a.c, mms[i]));
				uint64_t p = 0;
				ASSERT_EQ(0, sd_access(a.c, va, SD_WRITE, &p));
				if (round == 0)
					pfn[i] = p;
				else
					EXPECT_EQ(pfn[i], p) << "mm " << i << " round " << round
							     << ": another mm's translation";
			}
		}
		ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	EXPECT_EQ((size_t)kMms, std::set<uint64_t>(pfn.begin(), pfn.end()).size());
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &s));
	EXPECT_GT(s.counter[SD_STAT_ASID_ROLLOVER], 0u);
	EXPECT_GE(s.counter[SD_STAT_ASID_ALLOC], (uint64_t)kMms);
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	for (auto *x : mms)
		EXPECT_EQ(0, sd_mm_destroy(x));
}

TEST(MmFrames, PoolInUseFollowsMappedPages)
{
	// Frames out of the pool = populated pages + what sits in the CPU's
	// frame cache (at most SD_FRAME_CACHE): never more, and all of them
	// come back once the mms are gone and the CPU detached.
	Machine mach(cfg(1));
	ASSERT_NE(nullptr, mach.m);
	sd_frame_pool *pool = &mach.m->frames;
	auto in_use = [&] { return sd_frame_pool_in_use(pool); };
	ASSERT_EQ(0u, in_use());
	sd_mm *a = nullptr, *b = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &a));
	ASSERT_EQ(0, sd_mm_create(mach.m, &b));
	const uint64_t va = 0x60000000;
	auto within = [&](uint64_t populated, const char *when) {
		uint64_t n = in_use();
		EXPECT_GE(n, populated) << when;
		EXPECT_LE(n, populated + SD_FRAME_CACHE) << when;
	};
	{
		Attached cpu(mach.m, 0);
		ASSERT_NE(nullptr, cpu.c);
		sd_cpu *c = cpu.c;
		ASSERT_EQ(0, sd_switch_mm(c, a));
		ASSERT_EQ(0, sd_mmap(c, a, va, 100 * P, RW));
		within(0, "after mmap");
		for (int i = 0; i < 100; i++)
			ASSERT_EQ(0, sd_access(c, va + i * P, SD_WRITE, nullptr));
		within(100, "100 pages touched");
		ASSERT_EQ(0, sd_munmap(c, a, va, 50 * P));
		within(50, "50 unmapped");
		ASSERT_EQ(0, sd_madvise_dontneed(c, a, va + 50 * P, 10 * P));
		within(40, "10 dropped by madvise");

		// A second mm, then destroyed.
		ASSERT_EQ(0, sd_switch_mm(c, b));
		ASSERT_EQ(0, sd_mmap(c, b, va, 40 * P, RW));
		for (int i = 0; i < 40; i++)
			ASSERT_EQ(0, sd_access(c, va + i * P, SD_READ, nullptr));
		within(40, "second mm read: the zero page, no frame");
		for (int i = 0; i < 40; i++)
			ASSERT_EQ(0, sd_access(c, va + i * P, SD_WRITE, nullptr));
		within(80, "second mm written: a frame each");
		ASSERT_EQ(0, sd_switch_mm(c, a));
		ASSERT_EQ(0, sd_mm_destroy(b));
		within(40, "second mm destroyed");

		// Churn: map, touch, unmap; in use never exceeds what is mapped.
		uint64_t worst = 0;
		for (int round = 0; round < 100; round++) {
			uint64_t base = 0x70000000 + (uint64_t)(round % 5) * 0x200000;
			ASSERT_EQ(0, sd_mmap(c, a, base, 16 * P, RW));
			for (int i = 0; i < 16; i++)
				ASSERT_EQ(0, sd_access(c, base + i * P, SD_WRITE, nullptr));
			worst = std::max(worst, in_use());
			ASSERT_EQ(0, sd_munmap(c, a, base, 16 * P));
		}
		EXPECT_LE(worst, (uint64_t)40 + 16 + SD_FRAME_CACHE);
		within(40, "after churn");
		ASSERT_EQ(0, sd_switch_mm(c, nullptr));
		ASSERT_EQ(0, sd_mm_destroy(a));
		within(0, "all mms destroyed");
	}
	// Detaching gave the CPU's cached frames back.
	EXPECT_EQ(0u, in_use()) << "frames leaked";
}

} // namespace
