// SPDX-License-Identifier: MIT
// DESIGN invariant 4: a page-table page is never freed while a lockless
// walker can still reach it. Through the public API only: four CPUs (more
// than this machine's two cores, so walkers are preempted mid-walk) under
// the broadcast strategy. CPUs 1..3 access a few pages in each half of a
// 4 MiB region, so their TLB misses walk the tables (or start from the
// leaf pointer in their walk cache) and, while the region is unmapped,
// every access is a walk; they never take the mm lock. CPU 0 maps, touches
// and unmaps the two 2 MiB halves in a tight loop, so leaf, pmd and pud
// tables are unlinked and freed over and over. Broadcast sends no IPI, so
// only the RCU grace period keeps a preempted walker's table alive.
//
// The real check is AddressSanitizer (this test runs under ASan in CI): a
// table freed too early is a heap-use-after-free (or a wild pointer read
// out of the freed table) in the walker. With sd_pt_free_deferred() planted
// to free at once, 25 of 25 ASan runs failed that way. Without ASan the
// oracle still counts stale or foreign translations, and every access must
// see either the mapping or a clean -EFAULT.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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
};

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
			int err = sd_access(cpu, va, (rng() & 3) ? SD_READ : SD_WRITE, &pfn);
			if (err == 0 && pfn != 0) {
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
		mapper(cpu, s);
		s.stop = true;
	} else {
		walker(cpu, s);
	}
	sd_switch_mm(cpu, nullptr);
}

TEST(RcuFree, TablesOutliveWalkersUnderBroadcast)
{
	sd_machine_config c = sdtest::config(kCpus, "broadcast");
	c.oracle = SD_ORACLE_CHECKED;
	Machine mach(c);
	ASSERT_NE(nullptr, mach.m);
	Shared s;
	s.seed = sdtest::seed();
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.mm));

	sd_stats before, after, d;
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
				    << " (only success with a frame, or -EFAULT, is allowed)";
	EXPECT_EQ(0u, s.change_errors.load());
	// The run did what it is meant to: tables freed under walkers that hit
	// and missed, with and without the walk cache.
	EXPECT_GT(s.cycles.load(), 20u);
	EXPECT_GT(s.ok.load(), 0u);
	EXPECT_GT(s.faults.load(), 0u) << "walkers never saw the region unmapped";
	EXPECT_GT(d.counter[SD_STAT_WALK_CACHE_HIT], 0u);
	EXPECT_GT(d.counter[SD_STAT_PAGE_WALK], d.counter[SD_STAT_WALK_CACHE_HIT]);

	EXPECT_EQ(0, sd_mm_destroy(s.mm));
}

} // namespace
