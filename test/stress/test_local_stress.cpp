// SPDX-License-Identifier: MIT
// Oracle-checked stress for `local` (and `broadcast` beside it): many
// single-threaded mms plus a few multi-threaded ones, run as tasks that
// migrate between CPUs, with idle periods; then ASID rollover storms with
// 4-bit ASIDs. Every run must end with zero stale and zero foreign hits.
#include "common.hpp"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kBase = 0x7f0000000000ull;
constexpr unsigned kPages = 64;

struct Task {
	sd_mm *mm;
	uint64_t base;               // region of this task's mm it works in
	std::atomic<int> running{ 0 };
};

struct World {
	std::vector<sd_mm *> mms;
	std::vector<std::unique_ptr<Task>> tasks;
	double seconds;
	uint64_t seed;
	std::atomic<uint64_t> ops{ 0 }, unexpected{ 0 };
};

int random_op(sd_cpu *c, Task &t, std::mt19937_64 &rng)
{
	uint64_t first = rng() % kPages, n = 1 + rng() % std::min<uint64_t>(8, kPages - first);
	uint64_t va = t.base + first * SD_PAGE_SIZE, len = n * SD_PAGE_SIZE;
	switch (rng() % 20) {
	case 0:
	case 1:
		return sd_mprotect(c, t.mm, va, len, rng() % 2 ? SD_PROT_READ
							      : SD_PROT_READ | SD_PROT_WRITE);
	case 2:
		return sd_madvise_dontneed(c, t.mm, va, len);
	case 3: {
		int err = sd_munmap(c, t.mm, va, len);
		int err2 = sd_mmap(c, t.mm, va, len, SD_PROT_READ | SD_PROT_WRITE);
		// Another task of a shared mm may have remapped part of it.
		return err ? err : (err2 == -EEXIST ? 0 : err2);
	}
	default:
		return sd_access(c, va, rng() % 3 ? SD_READ : SD_WRITE, nullptr);
	}
}

void cpu_body(sd_cpu *c, void *arg)
{
	World &w = *static_cast<World *>(arg);
	std::mt19937_64 rng(w.seed * 1000003 + sd_cpu_id(c));
	auto deadline = std::chrono::steady_clock::now() +
			std::chrono::duration<double>(w.seconds);

	while (std::chrono::steady_clock::now() < deadline) {
		Task &t = *w.tasks[rng() % w.tasks.size()];
		int idle = 0;
		if (!t.running.compare_exchange_strong(idle, 1))
			continue;
		sd_switch_mm(c, t.mm); // the task migrates here
		for (int i = 0, n = 1 + (int)(rng() % 40); i < n; i++) {
			int err = random_op(c, t, rng);
			if (err && err != -EFAULT && err != -EACCES && err != -ENOMEM)
				w.unexpected++;
			w.ops++;
		}
		t.running.store(0);
		if (rng() % 16 == 0) {
			// Reclaim-style: zap another task's pages without running its
			// mm, so the flusher is not local (NO or BROADCAST).
			Task &o = *w.tasks[rng() % w.tasks.size()];
			uint64_t first = rng() % kPages;
			int err = sd_madvise_dontneed(c, o.mm, o.base + first * SD_PAGE_SIZE,
						      SD_PAGE_SIZE);
			if (err)
				w.unexpected++;
		}
		if (rng() % 8 == 0) {
			sd_cpu_idle(c); // lazy: the mm stays loaded, uncounted
			std::this_thread::yield();
		}
	}
	sd_switch_mm(c, nullptr);
}

struct Params {
	const char *strategy;
	unsigned cpus;
	unsigned asid_bits;
	unsigned single_mms;
	unsigned shared_mms;
};

void run(const Params &p, sd_stats *out)
{
	sd_machine_config cfg = sdtest::config(p.cpus, p.strategy);
	cfg.asid_bits = p.asid_bits;
	sdtest::Machine machine(cfg);
	ASSERT_NE(nullptr, machine.m);
	World w;
	w.seed = sdtest::seed();
	w.seconds = sdtest::stress_seconds() / 3;
	unsigned nmms = p.single_mms + p.shared_mms;

	sd_cpu *c;
	ASSERT_EQ(0, sd_cpu_attach(machine.m, 0, &c));
	for (unsigned i = 0; i < nmms; i++) {
		sd_mm *mm;
		ASSERT_EQ(0, sd_mm_create(machine.m, &mm));
		w.mms.push_back(mm);
	}
	// One task per single-threaded mm; three tasks on each shared mm, all
	// in the same region, so they run concurrently and share translations
	// (a multi-threaded process).
	for (unsigned i = 0; i < nmms; i++) {
		unsigned ntasks = i < p.single_mms ? 1 : 3;
		ASSERT_EQ(0, sd_mmap(c, w.mms[i], kBase, kPages * SD_PAGE_SIZE,
				     SD_PROT_READ | SD_PROT_WRITE));
		for (unsigned k = 0; k < ntasks; k++) {
			auto t = std::make_unique<Task>();
			t->mm = w.mms[i];
			t->base = kBase;
			w.tasks.push_back(std::move(t));
		}
	}
	ASSERT_EQ(0, sd_cpu_detach(c));

	std::fprintf(stderr, "[stress] %s, %u CPUs%s, %u-bit ASIDs, %u+%u mms, %zu tasks, %.1f s\n",
		     p.strategy, p.cpus, p.cpus > std::thread::hardware_concurrency() ?
		     " (oversubscribed)" : "", p.asid_bits, p.single_mms, p.shared_mms,
		     w.tasks.size(), w.seconds);
	{
		sdtest::Watchdog dog(std::string(p.strategy) + " stress", w.seconds + 120);
		ASSERT_EQ(0, sd_machine_run(machine.m, cpu_body, &w));
	}

	EXPECT_EQ(0, sd_stats_snapshot(machine.m, out)) << sd_last_error();
	uint64_t v = sd_oracle_violations(machine.m);
	if (v) {
		sd_violation d;
		sd_oracle_violation(machine.m, 0, &d);
		ADD_FAILURE() << v << " violations; first: kind " << d.kind << " cpu " << d.cpu
			      << " va 0x" << std::hex << d.va << std::dec << " entry v"
			      << d.entry_version << " floor v" << d.floor_version << " mm "
			      << d.mm_id << " entry mm " << d.entry_mm_id << " (SD_SEED="
			      << w.seed << ")";
	}
	EXPECT_EQ(0u, w.unexpected.load());
	EXPECT_GT(w.ops.load(), 1000u);
	std::fprintf(stderr, "[stress] ops %llu flushes %llu local_only %llu skipped %llu "
			     "stale_switch %llu tlbi %llu rollovers %llu violations %llu\n",
		     (unsigned long long)w.ops.load(),
		     (unsigned long long)out->counter[SD_STAT_FLUSH],
		     (unsigned long long)out->counter[SD_STAT_LOCAL_ONLY_FLUSH],
		     (unsigned long long)out->counter[SD_STAT_FLUSH_SKIPPED],
		     (unsigned long long)out->counter[SD_STAT_STALE_SWITCH_FLUSH],
		     (unsigned long long)out->counter[SD_STAT_TLBI_OP],
		     (unsigned long long)out->counter[SD_STAT_ASID_ROLLOVER],
		     (unsigned long long)v);
	for (sd_mm *mm : w.mms)
		EXPECT_EQ(0, sd_mm_destroy(mm));
}

class LocalStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(LocalStress, MigratingTasksStayCoherent)
{
	unsigned cpus = GetParam();
	sd_stats s = SD_STATS_INIT;
	run({ "local", cpus, 16, 3 * cpus, 2 }, &s);
	// The paths this strategy adds must all have run.
	EXPECT_GT(s.counter[SD_STAT_LOCAL_ONLY_FLUSH], 0u);
	EXPECT_GT(s.counter[SD_STAT_STALE_SWITCH_FLUSH], 0u);
	EXPECT_GT(s.counter[SD_STAT_TLBI_OP], 0u); // shared mms broadcast
	EXPECT_GT(s.counter[SD_STAT_FLUSH_SKIPPED], 0u); // reclaim of idle mms
}

INSTANTIATE_TEST_SUITE_P(Cpus, LocalStress, ::testing::Values(2u, 4u, 8u));

class RolloverStorm : public ::testing::TestWithParam<const char *> {};

TEST_P(RolloverStorm, FourBitAsidsNoCrossMmTranslations)
{
	sd_stats s = SD_STATS_INIT;
	// 15 usable ASIDs for 40 mms on 6 CPUs: rollovers all the time.
	run({ GetParam(), 6, 4, 36, 4 }, &s);
	EXPECT_GT(s.counter[SD_STAT_ASID_ROLLOVER], 10u);
}

INSTANTIATE_TEST_SUITE_P(Strategies, RolloverStorm, ::testing::Values("broadcast", "local"));

} // namespace
