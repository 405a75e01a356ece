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

sd_machine_config active_cpu_config(unsigned cpus, const char *strategy)
{
	sd_machine_config c = sdtest::config(cpus, strategy);
	return c;
}

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
	Machine mach(active_cpu_config(2, "broadcast:select=active_cpu"));
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

// ---- the switch/flush race, forced ----

// CPU 0 ran the mm alone (active_cpu == 0) and write-protects page P; CPU 1
// switches to the mm for the first time, and its walker caches P (still
// writable) as soon as its TTBR0 is written, held there while CPU 0
// flushes. Returns the violations CPU 1's later write through its TLB
// makes, and that write's result.
struct RaceResult {
	uint64_t violations = 0;
	int write = 1;
	Flushes f;
};

std::atomic<bool> g_hold{false}, g_filled{false}, g_flushed{false};
sd_mm *g_mm = nullptr;

void hold_after_ttbr0(enum sd_order_point p, unsigned cpu)
{
	if (p != SD_ORDER_SWITCH_LOADED || cpu != 1 || !g_hold.exchange(false))
		return;
	// The walker, speculatively, right after the TTBR0 write.
	EXPECT_EQ(0, sd_mm_walk_speculative(sd_cpu_self(), g_mm, kPage));
	g_filled = true;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (!g_flushed && std::chrono::steady_clock::now() < deadline)
		std::this_thread::yield();
}

RaceResult run_race(unsigned bug)
{
	RaceResult r;
	Machine mach(active_cpu_config(2, "broadcast:select=active_cpu"));
	EXPECT_NE(nullptr, mach.m);
	if (!mach.m)
		return r;
	EXPECT_EQ(0, sd_mm_create(mach.m, &g_mm));
	std::atomic<bool> a_ready{false};
	g_hold = g_filled = g_flushed = false;
	sd_order_set_delayed_stores(true);
	sd_order_set_hook(hold_after_ttbr0);
	atomic_store(&sd_active_cpu_test_break, bug);
	std::thread tb([&] {
		sdtest::Attached b(mach.m, 1);
		while (!a_ready)
			std::this_thread::yield();
		g_hold = true;
		EXPECT_EQ(0, sd_switch_mm(b.c, g_mm));
		r.write = sd_access(b.c, kPage, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
	});
	{
		sdtest::Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, g_mm, kPage, SD_PAGE_SIZE, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, g_mm));
		EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
		a_ready = true;
		while (!g_filled)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_mprotect(a.c, g_mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		g_flushed = true;
		tb.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	atomic_store(&sd_active_cpu_test_break, 0u);
	sd_order_set_hook(nullptr);
	sd_order_set_delayed_stores(false);
	r.violations = total(mach.m, SD_STAT_VIOLATION);
	r.f = flushes(mach.m);
	EXPECT_EQ(0, sd_mm_destroy(g_mm));
	return r;
}

TEST(ActiveCpuRace, TheSwitchersBarrierMakesTheFlusherBroadcast)
{
	RaceResult r = run_race(0);
	EXPECT_EQ(0u, r.violations);
	EXPECT_EQ(-EACCES, r.write) << "the write-protected page, read afresh";
	EXPECT_EQ(0u, r.f.local);
	EXPECT_EQ(1u, r.f.broadcast);
}

TEST(ActiveCpuRace, WithoutItTheFlusherStaysLocalAndTheOracleSeesIt)
{
	RaceResult r = run_race(SD_ACTIVE_CPU_BREAK_NO_DSB);
	EXPECT_EQ(1u, r.f.local) << "the switcher's store was still in its store buffer";
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

Rollover run_rollover(const char *strategy, bool cpu1_stays, unsigned bug = 0)
{
	Rollover r;
	sd_machine_config cfg = sdtest::config(2, strategy);
	cfg.asid_bits = 4;
	Machine mach(cfg);
	EXPECT_NE(nullptr, mach.m);
	if (!mach.m)
		return r;
	sd_mm *mm = nullptr, *rest = nullptr;
	std::vector<sd_mm *> others(16);
	EXPECT_EQ(0, sd_mm_create(mach.m, &mm));
	EXPECT_EQ(0, sd_mm_create(mach.m, &rest));
	for (auto &o : others)
		EXPECT_EQ(0, sd_mm_create(mach.m, &o));
	atomic_store(&sd_active_cpu_test_break, bug);
	std::atomic<int> step{0};
	std::thread tb([&] {
		sdtest::Attached b(mach.m, 1);
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
		sdtest::Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, mm, kPage, SD_PAGE_SIZE, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
		step.store(1);
		while (step.load() < 2)
			std::this_thread::yield();
		// active_cpu is MULTIPLE now. Roll the ASIDs over.
		for (auto *o : others)
			EXPECT_EQ(0, sd_switch_mm(a.c, o));
		r.before = flushes(mach.m);
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_mprotect(a.c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		r.after = flushes(mach.m);
		step.store(3);
		tb.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	atomic_store(&sd_active_cpu_test_break, 0u);
	r.violations = total(mach.m, SD_STAT_VIOLATION);
	EXPECT_GE(total(mach.m, SD_STAT_ASID_ROLLOVER), 1u);
	for (auto *o : others)
		EXPECT_EQ(0, sd_mm_destroy(o));
	EXPECT_EQ(0, sd_mm_destroy(rest));
	EXPECT_EQ(0, sd_mm_destroy(mm));
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

}  // namespace
