// SPDX-License-Identifier: MIT
// invariant 4 of docs/invariants.md: a page-table page is never freed while a lockless
// walker can still reach it. Through the public API (plus a peek at gbcast's
// per-mm state): four CPUs (more than this machine's two cores, so walkers
// are preempted mid-walk), under two strategies that send the walkers no
// IPI: broadcast, and gbcast once the mm has a global ASID
// (INVLPGB interrupts nobody, so the implicit lock of an IRQs-off
// walker delaying a flush IPI's acknowledgement is gone).
//
// CPUs 1..3 access a few pages in each half of a 4 MiB region, so their TLB
// misses walk the tables (or start from the leaf pointer in their walk
// cache) and, while the region is unmapped, every access is a walk; they
// never take the mm lock. CPU 0 maps, touches and unmaps the two 2 MiB
// halves in a tight loop, so leaf, pmd and pud tables are unlinked and freed
// over and over. With no IPI, only the RCU grace period keeps a preempted
// walker's table alive. Under gbcast (threshold=0, sample=1) CPU 0 first
// warms up: the mm's first flush goes by IPI and gives it a global ASID, the
// next ones move the walkers onto it (transition IPIs) until the transition
// is over. From then on the run is checked to send no IPI at all: INVLPGB
// and TLBSYNC only.
//
// The real check is AddressSanitizer (this test runs under ASan in CI): a
// table freed too early is a heap-use-after-free (or a wild pointer read
// out of the freed table) in the walker. With sd_pt_free_deferred() planted
// to free at once, 25 of 25 ASan runs failed that way under broadcast; under
// gbcast 20 of 20 did (heap-use-after-free in walk_and_fill or a wild read
// in sd_pt_walk_leaf), every one after the warm-up, when no IPI is sent.
// Without ASan the oracle still counts stale or foreign translations, and
// every access must see either the mapping or a clean -EFAULT.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

extern "C" {
#include "strategy/ipi.h"
#include "mm/mm.h"
}

namespace {

using sdtest::Machine;

constexpr uint64_t kChunk = UINT64_C(2) << 20;          // one leaf table's span
// Alone in its 512 GiB (pud) span, so emptying the region frees the leaf,
// pmd and pud tables.
constexpr uint64_t kBase = UINT64_C(3) << 39;
constexpr uint64_t kRegion = 2 * kChunk;
constexpr unsigned kCpus = 4;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

// The pages the walkers access: spread over each half, populated by the
// mapper right after each mmap.
constexpr unsigned kHot = 8;
uint64_t hot_page(unsigned half, unsigned k)
{
	return kBase + half * kChunk + k * (kChunk / kHot) + (k * 7 % 64) * SD_PAGE_SIZE;
}

constexpr uint64_t kMinCycles = 600;

struct Shared {
	sd_mm *mm = nullptr;
	double seconds = 1.5, max_seconds = 4.0;
	uint64_t seed = 0;
	std::atomic<unsigned> ready{0};
	std::atomic<bool> stop{false};
	// Totals over the CPUs.
	std::atomic<uint64_t> ok{0}, faults{0}, bad{0}, cycles{0}, change_errors{0};
	std::atomic<int> first_bad{0};
	// gbcast: warm up to a global ASID first; the stats after it.
	bool gbcast = false;
	bool warmed = false;           // written by CPU 0 before it sets stop
	unsigned warm_cycles = 0;
	sd_stats warm = SD_STATS_INIT;
};

// gbcast's per-mm state (tests only).
sd_ipi_mm *ipi_mm(sd_mm *mm)
{
	return static_cast<sd_ipi_mm *>(mm->strategy);
}

void walker(sd_cpu *cpu, Shared &s)
{
	std::mt19937_64 rng(s.seed + sd_cpu_id(cpu));
	uint64_t ok = 0, faults = 0, bad = 0;
	while (!s.stop.load(std::memory_order_relaxed)) {
		// Bursts within one half: after a flush the first miss walks from
		// the pgd, the following ones start from the walk-cached leaf.
		unsigned half = (unsigned)(rng() & 1);
		for (int i = 0; i < 32; i++) {
			uint64_t va = hot_page(half, (unsigned)(rng() % kHot));
			uint64_t pfn = 0;
			const bool read = rng() & 3;
			int err = sd_access(cpu, va, read ? SD_READ : SD_WRITE, &pfn);
			// A read that came before the mapper's touch maps the
			// zero page (frame 0); a write always has a frame.
			if (err == 0 && (pfn != 0 || read)) {
				ok++;
			} else if (err == -EFAULT) {
				faults++;
			} else {
				if (!bad++)
					s.first_bad = err ? err : 1;
			}
		}
	}
	s.ok += ok;
	s.faults += faults;
	s.bad += bad;
}

void mapper(sd_cpu *cpu, Shared &s)
{
	std::mt19937_64 rng(s.seed);
	auto start = std::chrono::steady_clock::now();
	uint64_t cycles = 0, errors = 0;
	auto check = [&](int err) {
		if (err && !errors++)
			ADD_FAILURE() << "mapping change failed: " << sd_strerror(err) << ": "
				      << sd_last_error();
	};
	auto touch = [&](uint64_t half) {
		// Populate the pages the walkers use, so that they never take the
		// mm lock (populating) and are preempted at any point of a walk.
		for (unsigned k = 0; k < kHot; k++)
			check(sd_access(cpu, hot_page(half, k), SD_WRITE, nullptr));
	};
	// At least s.seconds and kMinCycles cycles (on a loaded machine the
	// mapper gets little CPU), at most s.max_seconds.
	for (;;) {
		double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
				    .count();
		if (el >= s.max_seconds || (el >= s.seconds && cycles >= kMinCycles))
			break;
		unsigned first = (unsigned)(rng() & 1), second = first ^ 1;
		check(sd_mmap(cpu, s.mm, kBase + first * kChunk, kChunk, RW));
		touch(first);
		check(sd_mmap(cpu, s.mm, kBase + second * kChunk, kChunk, RW));
		touch(second);
		switch (rng() % 3) {
		case 0:
			// One half: its leaf goes, the pmd stays.
			check(sd_munmap(cpu, s.mm, kBase + first * kChunk, kChunk));
			// The other: leaf, pmd and pud go.
			check(sd_munmap(cpu, s.mm, kBase + second * kChunk, kChunk));
			break;
		case 1:
			// Everything at once.
			check(sd_munmap(cpu, s.mm, kBase, kRegion));
			break;
		default:
			// Page by page over the last 16 pages of a half first (leaf-only
			// range flushes), then the rest.
			check(sd_munmap(cpu, s.mm, kBase + first * kChunk + kChunk - 16 * SD_PAGE_SIZE,
					16 * SD_PAGE_SIZE));
			check(sd_munmap(cpu, s.mm, kBase, kRegion));
			break;
		}
		cycles++;
	}
	s.cycles += cycles;
	s.change_errors += errors;
}

// CPU 0, gbcast: map, touch and unmap (freeing tables) until the mm has a
// global ASID and no CPU runs it on a dynamic one any more. The first flush
// is an IPI flush (the walkers are in the mm's cpumask) and allocates the
// ASID; the next one IPIs the stragglers; the one after that finds none.
void warm_up(sd_cpu *cpu, Shared &s)
{
	sd_ipi_mm *im = ipi_mm(s.mm);
	for (unsigned i = 0; i < 100; i++) {
		if (im->global_asid.load() && !im->asid_transition.load()) {
			s.warmed = true;
			break;
		}
		s.warm_cycles++;
		if (sd_mmap(cpu, s.mm, kBase, kChunk, RW) ||
		    sd_access(cpu, hot_page(0, 0), SD_WRITE, nullptr) ||
		    sd_munmap(cpu, s.mm, kBase, kChunk)) {
			ADD_FAILURE() << "warm-up: " << sd_last_error();
			return;
		}
	}
	if (!s.warmed)
		ADD_FAILURE() << "the mm never got a global ASID, or its transition never ended";
	EXPECT_EQ(0, sd_stats_snapshot(sd_cpu_machine(cpu), &s.warm));
	std::fprintf(stderr, "[rcu_free] gbcast: warm-up over after %u cycles (global ASID %u, "
			     "%llu IPIs so far); no IPI from here on\n",
		     s.warm_cycles, (unsigned)im->global_asid.load(),
		     (unsigned long long)s.warm.counter[SD_STAT_IPI_SENT]);
}

void body(sd_cpu *cpu, void *arg)
{
	Shared &s = *static_cast<Shared *>(arg);
	int err = sd_switch_mm(cpu, s.mm);
	if (err) {
		ADD_FAILURE() << "sd_switch_mm: " << sd_strerror(err);
		s.stop = true;
	}
	s.ready++;
	while (s.ready.load() < kCpus)
		std::this_thread::yield();
	if (sd_cpu_id(cpu) == 0) {
		if (s.gbcast)
			warm_up(cpu, s);
		mapper(cpu, s);
		s.stop = true;
	} else {
		walker(cpu, s);
	}
	sd_switch_mm(cpu, nullptr);
}

class RcuFree : public ::testing::TestWithParam<const char *> {};

TEST_P(RcuFree, TablesOutliveWalkers)
{
	const bool gbcast = !std::strncmp(GetParam(), "gbcast", 6);
	sd_machine_config c = sdtest::config(kCpus, GetParam());
	c.oracle = SD_ORACLE_CHECKED;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	Shared s;
	s.seed = sdtest::seed();
	s.gbcast = gbcast;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.mm));

	sd_stats before = SD_STATS_INIT, after = SD_STATS_INIT, d = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &before));
	ASSERT_EQ(0, sd_machine_run(mach.m, body, &s)) << sd_last_error();
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &after));
	sd_stats_delta(&after, &before, &d);

	std::fprintf(stderr,
		     "[rcu_free] %llu map/unmap cycles; walkers: %llu hits or fills, %llu faults; "
		     "%llu page walks, %llu walk-cache hits, %llu flushes, %llu raced fills\n",
		     (unsigned long long)s.cycles.load(), (unsigned long long)s.ok.load(),
		     (unsigned long long)s.faults.load(),
		     (unsigned long long)d.counter[SD_STAT_PAGE_WALK],
		     (unsigned long long)d.counter[SD_STAT_WALK_CACHE_HIT],
		     (unsigned long long)d.counter[SD_STAT_FLUSH],
		     (unsigned long long)d.counter[SD_STAT_TLB_FILL_RACED]);

	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	for (unsigned i = 0; i < 3; i++) {
		sd_violation v;
		if (sd_oracle_violation(mach.m, i, &v) == 0)
			ADD_FAILURE() << "violation kind " << v.kind << " cpu " << v.cpu << " va 0x"
				      << std::hex << v.va << std::dec << " entry version "
				      << v.entry_version << " floor " << v.floor_version;
	}
	EXPECT_EQ(0u, s.bad.load()) << "an access returned " << s.first_bad.load()
				    << " (only success with a frame, the zero page for a read, or -EFAULT, is allowed)";
	EXPECT_EQ(0u, s.change_errors.load());
	// The run did what it is meant to: tables freed under walkers that hit
	// and missed, with and without the walk cache.
	EXPECT_GT(s.cycles.load(), 20u);
	EXPECT_GT(s.ok.load(), 0u);
	EXPECT_GT(s.faults.load(), 0u) << "walkers never saw the region unmapped";
	EXPECT_GT(d.counter[SD_STAT_WALK_CACHE_HIT], 0u);
	EXPECT_GT(d.counter[SD_STAT_PAGE_WALK], d.counter[SD_STAT_WALK_CACHE_HIT]);

	if (gbcast) {
		// From the end of the warm-up on: no IPI reached the walkers.
		// Only the RCU grace period kept their tables alive.
		sd_stats g = SD_STATS_INIT;
		sd_stats_delta(&after, &s.warm, &g);
		std::fprintf(stderr,
			     "[rcu_free] gbcast: global ASID %u after %u warm-up cycles; then "
			     "%llu INVLPGBs, %llu TLBSYNCs, %llu IPIs\n",
			     (unsigned)ipi_mm(s.mm)->global_asid.load(), s.warm_cycles,
			     (unsigned long long)g.counter[SD_STAT_INVLPGB],
			     (unsigned long long)g.counter[SD_STAT_TLBSYNC],
			     (unsigned long long)g.counter[SD_STAT_IPI_SENT]);
		EXPECT_TRUE(s.warmed);
		EXPECT_NE(0u, ipi_mm(s.mm)->global_asid.load());
		EXPECT_EQ(1u, d.counter[SD_STAT_GLOBAL_ASID_ALLOC]);
		EXPECT_EQ(0u, g.counter[SD_STAT_IPI_SENT]);
		EXPECT_EQ(0u, g.counter[SD_STAT_IPI_RECV]);
		EXPECT_EQ(0u, g.counter[SD_STAT_TRANSITION_IPI]);
		EXPECT_EQ(0u, g.counter[SD_STAT_FALLBACK_IPI_FLUSH]);
		EXPECT_GE(g.counter[SD_STAT_INVLPGB], s.cycles.load());
		EXPECT_GE(g.counter[SD_STAT_TLBSYNC], s.cycles.load());
	}

	EXPECT_EQ(0, sd_mm_destroy(s.mm));
}

INSTANTIATE_TEST_SUITE_P(Strategies, RcuFree,
			 ::testing::Values("broadcast", "gbcast:threshold=0,sample=1"),
			 [](const auto &info) {
				 return std::string(info.index ? "GbcastGlobalAsid" : "Broadcast");
			 });

} // namespace
