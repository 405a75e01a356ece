// SPDX-License-Identifier: MIT
// broadcast:select=tlb_mode (Lameter's tlb_mode) and select=ipi (Fujitsu's
// IPI-based arm64 flush), lib/strategy/tlb_mode.c: the mode follows the
// weight of the mm's cpumask (LOCAL with this CPU alone, IPI up to ipi_max
// CPUs, BROADCAST above), the IPI mode's targets flush their own TLBs, and
// the switch/flush race on the mask is forced as for active_cpu, with the
// switcher's dsb(ishst) removed as the planted bug.
#include "common.hpp"
#include "walk_race.hpp"

#include <atomic>
#include <chrono>
#include <thread>

extern "C" {
#include "core/ordering.h"
#include "mm/mm.h"
#include "strategy/broadcast.h"
}

namespace {

using sdtest::Machine;
using sdtest::total;

constexpr uint64_t kPage = 0x40000000;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

struct Counts {
	uint64_t local, ipis, tlbi, remote;
};

Counts counts(sd_machine *m)
{
	return { total(m, SD_STAT_LOCAL_ONLY_FLUSH), total(m, SD_STAT_IPI_SENT),
		 total(m, SD_STAT_TLBI_OP), total(m, SD_STAT_REMOTE_FLUSH) };
}

// CPU 0 runs the mm and write-protects (then unprotects) a page each time
// another CPU joins: alone, with one other (weight 2), with two (weight 3).
// Each joiner caches the page writable first; after the flush its write
// must be refused.
TEST(TlbMode, TheMasksWeightChoosesLocalIpiOrBroadcast)
{
	Machine mach(sdtest::config(3, "broadcast:select=tlb_mode,ipi_max=2"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	std::atomic<int> turn{0}, joined{0}, flushed{0};
	int refused[3] = {1, 1, 1};
	Counts after[3];
	auto joiner = [&](unsigned id) {
		sdtest::Attached j(mach.m, id);
		while (turn.load() != (int)id)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(j.c, mm));
		EXPECT_EQ(0, sd_access(j.c, kPage, SD_WRITE, nullptr));
		joined.store((int)id);
		while (flushed.load() < (int)id)
			EXPECT_EQ(0, sd_cpu_poll(j.c));   // answers the IPI mode's IPI
		refused[id] = sd_access(j.c, kPage, SD_WRITE, nullptr);
		joined.store(10 + (int)id);
		while (flushed.load() < 10)
			EXPECT_EQ(0, sd_cpu_poll(j.c));
		EXPECT_EQ(0, sd_switch_mm(j.c, nullptr));
	};
	std::thread t1(joiner, 1), t2(joiner, 2);
	{
		sdtest::Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, mm, kPage, SD_PAGE_SIZE, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
		for (unsigned id = 0; id < 3; id++) {
			if (id) {
				turn.store((int)id);
				while (joined.load() != (int)id)
					EXPECT_EQ(0, sd_cpu_poll(a.c));
			}
			EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
			after[id] = counts(mach.m);
			flushed.store((int)id);
			if (id) {
				while (joined.load() != 10 + (int)id)
					EXPECT_EQ(0, sd_cpu_poll(a.c));
			}
			EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, RW));
		}
		flushed.store(10);
		t1.join();
		t2.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	// Alone: local. Weight 2: one IPI, no broadcast. Weight 3: a TLBI.
	EXPECT_EQ(1u, after[0].local);
	EXPECT_EQ(0u, after[0].tlbi);
	EXPECT_GE(after[1].ipis - after[0].ipis, 1u);
	EXPECT_EQ(0u, after[1].tlbi) << "weight 2 <= ipi_max: IPIs, no broadcast";
	EXPECT_GE(after[2].tlbi, 1u) << "weight 3 > ipi_max: broadcast";
	EXPECT_EQ(-EACCES, refused[1]) << "CPU 1 flushed its own TLB in the IPI";
	EXPECT_EQ(-EACCES, refused[2]);
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(TlbMode, EachOptionBelongsToItsSelect)
{
	for (const char *s : {"broadcast:ipi_max=2", "broadcast:select=active_cpu,tlb_local=1",
			      "broadcast:select=tlb_mode,ipi_max=1024", "broadcast:reset=1",
			      "broadcast:select=tlb_mode,reset=0", "broadcast:select=tlb_mode,tlb_none=2",
			      "local:select=tlb_mode", "broadcast:select=sometimes"}) {
		sd_machine_config c = sdtest::config(1, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m);
	}
	for (const char *s : {"broadcast:select=ipi", "broadcast:select=tlb_mode,ipi_max=0,tlb_local=0",
			      "broadcast:select=tlb_mode,tlb_none=0"}) {
		sd_machine_config c = sdtest::config(1, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(0, sd_machine_create(&c, &m)) << s << ": " << sd_last_error();
		EXPECT_EQ(0, sd_machine_destroy(m));
	}
}

// ---- the switch/flush race, forced (walk_race.hpp) ----

TEST(TlbModeRace, TheSwitchersBarrierPutsItInTheMaskTheFlusherReads)
{
	sdtest::WalkRace r = sdtest::run_walk_race("broadcast:select=tlb_mode", 0);
	EXPECT_EQ(0u, r.violations);
	EXPECT_EQ(0u, r.local);
	EXPECT_EQ(-EACCES, r.write);
}

TEST(TlbModeRace, WithoutItTheFlusherStaysLocalAndTheOracleSeesIt)
{
	sdtest::WalkRace r = sdtest::run_walk_race("broadcast:select=tlb_mode", SD_ACTIVE_CPU_BREAK_NO_DSB);
	EXPECT_EQ(1u, r.local) << "CPU 1's bit was still in its store buffer";
	EXPECT_GE(r.violations, 1u);
}

}  // namespace
