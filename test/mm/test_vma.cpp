// SPDX-License-Identifier: MIT
// VMAs as objects (lib/mm/vma.c): mmap merges with neighbours of the same
// protection (vma_merge()), munmap and mprotect split at the range's ends
// (__split_vma()), mprotect merges again after, fork copies the list, and
// a fault that races an mprotect splitting its VMA falls back to the
// mmap_lock and sees the new protection (the oracle checks the flushes).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
extern "C" {
#include "core/ordering.h"
}

// Test accessors of lib/mm/vma.c (not exported: the test links the static
// layers).
extern "C" uint64_t sd_mm_nr_vmas(sd_mm *mm);
extern "C" int sd_mm_vma_at(sd_mm *mm, uint64_t i, uint64_t *va, uint64_t *len,
			    unsigned *prot);

namespace {

using sdtest::Attached;
using sdtest::Machine;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kVa = 0x40000000ull;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
constexpr unsigned RO = SD_PROT_READ;

uint64_t stat(sd_machine *m, sd_stat id)
{
	sd_stats s = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_snapshot(m, &s));
	return s.counter[id];
}

struct Vma {
	uint64_t va, len;
	unsigned prot;
	bool operator==(const Vma &o) const
	{
		return va == o.va && len == o.len && prot == o.prot;
	}
};

std::ostream &operator<<(std::ostream &os, const Vma &v)
{
	return os << "[0x" << std::hex << v.va << ", +0x" << v.len << std::dec << ") prot "
		  << v.prot;
}

std::vector<Vma> vmas(sd_mm *mm)
{
	std::vector<Vma> out;
	Vma v;
	for (uint64_t i = 0; sd_mm_vma_at(mm, i, &v.va, &v.len, &v.prot) == 0; i++)
		out.push_back(v);
	EXPECT_EQ(out.size(), sd_mm_nr_vmas(mm));
	return out;
}

// One attached CPU with one mm loaded.
class VmaTest : public ::testing::Test {
protected:
	Machine mach{sdtest::config(1, "broadcast")};
	sd_cpu *c = nullptr;
	sd_mm *mm = nullptr;

	void SetUp() override
	{
		ASSERT_NE(nullptr, mach.m);
		ASSERT_EQ(0, sd_cpu_attach(mach.m, 0, &c)) << sd_last_error();
		ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
		ASSERT_EQ(0, sd_switch_mm(c, mm));
	}
	void TearDown() override
	{
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
		EXPECT_EQ(0, sd_cpu_detach(c));
		EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	}
	uint64_t merges()
	{
		return stat(mach.m, SD_STAT_VMA_MERGE);
	}
	uint64_t splits()
	{
		return stat(mach.m, SD_STAT_VMA_SPLIT);
	}
};

TEST_F(VmaTest, AdjacentMmapsOfOneProtectionMerge)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kVa, 4 * P, RW));
	EXPECT_EQ(0u, merges());
	ASSERT_EQ(0, sd_mmap(c, mm, kVa + 4 * P, 4 * P, RW));
	EXPECT_EQ(1u, merges());
	EXPECT_EQ(0u, splits());
	EXPECT_EQ((std::vector<Vma>{{kVa, 8 * P, RW}}), vmas(mm));
	// One mapping to every access, both halves writable.
	EXPECT_EQ(0, sd_access(c, kVa + 3 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, kVa + 4 * P, SD_WRITE, nullptr));
	// Below, merging backwards.
	ASSERT_EQ(0, sd_mmap(c, mm, kVa - 2 * P, 2 * P, RW));
	EXPECT_EQ(2u, merges());
	EXPECT_EQ((std::vector<Vma>{{kVa - 2 * P, 10 * P, RW}}), vmas(mm));
}

TEST_F(VmaTest, FillingAHoleMergesBothNeighbours)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kVa, 2 * P, RW));
	ASSERT_EQ(0, sd_mmap(c, mm, kVa + 4 * P, 2 * P, RW));
	EXPECT_EQ(2u, sd_mm_nr_vmas(mm));
	ASSERT_EQ(0, sd_mmap(c, mm, kVa + 2 * P, 2 * P, RW));
	EXPECT_EQ(2u, merges()) << "three ranges became one VMA";
	EXPECT_EQ((std::vector<Vma>{{kVa, 6 * P, RW}}), vmas(mm));
}

TEST_F(VmaTest, DifferentProtectionsDoNotMerge)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kVa, 4 * P, RW));
	ASSERT_EQ(0, sd_mmap(c, mm, kVa + 4 * P, 4 * P, RO));
	EXPECT_EQ(0u, merges());
	EXPECT_EQ((std::vector<Vma>{{kVa, 4 * P, RW}, {kVa + 4 * P, 4 * P, RO}}), vmas(mm));
	// The read-only neighbour stays read-only, populated or not: a write
	// to a page never touched faults and the fault asks its VMA.
	EXPECT_EQ(-EACCES, sd_access(c, kVa + 5 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, kVa + 4 * P, SD_READ, nullptr));
	EXPECT_EQ(-EACCES, sd_access(c, kVa + 4 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, kVa + 3 * P, SD_WRITE, nullptr));
	// An overlapping mmap is refused whatever the VMA boundaries.
	EXPECT_EQ(-EEXIST, sd_mmap(c, mm, kVa + 7 * P, 2 * P, RO));
	EXPECT_EQ(2u, sd_mm_nr_vmas(mm));
}

TEST_F(VmaTest, MprotectOfTheMiddleSplitsTwiceAndBackMergesTwice)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kVa, 12 * P, RW));
	for (unsigned i = 0; i < 12; i++)
		ASSERT_EQ(0, sd_access(c, kVa + i * P, SD_WRITE, nullptr));
	ASSERT_EQ(0, sd_mprotect(c, mm, kVa + 4 * P, 4 * P, RO));
	EXPECT_EQ(2u, splits());
	EXPECT_EQ(0u, merges());
	EXPECT_EQ((std::vector<Vma>{{kVa, 4 * P, RW}, {kVa + 4 * P, 4 * P, RO},
				    {kVa + 8 * P, 4 * P, RW}}),
		  vmas(mm));
	EXPECT_EQ(-EACCES, sd_access(c, kVa + 5 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, kVa + 3 * P, SD_WRITE, nullptr));
	// The same protection again changes no VMA.
	ASSERT_EQ(0, sd_mprotect(c, mm, kVa + 5 * P, P, RO));
	EXPECT_EQ(2u, splits());
	EXPECT_EQ(3u, sd_mm_nr_vmas(mm));
	ASSERT_EQ(0, sd_mprotect(c, mm, kVa + 4 * P, 4 * P, RW));
	EXPECT_EQ(2u, splits());
	EXPECT_EQ(2u, merges());
	EXPECT_EQ((std::vector<Vma>{{kVa, 12 * P, RW}}), vmas(mm));
	EXPECT_EQ(0, sd_access(c, kVa + 5 * P, SD_WRITE, nullptr));
	// A range with a hole is refused and changes nothing.
	EXPECT_EQ(-ENOMEM, sd_mprotect(c, mm, kVa + 10 * P, 4 * P, RO));
	EXPECT_EQ(2u, splits());
	EXPECT_EQ(1u, sd_mm_nr_vmas(mm));
}

TEST_F(VmaTest, MunmapOfTheMiddleSplitsAndHolesAreAllowed)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kVa, 12 * P, RW));
	ASSERT_EQ(0, sd_access(c, kVa + 5 * P, SD_WRITE, nullptr));
	ASSERT_EQ(0, sd_munmap(c, mm, kVa + 4 * P, 4 * P));
	EXPECT_EQ(2u, splits()) << "__split_vma() at both ends";
	EXPECT_EQ((std::vector<Vma>{{kVa, 4 * P, RW}, {kVa + 8 * P, 4 * P, RW}}), vmas(mm));
	EXPECT_EQ(-EFAULT, sd_access(c, kVa + 5 * P, SD_READ, nullptr));
	EXPECT_EQ(0, sd_access(c, kVa + 8 * P, SD_WRITE, nullptr));
	// Across the hole, past the end, and over nothing at all: 0, as
	// munmap(2); the ends split where they fall inside a VMA.
	ASSERT_EQ(0, sd_munmap(c, mm, kVa + 2 * P, 8 * P));
	EXPECT_EQ(4u, splits());
	EXPECT_EQ((std::vector<Vma>{{kVa, 2 * P, RW}, {kVa + 10 * P, 2 * P, RW}}), vmas(mm));
	ASSERT_EQ(0, sd_munmap(c, mm, kVa + 64 * P, 4 * P));
	ASSERT_EQ(0, sd_munmap(c, mm, kVa, 12 * P));
	EXPECT_EQ(0u, sd_mm_nr_vmas(mm));
	EXPECT_EQ(4u, splits());
}

TEST_F(VmaTest, ForkCopiesTheList)
{
	ASSERT_EQ(0, sd_mmap(c, mm, kVa, 4 * P, RW));
	ASSERT_EQ(0, sd_mmap(c, mm, kVa + 4 * P, 4 * P, RO));
	ASSERT_EQ(0, sd_mmap(c, mm, kVa + 16 * P, 2 * P, RW));
	ASSERT_EQ(0, sd_access(c, kVa, SD_WRITE, nullptr));
	sd_mm *child = nullptr;
	ASSERT_EQ(0, sd_mm_fork(c, mm, &child)) << sd_last_error();
	EXPECT_EQ(vmas(mm), vmas(child));
	EXPECT_EQ(3u, sd_mm_nr_vmas(child));
	ASSERT_EQ(0, sd_switch_mm(c, child));
	EXPECT_EQ(-EACCES, sd_access(c, kVa + 5 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_access(c, kVa + 17 * P, SD_WRITE, nullptr));
	// The child's list is its own: a change there leaves the parent's.
	ASSERT_EQ(0, sd_mprotect(c, child, kVa + 4 * P, 4 * P, RW));
	EXPECT_EQ(2u, sd_mm_nr_vmas(child));
	EXPECT_EQ(3u, sd_mm_nr_vmas(mm));
	ASSERT_EQ(0, sd_switch_mm(c, mm));
	EXPECT_EQ(-EACCES, sd_access(c, kVa + 5 * P, SD_WRITE, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(child));
}

// A fault racing an mprotect that splits its VMA. CPU 0 mprotects the
// middle of a populated writable VMA to read-only and is held at the order
// point SD_ORDER_VMA_CHANGED (VMAs split and write-locked, no PTE edited)
// until CPU 1 has started a write to a page of the middle that it never
// touched: its fault finds the VMA write-locked, falls back to the
// mmap_lock for read and waits for the mprotect (a lock wait on CPU 1),
// then sees the read-only VMA: -EACCES. A write to a page outside the
// range, through the other half of the split VMA, succeeds. The oracle
// checks that no CPU keeps writing through a writable entry of the middle.
std::atomic<bool> g_held{false};
std::atomic<int> g_cpu1_writing{0};
sd_machine *g_m = nullptr;

void hold_the_mprotect(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_VMA_CHANGED || cpu != 0 || g_held.exchange(true))
		return;
	while (!g_cpu1_writing.load())
		std::this_thread::sleep_for(std::chrono::microseconds(50));
	// Until CPU 1 waits for the mmap_lock (its fault's fallback), or 5 s.
	for (int i = 0; i < 5000; i++) {
		sd_stats s = SD_STATS_INIT;
		if (sd_stats_cpu(g_m, 1, &s) == 0 && s.counter[SD_STAT_LOCK_WAIT])
			break;
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
}

using sdtest::wait_for;

TEST(VmaRace, FaultRacingASplittingMprotectSeesTheNewProtection)
{
	for (const char *strategy : {"ipi", "broadcast"}) {
		SCOPED_TRACE(strategy);
		Machine m(sdtest::config(2, strategy));
		ASSERT_NE(nullptr, m.m);
		struct Arg {
			sd_mm *mm = nullptr;
			std::atomic<unsigned> ready{0};
			int inside = 0, outside = -1;
		} a;
		ASSERT_EQ(0, sd_mm_create(m.m, &a.mm));
		g_m = m.m;
		g_held = false;
		g_cpu1_writing = 0;
		sd_order_set_hook(hold_the_mprotect);
		{
			sdtest::Watchdog w(std::string(strategy) + ": a fault racing an mprotect hung", 60);
			ASSERT_EQ(0, sd_machine_run(m.m, [](sd_cpu *c, void *v) {
				auto *a = static_cast<Arg *>(v);
				const unsigned id = sd_cpu_id(c);
				EXPECT_EQ(0, sd_switch_mm(c, a->mm));
				if (id == 0) {
					EXPECT_EQ(0, sd_mmap(c, a->mm, kVa, 12 * P, RW));
					for (unsigned i = 0; i < 12; i += 2)
						EXPECT_EQ(0, sd_access(c, kVa + i * P, SD_WRITE, nullptr));
				}
				a->ready.fetch_add(1);
				wait_for(c, [&] { return a->ready.load() >= 2; });
				// Both CPUs cache writable entries of the middle.
				EXPECT_EQ(0, sd_access(c, kVa + 4 * P, SD_WRITE, nullptr));
				a->ready.fetch_add(1);
				wait_for(c, [&] { return a->ready.load() >= 4; });
				if (id == 0) {
					EXPECT_EQ(0, sd_mprotect(c, a->mm, kVa + 4 * P, 4 * P, RO));
				} else {
					wait_for(c, [&] { return g_held.load(); });
					g_cpu1_writing = 1;
					a->inside = sd_access(c, kVa + 5 * P, SD_WRITE, nullptr);
					a->outside = sd_access(c, kVa + 9 * P, SD_WRITE, nullptr);
					// The cached entry of a page made read-only is gone.
					EXPECT_EQ(-EACCES, sd_access(c, kVa + 4 * P, SD_WRITE, nullptr));
				}
				EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			}, &a)) << sd_last_error();
		}
		sd_order_set_hook(nullptr);
		EXPECT_TRUE(g_held.load()) << "the mprotect never reached its order point";
		EXPECT_EQ(-EACCES, a.inside) << "the fault used the VMA from before the mprotect";
		EXPECT_EQ(0, a.outside);
		sd_stats s = SD_STATS_INIT;
		ASSERT_EQ(0, sd_stats_cpu(m.m, 1, &s));
		EXPECT_LE(1u, s.counter[SD_STAT_LOCK_WAIT]) << "CPU 1's fault never waited";
		EXPECT_EQ(2u, stat(m.m, SD_STAT_VMA_SPLIT));
		EXPECT_EQ(3u, sd_mm_nr_vmas(a.mm));
		EXPECT_EQ(0u, sd_oracle_violations(m.m));
		EXPECT_EQ(0, sd_mm_destroy(a.mm));
	}
}

} // namespace
