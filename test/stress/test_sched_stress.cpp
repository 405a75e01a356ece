// SPDX-License-Identifier: MIT
// Tasks under stress, oracle on: two processes of several threads each on
// an oversubscribed machine, every task at random touching, zapping and
// protecting pages of its process's shared region, waiting for and handing
// out tokens through a wait queue, sleeping, yielding, changing its
// affinity and forking children that write the parent's pages (copy-on-
// write) and exit. Every strategy; no stale translation may be served.
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <shootdown/task.h>

namespace {

using sdtest::Machine;
using sdtest::Watchdog;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
constexpr uint64_t kBase = 0x40000000;
constexpr unsigned kPages = 16;
constexpr unsigned kCpus = 4;
constexpr unsigned kThreads = 3;        // per process

struct Process {
	sd_mm *mm = nullptr;
	sd_waitq *q = nullptr;
	std::atomic<int> tokens{0};
};

struct Stress {
	Process proc[2];
	std::chrono::steady_clock::time_point deadline;
	std::atomic<bool> stop{false};
	std::atomic<unsigned> children{0};
	std::atomic<uint64_t> ops{0}, waits{0}, deadlocks{0}, forks{0}, moves{0}, sleeps{0};
};

struct Worker {
	Stress *s;
	Process *p;
	uint64_t seed;
};

bool token_or_stop(void *arg)
{
	auto *w = static_cast<Worker *>(arg);
	return w->p->tokens.load() > 0 || w->s->stop.load();
}

void child_body(sd_task *self, void *arg)
{
	auto *s = static_cast<Stress *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	for (unsigned i = 0; i < kPages; i += 3) {
		int rc = sd_access(c, kBase + i * P, SD_WRITE, nullptr);
		// A page the parent zapped is mapped again; one it protected
		// refuses the write.
		EXPECT_TRUE(rc == 0 || rc == -EACCES) << sd_strerror(rc);
	}
	s->children--;
}

void stop_all(sd_task *self, Stress *s)
{
	s->stop = true;
	for (auto &p : s->proc)
		EXPECT_GE(sd_task_wake(self, p.q, 0), 0) << sd_last_error();
}

void worker_body(sd_task *self, void *arg)
{
	auto *w = static_cast<Worker *>(arg);
	Stress *s = w->s;
	std::mt19937_64 rng(w->seed);
	static const char *const kAffinities[] = {"0-3", "0", "1", "2-3", "0,2", "1,3", nullptr};

	while (!s->stop) {
		if (std::chrono::steady_clock::now() >= s->deadline) {
			stop_all(self, s);
			break;
		}
		sd_cpu *c = sd_task_cpu(self);
		ASSERT_NE(nullptr, c);
		sd_mm *mm = w->p->mm;
		const uint64_t va = kBase + (rng() % kPages) * P;
		unsigned op = rng() % 100;
		s->ops++;
		if (op < 50) {
			int rc = sd_access(c, va, op % 2 ? SD_WRITE : SD_READ, nullptr);
			EXPECT_TRUE(rc == 0 || rc == -EACCES) << sd_strerror(rc);
		} else if (op < 60) {
			EXPECT_EQ(0, sd_madvise_dontneed(c, mm, va, P));
		} else if (op < 66) {
			EXPECT_EQ(0, sd_mprotect(c, mm, va, P, op % 2 ? (unsigned)SD_PROT_READ : RW));
		} else if (op < 74) {
			EXPECT_EQ(0, sd_task_yield(self));
		} else if (op < 82) {
			// Hand out a token, or wait for one.
			if (op % 2) {
				w->p->tokens++;
				EXPECT_GE(sd_task_wake(self, w->p->q, 1), 0);
			} else {
				s->waits++;
				int rc = sd_task_wait(self, w->p->q, token_or_stop, w);
				if (rc == -EDEADLK)
					s->deadlocks++;
				else
					EXPECT_EQ(0, rc) << sd_last_error();
				if (!rc && w->p->tokens.fetch_sub(1) <= 0)
					w->p->tokens++;   // taken by another first
			}
		} else if (op < 88) {
			s->sleeps++;
			EXPECT_EQ(0, sd_task_sleep(self, 20000 + rng() % 80000));
		} else if (op < 95) {
			s->moves++;
			const char *a = kAffinities[rng() % (sizeof(kAffinities) / sizeof(*kAffinities))];
			EXPECT_EQ(0, sd_task_set_affinity(self, self, a)) << sd_last_error();
		} else if (s->children.load() < 4) {
			s->children++;
			s->forks++;
			int rc = sd_task_fork(self, child_body, s, nullptr);
			EXPECT_EQ(0, rc) << sd_last_error();
			if (rc)
				s->children--;
		}
	}
	// Leave everything readable for the next pass of another worker.
}

void run_stress(const char *strategy, double seconds)
{
	sd_machine_config cfg = sdtest::config(kCpus, strategy);
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	Stress s;
	for (auto &p : s.proc) {
		ASSERT_EQ(0, sd_mm_create(mach.m, &p.mm));
		ASSERT_EQ(0, sd_waitq_create(mach.m, "tokens", &p.q));
		sdtest::Attached a(mach.m, 0);
		ASSERT_EQ(0, sd_mmap(a.c, p.mm, kBase, kPages * P, RW));
	}
	std::vector<Worker> workers;
	workers.reserve(2 * kThreads);
	const uint64_t seed = sdtest::seed();
	for (unsigned i = 0; i < 2 * kThreads; i++)
		workers.push_back(Worker{&s, &s.proc[i % 2], seed + i});
	for (auto &w : workers) {
		sd_task_config tc = SD_TASK_CONFIG_INIT;
		tc.mm = w.p->mm;
		ASSERT_EQ(0, sd_task_create(mach.m, &tc, worker_body, &w, nullptr)) << sd_last_error();
	}
	s.deadline = std::chrono::steady_clock::now() +
		     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
			     std::chrono::duration<double>(seconds));
	{
		Watchdog wd(std::string("sched stress ") + strategy, 60 + 4 * seconds);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &st));
	std::printf("[sched stress] %-10s %llu ops, %llu waits (%llu deadlocks broken), %llu sleeps, "
		    "%llu moves, %llu forks; %llu switches, %llu wakeups, %llu wakeup IPIs, "
		    "%llu migrations, %llu copy-on-write faults, %llu violations\n",
		    strategy, (unsigned long long)s.ops, (unsigned long long)s.waits,
		    (unsigned long long)s.deadlocks, (unsigned long long)s.sleeps,
		    (unsigned long long)s.moves, (unsigned long long)s.forks,
		    (unsigned long long)st.counter[SD_STAT_TASK_SWITCH],
		    (unsigned long long)st.counter[SD_STAT_TASK_WAKEUP],
		    (unsigned long long)st.counter[SD_STAT_WAKEUP_IPI],
		    (unsigned long long)st.counter[SD_STAT_TASK_MIGRATE],
		    (unsigned long long)st.counter[SD_STAT_WP_FAULT],
		    (unsigned long long)st.counter[SD_STAT_VIOLATION]);
	EXPECT_EQ(0u, st.counter[SD_STAT_VIOLATION]) << strategy;
	EXPECT_GT(st.counter[SD_STAT_TASK_SWITCH], 0u);
	EXPECT_EQ(s.forks.load() + 2 * kThreads, st.counter[SD_STAT_TASK_EXIT]);
	for (auto &p : s.proc) {
		EXPECT_EQ(0, sd_waitq_destroy(p.q));
		EXPECT_EQ(0, sd_mm_destroy(p.mm)) << sd_last_error();
	}
}

TEST(SchedStress, EveryStrategyServesNoStaleTranslation)
{
	const char *const strategies[] = {"broadcast", "local", "ipi", "ipi:cpumask=lazy", "gbcast"};
	const double each = sdtest::stress_seconds() / (sizeof(strategies) / sizeof(*strategies));
	for (const char *strategy : strategies)
		run_stress(strategy, each);
}

}  // namespace
