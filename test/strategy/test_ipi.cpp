// SPDX-License-Identifier: MIT
// The `ipi` strategy's switch/flush races, forced, and the lazy mm_cpumask
// costs, counted (arch/x86/mm/tlb.c: switch_mm_irqs_off(), flush_tlb_func()).
//
// Races: CPU B ran mm M and cached page P, left for another mm, and is now
// switching back to M. A hook stops B right after it read M's tlb_gen (so it
// will not flush at switch-in) until CPU A, running M, has revoked write on
// P and chosen its IPI targets. B then finishes its switch and writes P once
// A's mprotect has returned. Only an IPI to B can save it now, so:
//   - CVE-2025-37964: A must IPI a CPU whose loaded_mm is SWITCHING;
//   - CVE-2025-40174: with the lazy mask B's bit is already set, no RMW
//     publishes SWITCHING, and only the explicit fence makes A see it
//     (delayed stores, core/ordering.h, keep it buffered otherwise).
// Each test runs the fixed code (no stale hit), then the same interleaving
// with the bug planted back (sd_ipi_test_break: a stale hit), so every run
// shows the test can tell the two apart.
//
// Counters: Dave Hansen's forked-worker case. A task's mm runs on A, moves
// to B, and B frees memory. The eager mask never IPIs A; the lazy mask IPIs
// it once (the "wrong CPU" IPI that clears its bit) and only when a trim is
// due, or when page tables are freed.
#include "common.hpp"

#include <atomic>
#include <functional>
#include <thread>

extern "C" {
#include "core/ordering.h"
#include "strategy/ipi.h"
#include "mm/mm.h"
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kA = 0, kB = 1;
constexpr uint64_t kPage = 0x40000000;

uint64_t cpu_stat(sd_machine *m, unsigned cpu, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_cpu(m, cpu, &s));
	return s.counter[id];
}

// Whether @cpu's bit is set in @mm's mm_cpumask (the strategy's own state:
// the public API has no view of it).
bool in_cpumask(sd_mm *mm, unsigned cpu)
{
	return sd_cpumask_test(&static_cast<sd_ipi_mm *>(mm->strategy)->cpumask, cpu);
}

// Spin (yielding) until @pred; false after 20 s, so a lost wake-up fails
// the test instead of hanging it.
bool wait_for(const std::function<bool()> &pred)
{
	auto deadline = Clock::now() + std::chrono::seconds(20);
	while (!pred()) {
		if (Clock::now() > deadline)
			return false;
		std::this_thread::yield();
	}
	return true;
}

// ---- forced switch/flush interleaving ----

// The hook: B waits at SWITCH_LOADED (interrupts off, old tlb_gen read)
// until A reaches FLUSH_LOADED (targets chosen, IPIs posted). It must not
// wait for A's flush to end: A waits for B's ack, which B can only give
// once its interrupts are back on, after the switch.
std::atomic<bool> armed{ false };
std::atomic<bool> b_loaded{ false };
std::atomic<bool> a_loaded{ false };
std::atomic<bool> hook_timed_out{ false };

void race_hook(enum sd_order_point p, unsigned cpu)
{
	if (!armed.load())
		return;
	if (p == SD_ORDER_FLUSH_LOADED && cpu == kA) {
		a_loaded = true;
	} else if (p == SD_ORDER_SWITCH_LOADED && cpu == kB) {
		b_loaded = true;
		if (!wait_for([] { return a_loaded.load(); }))
			hook_timed_out = true;
	}
}

struct RaceResult {
	uint64_t violations = 0;
	int write_err = 0;          // B's write to P after A's mprotect returned
	uint64_t b_ipis = 0;        // IPIs B ran during the race
	uint64_t b_flushes = 0;     // flushes B did then (IPI or switch-in)
};

// Runs the interleaving once on a fresh machine running @spec, with the
// planted bugs @broken and, if @delayed, emulated store buffers.
RaceResult run_switch_race(const char *spec, unsigned broken, bool delayed)
{
	sdtest::Machine machine{ sdtest::config(2, spec) };
	sd_mm *m = nullptr, *other = nullptr;
	std::atomic<bool> a_ready{ false }, b_ready{ false }, a_done{ false }, b_done{ false };
	RaceResult r;
	uint64_t b_recv0 = 0, b_flush0 = 0;

	// Before any thread starts: A waits on b_loaded from the last run.
	b_loaded = false;
	a_loaded = false;
	hook_timed_out = false;

	EXPECT_EQ(0, sd_ipi_test_break(machine.m, broken)) << sd_last_error();
	EXPECT_EQ(0, sd_mm_create(machine.m, &m));
	EXPECT_EQ(0, sd_mm_create(machine.m, &other));

	std::thread ta([&] {
		sdtest::Attached a(machine.m, kA);
		EXPECT_EQ(0, sd_mmap(a.c, m, kPage, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(0, sd_switch_mm(a.c, m));
		EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
		a_ready = true;
		// B is inside its switch back to M, past its tlb_gen read.
		EXPECT_TRUE(wait_for([&] { return b_loaded.load(); }));
		EXPECT_EQ(0, sd_mprotect(a.c, m, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		a_done = true;
		EXPECT_TRUE(wait_for([&] { return b_done.load(); }));
		sd_switch_mm(a.c, nullptr);
	});
	std::thread tb([&] {
		sdtest::Attached b(machine.m, kB);
		EXPECT_TRUE(wait_for([&] { return a_ready.load(); }));
		EXPECT_EQ(0, sd_switch_mm(b.c, m));
		EXPECT_EQ(0, sd_access(b.c, kPage, SD_WRITE, nullptr)); // B caches P writable
		EXPECT_EQ(0, sd_switch_mm(b.c, other));
		b_recv0 = cpu_stat(machine.m, kB, SD_STAT_IPI_RECV);
		b_flush0 = cpu_stat(machine.m, kB, SD_STAT_FLUSH_PARTIAL) +
			   cpu_stat(machine.m, kB, SD_STAT_FLUSH_FULL);
		b_ready = true;
		EXPECT_TRUE(wait_for([&] { return armed.load(); }));
		EXPECT_EQ(0, sd_switch_mm(b.c, m)); // stops in the hook
		// Only after A's flush returned is a stale hit a violation.
		EXPECT_TRUE(wait_for([&] { return a_done.load(); }));
		r.write_err = sd_access(b.c, kPage, SD_WRITE, nullptr);
		r.b_ipis = cpu_stat(machine.m, kB, SD_STAT_IPI_RECV) - b_recv0;
		r.b_flushes = cpu_stat(machine.m, kB, SD_STAT_FLUSH_PARTIAL) +
			      cpu_stat(machine.m, kB, SD_STAT_FLUSH_FULL) - b_flush0;
		b_done = true;
		sd_switch_mm(b.c, nullptr);
	});

	EXPECT_TRUE(wait_for([&] { return a_ready.load() && b_ready.load(); }));
	sd_order_set_hook(race_hook);
	sd_order_set_delayed_stores(delayed);
	armed = true;
	ta.join();
	tb.join();
	armed = false;
	sd_order_set_delayed_stores(false);
	sd_order_set_hook(nullptr);
	EXPECT_FALSE(hook_timed_out.load()) << "A never reached FLUSH_LOADED";

	r.violations = sd_oracle_violations(machine.m);
	EXPECT_EQ(0, sd_mm_destroy(m));
	EXPECT_EQ(0, sd_mm_destroy(other));
	return r;
}

// The fixed code: B was SWITCHING when A chose its targets, so A sent the
// IPI; it ran when B's switch turned interrupts back on, one generation
// behind, hence a per-page flush. The write then faults on the new PTE.
void expect_saved(const RaceResult &r)
{
	EXPECT_EQ(0u, r.violations);
	EXPECT_EQ(-EACCES, r.write_err) << "a write succeeded on a read-only page";
	EXPECT_EQ(1u, r.b_ipis);
	EXPECT_EQ(1u, r.b_flushes);
}

// The bug planted back: A skipped B, B kept the old slot, and the write hit
// the stale writable entry.
void expect_stale_hit(const RaceResult &r)
{
	EXPECT_GE(r.violations, 1u) << "the planted bug went unnoticed: the test lost its power";
	EXPECT_EQ(0, r.write_err);
	EXPECT_EQ(0u, r.b_ipis);
	EXPECT_EQ(0u, r.b_flushes);
}

// Each test runs the interleaving with the fix, then with the bug planted
// back: one run shows both that the fix holds and that the test would see
// it go.

class SwitchingRule : public ::testing::TestWithParam<const char *> {};

TEST_P(SwitchingRule, SwitchingCpuMustBeIpid)
{
	// CVE-2025-37964: B's SWITCHING store is visible (delayed stores off);
	// what matters is that the flusher counts it as "send".
	{
		SCOPED_TRACE("fixed");
		expect_saved(run_switch_race(GetParam(), 0, false));
	}
	{
		SCOPED_TRACE("SD_IPI_BREAK_SWITCHING_RULE");
		expect_stale_hit(run_switch_race(GetParam(), SD_IPI_BREAK_SWITCHING_RULE, false));
	}
}

INSTANTIATE_TEST_SUITE_P(Cpumask, SwitchingRule,
			 ::testing::Values("ipi:cpumask=eager", "ipi:cpumask=lazy"),
			 [](const auto &info) {
				 return std::string(info.index ? "Lazy" : "Eager");
			 });

// A trim would IPI B whatever its loaded_mm says and hide the fence; an
// hour-long period keeps it out of the way.
constexpr const char *kLazyNoTrim = "ipi:cpumask=lazy,trim_ms=3600000";

TEST(SwitchFence, LazyMaskNeedsExplicitFence)
{
	// CVE-2025-40174: B's bit in M's mask survived its switch-out, so the
	// RMW is skipped and only the explicit fence drains SWITCHING before
	// the tlb_gen read. Without it the store is still buffered when A
	// reads B's loaded_mm: A sees the other mm, not SWITCHING, and skips B.
	{
		SCOPED_TRACE("fixed");
		expect_saved(run_switch_race(kLazyNoTrim, 0, true));
	}
	{
		SCOPED_TRACE("SD_IPI_BREAK_SWITCH_FENCE");
		expect_stale_hit(run_switch_race(kLazyNoTrim, SD_IPI_BREAK_SWITCH_FENCE, true));
	}
}

TEST(SwitchFence, EagerMaskNeedsNoExplicitFence)
{
	// The eager mask cleared B's bit at switch-out, so the switch back
	// always takes the RMW, a full barrier: removing the fence changes
	// nothing.
	{
		SCOPED_TRACE("fixed");
		expect_saved(run_switch_race("ipi:cpumask=eager", 0, true));
	}
	{
		SCOPED_TRACE("SD_IPI_BREAK_SWITCH_FENCE");
		expect_saved(run_switch_race("ipi:cpumask=eager", SD_IPI_BREAK_SWITCH_FENCE, true));
	}
}

// ---- Dave Hansen's forked-worker case ----

constexpr uint64_t kHeap = 0x10000000;    // 8 pages: frees that keep the table
constexpr unsigned kHeapPages = 8;
constexpr uint64_t kLone = 0x20000000;    // 1 page alone in its leaf table

// The task's mm runs on A and touches its memory; A then leaves it (runs
// another mm, or goes idle) and the task runs on B, the calling thread. A's
// thread stays attached, answering IPIs, until the test ends.
struct ForkedWorker {
	sdtest::Machine machine;
	sd_mm *task = nullptr, *other = nullptr;
	Clock::time_point created;
	std::atomic<bool> a_left{ false }, finish{ false };
	std::thread a;
	sd_cpu *b = nullptr;

	ForkedWorker(const char *spec, bool a_idles) : machine(sdtest::config(2, spec))
	{
		EXPECT_EQ(0, sd_mm_create(machine.m, &task));
		created = Clock::now();
		EXPECT_EQ(0, sd_mm_create(machine.m, &other));
		a = std::thread([this, a_idles] { run_a(a_idles); });
		EXPECT_TRUE(wait_for([this] { return a_left.load(); }));
		EXPECT_EQ(0, sd_cpu_attach(machine.m, kB, &b));
		EXPECT_EQ(0, sd_switch_mm(b, task));
	}

	~ForkedWorker()
	{
		sd_switch_mm(b, nullptr);
		EXPECT_EQ(0, sd_cpu_detach(b));
		finish = true;
		a.join();
		EXPECT_EQ(0, sd_mm_destroy(task));
		EXPECT_EQ(0, sd_mm_destroy(other));
	}

	void run_a(bool idles)
	{
		sdtest::Attached at(machine.m, kA);
		sd_cpu *c = at.c;
		EXPECT_EQ(0, sd_mmap(c, task, kHeap, kHeapPages * SD_PAGE_SIZE,
				     SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(0, sd_mmap(c, task, kLone, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(0, sd_switch_mm(c, task));
		for (unsigned i = 0; i < kHeapPages; i++)
			EXPECT_EQ(0, sd_access(c, kHeap + i * SD_PAGE_SIZE, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_access(c, kLone, SD_WRITE, nullptr));
		EXPECT_EQ(0, idles ? sd_cpu_idle(c) : sd_switch_mm(c, other));
		a_left = true;
		while (!finish)
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		sd_switch_mm(c, nullptr);
	}

	uint64_t a_stat(sd_stat id) { return cpu_stat(machine.m, kA, id); }
	uint64_t b_stat(sd_stat id) { return cpu_stat(machine.m, kB, id); }

	// Frees that leave every page table in place: one page dropped, one
	// page of the larger mapping unmapped (and mapped again, refilled, for
	// the next call).
	void free_keeping_tables(unsigned i)
	{
		uint64_t va = kHeap + (i % kHeapPages) * SD_PAGE_SIZE;
		ASSERT_EQ(0, sd_access(b, va, SD_WRITE, nullptr));
		ASSERT_EQ(0, sd_madvise_dontneed(b, task, va, SD_PAGE_SIZE));
		ASSERT_EQ(0, sd_munmap(b, task, va, SD_PAGE_SIZE));
		ASSERT_EQ(0, sd_mmap(b, task, va, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	}

	// A free that empties a leaf table: the flush names freed tables.
	void free_table()
	{
		ASSERT_EQ(0, sd_munmap(b, task, kLone, SD_PAGE_SIZE));
		ASSERT_EQ(0, sd_mmap(b, task, kLone, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		ASSERT_EQ(0, sd_access(b, kLone, SD_WRITE, nullptr));
	}

	void sleep_past_trim(std::chrono::milliseconds period, Clock::time_point since)
	{
		std::this_thread::sleep_until(since + 2 * period);
	}
};

TEST(ForkedWorker, EagerNeverIpisTheCpuTheTaskLeft)
{
	ForkedWorker w("ipi:cpumask=eager", false);
	EXPECT_FALSE(in_cpumask(w.task, kA)); // cleared at switch-out
	for (unsigned i = 0; i < 4; i++)
		w.free_keeping_tables(i);
	w.free_table();
	EXPECT_EQ(0u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(0u, w.b_stat(SD_STAT_IPI_SENT));
	EXPECT_EQ(0u, w.b_stat(SD_STAT_CPUMASK_TRIM)); // eager never trims
	EXPECT_EQ(0u, sd_oracle_violations(w.machine.m));
}

TEST(ForkedWorker, LazyOneWrongCpuIpiOnceTrimIsDue)
{
	constexpr auto period = std::chrono::milliseconds(50);
	ForkedWorker w("ipi:cpumask=lazy,trim_ms=50", false);
	EXPECT_TRUE(in_cpumask(w.task, kA)); // lazy: left set at switch-out

	// The mm's first trim is due one period after its creation: the first
	// flush IPIs A, which finds the mm not loaded and clears its bit.
	w.sleep_past_trim(period, w.created);
	ASSERT_EQ(0, sd_madvise_dontneed(w.b, w.task, kHeap, SD_PAGE_SIZE));
	EXPECT_EQ(1u, w.b_stat(SD_STAT_CPUMASK_TRIM));
	EXPECT_EQ(1u, w.b_stat(SD_STAT_IPI_SENT));
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_UNNEEDED));
	EXPECT_FALSE(in_cpumask(w.task, kA));
	EXPECT_TRUE(in_cpumask(w.task, kB));

	// The rest of the burst: A's bit is gone, so none reaches it.
	for (unsigned i = 0; i < 4; i++)
		w.free_keeping_tables(i);
	// Another period later a trim would be due again, but B alone is in
	// the mask, so none is even considered; freed tables do not reach A
	// either.
	w.sleep_past_trim(period, Clock::now());
	w.free_keeping_tables(5);
	w.free_table();
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(1u, w.b_stat(SD_STAT_IPI_SENT));
	EXPECT_EQ(1u, w.b_stat(SD_STAT_CPUMASK_TRIM));
	EXPECT_EQ(0u, sd_oracle_violations(w.machine.m));
}

TEST(ForkedWorker, LazyBeforeTrimIsDueSkipsAndKeepsTheBit)
{
	// The defaults: lazy mask, trim once a second.
	ForkedWorker w("ipi", false);
	for (unsigned i = 0; i < 4; i++)
		w.free_keeping_tables(i);
	if (Clock::now() - w.created > std::chrono::milliseconds(800))
		GTEST_SKIP() << "too slow: the 1 s trim period may have passed";
	EXPECT_EQ(0u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(0u, w.b_stat(SD_STAT_IPI_SENT));
	EXPECT_EQ(0u, w.b_stat(SD_STAT_CPUMASK_TRIM));
	EXPECT_TRUE(in_cpumask(w.task, kA)); // skipped: harmless, stays set

	// Freed tables IPI every CPU in the mask, trim or not: A gets one
	// unneeded IPI and leaves the mask; the next one does not reach it.
	w.free_table();
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_UNNEEDED));
	EXPECT_FALSE(in_cpumask(w.task, kA));
	w.free_table();
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(0u, sd_oracle_violations(w.machine.m));
}

TEST(ForkedWorker, LazyIdleCpuIsSkippedEvenWhenTrimIsDue)
{
	// A went idle with the task's mm still loaded (lazy TLB): not a wrong
	// CPU, but a lazy one, which page-only flushes never IPI.
	constexpr auto period = std::chrono::milliseconds(50);
	ForkedWorker w("ipi:cpumask=lazy,trim_ms=50", true);
	w.sleep_past_trim(period, w.created);
	ASSERT_EQ(0, sd_madvise_dontneed(w.b, w.task, kHeap, SD_PAGE_SIZE));
	EXPECT_EQ(1u, w.b_stat(SD_STAT_CPUMASK_TRIM));
	EXPECT_EQ(1u, w.b_stat(SD_STAT_LAZY_SKIP));
	EXPECT_EQ(0u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_TRUE(in_cpumask(w.task, kA));

	// Freed tables must reach it: it stops using them by leaving for
	// init_mm. The mm was loaded, so the IPI was needed.
	w.free_table();
	EXPECT_EQ(1u, w.a_stat(SD_STAT_IPI_RECV));
	EXPECT_EQ(0u, w.a_stat(SD_STAT_IPI_UNNEEDED));
	EXPECT_EQ(0u, sd_oracle_violations(w.machine.m));
}

} // namespace
