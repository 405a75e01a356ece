// SPDX-License-Identifier: MIT
//
// The LRU lock as a machine setting (sd_machine_config.lru), under every
// strategy, built-in or user: populated pages join their CPU's batch of 31,
// moved onto the LRU under the lock when full; with SD_LRU_GLOBAL every free
// first drains the batch (lru_add_drain() in free_pages_and_swap_cache())
// and then takes the freed pages off under the lock again; with
// SD_LRU_PERCPU (the lru_add_drain() removal) pages freed while still in
// the batch leave the LRU at its drain. lru_lock_pages counts the folios
// added or removed under the lock. The strategy option `lru=` it replaces is refused with a pointer to
// the setting. Also the two public calls the benchmark measures through:
// sd_flush_tlb_range() and sd_tlb_probe().
#include "common.hpp"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

using namespace sdtest;

namespace {

constexpr uint64_t kVa = 0x40000000;
constexpr uint64_t kPages = 4;

void local_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	sd_tlb_invalidate_local(cpu, mm, va, len);
}

// A user strategy for the scope: one CPU, so a local invalidation is a
// complete flush.
struct LruUserStrategy {
	LruUserStrategy()
	{
		sd_strategy s = SD_STRATEGY_INIT;
		s.name = "lrutest";
		s.flush = local_flush;
		EXPECT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	}
	~LruUserStrategy() { EXPECT_EQ(0, sd_strategy_unregister("lrutest")) << sd_last_error(); }
};

const char *const kStrategies[] = { "broadcast", "local", "ipi", "gbcast", "none", "lrutest" };

// Folios handled under the LRU lock by: madvise of kPages touched pages,
// then munmap of the range after touching 2 of them again.
uint64_t lru_pages_freed(const char *strategy, unsigned lru)
{
	sd_machine_config c = config(1, strategy);
	c.lru = lru;
	c.oracle = SD_ORACLE_OFF;      // `none` serves stale entries by design
	Machine mach(c);
	if (!mach.m)
		return ~0ull;
	Attached a(mach.m, 0);
	sd_mm *mm = nullptr;
	EXPECT_EQ(0, sd_mm_create(mach.m, &mm)) << sd_last_error();
	EXPECT_EQ(0, sd_mmap(a.c, mm, kVa, kPages * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	EXPECT_EQ(0, sd_switch_mm(a.c, mm));
	for (uint64_t p = 0; p < kPages; p++)
		EXPECT_EQ(0, sd_access(a.c, kVa + p * SD_PAGE_SIZE, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_madvise_dontneed(a.c, mm, kVa, kPages * SD_PAGE_SIZE)) << sd_last_error();
	for (uint64_t p = 0; p < 2; p++)
		EXPECT_EQ(0, sd_access(a.c, kVa + p * SD_PAGE_SIZE, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_munmap(a.c, mm, kVa, kPages * SD_PAGE_SIZE)) << sd_last_error();
	EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return total(mach.m, SD_STAT_LRU_LOCK_PAGES);
}

// Each free drains what was populated since the last one (added) and takes
// the freed pages off: 2 x kPages at the madvise, 2 x 2 at the munmap.
TEST(Lru, GlobalDrainsAndFreesUnderTheLockAtEveryFree)
{
	LruUserStrategy user;
	for (const char *s : kStrategies) {
		SCOPED_TRACE(s);
		EXPECT_EQ(2 * (kPages + 2), lru_pages_freed(s, SD_LRU_GLOBAL));
	}
}

// Fewer than a batch populated, and every page freed still in it: no hold.
TEST(Lru, PerCpuTakesNoLockBeforeABatchFills)
{
	LruUserStrategy user;
	for (const char *s : kStrategies) {
		SCOPED_TRACE(s);
		EXPECT_EQ(0u, lru_pages_freed(s, SD_LRU_PERCPU));
	}
}

// The 31st population moves the batch onto the LRU, and the pages freed
// while in it come off in the same drain; a page freed after that, already
// on the LRU, is taken off under the lock at once.
TEST(Lru, PerCpuBatchOf31DrainsWithItsFreedPages)
{
	sd_machine_config c = config(1, "ipi");
	c.lru = SD_LRU_PERCPU;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kVa, 64 * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	ASSERT_EQ(0, sd_switch_mm(a.c, mm));
	for (uint64_t p = 0; p < 30; p++)
		ASSERT_EQ(0, sd_access(a.c, kVa + p * SD_PAGE_SIZE, SD_WRITE, nullptr));
	ASSERT_EQ(0, sd_madvise_dontneed(a.c, mm, kVa, 3 * SD_PAGE_SIZE));
	EXPECT_EQ(0u, total(mach.m, SD_STAT_LRU_LOCK_PAGES)) << "30 populated, 3 freed in the batch";
	ASSERT_EQ(0, sd_access(a.c, kVa + 30 * SD_PAGE_SIZE, SD_WRITE, nullptr));
	EXPECT_EQ(31u + 3u, total(mach.m, SD_STAT_LRU_LOCK_PAGES)) << "the 31st drains: 31 on, 3 off";
	ASSERT_EQ(0, sd_madvise_dontneed(a.c, mm, kVa + 10 * SD_PAGE_SIZE, SD_PAGE_SIZE));
	EXPECT_EQ(31u + 3u + 1u, total(mach.m, SD_STAT_LRU_LOCK_PAGES)) << "a page on the LRU";
	ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(Lru, DefaultIsPerCpuAlsoForAnOlderConfig)
{
	sd_machine_config c = SD_MACHINE_CONFIG_INIT;
	EXPECT_EQ((unsigned)SD_LRU_PERCPU, c.lru);
	// A caller compiled before the field existed passes a shorter size;
	// the library must not read the bytes behind it.
	struct {
		sd_machine_config cfg;
		unsigned char guard[16];
	} old;
	std::memset(&old, 0xff, sizeof(old));
	old.cfg = config(1, "ipi");
	old.cfg.lru = 0xffffffffu;     // garbage past the old end
	old.cfg.size = offsetof(sd_machine_config, lru);
	old.cfg.oracle = SD_ORACLE_OFF;
	sd_machine *m = nullptr;
	ASSERT_EQ(0, sd_machine_create(&old.cfg, &m)) << sd_last_error();
	sd_cpu *cpu = nullptr;
	ASSERT_EQ(0, sd_cpu_attach(m, 0, &cpu));
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(m, &mm));
	EXPECT_EQ(0, sd_mmap(cpu, mm, kVa, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	EXPECT_EQ(0, sd_switch_mm(cpu, mm));
	EXPECT_EQ(0, sd_access(cpu, kVa, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_munmap(cpu, mm, kVa, SD_PAGE_SIZE));
	EXPECT_EQ(0, sd_switch_mm(cpu, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	EXPECT_EQ(0, sd_cpu_detach(cpu));
	EXPECT_EQ(0u, total(m, SD_STAT_LRU_LOCK_PAGES));
	EXPECT_EQ(0, sd_machine_destroy(m));
}

TEST(Lru, UnknownValueIsRefusedWithNothingCreated)
{
	for (unsigned bad : { 2u, 7u, ~0u }) {
		SCOPED_TRACE(bad);
		sd_machine_config c = config(2, "broadcast");
		c.lru = bad;
		sd_machine *sentinel = reinterpret_cast<sd_machine *>(uintptr_t(0xdeadbeef));
		sd_machine *m = sentinel;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m));
		EXPECT_EQ(sentinel, m) << "*out written by a failing sd_machine_create";
		EXPECT_NE(nullptr, std::strstr(sd_last_error(), "lru")) << sd_last_error();
	}
	// Nothing was left behind: the same config, fixed, creates.
	sd_machine_config c = config(2, "broadcast");
	c.lru = SD_LRU_GLOBAL;
	Machine ok(c);
	EXPECT_NE(nullptr, ok.m);
}

TEST(Lru, StrategyOptionPointsToTheMachineSetting)
{
	for (const char *spec : { "ipi:lru=global", "ipi:lru=percpu", "gbcast:lru=global",
				  "gbcast:threshold=0,lru=percpu" }) {
		SCOPED_TRACE(spec);
		sd_machine_config c = config(2, spec);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m));
		EXPECT_EQ(nullptr, m);
		const std::string msg = sd_last_error();
		EXPECT_NE(std::string::npos, msg.find("machine setting")) << msg;
		EXPECT_NE(std::string::npos, msg.find("sd_machine_config.lru")) << msg;
	}
}

// sd_tlb_probe() sees what sd_access() filled; sd_flush_tlb_range() removes
// it without touching the PTE (the next access hits the same frame) and
// counts as a flush.
TEST(FlushTlbRange, FlushesWithoutChangingThePte)
{
	for (const char *s : { "broadcast", "local", "ipi", "gbcast" }) {
		SCOPED_TRACE(s);
		Machine mach(config(1, s));
		ASSERT_NE(nullptr, mach.m);
		Attached a(mach.m, 0);
		sd_mm *mm = nullptr;
		ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
		ASSERT_EQ(0, sd_mmap(a.c, mm, kVa, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		uint64_t pfn = 0, probed = 0, again = 0;
		ASSERT_EQ(0, sd_access(a.c, kVa, SD_WRITE, &pfn));
		EXPECT_EQ(1, sd_tlb_probe(a.c, kVa, &probed));
		EXPECT_EQ(pfn, probed);
		const uint64_t flushes = total(mach.m, SD_STAT_FLUSH);
		EXPECT_EQ(0, sd_flush_tlb_range(a.c, mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
		EXPECT_EQ(flushes + 1, total(mach.m, SD_STAT_FLUSH));
		EXPECT_EQ(0, sd_tlb_probe(a.c, kVa, nullptr)) << "entry survived the flush";
		EXPECT_EQ(0, sd_access(a.c, kVa, SD_READ, &again));
		EXPECT_EQ(pfn, again) << "the flush changed the mapping";
		EXPECT_EQ(0u, sd_oracle_violations(mach.m));
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
}

TEST(FlushTlbRange, BadArgumentsAreRefused)
{
	Machine mach(config(1));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	EXPECT_EQ(-EINVAL, sd_flush_tlb_range(a.c, mm, kVa, 0));
	EXPECT_EQ(-EINVAL, sd_flush_tlb_range(a.c, mm, kVa + 1, SD_PAGE_SIZE));
	EXPECT_EQ(-EINVAL, sd_flush_tlb_range(a.c, nullptr, kVa, SD_PAGE_SIZE));
	EXPECT_EQ(-EINVAL, sd_flush_tlb_range(a.c, mm, ~0ull << 12, SD_PAGE_SIZE));
	EXPECT_EQ(-EPERM, sd_flush_tlb_range(nullptr, mm, kVa, SD_PAGE_SIZE));
	EXPECT_EQ(-EPERM, sd_tlb_probe(nullptr, kVa, nullptr));
	// Another thread is not this CPU.
	int probe_err = 0, flush_err = 0;
	std::thread([&] {
		probe_err = sd_tlb_probe(a.c, kVa, nullptr);
		flush_err = sd_flush_tlb_range(a.c, mm, kVa, SD_PAGE_SIZE);
	}).join();
	EXPECT_EQ(-EPERM, probe_err);
	EXPECT_EQ(-EPERM, flush_err);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

} // namespace
