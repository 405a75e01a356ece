// SPDX-License-Identifier: MIT
// The switcher-versus-flusher race of the `local` strategy (the arm64 skip-tlbi-broadcast patch), forced.
//
// Both sides store, fence, then load (store buffering). With delayed stores
// on (core/ordering.h) each side's store sits in an emulated store buffer
// until its fence, and hooks stop each side between its store and its load,
// so the test can run the two interleavings in which one side loads before
// the other has fenced. With both fences the outcome is always safe; delete
// either sd_sb_fence() in lib/strategy/local.c and one of these tests finds the
// switcher running with a stale translation (an oracle violation).
#include "common.hpp"

#include <atomic>
#include <thread>

extern "C" {
#include "core/ordering.h"
}

namespace {

constexpr uint64_t kPage = 0x40000000;

// Which points stop, and the gates the test opens.
std::atomic<bool> stop_at[SD_ORDER_NR_POINTS];
std::atomic<bool> arrived[SD_ORDER_NR_POINTS];
std::atomic<bool> go[SD_ORDER_NR_POINTS];

void hook(enum sd_order_point p, unsigned cpu)
{
	(void)cpu;
	if (!stop_at[p].load())
		return;
	arrived[p].store(true);
	while (!go[p].load())
		std::this_thread::yield();
}

void wait_arrived(enum sd_order_point p)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (!arrived[p].load()) {
		ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "never reached point " << p;
		std::this_thread::yield();
	}
}

void reset_points()
{
	for (int i = 0; i < SD_ORDER_NR_POINTS; i++) {
		stop_at[i] = false;
		arrived[i] = false;
		go[i] = false;
	}
}

// A = CPU 0 runs mm M alone and mprotects page P; B = CPU 1 ran M before
// (so its TLB caches P), went to another mm, and now switches back to M.
struct Race {
	sdtest::Machine machine{ sdtest::config(2, "local") };
	sd_mm *m = nullptr, *other = nullptr;
	sd_cpu *a = nullptr, *b = nullptr;
	std::atomic<int> step{ 0 };

	Race()
	{
		sd_mm_create(machine.m, &m);
		sd_mm_create(machine.m, &other);
	}
	~Race()
	{
		sd_mm_destroy(m);
		sd_mm_destroy(other);
	}
};

enum class Order { switcher_loads_first, flusher_loads_first };

// Returns the oracle violations seen by B's access after both sides are done.
uint64_t run_race(Order order)
{
	Race r;
	std::atomic<bool> a_ready{ false }, b_ready{ false }, start{ false };
	std::atomic<bool> a_done{ false }, b_switched{ false }, b_go_access{ false };
	uint64_t violations = 0;

	std::thread ta([&] {
		EXPECT_EQ(0, sd_cpu_attach(r.machine.m, 0, &r.a));
		EXPECT_EQ(0, sd_mmap(r.a, r.m, kPage, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(0, sd_switch_mm(r.a, r.m));
		a_ready = true;
		while (!start)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_mprotect(r.a, r.m, kPage, SD_PAGE_SIZE, SD_PROT_READ));
		a_done = true;
		while (!b_switched)
			std::this_thread::yield();
		sd_switch_mm(r.a, nullptr);
		sd_cpu_detach(r.a);
	});
	std::thread tb([&] {
		EXPECT_EQ(0, sd_cpu_attach(r.machine.m, 1, &r.b));
		while (!a_ready)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(r.b, r.m));
		EXPECT_EQ(0, sd_access(r.b, kPage, SD_READ, nullptr)); // B caches P
		EXPECT_EQ(0, sd_switch_mm(r.b, r.other));              // M runs on A alone
		b_ready = true;
		while (!start)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_switch_mm(r.b, r.m));
		b_switched = true;
		while (!b_go_access)
			std::this_thread::yield();
		// Starts after A's flush returned: must not see the old translation.
		EXPECT_EQ(0, sd_access(r.b, kPage, SD_READ, nullptr));
		sd_switch_mm(r.b, nullptr);
		sd_cpu_detach(r.b);
	});

	while (!a_ready || !b_ready)
		std::this_thread::yield();
	reset_points();
	stop_at[SD_ORDER_SWITCH_STORED] = true;
	stop_at[SD_ORDER_SWITCH_LOADED] = true;
	stop_at[SD_ORDER_FLUSH_STORED] = true;
	stop_at[SD_ORDER_FLUSH_LOADED] = true;
	sd_order_set_hook(hook);
	sd_order_set_delayed_stores(true);
	start = true;

	// Both sides have stored (their stores still buffered) and stopped.
	wait_arrived(SD_ORDER_SWITCH_STORED);
	wait_arrived(SD_ORDER_FLUSH_STORED);
	if (order == Order::switcher_loads_first) {
		go[SD_ORDER_SWITCH_STORED] = true;   // B: fence, load stale bit
		wait_arrived(SD_ORDER_SWITCH_LOADED);
		go[SD_ORDER_FLUSH_STORED] = true;    // A: fence, load nr_active
		wait_arrived(SD_ORDER_FLUSH_LOADED);
		go[SD_ORDER_FLUSH_LOADED] = true;    // A: flush, return
		while (!a_done)
			std::this_thread::yield();
		go[SD_ORDER_SWITCH_LOADED] = true;   // B: finish the switch
	} else {
		go[SD_ORDER_FLUSH_STORED] = true;    // A: fence, load nr_active
		wait_arrived(SD_ORDER_FLUSH_LOADED);
		go[SD_ORDER_SWITCH_STORED] = true;   // B: fence, load stale bit
		wait_arrived(SD_ORDER_SWITCH_LOADED);
		go[SD_ORDER_SWITCH_LOADED] = true;   // B: finish the switch
		while (!b_switched)
			std::this_thread::yield();
		go[SD_ORDER_FLUSH_LOADED] = true;    // A: flush, return
		while (!a_done)
			std::this_thread::yield();
	}
	while (!b_switched)
		std::this_thread::yield();
	b_go_access = true;
	ta.join();
	tb.join();
	sd_order_set_delayed_stores(false);
	sd_order_set_hook(nullptr);
	violations = sd_oracle_violations(r.machine.m);
	return violations;
}

TEST(LocalOrder, SwitcherLoadsBeforeFlusherFences)
{
	// Needs the switcher's fence: without it, its nr_active++ is still
	// buffered when the flusher reads nr_active == 1 and flushes locally.
	EXPECT_EQ(0u, run_race(Order::switcher_loads_first));
}

TEST(LocalOrder, FlusherLoadsBeforeSwitcherFences)
{
	// Needs the flusher's fence: without it, the stale mask is still
	// buffered when the switcher reads its stale bit and skips the flush.
	EXPECT_EQ(0u, run_race(Order::flusher_loads_first));
}

TEST(LocalOrder, NoInstrumentationWhenOff)
{
	// The ordinary path: the same scenario, hooks off, must be clean too.
	sdtest::Machine machine{ sdtest::config(2, "local") };
	sd_cpu *c;
	sd_mm *mm;
	ASSERT_EQ(0, sd_mm_create(machine.m, &mm));
	ASSERT_EQ(0, sd_cpu_attach(machine.m, 0, &c));
	ASSERT_EQ(0, sd_mmap(c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	ASSERT_EQ(0, sd_access(c, kPage, SD_WRITE, nullptr));
	ASSERT_EQ(0, sd_mprotect(c, mm, kPage, SD_PAGE_SIZE, SD_PROT_READ));
	EXPECT_EQ(-EACCES, sd_access(c, kPage, SD_WRITE, nullptr));
	sd_stats s = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(machine.m, &s)) << sd_last_error();
	EXPECT_EQ(1u, s.counter[SD_STAT_LOCAL_ONLY_FLUSH]);
	EXPECT_EQ(0u, s.counter[SD_STAT_REMOTE_INVAL]);
	sd_switch_mm(c, nullptr);
	sd_cpu_detach(c);
	sd_mm_destroy(mm);
}

} // namespace
