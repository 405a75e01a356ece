// SPDX-License-Identifier: MIT
// Stephen Dolan's reproducer for CVE-2025-40174, on the
// `ipi` strategy, with the eager and the lazy mm_cpumask.
//
// A writer runs mm X and, round after round, makes page A read-only, maps a
// page B, unmaps B, then makes A writable again. Readers run X too, but
// ping-pong with mms of their own, so most of the writer's flushes find them
// switching or switched away. In X a reader loads B, then writes A. Seeing B
// mapped and writing A in the same round means a translation of A from
// before that round's read-only flush survived it: "new B with old A".
//
// Each run also plants both bugs back (no SWITCHING rule, no fence) with
// delayed stores on and prints what the same workload finds then; the race
// window is a few instructions wide, so that count may well be 0, and is
// not asserted: test_ipi forces the interleavings instead.
#include "common.hpp"

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "core/ordering.h"
#include "strategy/ipi.h"
}

namespace {

using Clock = std::chrono::steady_clock;

// A and B share a leaf table, so unmapping B frees no table: its flush is a
// targeted one, not the IPI-everyone flush that freed tables force.
constexpr uint64_t kA = 0x50000000;
constexpr uint64_t kB = kA + SD_PAGE_SIZE;
constexpr uint64_t kY = 0x60000000;
constexpr unsigned kYPages = 4;
constexpr unsigned kProbesPerVisit = 2;

struct World {
	sd_mm *x = nullptr;
	std::vector<sd_mm *> ys;        // ys[cpu]: that reader's other task
	double seconds = 0;
	// Bumped after each round's munmap(B) returned, before A is made
	// writable again (see probe()).
	std::atomic<uint64_t> round{ 0 };
	std::atomic<bool> stop{ false };
	std::atomic<uint64_t> visits{ 0 }, probes{ 0 }, saw_b{ 0 }, wrote_a{ 0 };
	std::atomic<uint64_t> failures{ 0 }, unexpected{ 0 };
};

void check(World &w, int err, int allowed)
{
	if (err && err != allowed)
		w.unexpected++;
}

// Keep B mapped until a reader has probed once more (or 20 us passed): the
// window is otherwise so short that on two PUs readers may never see B.
void let_readers_probe(World &w)
{
	uint64_t p0 = w.probes.load(std::memory_order_relaxed);
	auto until = Clock::now() + std::chrono::microseconds(20);

	while (w.probes.load(std::memory_order_relaxed) == p0 && Clock::now() < until)
		std::this_thread::yield();
}

void writer(sd_cpu *c, World &w)
{
	auto deadline = Clock::now() + std::chrono::duration<double>(w.seconds);

	check(w, sd_switch_mm(c, w.x), 0);
	check(w, sd_access(c, kA, SD_WRITE, nullptr), 0);
	while (Clock::now() < deadline) {
		check(w, sd_mprotect(c, w.x, kA, SD_PAGE_SIZE, SD_PROT_READ), 0);
		// Mapped only now, so no reader can have cached it before: a
		// reader that sees B walked to it after the flush above returned.
		check(w, sd_mmap(c, w.x, kB, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE), 0);
		let_readers_probe(w);
		check(w, sd_munmap(c, w.x, kB, SD_PAGE_SIZE), 0);
		w.round.fetch_add(1, std::memory_order_release);
		check(w, sd_mprotect(c, w.x, kA, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE), 0);
	}
	w.stop = true;
	sd_switch_mm(c, nullptr);
}

// One probe while in X. Suppose B's access saw the mapping of round k and
// A's write succeeded legitimately. B was mapped after round k's read-only
// flush of A returned, so a legitimate write must have seen the PTE that
// round k's last mprotect stored after its bump of `round`: its acquire
// walk makes r2 see that bump. And r1 was read before the B access, which
// cannot see round k's mapping once that round's munmap has returned (a
// stale hit there is an oracle violation), hence before the bump. So
// r1 == r2 means A's write used a translation the read-only flush should
// have removed. (A bump between mmap(B) and munmap(B) would not do: a
// reader could then read r1 after it, see B, and write A after the next
// mprotect, all legitimately, with r1 == r2.)
void probe(World &w, sd_cpu *c)
{
	uint64_t r1 = w.round.load(std::memory_order_acquire);
	int errb = sd_access(c, kB, SD_READ, nullptr);
	int erra = sd_access(c, kA, SD_WRITE, nullptr);
	uint64_t r2 = w.round.load(std::memory_order_acquire);

	check(w, errb, -EFAULT);
	check(w, erra, -EACCES);
	w.saw_b += !errb;
	w.wrote_a += !erra;
	if (!errb && !erra && r1 == r2)
		w.failures++;
	w.probes.fetch_add(1, std::memory_order_relaxed);
}

void reader(sd_cpu *c, World &w)
{
	sd_mm *y = w.ys[sd_cpu_id(c)];
	unsigned n = 0;

	while (!w.stop.load(std::memory_order_relaxed)) {
		check(w, sd_switch_mm(c, w.x), 0);
		for (unsigned i = 0; i < kProbesPerVisit; i++)
			probe(w, c);
		w.visits++;
		// The other task: a few accesses, so it is a real mm in use,
		// then a yield, as a pipe ping-pong would block: with more CPUs
		// than PUs, readers that never block starve the writer.
		check(w, sd_switch_mm(c, y), 0);
		for (unsigned i = 0; i < 3; i++, n++)
			check(w, sd_access(c, kY + (n % kYPages) * SD_PAGE_SIZE,
					   n % 2 ? SD_WRITE : SD_READ, nullptr), 0);
		std::this_thread::yield();
	}
	sd_switch_mm(c, nullptr);
}

void cpu_body(sd_cpu *c, void *arg)
{
	World &w = *static_cast<World *>(arg);

	if (sd_cpu_id(c) == 0)
		writer(c, w);
	else
		reader(c, w);
}

struct Result {
	uint64_t failures, violations, visits, saw_b, wrote_a, rounds;
	sd_stats stats = SD_STATS_INIT;
};

// One run on a fresh machine; @broken plants both bugs, with delayed stores.
void run(const std::string &spec, unsigned cpus, bool broken, double seconds, Result *out)
{
	sdtest::Machine machine(sdtest::config(cpus, spec.c_str()));
	ASSERT_NE(nullptr, machine.m);
	World w;
	w.seconds = seconds;

	sd_cpu *c;
	ASSERT_EQ(0, sd_cpu_attach(machine.m, 0, &c));
	ASSERT_EQ(0, sd_mm_create(machine.m, &w.x));
	ASSERT_EQ(0, sd_mmap(c, w.x, kA, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE));
	w.ys.assign(cpus, nullptr);
	for (unsigned i = 1; i < cpus; i++) {
		ASSERT_EQ(0, sd_mm_create(machine.m, &w.ys[i]));
		ASSERT_EQ(0, sd_mmap(c, w.ys[i], kY, kYPages * SD_PAGE_SIZE,
				     SD_PROT_READ | SD_PROT_WRITE));
	}
	ASSERT_EQ(0, sd_cpu_detach(c));

	if (broken) {
		ASSERT_EQ(0, sd_ipi_test_break(machine.m, SD_IPI_BREAK_SWITCHING_RULE |
								  SD_IPI_BREAK_SWITCH_FENCE));
		sd_order_set_delayed_stores(true);
	}
	{
		sdtest::Watchdog dog("ipi Dolan " + spec, seconds + 120);
		EXPECT_EQ(0, sd_machine_run(machine.m, cpu_body, &w));
	}
	sd_order_set_delayed_stores(false);

	*out = { w.failures.load(), sd_oracle_violations(machine.m), w.visits.load(),
		 w.saw_b.load(), w.wrote_a.load(), w.round.load(), SD_STATS_INIT };
	EXPECT_EQ(0, sd_stats_snapshot(machine.m, &out->stats)) << sd_last_error();
	EXPECT_EQ(0u, w.unexpected.load());
	EXPECT_EQ(0, sd_mm_destroy(w.x));
	for (unsigned i = 1; i < cpus; i++)
		EXPECT_EQ(0, sd_mm_destroy(w.ys[i]));
}

void report(const char *what, const std::string &spec, unsigned cpus, const Result &r)
{
	const uint64_t *k = r.stats.counter;
	std::fprintf(stderr, "[dolan] %s %s, %u CPUs: rounds %llu, visits %llu, saw B %llu, "
			     "wrote A %llu, new-B-old-A %llu, violations %llu; ipis %llu "
			     "(unneeded %llu, deferred %llu), switch flushes %llu, lazy skips %llu, "
			     "trims %llu\n",
		     what, spec.c_str(), cpus, (unsigned long long)r.rounds,
		     (unsigned long long)r.visits, (unsigned long long)r.saw_b,
		     (unsigned long long)r.wrote_a, (unsigned long long)r.failures,
		     (unsigned long long)r.violations, (unsigned long long)k[SD_STAT_IPI_SENT],
		     (unsigned long long)k[SD_STAT_IPI_UNNEEDED],
		     (unsigned long long)k[SD_STAT_IPI_DEFERRED],
		     (unsigned long long)k[SD_STAT_SWITCH_FLUSH],
		     (unsigned long long)k[SD_STAT_LAZY_SKIP],
		     (unsigned long long)k[SD_STAT_CPUMASK_TRIM]);
}

struct Param {
	const char *spec;
	unsigned cpus;
};

class Dolan : public ::testing::TestWithParam<Param> {};

TEST_P(Dolan, NeverNewBWithOldA)
{
	const Param p = GetParam();
	const double secs = sdtest::stress_seconds();
	unsigned pus = std::thread::hardware_concurrency();

	std::fprintf(stderr, "[dolan] %s, %u CPUs on %u PUs%s, %.1f s + %.1f s planted\n", p.spec,
		     p.cpus, pus, p.cpus > pus ? " (oversubscribed)" : "", secs / 4, secs / 8);

	Result r;
	run(p.spec, p.cpus, false, secs / 4, &r);
	report("fixed", p.spec, p.cpus, r);
	EXPECT_EQ(0u, r.failures) << "a reader saw B mapped and wrote A in the same round";
	EXPECT_EQ(0u, r.violations);
	// The workload did what it is for.
	EXPECT_GT(r.rounds, 10u);
	EXPECT_GT(r.visits, 10u);
	EXPECT_GT(r.saw_b, 0u);
	EXPECT_GT(r.wrote_a, 0u);
	EXPECT_GT(r.stats.counter[SD_STAT_SWITCH_FLUSH], 0u);

	Result b;
	run(p.spec, p.cpus, true, secs / 8, &b);
	report("planted", p.spec, p.cpus, b);
}

INSTANTIATE_TEST_SUITE_P(Modes, Dolan,
			 ::testing::Values(Param{ "ipi:cpumask=eager", 2 },
					   Param{ "ipi:cpumask=eager", 4 },
					   Param{ "ipi:cpumask=lazy", 2 },
					   Param{ "ipi:cpumask=lazy", 4 }),
			 [](const auto &info) {
				 return std::string(std::strstr(info.param.spec, "eager") ? "Eager" : "Lazy") +
					std::to_string(info.param.cpus) + "Cpus";
			 });

} // namespace
