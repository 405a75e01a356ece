// SPDX-License-Identifier: MIT
// Restartable sequences (rseq.h, lib/runtime/rseq.c) and membarrier's RSEQ
// fence (handshake.h, SD_HANDSHAKE_MEMBARRIER_RSEQ): a section commits
// unless its task was switched out, migrated, signalled or fenced before
// the commit; a TLB shootdown IPI and a plain membarrier do not abort it;
// the fence aborts every target's section (or one CPU's), the check catches
// a fence that does not; and per-CPU counters updated by rseq from more
// tasks than CPUs lose no update. More CPUs and tasks than PUs throughout.
#include "common.hpp"

#include <atomic>
#include <string>
#include <vector>

#include <shootdown/rseq.h>
#include <shootdown/task.h>

extern "C" {
#include "runtime/handshake.h"
}

namespace {

using sdtest::Machine;
using sdtest::total;
using sdtest::create_task;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr uint64_t kBase = 0x40000000;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;

// ---- one thread, no abort ----

TEST(Rseq, ASectionNothingAbortsCommits)
{
	Machine mach(sdtest::config(1, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	uint64_t word = 1;
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *w = static_cast<uint64_t *>(arg);
		EXPECT_EQ(0, sd_rseq_begin(c));
		EXPECT_EQ(0, sd_rseq_end(c, w, *w + 41));
		// A section with no store, and one begun over another.
		EXPECT_EQ(0, sd_rseq_begin(c));
		EXPECT_EQ(0, sd_rseq_begin(c));
		EXPECT_EQ(0, sd_rseq_end(c, nullptr, 0));
		EXPECT_EQ(-EINVAL, sd_rseq_end(c, w, 7)) << "no section any more";
	}, &word)) << sd_last_error();
	EXPECT_EQ(42u, word);
	EXPECT_EQ(2u, total(mach.m, SD_STAT_RSEQ_COMMIT));
	EXPECT_EQ(0u, total(mach.m, SD_STAT_RSEQ_ABORT));
}

// ---- the fence: CPUs 1 and 2 in a section while CPU 0 fences ----

struct Fence {
	sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	sd_mm *mm = nullptr;
	sd_handshake *h = nullptr;
	sd_handshake_result res{};
	bool shootdown = false;         // CPU 0 also write-protects a page they cached
	std::atomic<int> mapped{0}, in_section{0}, fenced{0};
	int end_rc[3] = {1, 1, 1};
	uint64_t slot[3] = {0, 0, 0};   // each CPU's per-CPU word
	int run_err = 0;
	uint64_t flushes_received = 0;  // after the run
};

void fence_body(sd_cpu *c, void *arg)
{
	auto *f = static_cast<Fence *>(arg);
	const unsigned id = sd_cpu_id(c);
	EXPECT_EQ(0, sd_switch_mm(c, f->mm));
	if (id == 0) {
		EXPECT_EQ(0, sd_mmap(c, f->mm, kBase, P, RW));
		f->mapped.store(1);
		EXPECT_EQ(0, sd_cpu_poll_wake(c));
		while (f->in_section.load() < 2)
			EXPECT_EQ(0, sd_cpu_poll(c));
		if (f->shootdown) {
			EXPECT_EQ(0, sd_mprotect(c, f->mm, kBase, P, SD_PROT_READ));
		} else {
			f->run_err = sd_handshake_run(f->h, c, nullptr, nullptr, &f->res);
		}
		f->fenced.store(1);
		EXPECT_EQ(0, sd_cpu_poll_wake(c));
	} else {
		while (!f->mapped.load())
			EXPECT_EQ(0, sd_cpu_poll(c));
		EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr));
		// The section: read the slot, then wait (interrupts on) for the
		// fence before committing what was read plus one.
		EXPECT_EQ((int)id, sd_rseq_begin(c));
		uint64_t seen = f->slot[id];
		f->in_section.fetch_add(1);
		EXPECT_EQ(0, sd_cpu_poll_wake(c));
		while (!f->fenced.load())
			EXPECT_EQ(0, sd_cpu_poll(c));
		f->end_rc[id] = sd_rseq_end(c, &f->slot[id], seen + 1);
	}
	EXPECT_EQ(0, sd_switch_mm(c, nullptr));
}

void run_fence(Fence &f, const char *strategy = "ipi")
{
	Machine mach(sdtest::config(3, strategy));
	ASSERT_NE(nullptr, mach.m);
	ASSERT_EQ(0, sd_mm_create(mach.m, &f.mm));
	ASSERT_EQ(0, sd_handshake_create(f.mm, &f.hc, &f.h)) << sd_last_error();
	sdtest::Watchdog w("rseq fence: a CPU stuck", 120);
	EXPECT_EQ(0, sd_machine_run(mach.m, fence_body, &f)) << sd_last_error();
	EXPECT_EQ(0, f.run_err) << sd_last_error();
	f.flushes_received = total(mach.m, SD_STAT_REMOTE_INVAL_RECV);
	EXPECT_EQ(0, sd_handshake_destroy(f.h));
	EXPECT_EQ(0, sd_mm_destroy(f.mm));
}

TEST(RseqFence, MembarrierRseqAbortsEverySectionOpenAtTheFence)
{
	Fence f;
	f.hc.kind = SD_HANDSHAKE_MEMBARRIER_RSEQ;
	run_fence(f);
	EXPECT_EQ(2u, f.res.targets);
	EXPECT_EQ(2u, f.res.aborted);
	EXPECT_EQ(0u, f.res.unreached);
	EXPECT_EQ(-EAGAIN, f.end_rc[1]);
	EXPECT_EQ(-EAGAIN, f.end_rc[2]);
	EXPECT_EQ(0u, f.slot[1]) << "an aborted section stores nothing";
	EXPECT_EQ(0u, f.slot[2]);
}

TEST(RseqFence, PlainMembarrierIsABarrierNotAnAbort)
{
	Fence f;
	f.hc.kind = SD_HANDSHAKE_MEMBARRIER;
	run_fence(f);
	EXPECT_EQ(2u, f.res.barriers);
	EXPECT_EQ(0u, f.res.aborted);
	EXPECT_EQ(0, f.end_rc[1]);
	EXPECT_EQ(0, f.end_rc[2]);
	EXPECT_EQ(1u, f.slot[1]);
}

TEST(RseqFence, FlagCpuFencesThatCpuAlone)
{
	Fence f;
	f.hc.kind = SD_HANDSHAKE_MEMBARRIER_RSEQ;
	f.hc.flags = SD_HANDSHAKE_FLAG_CPU;
	f.hc.cpu_id = 2;
	run_fence(f);
	EXPECT_EQ(1u, f.res.targets);
	EXPECT_EQ(1u, f.res.aborted);
	EXPECT_EQ(0, f.end_rc[1]) << "CPU 1 was not fenced";
	EXPECT_EQ(-EAGAIN, f.end_rc[2]);
}

// A signal delivered aborts the section whatever its handler does.
TEST(RseqFence, ASignalAborts)
{
	Fence f;
	f.hc.kind = SD_HANDSHAKE_SIGNAL;
	run_fence(f);
	EXPECT_EQ(2u, f.res.aborted);
	EXPECT_EQ(-EAGAIN, f.end_rc[1]);
	EXPECT_EQ(-EAGAIN, f.end_rc[2]);
}

// An interrupt is not an abort: the TLB shootdown's IPIs reach both CPUs
// (they cached the page) and their sections still commit.
TEST(RseqFence, AShootdownIpiDoesNotAbort)
{
	Fence f;
	f.shootdown = true;
	run_fence(f);
	EXPECT_EQ(2u, f.flushes_received) << "the flush IPIs reached both";
	EXPECT_EQ(0, f.end_rc[1]);
	EXPECT_EQ(0, f.end_rc[2]);
}

// The planted bug: ipi_mb() in place of ipi_rseq(). The barrier is
// passed, but the sections open at the fence commit after it: the check
// reports both targets.
TEST(RseqFence, AFenceThatDoesNotAbortIsCaught)
{
	Fence f;
	f.hc.kind = SD_HANDSHAKE_MEMBARRIER_RSEQ;
	atomic_store(&sd_hs_test_break, (unsigned)SD_HS_BREAK_NO_RSEQ_ABORT);
	run_fence(f);
	atomic_store(&sd_hs_test_break, 0u);
	EXPECT_EQ(2u, f.res.barriers);
	EXPECT_EQ(2u, f.res.unreached);
	EXPECT_EQ(1, f.res.first_unreached);
	EXPECT_EQ(0, f.end_rc[1]) << "what the check is there to catch";
}

// ---- tasks: preemption and migration ----

struct Shared {
	uint64_t slot[2] = {0, 0};
	std::atomic<int> phase{0};
	int rc_first = 1, rc_retry = 1;
};

// Begins, reads CPU 0's slot, and yields to the other task inside the
// section; its commit is then refused, though the other task began no
// section of its own (which would have replaced this one anyway): a
// switch alone aborts, as rseq_preempt() does. The retry commits.
void preempted(sd_task *self, void *arg)
{
	auto *s = static_cast<Shared *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	ASSERT_EQ(0, sd_rseq_begin(c));
	uint64_t seen = s->slot[0];
	s->phase.store(1);
	EXPECT_EQ(0, sd_task_yield(self));
	c = sd_task_cpu(self);
	s->rc_first = sd_rseq_end(c, &s->slot[0], seen + 1);
	ASSERT_EQ(0, sd_rseq_begin(c));
	s->rc_retry = sd_rseq_end(c, &s->slot[0], s->slot[0] + 1);
}

void other(sd_task *self, void *arg)
{
	auto *s = static_cast<Shared *>(arg);
	while (!s->phase.load())
		EXPECT_EQ(0, sd_task_yield(self));
}

// A machine of @cpus CPUs and one mm for its tasks, run by run().
struct TaskRun {
	Machine mach;
	sd_mm *mm = nullptr;
	explicit TaskRun(unsigned cpus) : mach(sdtest::config(cpus, "ipi"))
	{
		if (mach.m) {
			EXPECT_EQ(0, sd_mm_create(mach.m, &mm));
		}
	}
	~TaskRun()
	{
		if (mm) {
			EXPECT_EQ(0, sd_mm_destroy(mm));
		}
	}
	void run(const char *what)
	{
		sdtest::Watchdog w(what, 120);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
};

TEST(RseqTasks, ASwitchedOutSectionIsAborted)
{
	TaskRun tr(1);
	ASSERT_NE(nullptr, tr.mm);
	Shared s;
	create_task(tr.mach.m, tr.mm, preempted, &s, 0, "0");
	create_task(tr.mach.m, tr.mm, other, &s, 0, "0");
	tr.run("rseq preemption");
	EXPECT_EQ(-EAGAIN, s.rc_first) << "switched out inside its section";
	EXPECT_EQ(0, s.rc_retry);
	EXPECT_EQ(1u, s.slot[0]);
	EXPECT_EQ(1u, total(tr.mach.m, SD_STAT_RSEQ_ABORT));
}

// Moved to CPU 1 inside its section: the section it began on CPU 0 is
// gone, and ending it on CPU 1 stores nothing.
void migrant(sd_task *self, void *arg)
{
	auto *s = static_cast<Shared *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	ASSERT_EQ(0u, sd_cpu_id(c));
	ASSERT_EQ(0, sd_rseq_begin(c));
	EXPECT_EQ(0, sd_task_set_affinity(self, self, "1"));
	c = sd_task_cpu(self);
	EXPECT_EQ(1u, sd_cpu_id(c));
	s->rc_first = sd_rseq_end(c, &s->slot[0], 99);
	ASSERT_EQ(1, sd_rseq_begin(c));
	s->rc_retry = sd_rseq_end(c, &s->slot[1], 1);
}

TEST(RseqTasks, AMigratedSectionIsAborted)
{
	TaskRun tr(2);
	ASSERT_NE(nullptr, tr.mm);
	Shared s;
	create_task(tr.mach.m, tr.mm, migrant, &s, 0, "0-1");
	tr.run("rseq migration");
	EXPECT_EQ(-EAGAIN, s.rc_first);
	EXPECT_EQ(0u, s.slot[0]);
	EXPECT_EQ(0, s.rc_retry);
	EXPECT_EQ(1u, s.slot[1]);
}

// Per-CPU counters, librseq's percpu counter: tasks on two CPUs add to
// their CPU's slot with a plain load and the commit, yielding inside the
// section every few rounds, while a fencer task on a third CPU fences the
// two with MEMBARRIER_RSEQ. The slots sum to every increment made.
struct Counters {
	uint64_t slot[3] = {0, 0, 0};
	sd_handshake *h = nullptr;
	std::atomic<unsigned> adders_left{0};
	std::atomic<uint64_t> aborted{0};
	unsigned rounds = 0;
};

void adder(sd_task *self, void *arg)
{
	auto *k = static_cast<Counters *>(arg);
	for (unsigned r = 0; r < k->rounds; r++) {
		for (unsigned attempt = 0;; attempt++) {
			sd_cpu *c = sd_task_cpu(self);
			int id = sd_rseq_begin(c);
			ASSERT_GE(id, 0);
			uint64_t seen = k->slot[id];
			// A section that yields every time never commits while
			// others share the CPU (as a real one would not): only
			// its first attempt does.
			if (r % 3 == 0 && attempt == 0) {
				EXPECT_EQ(0, sd_task_yield(self));
			}
			c = sd_task_cpu(self);
			int rc = sd_rseq_end(c, &k->slot[id], seen + 1);
			if (rc == 0)
				break;
			ASSERT_EQ(-EAGAIN, rc);
			k->aborted.fetch_add(1);
		}
	}
	k->adders_left.fetch_sub(1);
}

void fencer(sd_task *self, void *arg)
{
	auto *k = static_cast<Counters *>(arg);
	sd_handshake_result res;
	while (k->adders_left.load()) {
		ASSERT_EQ(0, sd_handshake_run(k->h, sd_task_cpu(self), nullptr, nullptr, &res));
		EXPECT_EQ(0u, res.unreached);
		EXPECT_EQ(0, sd_task_yield(self));
	}
}

TEST(RseqTasks, PerCpuCountersFromMoreTasksThanCpusLoseNoUpdate)
{
	TaskRun tr(3);
	ASSERT_NE(nullptr, tr.mm);
	Counters k;
	k.rounds = (unsigned)(300 * sdtest::stress_scale());
	if (k.rounds < 30) {
		k.rounds = 30;
	}
	constexpr unsigned kAdders = 6;
	k.adders_left = kAdders;
	sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	hc.kind = SD_HANDSHAKE_MEMBARRIER_RSEQ;
	ASSERT_EQ(0, sd_handshake_create(tr.mm, &hc, &k.h));
	for (unsigned i = 0; i < kAdders; i++)
		create_task(tr.mach.m, tr.mm, adder, &k, i % 2, i % 2 ? "1" : "0");
	create_task(tr.mach.m, tr.mm, fencer, &k, 2, "2");
	tr.run("rseq counters");
	EXPECT_EQ(0u, k.slot[2]);
	EXPECT_EQ((uint64_t)kAdders * k.rounds, k.slot[0] + k.slot[1]) << "updates were lost";
	EXPECT_GE(k.aborted.load(), 1u);
	EXPECT_EQ(k.aborted.load(), total(tr.mach.m, SD_STAT_RSEQ_ABORT))
		<< "every refused commit was one abort, counted where it happened";
	EXPECT_EQ(0, sd_handshake_destroy(k.h));
}

}  // namespace
