// SPDX-License-Identifier: MIT
// Spurious-fault repair (Huang Ying, Linux 6.19: "arm64, tlbflush: don't
// TLBI broadcast if page reused in write fault"). After fork, the parent's
// pages are write-protected; once the child is gone, a write reuses the page
// in place (wp_page_reuse()), making the PTE writable on the same frame.
// arm64 flushed that page by TLBI IS before 6.19 and flushes it locally
// since; x86 never flushes it. A CPU still holding the stale read-only entry
// then takes a spurious fault on its next write: the fault finds the PTE
// writable, and the entry is repaired locally. The oracle's rule: a stale
// entry less permissive than the PTE (same frame) is legal, counted as a
// spurious fault when it faults; a more permissive one is a violation.
#include "common.hpp"

#include <atomic>
#include <string>
#include <thread>

namespace {

using sdtest::Machine;
using sdtest::total;

constexpr uint64_t kVa = 0x40000000;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

struct Reuse {
	const char *strategy;
	uint64_t spurious;        // CPU 1's write after CPU 0's reuse
	uint64_t tlbi_at_reuse;   // broadcast TLBIs the reuse sent
	uint64_t ipis_at_reuse;
	uint64_t flushes_at_reuse;  // counted (and timed) as a flush: 1 on arm64, 0 on x86
};

struct Seen {
	uint64_t spurious = 0, tlbi = 0, ipis = 0, flushes = 0, violations = 0, local_flushes = 0;
	int cpu1_write = 1;
};

// CPU 0 and CPU 1 run the parent; fork, CPU 1 reads the page (a read-only
// entry), the child goes; CPU 0 writes (a reuse), then CPU 1 writes.
Seen run_reuse(const char *strategy)
{
	Seen s;
	Machine mach(sdtest::config(2, strategy));
	EXPECT_NE(nullptr, mach.m);
	if (!mach.m)
		return s;
	sd_mm *parent = nullptr;
	EXPECT_EQ(0, sd_mm_create(mach.m, &parent));
	std::atomic<int> step{0};
	uint64_t tlbi_before = 0, ipis_before = 0, tlbi_after = 0, ipis_after = 0;
	uint64_t flushes_before = 0, flushes_after = 0;
	std::thread t1([&] {
		sdtest::Attached b(mach.m, 1);
		EXPECT_EQ(0, sd_switch_mm(b.c, parent));
		while (step.load() < 1)
			EXPECT_EQ(0, sd_cpu_poll(b.c));
		EXPECT_EQ(0, sd_access(b.c, kVa, SD_READ, nullptr));     // read-only entry
		step.store(2);
		while (step.load() < 3)
			EXPECT_EQ(0, sd_cpu_poll(b.c));
		s.cpu1_write = sd_access(b.c, kVa, SD_WRITE, nullptr);
		EXPECT_EQ(0, sd_switch_mm(b.c, nullptr));
	});
	{
		sdtest::Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, parent, kVa, SD_PAGE_SIZE, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, parent));
		EXPECT_EQ(0, sd_access(a.c, kVa, SD_WRITE, nullptr));
		sd_mm *child = nullptr;
		EXPECT_EQ(0, sd_mm_fork(a.c, parent, &child)) << sd_last_error();
		step.store(1);
		while (step.load() < 2)
			EXPECT_EQ(0, sd_cpu_poll(a.c));
		EXPECT_EQ(0, sd_mm_destroy(child));              // the frame is the parent's alone
		tlbi_before = total(mach.m, SD_STAT_TLBI_OP);
		ipis_before = total(mach.m, SD_STAT_IPI_SENT);
		flushes_before = total(mach.m, SD_STAT_FLUSH);
		EXPECT_EQ(0, sd_access(a.c, kVa, SD_WRITE, nullptr));     // wp_page_reuse()
		tlbi_after = total(mach.m, SD_STAT_TLBI_OP);
		ipis_after = total(mach.m, SD_STAT_IPI_SENT);
		flushes_after = total(mach.m, SD_STAT_FLUSH);
		step.store(3);
		t1.join();
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	s.spurious = total(mach.m, SD_STAT_SPURIOUS_FAULT);
	s.tlbi = tlbi_after - tlbi_before;
	s.ipis = ipis_after - ipis_before;
	s.flushes = flushes_after - flushes_before;
	s.violations = total(mach.m, SD_STAT_VIOLATION);
	s.local_flushes = total(mach.m, SD_STAT_LOCAL_FLUSH_ONE);
	EXPECT_EQ(0, sd_mm_destroy(parent));
	return s;
}

class WpReuse : public ::testing::TestWithParam<Reuse> {};

TEST_P(WpReuse, AStaleReadOnlyEntryFaultsSpuriouslyOrIsFlushed)
{
	const Reuse &r = GetParam();
	Seen s = run_reuse(r.strategy);
	EXPECT_EQ(0, s.cpu1_write) << "the write goes through once the entry is repaired";
	EXPECT_EQ(r.spurious, s.spurious) << r.strategy;
	EXPECT_EQ(r.tlbi_at_reuse, s.tlbi) << r.strategy;
	EXPECT_EQ(r.ipis_at_reuse, s.ipis) << r.strategy;
	EXPECT_EQ(r.flushes_at_reuse, s.flushes) << r.strategy;
	EXPECT_EQ(0u, s.violations) << "a less permissive stale entry is legal";
}

INSTANTIATE_TEST_SUITE_P(
	Strategies, WpReuse,
	::testing::Values(
		// x86: no flush at the reuse; CPU 1's entry faults spuriously.
		Reuse{"ipi", 1, 0, 0, 0},
		// arm64 since 6.19: a local TLBI; CPU 1 faults spuriously.
		Reuse{"broadcast", 1, 0, 0, 1},
		// arm64 before 6.19: flush_tlb_page(), a broadcast; no spurious fault.
		Reuse{"broadcast:wp_reuse=tlbi", 0, 1, 0, 1},
		// Arcangeli's 2020 series: its flush, a broadcast (the mm runs on 2 CPUs).
		Reuse{"local", 0, 1, 0, 1}),
	[](const ::testing::TestParamInfo<Reuse> &i) {
		std::string n = i.param.strategy;
		for (char &ch : n)
			if (ch == ':' || ch == '=')
				ch = '_';
		return n;
	});

TEST(WpReuse, ArmRepairsItsSpuriousFaultWithALocalTlbi)
{
	// The 6.19 arm64 path: one local TLBI at the reuse (CPU 0) and one at
	// the spurious fault's repair (CPU 1), where the path before 6.19 sent
	// one broadcast and repaired nothing.
	Seen now = run_reuse("broadcast");
	Seen before = run_reuse("broadcast:wp_reuse=tlbi");
	EXPECT_EQ(now.local_flushes, before.local_flushes + 2);
}

TEST(WpReuse, BadOrMisplacedOptionIsRefused)
{
	for (const char *s : {"broadcast:wp_reuse=never", "broadcast:wp_reuse=",
			      "local:wp_reuse=tlbi"}) {
		sd_machine_config c = sdtest::config(1, s);
		sd_machine *m = nullptr;
		EXPECT_EQ(-EINVAL, sd_machine_create(&c, &m)) << s;
	}
}

}  // namespace
