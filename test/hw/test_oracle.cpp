// SPDX-License-Identifier: MIT
// The oracle against a strategy that is broken on purpose ("none": flushes
// only the initiator's TLB) and a correct one ("broadcast"), on the smallest
// scenario that breaks invariant 1: CPU 1 caches a page, CPU 0 changes it,
// and after CPU 0's change returned CPU 1 accesses the page again.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kVa = 0x7f0000200000; // a page in the middle of a leaf table
constexpr uint64_t kVa2 = kVa + 5 * P;

enum class Change { Mprotect, MadviseDontneed, Munmap };

const char *change_name(Change c)
{
	switch (c) {
	case Change::Mprotect:
		return "mprotect";
	case Change::MadviseDontneed:
		return "madvise_dontneed";
	case Change::Munmap:
		return "munmap";
	}
	return "?";
}

// A two-step lock-step handshake between the test thread (CPU 0) and one
// helper thread (CPU 1). While waiting, a CPU passes quiescent states so it
// never holds up a grace period.
struct Steps {
	std::atomic<int> step{0};
	void wait_for(sd_cpu *c, int s)
	{
		auto end = Clock::now() + std::chrono::seconds(20);
		while (step.load(std::memory_order_acquire) < s) {
			if (c)
				sd_cpu_quiescent(c);
			std::this_thread::yield();
			if (Clock::now() > end) {
				ADD_FAILURE() << "handshake timed out waiting for step " << s;
				return;
			}
		}
	}
	void go(int s)
	{
		step.store(s, std::memory_order_release);
	}
};

struct Outcome {
	uint64_t violations = 0;
	bool have_first = false;
	sd_violation first{};
	uint64_t mm_id = 0;
	int cpu1_before = 1;         // CPU 1's first access
	uint64_t pfn_before = 0;
	int cpu1_after = 1;          // CPU 1's access after CPU 0's change returned
	int cpu1_write_after = 1;    // ...and a write (mprotect case)
	uint64_t pfn_after = 0;
	int cpu1_other_page = 1;     // an untouched page of the same mm, never cached
	uint64_t cpu1_misses_after = 0;
	int checked = -1;
};

Outcome run_scenario(const char *strategy, sd_oracle_mode oracle, Change change)
{
	Outcome out;
	sd_machine_config cfg = sdtest::config(2, strategy);
	cfg.oracle = oracle;
	sd_machine *m = nullptr;
	EXPECT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	if (!m)
		return out;
	out.checked = sd_oracle_checked(m);
	sd_mm *mm = nullptr;
	EXPECT_EQ(0, sd_mm_create(m, &mm));
	out.mm_id = sd_mm_id(mm);
	Steps s;

	std::thread cpu1([&] {
		sdtest::Attached a(m, 1);
		if (!a.c) {
			s.go(100);
			return;
		}
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		s.wait_for(a.c, 1);                    // mapping exists
		out.cpu1_before = sd_access(a.c, kVa, SD_WRITE, &out.pfn_before);
		// A second read: now certainly a TLB hit.
		EXPECT_EQ(0, sd_access(a.c, kVa, SD_READ, nullptr));
		s.go(2);                               // cached
		s.wait_for(a.c, 3);                    // CPU 0's change returned
		sd_stats before = SD_STATS_INIT, after = SD_STATS_INIT;
		EXPECT_EQ(0, sd_stats_cpu(m, 1, &before));
		out.cpu1_after = sd_access(a.c, kVa, SD_READ, &out.pfn_after);
		EXPECT_EQ(0, sd_stats_cpu(m, 1, &after));
		out.cpu1_misses_after =
			after.counter[SD_STAT_TLB_MISS] - before.counter[SD_STAT_TLB_MISS];
		if (change == Change::Mprotect)
			out.cpu1_write_after = sd_access(a.c, kVa, SD_WRITE, nullptr);
		out.cpu1_other_page = sd_access(a.c, kVa2, SD_READ, nullptr);
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
		s.go(4);
	});

	{
		sdtest::Attached a(m, 0);
		if (a.c) {
			EXPECT_EQ(0, sd_switch_mm(a.c, mm));
			EXPECT_EQ(0, sd_mmap(a.c, mm, kVa, 8 * P, SD_PROT_READ | SD_PROT_WRITE));
			// CPU 0 populates the other page (CPU 1 never touched it).
			EXPECT_EQ(0, sd_access(a.c, kVa2, SD_WRITE, nullptr));
			s.go(1);
			s.wait_for(a.c, 2);
			int err = 0;
			switch (change) {
			case Change::Mprotect:
				err = sd_mprotect(a.c, mm, kVa, P, SD_PROT_READ);
				break;
			case Change::MadviseDontneed:
				err = sd_madvise_dontneed(a.c, mm, kVa, P);
				break;
			case Change::Munmap:
				err = sd_munmap(a.c, mm, kVa, P);
				break;
			}
			EXPECT_EQ(0, err) << change_name(change) << ": " << sd_last_error();
			s.go(3);
			s.wait_for(a.c, 4);
			EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
		}
	}
	cpu1.join();

	out.violations = sd_oracle_violations(m);
	out.have_first = sd_oracle_violation(m, 0, &out.first) == 0;
	EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
	return out;
}

void expect_stale_violation(const Outcome &o)
{
	EXPECT_EQ(1, o.checked);
	EXPECT_GT(o.violations, 0u) << "the oracle missed CPU 1's stale hit";
	ASSERT_TRUE(o.have_first) << "a counted violation without details";
	EXPECT_EQ(SD_VIOLATION_STALE, o.first.kind);
	EXPECT_EQ(1u, o.first.cpu);
	EXPECT_EQ(kVa, o.first.va);
	EXPECT_EQ(o.mm_id, o.first.mm_id);
	EXPECT_EQ(o.mm_id, o.first.entry_mm_id);
	EXPECT_LT(o.first.entry_version, o.first.floor_version);
	EXPECT_GT(o.first.floor_version, 0u);
}

TEST(Oracle, NoneStrategyMprotectIsCaught)
{
	Outcome o = run_scenario("none", SD_ORACLE_CHECKED, Change::Mprotect);
	EXPECT_EQ(0, o.cpu1_before);
	EXPECT_NE(0u, o.pfn_before);
	// The broken strategy left CPU 1's RW entry in place: the read is
	// served from it, and even the write goes through.
	EXPECT_EQ(0, o.cpu1_after);
	EXPECT_EQ(0u, o.cpu1_misses_after) << "served by the stale TLB entry, not a walk";
	EXPECT_EQ(0, o.cpu1_write_after) << "stale RW entry should have allowed the write";
	EXPECT_EQ(0, o.cpu1_other_page);
	expect_stale_violation(o);
	// The read and the write were both stale hits.
	EXPECT_EQ(2u, o.violations);
}

TEST(Oracle, BroadcastMprotectIsClean)
{
	Outcome o = run_scenario("broadcast", SD_ORACLE_CHECKED, Change::Mprotect);
	EXPECT_EQ(1, o.checked);
	EXPECT_EQ(0, o.cpu1_before);
	EXPECT_EQ(0, o.cpu1_after);
	EXPECT_EQ(1u, o.cpu1_misses_after) << "the flush should have removed CPU 1's entry";
	EXPECT_EQ(o.pfn_before, o.pfn_after) << "mprotect keeps the frame";
	EXPECT_EQ(-EACCES, o.cpu1_write_after) << "the new protection must be seen";
	EXPECT_EQ(0, o.cpu1_other_page);
	EXPECT_EQ(0u, o.violations);
	EXPECT_FALSE(o.have_first);
}

TEST(Oracle, OffModeCountsNothing)
{
	Outcome o = run_scenario("none", SD_ORACLE_OFF, Change::Mprotect);
	EXPECT_EQ(0, o.checked);
	// The stale entry is really used (the write to a read-only page goes
	// through), but unchecked mode does not look.
	EXPECT_EQ(0, o.cpu1_after);
	EXPECT_EQ(0, o.cpu1_write_after);
	EXPECT_EQ(0u, o.violations);
	EXPECT_FALSE(o.have_first);
}

TEST(Oracle, NoneStrategyMadviseIsCaught)
{
	Outcome o = run_scenario("none", SD_ORACLE_CHECKED, Change::MadviseDontneed);
	EXPECT_EQ(0, o.cpu1_before);
	EXPECT_EQ(0, o.cpu1_after);
	EXPECT_EQ(0u, o.cpu1_misses_after);
	EXPECT_EQ(o.pfn_before, o.pfn_after) << "the stale entry still points at the dropped frame";
	expect_stale_violation(o);
}

TEST(Oracle, BroadcastMadviseIsClean)
{
	Outcome o = run_scenario("broadcast", SD_ORACLE_CHECKED, Change::MadviseDontneed);
	EXPECT_EQ(0, o.cpu1_after) << "the mapping stays after madvise";
	EXPECT_EQ(1u, o.cpu1_misses_after);
	EXPECT_EQ(0u, o.violations);
}

TEST(Oracle, NoneStrategyMunmapIsCaught)
{
	Outcome o = run_scenario("none", SD_ORACLE_CHECKED, Change::Munmap);
	EXPECT_EQ(0, o.cpu1_before);
	EXPECT_EQ(0, o.cpu1_after) << "an unmapped page served from the stale entry";
	EXPECT_EQ(o.pfn_before, o.pfn_after);
	expect_stale_violation(o);
}

TEST(Oracle, BroadcastMunmapIsClean)
{
	Outcome o = run_scenario("broadcast", SD_ORACLE_CHECKED, Change::Munmap);
	EXPECT_EQ(-EFAULT, o.cpu1_after);
	EXPECT_EQ(0, o.cpu1_other_page) << "munmap of one page took its neighbour";
	EXPECT_EQ(0u, o.violations);
}

TEST(Oracle, InitiatorItselfIsFlushedEvenByNone)
{
	// "none" still flushes the initiator: a change made and then accessed
	// on the same CPU is never stale.
	sd_machine_config cfg = sdtest::config(2, "none");
	sdtest::Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	{
		sdtest::Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		ASSERT_EQ(0, sd_switch_mm(a.c, mm));
		ASSERT_EQ(0, sd_mmap(a.c, mm, kVa, P, SD_PROT_READ | SD_PROT_WRITE));
		ASSERT_EQ(0, sd_access(a.c, kVa, SD_WRITE, nullptr));
		ASSERT_EQ(0, sd_mprotect(a.c, mm, kVa, P, SD_PROT_READ));
		EXPECT_EQ(-EACCES, sd_access(a.c, kVa, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_access(a.c, kVa, SD_READ, nullptr));
		ASSERT_EQ(0, sd_munmap(a.c, mm, kVa, P));
		EXPECT_EQ(-EFAULT, sd_access(a.c, kVa, SD_READ, nullptr));
		ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

TEST(Oracle, ViolationsAppearInStats)
{
	// The violation count is also the "violations" counter of the CPU that
	// was served, and recorded details stop at SD_ORACLE_MAX_DETAILS.
	sd_machine_config cfg = sdtest::config(2, "none");
	sdtest::Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	Steps s;
	constexpr unsigned kPages = SD_ORACLE_MAX_DETAILS + 4;
	std::thread cpu1([&] {
		sdtest::Attached a(mach.m, 1);
		if (!a.c) {
			s.go(100);
			return;
		}
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		s.wait_for(a.c, 1);
		for (unsigned i = 0; i < kPages; i++)
			EXPECT_EQ(0, sd_access(a.c, kVa + i * P, SD_READ, nullptr));
		s.go(2);
		s.wait_for(a.c, 3);
		for (unsigned i = 0; i < kPages; i++)
			EXPECT_EQ(0, sd_access(a.c, kVa + i * P, SD_READ, nullptr));
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	});
	{
		sdtest::Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		ASSERT_EQ(0, sd_mmap(a.c, mm, kVa, kPages * P, SD_PROT_READ | SD_PROT_WRITE));
		s.go(1);
		s.wait_for(a.c, 2);
		ASSERT_EQ(0, sd_mprotect(a.c, mm, kVa, kPages * P, SD_PROT_READ));
		s.go(3);
	}
	cpu1.join();
	EXPECT_EQ((uint64_t)kPages, sd_oracle_violations(mach.m));
	sd_stats c1 = SD_STATS_INIT, all = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_cpu(mach.m, 1, &c1));
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &all));
	EXPECT_EQ((uint64_t)kPages, c1.counter[SD_STAT_VIOLATION]);
	EXPECT_EQ((uint64_t)kPages, all.counter[SD_STAT_VIOLATION]);
	sd_violation v;
	for (unsigned i = 0; i < SD_ORACLE_MAX_DETAILS; i++) {
		ASSERT_EQ(0, sd_oracle_violation(mach.m, i, &v)) << i;
		EXPECT_EQ(kVa + i * P, v.va) << "details are kept in arrival order";
		EXPECT_EQ(SD_VIOLATION_STALE, v.kind);
	}
	EXPECT_EQ(-ENOENT, sd_oracle_violation(mach.m, SD_ORACLE_MAX_DETAILS, &v));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

} // namespace
