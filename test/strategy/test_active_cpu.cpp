// SPDX-License-Identifier: MIT
// broadcast:select=active_cpu, the arm64 "don't broadcast TLBI if mm was only
// active on local CPU" series (lib/strategy/active_cpu.c): a flush of an mm
// that ran only on the flushing CPU stays local, and from a second CPU on
// every flush broadcasts, for good; v2's reset lets an mm given a fresh
// ASID start again, and not one whose reserved ASID another CPU still
// runs. The switch/flush race is forced: the switcher's walker fills its
// TLB right after its TTBR0 write, while the flusher reads active_cpu;
// with its dsb(ishst) removed (the planted bug) the oracle sees the stale
// translation.
#include "common.hpp"
#include "walk_race.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

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

// ---- the choice ----

struct Flushes {
	uint64_t local = 0, broadcast = 0;
};

Flushes flushes(sd_machine *m)
{
	return { total(m, SD_STAT_LOCAL_ONLY_FLUSH), total(m, SD_STAT_REMOTE_FLUSH) };
}

TEST(ActiveCpu, LocalWhileTheMmRanOnlyHereThenBroadcastForGood)
{
	Machine mach(sdtest::config(2, "broadcast:select=active_cpu"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	std::atomic<int> step{0};
	Flushes after_alone, after_second, after_left;
	std::thread second([&] {
		sdtest::Attached b(mach.m, 1);
		while (step.load() < 1)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(b.c, mm));
		EXPECT_EQ(0, sd_access(b.c, kPage, SD_READ, nullptr));
		step.store(2);
		while (step.load() < 3)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
		step.store(4);
	});
	{
		sdtest::Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, mm, kPage, SD_PAGE_SIZE, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		after_alone = flushes(mach.m);
		step.store(1);
		while (step.load() < 2)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, RW));
		after_second = flushes(mach.m);
		step.store(3);
		while (step.load() < 4)
			std::this_thread::yield();
		// CPU 1 left, but active_cpu never goes back from MULTIPLE.
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		after_left = flushes(mach.m);
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	second.join();
	EXPECT_EQ(1u, after_alone.local);
	EXPECT_EQ(0u, after_alone.broadcast);
	EXPECT_EQ(1u, after_second.local) << "a second CPU ran it: broadcast";
	EXPECT_EQ(1u, after_second.broadcast);
	EXPECT_EQ(1u, after_left.local) << "MULTIPLE is for good";
	EXPECT_EQ(2u, after_left.broadcast);
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(ActiveCpu, OptionsAreBroadcastsAlone)
{
	for (const char *s : {"broadcast:select=sometimes", "broadcast:reset=2",
			      "local:select=active_cpu", "local:reset=1"}) {
		sd_machine_config c = sdtest::config(1, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m)) << s;
		EXPECT_EQ(nullptr, m);
	}
}

// ---- the switch/flush race, forced (walk_race.hpp) ----

TEST(ActiveCpuRace, TheSwitchersBarrierMakesTheFlusherBroadcast)
{
	sdtest::WalkRace r = sdtest::run_walk_race("broadcast:select=active_cpu", 0);
	EXPECT_EQ(0u, r.violations);
	EXPECT_EQ(-EACCES, r.write) << "the write-protected page, read afresh";
	EXPECT_EQ(0u, r.local);
	EXPECT_EQ(1u, r.broadcast);
}

TEST(ActiveCpuRace, WithoutItTheFlusherStaysLocalAndTheOracleSeesIt)
{
	sdtest::WalkRace r = sdtest::run_walk_race("broadcast:select=active_cpu", SD_ACTIVE_CPU_BREAK_NO_DSB);
	EXPECT_EQ(1u, r.local) << "the switcher's store was still in its store buffer";
	EXPECT_GE(r.violations, 1u) << "CPU 1 wrote through its stale writable entry";
}

// ---- v2's reset at a fresh ASID ----

// 4-bit ASIDs (15 numbers) on 2 CPUs: CPU 0 runs through 16 other mms to roll
// the generation over, then runs the mm again. @cpu1_stays: CPU 1 runs the
// mm all along, so its ASID is reserved across the rollover; otherwise it
// moves on to another mm (a CPU that only went idle would keep the mm's
// ASID as its active one, reserved too, as check_and_switch_context()
// leaves active_asids alone on a switch to a kernel thread).
struct Rollover {
	Flushes before, after;
	uint64_t violations = 0;
	int write = 1;
};

// 2 CPUs with 4-bit ASIDs, the mm under test, the one CPU 1 moves on to,
// and 16 others for CPU 0 to run through: one rollover at least.
struct RolloverRig {
	Machine mach;
	sd_mm *mm = nullptr, *rest = nullptr;
	std::vector<sd_mm *> others = std::vector<sd_mm *>(16);
	static sd_machine_config cfg(const char *strategy)
	{
		sd_machine_config c = sdtest::config(2, strategy);
		c.asid_bits = 4;
		return c;
	}
	explicit RolloverRig(const char *strategy) : mach(cfg(strategy))
	{
		if (!mach.m)
			return;
		EXPECT_EQ(0, sd_mm_create(mach.m, &mm));
		EXPECT_EQ(0, sd_mm_create(mach.m, &rest));
		for (auto &o : others)
			EXPECT_EQ(0, sd_mm_create(mach.m, &o));
	}
	~RolloverRig()
	{
		if (!mach.m)
			return;
		for (auto *o : others)
			EXPECT_EQ(0, sd_mm_destroy(o));
		EXPECT_EQ(0, sd_mm_destroy(rest));
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
	// CPU @c maps the page, runs the mm and writes it, then lets CPU 1
	// run (@step 1) and waits until it has moved on (@step 2).
	void first_run(sd_cpu *c, std::atomic<int> &step)
	{
		EXPECT_EQ(0, sd_mmap(c, mm, kPage, SD_PAGE_SIZE, RW));
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(0, sd_access(c, kPage, SD_WRITE, nullptr));
		step.store(1);
		while (step.load() < 2)
			std::this_thread::yield();
	}
	void roll_over(sd_cpu *c)
	{
		for (auto *o : others)
			EXPECT_EQ(0, sd_switch_mm(c, o));
	}
};

Rollover run_rollover(const char *strategy, bool cpu1_stays, unsigned bug = 0)
{
	Rollover r;
	RolloverRig rig(strategy);
	EXPECT_NE(nullptr, rig.mach.m);
	if (!rig.mach.m)
		return r;
	sd_machine *m = rig.mach.m;
	sd_mm *mm = rig.mm, *rest = rig.rest;
	atomic_store(&sd_active_cpu_test_break, bug);
	std::atomic<int> step{0};
	std::thread tb([&] {
		sdtest::Attached b(m, 1);
		while (step.load() < 1)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(b.c, mm));
		EXPECT_EQ(0, sd_access(b.c, kPage, SD_READ, nullptr));
		if (!cpu1_stays) {
			EXPECT_EQ(0, sd_switch_mm(b.c, rest));
		}
		step.store(2);
		while (step.load() < 3)
			std::this_thread::yield();
		// Its entry must be gone: a write now is refused, not a hit
		// (the oracle counts one that hits).
		if (cpu1_stays)
			r.write = sd_access(b.c, kPage, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
	});
	{
		sdtest::Attached a(m, 0);
		rig.first_run(a.c, step);
		// active_cpu is MULTIPLE now. Roll the ASIDs over.
		rig.roll_over(a.c);
		r.before = flushes(m);
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		r.after = flushes(m);
		step.store(3);
		tb.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	atomic_store(&sd_active_cpu_test_break, 0u);
	r.violations = total(m, SD_STAT_VIOLATION);
	EXPECT_GE(total(m, SD_STAT_ASID_ROLLOVER), 1u);
	return r;
}

TEST(ActiveCpuReset, AFreshAsidStartsAgainFromNone)
{
	Rollover v2 = run_rollover("broadcast:select=active_cpu", false);
	EXPECT_EQ(1u, v2.after.local - v2.before.local) << "v2: reset at the fresh ASID";
	Rollover v1 = run_rollover("broadcast:select=active_cpu,reset=0", false);
	EXPECT_EQ(0u, v1.after.local - v1.before.local) << "v1: MULTIPLE for good";
	EXPECT_EQ(0u, v2.violations + v1.violations);
}

TEST(ActiveCpuReset, NotWhileACpuStillRunsTheMmUnderItsReservedAsid)
{
	Rollover ok = run_rollover("broadcast:select=active_cpu", true);
	EXPECT_EQ(0u, ok.after.local - ok.before.local);
	EXPECT_EQ(0u, ok.violations);
	EXPECT_EQ(-EACCES, ok.write);
	Rollover bad = run_rollover("broadcast:select=active_cpu", true,
				    SD_ACTIVE_CPU_BREAK_RESET_RESERVED);
	EXPECT_EQ(1u, bad.after.local - bad.before.local) << "reset at the reserved ASID";
	EXPECT_GE(bad.violations, 1u) << "CPU 1 kept its writable entry";
}

// v2's reset must be made before the mm's new id is public: CPU 0 gives
// the mm a fresh ASID and is held right after publishing it; meanwhile
// CPU 1 switches in under the new id and caches the page. Reset first
// (new_context(), under the lock), CPU 1 reads NONE and claims, and CPU 0
// then makes it MULTIPLE: its flush broadcasts. Reset late (the planted
// bug, where the first version of this file made it), CPU 1 read the old
// MULTIPLE and did nothing, CPU 0's reset wiped it out and CPU 0 claims
// alone: its flush stays local and CPU 1 keeps a stale translation.
std::atomic<int> g_phase{0};

void hold_after_publish(enum sd_order_point p, unsigned cpu)
{
	if (p != SD_ORDER_ASID_PUBLISHED || cpu != 0 || g_phase.load() != 1)
		return;
	g_phase = 2;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (g_phase.load() != 3 && std::chrono::steady_clock::now() < deadline)
		std::this_thread::yield();
}

Rollover run_reset_race(unsigned bug)
{
	Rollover r;
	RolloverRig rig("broadcast:select=active_cpu");
	EXPECT_NE(nullptr, rig.mach.m);
	if (!rig.mach.m)
		return r;
	sd_machine *m = rig.mach.m;
	sd_mm *mm = rig.mm, *rest = rig.rest;
	g_phase = 0;
	atomic_store(&sd_active_cpu_test_break, bug);
	sd_order_set_hook(hold_after_publish);
	std::atomic<int> step{0};
	std::thread tb([&] {
		sdtest::Attached b(m, 1);
		while (step.load() < 1)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(b.c, mm));            // MULTIPLE
		EXPECT_EQ(0, sd_switch_mm(b.c, rest));          // its ASID not reserved
		step.store(2);
		while (g_phase.load() != 2)
			std::this_thread::yield();
		// CPU 0 is held with the new id public: switch in under it.
		EXPECT_EQ(0, sd_switch_mm(b.c, mm));
		EXPECT_EQ(0, sd_access(b.c, kPage, SD_READ, nullptr));
		g_phase = 3;
		while (step.load() < 3)
			std::this_thread::yield();
		r.write = sd_access(b.c, kPage, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
	});
	{
		sdtest::Attached a(m, 0);
		rig.first_run(a.c, step);
		rig.roll_over(a.c);
		g_phase = 1;
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));            // fresh ASID, held
		r.before = flushes(m);
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		r.after = flushes(m);
		step.store(3);
		tb.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	sd_order_set_hook(nullptr);
	atomic_store(&sd_active_cpu_test_break, 0u);
	EXPECT_EQ(3, g_phase.load()) << "the interleaving was not forced";
	r.violations = total(m, SD_STAT_VIOLATION);
	return r;
}

TEST(ActiveCpuReset, ACpuSwitchingInUnderTheNewIdSeesTheReset)
{
	Rollover ok = run_reset_race(0);
	EXPECT_EQ(0u, ok.after.local - ok.before.local);
	EXPECT_EQ(0u, ok.violations);
	EXPECT_EQ(-EACCES, ok.write);
	Rollover late = run_reset_race(SD_ACTIVE_CPU_BREAK_RESET_LATE);
	EXPECT_EQ(1u, late.after.local - late.before.local) << "CPU 0 claimed alone";
	EXPECT_GE(late.violations, 1u) << "CPU 1 wrote through its stale entry";
}

}  // namespace
