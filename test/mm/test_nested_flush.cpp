// SPDX-License-Identifier: MIT
// Per-call flush semantics (invariant 1, per call): a mapping change that
// finds its pages already changed by a concurrent call whose flush is still
// in flight must not return before the translations that call made stale
// are gone everywhere: mm_tlb_flush_nested() in tlb_finish_mmu() for zaps
// that race, munmap's write-held mmap_lock for an mmap of the same range.
//
// The race is forced, not hoped for: the first call (CPU 0) is held at the
// order point SD_ORDER_CHANGE_FLUSH, after its PTE edits and before its
// flush, until CPUs 1 and 2 have made their checking accesses. CPU 1 runs
// the second call on the same page and then accesses it; CPU 2 accesses it
// once CPU 1's call has returned. Both had the page cached beforehand, so
// only the second call's own flush can keep them off the old translation.
// The oracle (each call raises its range's floors to its own version once
// its flush is done) counts any access served by it.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "common.hpp"
extern "C" {
#include "core/ordering.h"
}

namespace {

constexpr uint64_t kVa = 0x40000000ull;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

enum class Second { Madvise, Munmap, MprotectRead, MmapAfterMunmap, ReclaimBatch,
		    MadviseAfterReclaim };

const char *name_of(Second s)
{
	switch (s) {
	case Second::Madvise: return "madvise after madvise";
	case Second::Munmap: return "munmap after madvise";
	case Second::MprotectRead: return "mprotect(R) after madvise";
	case Second::MmapAfterMunmap: return "mmap after munmap";
	case Second::ReclaimBatch: return "reclaim + batch flush after madvise";
	case Second::MadviseAfterReclaim: return "madvise after reclaim (batch not flushed)";
	}
	return "?";
}

// What an access that starts after the second call returned must see.
int expected_write(Second s)
{
	switch (s) {
	case Second::Munmap: return -EFAULT;
	case Second::MprotectRead: return -EACCES;
	default: return 0;       // a fresh frame, populated on the fault
	}
}

struct Race {
	Second second;
	sd_mm *mm = nullptr;
	sd_tlbbatch *batch = nullptr;
	std::atomic<unsigned> filled{0};
	std::atomic<bool> cpu0_held{false};     // CPU 0 is at its flush, held
	std::atomic<bool> cpu0_released{false}; // ...and let go
	bool second_waited = false;             // CPU 1's call returned only after it
	std::atomic<bool> second_returned{false};
	std::atomic<unsigned> checked{0};       // CPUs 1 and 2 made their access
	std::atomic<unsigned> finished{0};
	int write1 = 1, write2 = 1;
};

Race *g_race;

// The calls that take the mmap_lock for write: a second one waits for the
// first call's flush, which runs under the lock the kernel holds for it
// (madvise: read; munmap, mprotect: write), so it cannot race it at all.
bool writes(Second s)
{
	return s == Second::Munmap || s == Second::MprotectRead || s == Second::MmapAfterMunmap;
}

// Whether the first call's flush keeps a writer out: the built-in
// strategies flush under the lock; a user strategy's flush runs after it
// (mm/change.c, finish_change_locked()).
bool flushes_under_lock(const char *strategy)
{
	return std::string(strategy) != "nested_guide";
}

bool g_under_lock;

// How long CPU 0 stays held when CPU 1's call cannot get past it: long
// enough that a call not waiting for the lock would have returned.
constexpr auto kHeldForWriter = std::chrono::milliseconds(30);

// Where CPU 0's first call is held: before its flush; a reclaim, whose
// flush is its batch's, once its zap is done and its split locks dropped
// (the mmap_lock, for read, does not keep CPU 1's madvise out).
enum sd_order_point held_at(Second s)
{
	return s == Second::MadviseAfterReclaim ? SD_ORDER_RECLAIM_ZAPPED : SD_ORDER_CHANGE_FLUSH;
}

// Runs on CPU 0's thread with interrupts on: it keeps answering IPIs while
// it sleeps here, as a CPU that is merely slow to reach its flush does.
void hold_first_flush(enum sd_order_point point, unsigned cpu)
{
	Race *r = g_race;

	if (!r || point != held_at(r->second) || cpu != 0 || r->cpu0_held.load())
		return;
	r->cpu0_held.store(true);
	const auto t0 = std::chrono::steady_clock::now();
	while (r->checked.load() < 2 &&
	       !(g_under_lock && writes(r->second) &&
		 std::chrono::steady_clock::now() - t0 > kHeldForWriter))
		std::this_thread::sleep_for(std::chrono::microseconds(50));
	r->cpu0_released.store(true);
}

using sdtest::wait_for;

void first_call(sd_cpu *c, Race *r)
{
	if (r->second == Second::MadviseAfterReclaim) {
		EXPECT_EQ(0, sd_reclaim(c, r->batch, r->mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
		EXPECT_EQ(0, sd_tlbbatch_flush(c, r->batch)) << sd_last_error();
	} else if (r->second == Second::MmapAfterMunmap)
		EXPECT_EQ(0, sd_munmap(c, r->mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
	else
		EXPECT_EQ(0, sd_madvise_dontneed(c, r->mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
}

void second_call(sd_cpu *c, Race *r)
{
	switch (r->second) {
	case Second::Madvise:
	case Second::MadviseAfterReclaim:
		EXPECT_EQ(0, sd_madvise_dontneed(c, r->mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
		break;
	case Second::Munmap:
		EXPECT_EQ(0, sd_munmap(c, r->mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
		break;
	case Second::MprotectRead:
		EXPECT_EQ(0, sd_mprotect(c, r->mm, kVa, SD_PAGE_SIZE, SD_PROT_READ))
			<< sd_last_error();
		break;
	case Second::MmapAfterMunmap:
		EXPECT_EQ(0, sd_mmap(c, r->mm, kVa, SD_PAGE_SIZE, RW)) << sd_last_error();
		break;
	case Second::ReclaimBatch:
		EXPECT_EQ(0, sd_reclaim(c, r->batch, r->mm, kVa, SD_PAGE_SIZE)) << sd_last_error();
		EXPECT_EQ(0, sd_tlbbatch_flush(c, r->batch)) << sd_last_error();
		break;
	}
}

void race_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<Race *>(p);
	const unsigned id = sd_cpu_id(c);

	ASSERT_EQ(0, sd_switch_mm(c, r->mm));
	EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, nullptr));    // cached RW everywhere
	r->filled.fetch_add(1);
	wait_for(c, [&] { return r->filled.load() == 3; });
	if (id == 0) {
		first_call(c, r);
	} else if (id == 1) {
		wait_for(c, [&] { return r->cpu0_held.load(); });
		second_call(c, r);
		r->second_waited = r->cpu0_released.load();
		r->second_returned.store(true);
		r->write1 = sd_access(c, kVa, SD_WRITE, nullptr);
		r->checked.fetch_add(1);
	} else if (id == 2) {
		wait_for(c, [&] { return r->second_returned.load(); });
		r->write2 = sd_access(c, kVa, SD_WRITE, nullptr);
		r->checked.fetch_add(1);
	}
	r->finished.fetch_add(1);
	wait_for(c, [&] { return r->finished.load() == 3; });
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

class NestedFlush : public ::testing::TestWithParam<std::tuple<const char *, Second>> {};

TEST_P(NestedFlush, SecondCallReturnsOnlyOnceTheOldTranslationIsGone)
{
	const char *strategy = std::get<0>(GetParam());
	const Second second = std::get<1>(GetParam());
	const std::string what = std::string(strategy) + ", " + name_of(second);
	sdtest::GuideStrategy user("nested_guide");
	sd_machine_config cfg = sdtest::config(3, strategy);
	sdtest::Machine m(cfg);
	ASSERT_NE(nullptr, m.m);
	Race r;
	r.second = second;
	{
		sdtest::Attached a(m.m, 0);
		ASSERT_EQ(0, sd_mm_create(m.m, &r.mm));
		// A second page keeps the leaf table linked after an munmap of
		// the first, so no freed table forces a flush by itself.
		ASSERT_EQ(0, sd_mmap(a.c, r.mm, kVa, 2 * SD_PAGE_SIZE, RW));
	}
	ASSERT_EQ(0, sd_tlbbatch_create(m.m, &r.batch));
	g_race = &r;
	g_under_lock = flushes_under_lock(strategy);
	sd_order_set_hook(hold_first_flush);
	{
		sdtest::Watchdog w(what + ": CPU 0 held before its flush until CPUs 1 and 2 "
				   "accessed; CPU 1's second call or an IPI wait is stuck", 60);
		EXPECT_EQ(0, sd_machine_run(m.m, race_body, &r)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	g_race = nullptr;
	EXPECT_TRUE(r.cpu0_held.load()) << what << ": the first call never reached its flush";
	if (writes(second) && flushes_under_lock(strategy)) {
		EXPECT_TRUE(r.second_waited)
			<< what << ": a writer returned while the first call had not flushed: "
				   "that flush ran outside the mmap_lock";
	}
	EXPECT_EQ(expected_write(second), r.write1)
		<< what << ": CPU 1's own write after its call returned";
	EXPECT_EQ(expected_write(second), r.write2)
		<< what << ": CPU 2's write after CPU 1's call returned";
	EXPECT_EQ(0u, sd_oracle_violations(m.m))
		<< what << ": an access that started after the second call returned was "
			   "served by a translation older than what that call saw";
	EXPECT_EQ(0, sd_tlbbatch_destroy(r.batch));
	EXPECT_EQ(0, sd_mm_destroy(r.mm));
}

std::string param_name(const ::testing::TestParamInfo<NestedFlush::ParamType> &info)
{
	static const char *const names[] = { "Madvise", "Munmap", "MprotectRead",
					     "MmapAfterMunmap", "ReclaimBatch",
					     "MadviseAfterReclaim" };
	return std::string(std::get<0>(info.param)) + "_" +
	       names[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
	PerCall, NestedFlush,
	::testing::Combine(::testing::Values("broadcast", "local", "ipi", "gbcast", "nested_guide"),
			   ::testing::Values(Second::Madvise, Second::Munmap, Second::MprotectRead,
					     Second::MmapAfterMunmap, Second::ReclaimBatch,
					     Second::MadviseAfterReclaim)),
	param_name);

// ---- the issue's own scenario: a third CPU keeps interrupts off ----
//
// With `ipi`, CPU 2 caches the page and disables interrupts, so CPU 0's
// flush cannot finish. CPU 1's second call then either returns (no nested
// flush: CPU 2's access with interrupts still off is served by its old
// entry) or reaches its own flush, which CPU 2 answers by enabling
// interrupts. Either way CPU 2 accesses again once CPU 1 has returned.

struct IrqOff {
	Second second;
	sd_mm *mm = nullptr;
	sd_tlbbatch *batch = nullptr;
	std::atomic<unsigned> filled{0};
	std::atomic<bool> irqs_off{false};
	std::atomic<bool> cpu0_flushing{false};
	std::atomic<bool> cpu1_flushing{false};
	std::atomic<bool> second_returned{false};
	std::atomic<unsigned> finished{0};
	int write_irqs_off = 1;   // 1: not made (CPU 1 was still flushing)
	int write_after = 1;
};

IrqOff *g_irqoff;

void note_flushes(enum sd_order_point point, unsigned cpu)
{
	IrqOff *r = g_irqoff;

	if (point != SD_ORDER_CHANGE_FLUSH || !r)
		return;
	if (cpu == 0)
		r->cpu0_flushing.store(true);
	else if (cpu == 1)
		r->cpu1_flushing.store(true);
}

void irqoff_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<IrqOff *>(p);
	const unsigned id = sd_cpu_id(c);
	Race as_race;

	as_race.second = r->second;
	as_race.mm = r->mm;
	as_race.batch = r->batch;
	ASSERT_EQ(0, sd_switch_mm(c, r->mm));
	EXPECT_EQ(0, sd_access(c, kVa, SD_WRITE, nullptr));
	r->filled.fetch_add(1);
	wait_for(c, [&] { return r->filled.load() == 3; });
	if (id == 2) {
		sd_irq_disable(c);
		r->irqs_off.store(true);
		// Interrupts off on purpose: CPU 0's flush waits for us. A writer
		// second call waits for that flush on the mmap_lock, so neither
		// comes: then, after a while, we let the flush through.
		const auto t0 = std::chrono::steady_clock::now();
		while (!r->second_returned.load() && !r->cpu1_flushing.load() &&
		       !(writes(r->second) &&
			 std::chrono::steady_clock::now() - t0 > kHeldForWriter))
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		if (r->second_returned.load())
			r->write_irqs_off = sd_access(c, kVa, SD_WRITE, nullptr);
		sd_irq_enable(c);
		wait_for(c, [&] { return r->second_returned.load(); });
		r->write_after = sd_access(c, kVa, SD_WRITE, nullptr);
	} else if (id == 0) {
		wait_for(c, [&] { return r->irqs_off.load(); });
		first_call(c, &as_race);
	} else {
		wait_for(c, [&] { return r->cpu0_flushing.load(); });
		second_call(c, &as_race);
		r->second_returned.store(true);
	}
	r->finished.fetch_add(1);
	wait_for(c, [&] { return r->finished.load() == 3; });
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

class NestedFlushIrqOff : public ::testing::TestWithParam<Second> {};

TEST_P(NestedFlushIrqOff, IpiTargetWithInterruptsOffNeverSeesTheOldTranslation)
{
	const Second second = GetParam();
	const std::string what = std::string("ipi, ") + name_of(second);
	sd_machine_config cfg = sdtest::config(3, "ipi");
	sdtest::Machine m(cfg);
	ASSERT_NE(nullptr, m.m);
	IrqOff r;
	r.second = second;
	{
		sdtest::Attached a(m.m, 0);
		ASSERT_EQ(0, sd_mm_create(m.m, &r.mm));
		ASSERT_EQ(0, sd_mmap(a.c, r.mm, kVa, 2 * SD_PAGE_SIZE, RW));
	}
	ASSERT_EQ(0, sd_tlbbatch_create(m.m, &r.batch));
	g_irqoff = &r;
	sd_order_set_hook(note_flushes);
	{
		sdtest::Watchdog w(what + ": CPU 2 has interrupts off until CPU 1 returns or "
				   "flushes; an IPI wait or CPU 1's call is stuck", 60);
		EXPECT_EQ(0, sd_machine_run(m.m, irqoff_body, &r)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	g_irqoff = nullptr;
	EXPECT_EQ(1, r.write_irqs_off)
		<< what << ": CPU 1's call returned while CPU 0's flush was stuck behind CPU 2 "
			   "(CPU 2's write with interrupts off returned " << r.write_irqs_off << ")";
	EXPECT_EQ(expected_write(second), r.write_after) << what;
	EXPECT_EQ(0u, sd_oracle_violations(m.m)) << what;
	EXPECT_EQ(0, sd_tlbbatch_destroy(r.batch));
	EXPECT_EQ(0, sd_mm_destroy(r.mm));
}

std::string second_name(const ::testing::TestParamInfo<Second> &info)
{
	static const char *const names[] = { "Madvise", "Munmap", "MprotectRead",
					     "MmapAfterMunmap", "ReclaimBatch",
					     "MadviseAfterReclaim" };
	return names[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Ipi, NestedFlushIrqOff,
			 ::testing::Values(Second::Madvise, Second::Munmap, Second::MprotectRead,
					   Second::MmapAfterMunmap, Second::ReclaimBatch),
			 second_name);

} // namespace
