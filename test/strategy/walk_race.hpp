// SPDX-License-Identifier: MIT
// The arm64 switch/flush race of the flush-selection modes (active_cpu,
// tlb_mode), forced the same way for each: CPU 0 ran the mm alone and
// write-protects page P; CPU 1 switches to the mm for the first time, and
// its walker caches P (still writable) as soon as its TTBR0 is written
// (sd_mm_walk_speculative() at SD_ORDER_SWITCH_LOADED), held there while
// CPU 0 flushes, with delayed stores on. The result says what the flush
// did and whether CPU 1's later write went through a stale entry.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "common.hpp"

extern "C" {
#include "core/ordering.h"
#include "mm/mm.h"
#include "strategy/broadcast.h"
}

namespace sdtest {

struct WalkRace {
	uint64_t violations = 0, local = 0, broadcast = 0;
	int write = 1;         // CPU 1's write after the flush: -EACCES when clean
};

namespace walk_race_detail {

constexpr uint64_t kPage = 0x40000000;
inline std::atomic<bool> hold{false}, filled{false}, flushed{false};
inline sd_mm *mm = nullptr;

inline void hold_after_ttbr0(enum sd_order_point p, unsigned cpu)
{
	if (p != SD_ORDER_SWITCH_LOADED || cpu != 1 || !hold.exchange(false))
		return;
	EXPECT_EQ(0, sd_mm_walk_speculative(sd_cpu_self(), mm, kPage));
	filled = true;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (!flushed && std::chrono::steady_clock::now() < deadline)
		std::this_thread::yield();
}

}  // namespace walk_race_detail

// Runs the race on a 2-CPU machine of @strategy with @bug planted
// (sd_active_cpu_test_break). The flush must not need CPU 1 to answer an
// IPI: CPU 1 is held with interrupts off.
inline WalkRace run_walk_race(const char *strategy, unsigned bug)
{
	namespace d = walk_race_detail;
	WalkRace r;
	Machine mach(config(2, strategy));
	EXPECT_NE(nullptr, mach.m);
	if (!mach.m)
		return r;
	EXPECT_EQ(0, sd_mm_create(mach.m, &d::mm));
	std::atomic<bool> a_ready{false};
	d::hold = d::filled = d::flushed = false;
	sd_order_set_delayed_stores(true);
	sd_order_set_hook(d::hold_after_ttbr0);
	atomic_store(&sd_active_cpu_test_break, bug);
	std::thread tb([&] {
		Attached b(mach.m, 1);
		while (!a_ready)
			std::this_thread::yield();
		d::hold = true;
		EXPECT_EQ(0, sd_switch_mm(b.c, d::mm));
		r.write = sd_access(b.c, d::kPage, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
	});
	{
		Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, d::mm, d::kPage, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
		EXPECT_EQ(0, sd_switch_mm(a.c, d::mm));
		EXPECT_EQ(0, sd_access(a.c, d::kPage, SD_WRITE, nullptr));
		a_ready = true;
		while (!d::filled)
			std::this_thread::yield();
		EXPECT_EQ(0, sd_mprotect(a.c, d::mm, d::kPage, SD_PAGE_SIZE, SD_PROT_READ));
		d::flushed = true;
		tb.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	atomic_store(&sd_active_cpu_test_break, 0u);
	sd_order_set_hook(nullptr);
	sd_order_set_delayed_stores(false);
	r.violations = total(mach.m, SD_STAT_VIOLATION);
	r.local = total(mach.m, SD_STAT_LOCAL_ONLY_FLUSH);
	r.broadcast = total(mach.m, SD_STAT_REMOTE_FLUSH);
	EXPECT_EQ(0, sd_mm_destroy(d::mm));
	return r;
}

}  // namespace sdtest
