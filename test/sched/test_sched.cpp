// SPDX-License-Identifier: MIT
// Tasks and the scheduler (lib/sched, include/shootdown/task.h): switching
// between host threads on one CPU, blocking and wakeups with the reschedule
// IPI, idle in lazy TLB mode, migration, fork, exec, sleep, deadlock
// reports, in real and modelled time, oracle on.
#include "common.hpp"
#include "hw/profile.hpp"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <map>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include <shootdown/task.h>

namespace {

using sdtest::Machine;
using sdtest::Profile;
using sdtest::Watchdog;
using sdtest::create_task;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
constexpr uint64_t kBase = 0x40000000;

uint64_t total(sd_machine *m, sd_stat which)
{
	sd_stats st = SD_STATS_INIT;
	EXPECT_EQ(0, sd_stats_snapshot(m, &st));
	return st.counter[which];
}

// A new mm of @m with @pages pages mapped read-write at kBase (not yet
// touched), made from CPU 0 before any run.
sd_mm *mapped_mm(sd_machine *m, unsigned pages)
{
	sd_mm *mm = nullptr;
	EXPECT_EQ(0, sd_mm_create(m, &mm));
	sdtest::Attached a(m, 0);
	EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, pages * P, RW));
	return mm;
}

// Two tasks pass a token back and forth through two wait queues (a pipe
// each way, hackbench's shape reduced to one pair), each touching its page
// of one mm at every turn.
struct PingPong {
	sd_waitq *q[2] = {};
	std::atomic<unsigned> turn{0};   // whose turn: 0 or 1
	unsigned rounds = 0;
	std::atomic<unsigned> done{0};
	std::atomic<unsigned> cpus_seen[2] = {};
};

struct Player {
	PingPong *pp;
	unsigned me;
};

void player(sd_task *self, void *arg)
{
	auto *p = static_cast<Player *>(arg);
	PingPong *pp = p->pp;
	const unsigned me = p->me, other = 1 - me;

	for (unsigned r = 0; r < pp->rounds; r++) {
		ASSERT_EQ(0, sd_task_wait(self, pp->q[me], [](void *v) {
			auto *pl = static_cast<Player *>(v);
			return pl->pp->turn.load() == pl->me;
		}, p)) << sd_last_error();
		sd_cpu *c = sd_task_cpu(self);
		ASSERT_NE(nullptr, c);
		pp->cpus_seen[me] |= 1u << sd_cpu_id(c);
		EXPECT_EQ(0, sd_access(c, kBase + me * P, SD_WRITE, nullptr)) << sd_last_error();
		pp->turn.store(other);
		EXPECT_GE(sd_task_wake(self, pp->q[other], 1), 0) << sd_last_error();
	}
	pp->done++;
}

void run_ping_pong(sd_machine *m, unsigned cpu0, unsigned cpu1, unsigned rounds, PingPong &pp,
		   bool pinned = true)
{
	sd_mm *mm = mapped_mm(m, 2);
	ASSERT_NE(nullptr, mm);
	ASSERT_EQ(0, sd_waitq_create(m, "ping", &pp.q[0]));
	ASSERT_EQ(0, sd_waitq_create(m, "pong", &pp.q[1]));
	pp.rounds = rounds;
	Player pl[2] = {{&pp, 0}, {&pp, 1}};
	std::string a0 = std::to_string(cpu0), a1 = std::to_string(cpu1);
	create_task(m, mm, player, &pl[0], cpu0, pinned ? a0.c_str() : nullptr);
	create_task(m, mm, player, &pl[1], cpu1, pinned ? a1.c_str() : nullptr);
	Watchdog w("ping-pong", 120);
	EXPECT_EQ(0, sd_sched_run(m)) << sd_last_error();
	EXPECT_EQ(2u, pp.done.load());
	EXPECT_EQ(0, sd_waitq_destroy(pp.q[0]));
	EXPECT_EQ(0, sd_waitq_destroy(pp.q[1]));
	EXPECT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
}

// Both tasks on one CPU: every turn is a switch between the two host
// threads that take the CPU in turn, and no IPI is needed to wake anyone.
TEST(Sched, TwoTasksShareOneCpu)
{
	Machine mach(sdtest::config(1, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	PingPong pp;
	run_ping_pong(mach.m, 0, 0, 200, pp);
	EXPECT_EQ(1u, pp.cpus_seen[0].load());
	EXPECT_EQ(1u, pp.cpus_seen[1].load());
	// A round: player 0 blocks (a switch), player 1 wakes it, and the
	// woken task preempts its waker at the wake's return (a switch), so
	// player 0's own wake finds player 1 runnable, not waiting.
	EXPECT_GE(total(mach.m, SD_STAT_TASK_SWITCH), 400u);
	EXPECT_GE(total(mach.m, SD_STAT_TASK_WAKEUP), 199u);
	EXPECT_LE(total(mach.m, SD_STAT_TASK_WAKEUP), 201u);
	EXPECT_EQ(2u, total(mach.m, SD_STAT_TASK_EXIT));
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
}

// On two CPUs, each wait idles its CPU (lazily keeping the mm) and each
// wake is a reschedule IPI to the other, idle, CPU.
TEST(Sched, WakeupOfAnIdleCpuIsAnIpi)
{
	for (const char *strategy : {"ipi", "broadcast", "local", "gbcast"}) {
		Machine mach(sdtest::config(2, strategy));
		ASSERT_NE(nullptr, mach.m);
		PingPong pp;
		run_ping_pong(mach.m, 0, 1, 200, pp);
		EXPECT_EQ(1u, pp.cpus_seen[0].load()) << strategy;
		EXPECT_EQ(2u, pp.cpus_seen[1].load()) << strategy;
		EXPECT_GE(total(mach.m, SD_STAT_WAKEUP_IPI), 100u) << strategy;
		EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION)) << strategy;
	}
}

void waits_for_ever(sd_task *self, void *arg)
{
	auto *q = static_cast<sd_waitq *>(arg);
	EXPECT_EQ(-EDEADLK, sd_task_wait(self, q, [](void *) { return false; }, nullptr));
}

// A wait nobody can end is reported, not hung on: the waiters' calls
// return -EDEADLK and the run ends.
TEST(Sched, AWaitThatCannotEndIsReported)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	sd_waitq *q = nullptr;
	ASSERT_EQ(0, sd_waitq_create(mach.m, "never", &q));
	for (unsigned i = 0; i < 3; i++)
		create_task(mach.m, mm, waits_for_ever, q);
	Watchdog w("deadlock report", 60);
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	EXPECT_EQ(0, sd_waitq_destroy(q));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

}  // namespace

namespace {

// ---- modelled time ----

const std::map<std::string, double> kSchedCosts = {
	{"sched_switch", 500}, {"sched_wakeup", 300}, {"ipi_send", 100}, {"ipi_delivery", 400},
	{"irq_entry", 50}, {"irq_exit", 50}, {"ipi_handler", 20}, {"context_switch", 200},
	{"page_fault_entry", 700}};

struct Clocked {
	Player pl;
	uint64_t end_ns = 0;
};

void clocked_player(sd_task *self, void *arg)
{
	auto *c = static_cast<Clocked *>(arg);
	player(self, &c->pl);
	c->end_ns = sd_cpu_clock_ns(sd_task_cpu(self));
}

// The pair's end clocks, run in strict modelled time on @cpus CPUs.
std::vector<uint64_t> modelled_ping_pong(const sd_machine_config &cfg, unsigned cpu1,
					 unsigned rounds, sd_model_info *info = nullptr)
{
	Machine mach(cfg);
	EXPECT_NE(nullptr, mach.m) << sd_last_error();
	if (!mach.m)
		return {};
	sd_mm *mm = nullptr;
	EXPECT_EQ(0, sd_mm_create(mach.m, &mm));
	PingPong pp;
	pp.rounds = rounds;
	EXPECT_EQ(0, sd_waitq_create(mach.m, "ping", &pp.q[0]));
	EXPECT_EQ(0, sd_waitq_create(mach.m, "pong", &pp.q[1]));
	Clocked cl[2] = {{{&pp, 0}}, {{&pp, 1}}};
	std::string a1 = std::to_string(cpu1);
	{
		// The pages populated before the run: the turns take no fault.
		sdtest::Attached a(mach.m, 0);
		EXPECT_EQ(0, sd_mmap(a.c, mm, kBase, 2 * P, RW));
		EXPECT_EQ(0, sd_switch_mm(a.c, mm));
		EXPECT_EQ(0, sd_access(a.c, kBase, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_access(a.c, kBase + P, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_switch_mm(a.c, nullptr));
	}
	uint64_t start = 0;
	{
		sd_stats st = SD_STATS_INIT;
		EXPECT_EQ(0, sd_stats_cpu(mach.m, 0, &st));
		start = st.counter[SD_STAT_MODEL_NS];
	}
	create_task(mach.m, mm, clocked_player, &cl[0], 0, "0");
	create_task(mach.m, mm, clocked_player, &cl[1], cpu1, a1.c_str());
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	if (info) {
		*info = SD_MODEL_INFO_INIT;
		EXPECT_EQ(0, sd_machine_model_info(mach.m, info));
	}
	EXPECT_EQ(0, sd_waitq_destroy(pp.q[0]));
	EXPECT_EQ(0, sd_waitq_destroy(pp.q[1]));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return {cl[0].end_ns - start, cl[1].end_ns - start};
}

// One CPU, strict: a round is one wakeup and two task switches (one mm:
// no switch_mm; the woken player preempts its waker, so the other wake
// finds nobody waiting), nothing else is charged, so the clock is exact.
TEST(SchedModelled, OneCpuRoundIsAWakeupAndTwoSwitches)
{
	Profile p("pack:1 core:2 pu:1", kSchedCosts);
	Watchdog w("modelled ping-pong", 120);
	constexpr unsigned R = 100;
	auto end = modelled_ping_pong(sdtest::strict_config(1, "ipi", p), 0, R);
	ASSERT_EQ(2u, end.size());
	const uint64_t last = std::max(end[0], end[1]);
	// R rounds of two switches and a wakeup, give or take the first
	// and the last round's.
	EXPECT_GE(last, R * (2 * 500 + 300) - 2 * (500 + 300));
	EXPECT_LE(last, R * (2 * 500 + 300) + 2 * (500 + 300));
}

// Two CPUs, strict: every wakeup reaches an idle CPU through a reschedule
// IPI, and the runs are bit-identical, also beside a busy loop on every PU.
TEST(SchedModelled, StrictRunsAreBitIdenticalWhateverTheHostDoes)
{
	Profile p("pack:1 core:2 pu:1", kSchedCosts);
	Watchdog w("strict ping-pong", 180);
	for (const char *strategy : {"ipi", "broadcast", "gbcast"}) {
		sd_model_info info[3];
		auto first = modelled_ping_pong(sdtest::strict_config(2, strategy, p), 1, 60, &info[0]);
		auto second = modelled_ping_pong(sdtest::strict_config(2, strategy, p), 1, 60, &info[1]);
		std::vector<uint64_t> loaded;
		{
			sdtest::Hogs hogs(std::thread::hardware_concurrency() + 1);
			loaded = modelled_ping_pong(sdtest::strict_config(2, strategy, p), 1, 60,
						    &info[2]);
		}
		ASSERT_EQ(2u, first.size());
		// A round crosses an IPI each way at least.
		EXPECT_GE(first[1], 60u * 2 * (100 + 400)) << strategy;
		uint64_t stalls = info[0].seq_stalls + info[1].seq_stalls + info[2].seq_stalls;
		if (sdtest::tsan_stalled(strategy, stalls))
			continue;
		EXPECT_EQ(0u, stalls) << strategy;
		EXPECT_EQ(first, second) << strategy;
		EXPECT_EQ(first, loaded) << strategy;
	}
}

// Two tasks that only compute share one CPU through their preemption
// points: each keeps the CPU for one EEVDF base slice (0.75 ms at one CPU)
// and then goes behind the other, so the runs alternate in bursts of
// 8 chunks of 100 us (the slice is first seen used up after the 8th).
// Planted bug: no slice check, so the first task runs all its chunks.
struct Slicer {
	std::vector<unsigned> *log;
	unsigned me;
	std::atomic<unsigned> *switches_seen;
};

void slicer(sd_task *self, void *arg)
{
	auto *sl = static_cast<Slicer *>(arg);

	for (unsigned i = 0; i < 40; i++) {
		ASSERT_EQ(0, sd_cpu_work(sd_task_cpu(self), 100000));
		sl->log->push_back(sl->me);
		ASSERT_EQ(0, sd_task_preempt_point(self)) << sd_last_error();
	}
}

TEST(SchedModelled, APreemptPointEndsAUsedUpSliceWhenOthersWait)
{
	Profile p("pack:1 core:2 pu:1", kSchedCosts);
	Watchdog w("time slices", 120);
	Machine mach(sdtest::strict_config(1, "ipi", p));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	std::vector<unsigned> log;
	Slicer sl[2] = {{&log, 0, nullptr}, {&log, 1, nullptr}};
	create_task(mach.m, mm, slicer, &sl[0], 0, "0");
	create_task(mach.m, mm, slicer, &sl[1], 0, "0");
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	ASSERT_EQ(80u, log.size());
	std::vector<unsigned> bursts;
	for (size_t i = 0; i < log.size(); i++)
		if (i == 0 || log[i] != log[i - 1])
			bursts.push_back(1);
		else
			bursts.back()++;
	EXPECT_EQ(10u, bursts.size()) << "the two tasks did not take turns by the slice";
	for (unsigned b : bursts)
		EXPECT_EQ(8u, b) << "a burst of another length than the 0.75 ms slice";
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// Alone on its CPU, a task keeps it at every preemption point however long
// it runs (nobody waits).
TEST(SchedModelled, APreemptPointKeepsTheCpuWhenNobodyWaits)
{
	Profile p("pack:1 core:2 pu:1", kSchedCosts);
	Watchdog w("time slices alone", 120);
	Machine mach(sdtest::strict_config(2, "ipi", p));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	std::vector<unsigned> log[2];
	Slicer sl[2] = {{&log[0], 0, nullptr}, {&log[1], 1, nullptr}};
	create_task(mach.m, mm, slicer, &sl[0], 0, "0");
	create_task(mach.m, mm, slicer, &sl[1], 1, "1");
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	EXPECT_EQ(40u, log[0].size());
	EXPECT_EQ(40u, log[1].size());
	// Each task's first switch in, and the idle threads' switches out
	// and back at the end: no switch between the chunks.
	EXPECT_LE(total(mach.m, SD_STAT_TASK_SWITCH), 6u);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// Lax mode runs the same shape to the end with sensible clocks.
TEST(SchedModelled, LaxRunsToTheEnd)
{
	Profile p("pack:1 core:2 pu:1", kSchedCosts);
	Watchdog w("lax ping-pong", 120);
	sd_machine_config cfg = sdtest::config(2, "ipi");
	cfg.profile = p.path.c_str();
	auto end = modelled_ping_pong(cfg, 1, 60);
	ASSERT_EQ(2u, end.size());
	EXPECT_GE(end[1], 60u * 2 * (100 + 400));
}

}  // namespace

namespace {

// ---- fork, exec, affinity, sleep ----

struct ForkCase {
	uint64_t parent_pfn = 0, parent_pfn_after = 0, child_pfn = 0;
	sd_mm *child_mm = nullptr;
	std::atomic<bool> child_done{false};
	int fork_err = 1;
};

void forked_child(sd_task *self, void *arg)
{
	auto *f = static_cast<ForkCase *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	f->child_mm = sd_task_mm(self);
	// Its first write breaks copy-on-write: a frame of its own.
	EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, &f->child_pfn)) << sd_last_error();
	f->child_done = true;
}

void forking_parent(sd_task *self, void *arg)
{
	auto *f = static_cast<ForkCase *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	EXPECT_EQ(0, sd_mmap(c, sd_task_mm(self), kBase, P, RW));
	EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, &f->parent_pfn));
	sd_task *child = nullptr;
	f->fork_err = sd_task_fork(self, forked_child, f, &child);
	ASSERT_EQ(0, f->fork_err) << sd_last_error();
	ASSERT_NE(nullptr, child);
	EXPECT_NE(sd_task_mm(self), sd_task_mm(child));
	while (!f->child_done)
		EXPECT_EQ(0, sd_task_yield(self));
	c = sd_task_cpu(self);
	// The child copied: the parent's write is a reuse of its own frame
	// (no other mm maps it once the child has its copy).
	EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, &f->parent_pfn_after));
	EXPECT_EQ(0, sd_munmap(c, sd_task_mm(self), kBase, P));
}

TEST(Sched, ForkGivesTheChildACopyOnWriteMmThatGoesWithIt)
{
	for (unsigned cpus : {1u, 2u}) {
		Machine mach(sdtest::config(cpus, "ipi"));
		ASSERT_NE(nullptr, mach.m);
		sd_mm *mm = nullptr;
		ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
		ForkCase f;
		create_task(mach.m, mm, forking_parent, &f);
		Watchdog w("fork", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
		EXPECT_TRUE(f.child_done);
		EXPECT_NE(0u, f.parent_pfn);
		EXPECT_NE(f.parent_pfn, f.child_pfn);
		EXPECT_EQ(f.parent_pfn, f.parent_pfn_after);
		EXPECT_EQ(1u, total(mach.m, SD_STAT_TASK_FORK));
		EXPECT_GE(total(mach.m, SD_STAT_WP_FAULT), 1u);
		EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
		// The child's mm went with the child: only ours is left, so
		// destroying it leaves the machine with none.
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
}

void execing_task(sd_task *self, void *arg)
{
	auto *old = static_cast<sd_mm **>(arg);
	sd_cpu *c = sd_task_cpu(self);
	*old = sd_task_mm(self);
	ASSERT_EQ(0, sd_task_exec(self)) << sd_last_error();
	EXPECT_NE(*old, sd_task_mm(self));
	EXPECT_EQ(sd_task_mm(self), sd_cpu_current_mm(c));
	// The new mm is empty: what the old one mapped is gone.
	EXPECT_EQ(-EFAULT, sd_access(c, kBase, SD_READ, nullptr));
	EXPECT_EQ(0, sd_mmap(c, sd_task_mm(self), kBase, P, RW));
	EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
}

TEST(Sched, ExecReplacesTheMmAndTheProgramKeepsItsOwn)
{
	Machine mach(sdtest::config(1, "broadcast"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	ASSERT_NE(nullptr, mm);
	sd_mm *old = nullptr;
	create_task(mach.m, mm, execing_task, &old);
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	EXPECT_EQ(mm, old);
	EXPECT_EQ(1u, total(mach.m, SD_STAT_TASK_EXEC));
	// Ours is still ours (the exec'd task's new mm went with it).
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

struct Hopper {
	std::vector<unsigned> seen;
};

void hopper(sd_task *self, void *arg)
{
	auto *h = static_cast<Hopper *>(arg);
	for (const char *cpus : {"1", "2", "0", "2"}) {
		ASSERT_EQ(0, sd_task_set_affinity(self, self, cpus)) << sd_last_error();
		sd_cpu *c = sd_task_cpu(self);
		h->seen.push_back(sd_cpu_id(c));
		EXPECT_EQ(0, sd_access(c, kBase, SD_WRITE, nullptr));
	}
}

// A task whose affinity leaves its CPU moves at once, and its mm follows
// it (switch_mm on the new CPU); the moves are counted as migrations.
TEST(Sched, AffinityMovesARunningTask)
{
	Machine mach(sdtest::config(3, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	ASSERT_NE(nullptr, mm);
	Hopper h;
	create_task(mach.m, mm, hopper, &h, 0, "0");
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	EXPECT_EQ((std::vector<unsigned>{1, 2, 0, 2}), h.seen);
	EXPECT_EQ(4u, total(mach.m, SD_STAT_TASK_MIGRATE));
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

struct Sleeper {
	uint64_t before = 0, after = 0;
};

void sleeper(sd_task *self, void *arg)
{
	auto *s = static_cast<Sleeper *>(arg);
	s->before = sd_cpu_clock_ns(sd_task_cpu(self));
	EXPECT_EQ(0, sd_task_sleep(self, 1000000));
	s->after = sd_cpu_clock_ns(sd_task_cpu(self));
}

// A modelled sleep ends when its CPU's clock has passed it, in strict and
// lax modelled time, with the CPU idle meanwhile.
TEST(SchedModelled, SleepEndsAtItsModelledTime)
{
	Profile p("pack:1 core:2 pu:1", kSchedCosts);
	for (bool strict : {true, false}) {
		sd_machine_config cfg = strict ? sdtest::strict_config(2, "ipi", p)
					       : sdtest::config(2, "ipi");
		cfg.profile = p.path.c_str();
		Machine mach(cfg);
		ASSERT_NE(nullptr, mach.m);
		sd_mm *mm = nullptr;
		ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
		Sleeper s[2];
		create_task(mach.m, mm, sleeper, &s[0], 0);
		create_task(mach.m, mm, sleeper, &s[1], 1);
		Watchdog w("sleep", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
		for (auto &x : s) {
			EXPECT_GE(x.after, x.before + 1000000) << (strict ? "strict" : "lax");
			EXPECT_LE(x.after, x.before + 1000000 + 10000) << (strict ? "strict" : "lax");
		}
		EXPECT_EQ(0, sd_mm_destroy(mm));
	}
}

}  // namespace

extern "C" {
#include "core/ordering.h"
#include "sched/sched.h"
}

namespace {

// ---- forced interleavings ----

// A wakeup that lands after the waiter is on the wait queue but before it
// has switched out (try_to_wake_up() finding it still on its CPU,
// ttwu_runnable()): the waiter keeps running, and its wait ends.
std::atomic<bool> g_blocking{false}, g_woken{false};

void hold_the_blocker(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_TASK_BLOCKING || cpu != 0 || g_blocking.exchange(true))
		return;
	while (!g_woken)
		std::this_thread::sleep_for(std::chrono::microseconds(100));
}

struct Race {
	sd_waitq *q = nullptr;
	std::atomic<bool> ready{false};
	int wait_rc = 1, woke = -1;
	uint64_t switches_before = 0, switches_after = 0;
};

void race_waiter(sd_task *self, void *arg)
{
	auto *r = static_cast<Race *>(arg);
	r->wait_rc = sd_task_wait(self, r->q, [](void *v) {
		return static_cast<Race *>(v)->ready.load();
	}, r);
}

void race_waker(sd_task *self, void *arg)
{
	auto *r = static_cast<Race *>(arg);
	while (!g_blocking)
		EXPECT_EQ(0, sd_cpu_poll(sd_task_cpu(self)));
	r->ready = true;
	r->woke = sd_task_wake(self, r->q, 1);
	g_woken = true;
}

TEST(SchedRace, AWakeupBeforeTheSwitchIsNotLost)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	Race r;
	ASSERT_EQ(0, sd_waitq_create(mach.m, "race", &r.q));
	g_blocking = g_woken = false;
	sd_order_set_hook(hold_the_blocker);
	create_task(mach.m, mm, race_waiter, &r, 0, "0");
	create_task(mach.m, mm, race_waker, &r, 1, "1");
	{
		Watchdog w("wakeup race", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_blocking.load()) << "the hook never ran";
	EXPECT_EQ(0, r.wait_rc) << "the wakeup was lost: the wait could never end";
	EXPECT_EQ(1, r.woke);
	// Woken on its CPU: CPU 0 switched from idle to the waiter and back
	// at its end, never away and back for the wait.
	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_cpu(mach.m, 0, &st));
	EXPECT_EQ(2u, st.counter[SD_STAT_TASK_SWITCH]);
	EXPECT_EQ(0, sd_waitq_destroy(r.q));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// An IPI that reaches a CPU between its two threads (the outgoing one has
// let go, the incoming one is not yet there) is run by the incoming thread
// when it takes the CPU, not left for the watchdog's resend 20 ms later.
std::atomic<bool> g_handed{false}, g_flush_posted{false};

void hold_the_handover(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_CPU_HANDED || cpu != 1 || g_handed.exchange(true))
		return;
	// The flusher's IPI lands on the thread that let go (it finds no
	// CPU); hold the CPU between threads a while after it.
	for (int i = 0; i < 200 && !g_flush_posted; i++)
		std::this_thread::sleep_for(std::chrono::microseconds(100));
	std::this_thread::sleep_for(std::chrono::milliseconds(3));
}

struct Handover {
	std::atomic<bool> t1_in{false}, t2_in{false};
};

void yielder(sd_task *self, void *arg)
{
	auto *h = static_cast<Handover *>(arg);
	sd_cpu *c = sd_task_cpu(self);
	EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr));
	h->t1_in = true;
	while (!h->t2_in)
		EXPECT_EQ(0, sd_task_yield(self));
}

void second(sd_task *self, void *arg)
{
	auto *h = static_cast<Handover *>(arg);
	h->t2_in = true;
	EXPECT_EQ(0, sd_access(sd_task_cpu(self), kBase, SD_READ, nullptr));
}

void flusher(sd_task *self, void *arg)
{
	(void)arg;
	sd_cpu *c = sd_task_cpu(self);
	EXPECT_EQ(0, sd_access(c, kBase, SD_READ, nullptr));
	while (!g_handed)
		EXPECT_EQ(0, sd_cpu_poll(c));
	g_flush_posted = true;
	EXPECT_EQ(0, sd_mprotect(c, sd_task_mm(self), kBase, P, SD_PROT_READ));
}

TEST(SchedRace, AnIpiToACpuBetweenThreadsRunsWhenTheNextArrives)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	Handover h;
	g_handed = g_flush_posted = false;
	create_task(mach.m, mm, yielder, &h, 1, "1");
	create_task(mach.m, mm, second, &h, 1, "1");
	create_task(mach.m, mm, flusher, nullptr, 0, "0");
	sd_order_set_hook(hold_the_handover);
	{
		Watchdog w("handover race", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_handed.load());
	EXPECT_EQ(0u, total(mach.m, SD_STAT_IPI_RESENT))
		<< "the IPI waited for the watchdog's resend: the incoming thread did not run "
		   "what reached the CPU while it had no thread";
	EXPECT_GE(total(mach.m, SD_STAT_IPI_SENT), 1u);
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// set_cpus_allowed_ptr() of a task running on another CPU moves it at once
// (migration_cpu_stop()); here its CPU is told to reschedule and the task
// moves at its next preemption point. Task A computes on CPU 0, task B on
// CPU 1 takes CPU 0 from A's affinity and returns; A must go on on CPU 1.
// Planted bug: the running task's CPU is not told (as before), and A keeps
// CPU 0 for good.
std::atomic<bool> g_mover_started{false};
std::atomic<unsigned> g_mover_cpu_after{UINT32_MAX};
sd_task *g_mover = nullptr;

void running_mover(sd_task *self, void *)
{
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	g_mover_started = true;
	while (sd_cpu_id(sd_task_cpu(self)) == 0 && std::chrono::steady_clock::now() < deadline) {
		EXPECT_EQ(0, sd_cpu_work(sd_task_cpu(self), 1000));
		EXPECT_EQ(0, sd_task_preempt_point(self)) << sd_last_error();
	}
	g_mover_cpu_after = sd_cpu_id(sd_task_cpu(self));
}

void affinity_setter(sd_task *self, void *)
{
	while (!g_mover_started)
		EXPECT_EQ(0, sd_cpu_poll(sd_task_cpu(self)));
	EXPECT_EQ(0, sd_task_set_affinity(self, g_mover, "1")) << sd_last_error();
}

TEST(SchedRace, ARunningTaskWhoseAffinityLeftItsCpuMovesAtItsPreemptPoint)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	g_mover_started = false;
	g_mover_cpu_after = UINT32_MAX;
	sd_task_config tc = SD_TASK_CONFIG_INIT;
	tc.mm = mm;
	tc.cpu = 0;
	tc.affinity = "0-1";
	ASSERT_EQ(0, sd_task_create(mach.m, &tc, running_mover, nullptr, &g_mover));
	create_task(mach.m, mm, affinity_setter, nullptr, 1, "1");
	{
		Watchdog w("a running task's affinity move", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	EXPECT_EQ(1u, g_mover_cpu_after.load()) << "the running task never left CPU 0";
	EXPECT_GE(total(mach.m, SD_STAT_TASK_MIGRATE), 1u);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// exec_mmap() sets the task's mm before the CPU switches to it. A forked
// child (its mm its own, so its exec's last put destroys the old one) is
// preempted right after exec's switch: it yields to a second task on the
// only CPU, which yields back, and the scheduler switches the CPU to the
// child's task->mm as it returns. Planted bug: task->mm set after the
// switch, so the child comes back on the old mm and the put fails
// (-EBUSY, "mm still loaded").
std::atomic<sd_task *> g_execer{nullptr};
std::atomic<bool> g_exec_preempted{false}, g_exec_done{false};
int g_exec_err = 1;

void preempt_the_exec(enum sd_order_point point, unsigned)
{
	if (point != SD_ORDER_EXEC_SWITCHED)
		return;
	sd_task *t = g_execer.exchange(nullptr);
	if (!t)
		return;
	EXPECT_EQ(0, sd_task_yield(t)) << sd_last_error();
	g_exec_preempted = true;
}

void preempted_execer(sd_task *self, void *)
{
	g_execer = self;
	g_exec_err = sd_task_exec(self);
	EXPECT_EQ(0, g_exec_err) << sd_last_error();
	EXPECT_EQ(sd_task_mm(self), sd_cpu_current_mm(sd_task_cpu(self)))
		<< "the CPU runs another mm than the exec'd task's";
	g_exec_done = true;
}

void exec_bystander(sd_task *self, void *)
{
	while (!g_exec_done)
		EXPECT_EQ(0, sd_task_yield(self));
}

void forks_an_execer(sd_task *self, void *)
{
	sd_task *child = nullptr;
	ASSERT_EQ(0, sd_task_fork(self, preempted_execer, nullptr, &child)) << sd_last_error();
	exec_bystander(self, nullptr);
}

TEST(SchedRace, AnExecPreemptedAfterItsSwitchComesBackOnTheNewMm)
{
	Machine mach(sdtest::config(1, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	ASSERT_NE(nullptr, mm);
	g_execer = nullptr;
	g_exec_preempted = g_exec_done = false;
	g_exec_err = 1;
	create_task(mach.m, mm, forks_an_execer, nullptr);
	sd_order_set_hook(preempt_the_exec);
	{
		Watchdog w("exec preempted after its switch", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_exec_preempted.load()) << "the exec was never preempted at its switch";
	EXPECT_EQ(0, g_exec_err) << "the old mm's last put failed";
	EXPECT_EQ(1u, total(mach.m, SD_STAT_TASK_EXEC));
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// exit_mm() enters lazy TLB mode before the mm's reference goes. A task
// that is not its mm's last user exits on CPU 1 and is held there, its CPU
// not yet switched away; the last user then exits on CPU 2 and destroys the
// mm. sd_mm_destroy() refuses an mm a CPU still runs, so CPU 1 must count
// as lazy by then (it is shot like any lazy CPU, by IPI, while held).
std::atomic<bool> g_exit_armed{false}, g_first_held{false}, g_last_done{false},
	g_thread_started{false};

void hold_the_first_exit(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_TASK_EXITED)
		return;
	if (cpu == 2) {
		g_last_done = true;
		return;
	}
	if (cpu != 1 || !g_exit_armed.exchange(false))
		return;
	g_first_held = true;
	// Held with interrupts on: the destroyer's IPI runs here. Bounded,
	// so a broken build fails rather than hangs.
	for (int i = 0; i < 20000 && !g_last_done; i++)
		std::this_thread::sleep_for(std::chrono::microseconds(500));
}

void last_user(sd_task *self, void *)
{
	g_thread_started = true;
	while (!g_first_held)
		EXPECT_EQ(0, sd_cpu_poll(sd_task_cpu(self)));
}

void first_user(sd_task *self, void *)
{
	sd_task_config cfg = SD_TASK_CONFIG_INIT;
	cfg.mm = sd_task_mm(self);
	cfg.cpu = 2;
	cfg.affinity = "2";
	sd_task *t = nullptr;
	ASSERT_EQ(0, sd_task_create(sd_cpu_machine(sd_task_cpu(self)), &cfg, last_user, nullptr,
				    &t)) << sd_last_error();
	while (!g_thread_started)
		EXPECT_EQ(0, sd_cpu_poll(sd_task_cpu(self)));
	g_exit_armed = true;
}

void forker(sd_task *self, void *)
{
	sd_task *child = nullptr;
	EXPECT_EQ(0, sd_task_fork(self, first_user, nullptr, &child)) << sd_last_error();
}

TEST(SchedRace, AnExitingTaskIsLazyBeforeTheLastUserDestroysTheMm)
{
	Machine mach(sdtest::config(3, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	g_exit_armed = g_first_held = g_last_done = g_thread_started = false;
	create_task(mach.m, mm, forker, nullptr, 1, "1");
	sd_order_set_hook(hold_the_first_exit);
	{
		Watchdog w("exit race", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m))
			<< sd_last_error() << " (the exiting task's CPU still ran the mm)";
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_first_held.load()) << "the hook never held the first exit";
	EXPECT_TRUE(g_last_done.load());
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}


// context_switch() enters lazy TLB mode when the idle thread takes the CPU
// (enter_lazy_tlb()), before the CPU is handed over. A task whose mm only it
// uses leaves CPU 0 for CPU 1 and execs there: its old mm's last put
// destroys it while CPU 0's idle thread is held before its loop. CPU 0
// must count as lazy by then (shot by IPI), or the destroy finds the mm
// "still loaded on CPU 0" and the exec fails with -EBUSY (the fuzzer's
// failure in CI).
std::atomic<bool> g_idle_armed{false}, g_idle_held{false}, g_exec_started{false},
	g_mover_done{false};
std::atomic<uint64_t> g_ipis_at_exec{0};
sd_machine *g_mover_machine;
int g_mover_exec_err = 1;

void hold_the_idle_thread(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_IDLE_RESUMED || cpu != 0 || !g_idle_armed.exchange(false))
		return;
	g_idle_held = true;
	// Until the exec returned (refused: the CPU was not lazy) or, once
	// it began, the destroyer's IPI to this CPU was sent (the reschedule
	// IPI that moved the task came before); bounded, so a broken build
	// fails rather than hangs.
	for (int i = 0; i < 20000 && !g_mover_done &&
			(!g_exec_started ||
			 total(g_mover_machine, SD_STAT_IPI_SENT) == g_ipis_at_exec);
	     i++)
		std::this_thread::sleep_for(std::chrono::microseconds(500));
}

void mover(sd_task *self, void *)
{
	EXPECT_EQ(0, sd_access(sd_task_cpu(self), kBase, SD_WRITE, nullptr));
	g_idle_armed = true;
	ASSERT_EQ(0, sd_task_set_affinity(self, self, "1")) << sd_last_error();
	EXPECT_EQ(1u, sd_cpu_id(sd_task_cpu(self)));
	g_ipis_at_exec = total(g_mover_machine, SD_STAT_IPI_SENT);
	g_exec_started = true;
	g_mover_exec_err = sd_task_exec(self);
	g_mover_done = true;
}

void forks_a_mover(sd_task *self, void *)
{
	sd_task *child = nullptr;
	EXPECT_EQ(0, sd_task_fork(self, mover, nullptr, &child)) << sd_last_error();
}

class IdleTakeover : public ::testing::TestWithParam<const char *> {};

TEST_P(IdleTakeover, TheIdleThreadsCpuIsLazyBeforeItRuns)
{
	Machine mach(sdtest::config(2, GetParam()));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	g_idle_armed = g_idle_held = g_exec_started = g_mover_done = false;
	g_mover_machine = mach.m;
	g_mover_exec_err = 1;
	create_task(mach.m, mm, forks_a_mover, nullptr, 0, "0");
	sd_order_set_hook(hold_the_idle_thread);
	{
		Watchdog w("idle takeover race", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(g_idle_held.load()) << "CPU 0's idle thread was never held";
	EXPECT_EQ(0, g_mover_exec_err)
		<< "the old mm's last put failed: CPU 0 still ran it non-lazily";
	EXPECT_EQ(0u, total(mach.m, SD_STAT_VIOLATION));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

INSTANTIATE_TEST_SUITE_P(Strategies, IdleTakeover, ::testing::Values("ipi", "local", "broadcast"));

}  // namespace

namespace {

// The reschedule IPI's request is claimed by one sender at a time and
// reused once its target saw it done. A target that retired it between a
// claim and the post (seeing the previous use's DONE) would let a second
// sender post the same request while the first still holds it: the request
// twice in the target's IPI queue, a cycle the target then runs for ever.
// Forced: the first use completes; the second sender's claim is held (an
// order point) while the target retires at its preemption point and runs
// a task with interrupts off; a third sender wakes another sleeper of the
// target's; then the held claim posts, and interrupts come back on.
struct Claims {
	sd_waitq *q1 = nullptr, *q2 = nullptr;
	std::atomic<int> phase{0};
	std::atomic<bool> held{false}, third_done{false}, second_done{false};
	std::atomic<bool> finish{false};
	// Set by sleeper one's condition when it is false: under the queue's
	// lock, in the hold that queues it, so once seen it is waiting.
	std::atomic<bool> one_waits{false};
	sd_rq *rq0 = nullptr;           // CPU 0's run queue (the library's)
	sd_task *one = nullptr;         // sleeper one
};
Claims *g_k = nullptr;

void hold_the_second_claim(enum sd_order_point point, unsigned cpu)
{
	if (point != SD_ORDER_RESCHED_CLAIMED || cpu != 0 || g_k->phase.load() != 2 ||
	    g_k->held.exchange(true))
		return;
	// The third sender's try, then ours: 200 ms is plenty when it claims,
	// and what a correct library costs here when it cannot.
	for (int i = 0; i < 2000 && !g_k->third_done; i++)
		std::this_thread::sleep_for(std::chrono::microseconds(100));
}

bool phase_at_least(Claims *k, int p)
{
	return k->phase.load() >= p || k->finish.load();
}

bool one_may_go(Claims *k, int p)
{
	if (phase_at_least(k, p))
		return true;
	k->one_waits = true;
	return false;
}

// CPU 0: the target. It computes through preemption points until the
// sleepers' run is over.
void target_task(sd_task *self, void *arg)
{
	auto *k = static_cast<Claims *>(arg);
	while (!k->finish)
		ASSERT_EQ(0, sd_task_wait(self, k->q2, [](void *) { return true; }, nullptr));
}

// CPU 0: woken in phase 1 and 2; in phase 2 it runs with interrupts off
// until both posts are made, so the IPIs stay queued together.
void sleeper_one(sd_task *self, void *arg)
{
	auto *k = static_cast<Claims *>(arg);
	ASSERT_EQ(0, sd_task_wait(self, k->q1, [](void *v) {
		return one_may_go(static_cast<Claims *>(v), 1);
	}, k));
	ASSERT_EQ(0, sd_task_wait(self, k->q1, [](void *v) {
		return one_may_go(static_cast<Claims *>(v), 2);
	}, k));
	sd_cpu *c = sd_task_cpu(self);
	sd_irq_disable(c);
	k->phase = 3;
	for (int i = 0; i < 4000 && !(k->second_done && k->third_done); i++)
		std::this_thread::sleep_for(std::chrono::microseconds(100));
	EXPECT_EQ(0, sd_irq_enable(c));   // a cycle in the queue: never returns
}

// CPU 0: woken by the third sender in phase 3.
void sleeper_two(sd_task *self, void *arg)
{
	auto *k = static_cast<Claims *>(arg);
	ASSERT_EQ(0, sd_task_wait(self, k->q2, [](void *v) {
		return phase_at_least(static_cast<Claims *>(v), 3);
	}, k));
}

// @t is off its CPU and queue: read as __schedule() writes it, under its
// pi_lock.
bool switched_out(sd_task *t)
{
	sd_spin_lock(&t->pi_lock);
	const bool out = !t->on_rq;
	sd_spin_unlock(&t->pi_lock);
	return out;
}

// CPU 1: the first use, then the held claim.
void first_sender(sd_task *self, void *arg)
{
	auto *k = static_cast<Claims *>(arg);
	for (int use = 1; use <= 2; use++) {
		// Sleeper one waits, off its CPU (a wake before its switch
		// finds it still running, ttwu_runnable(), and sends no IPI:
		// nothing to claim), and CPU 0 retired the last use (its
		// preemption points do once the IPI ran).
		while (!k->one_waits || !switched_out(k->one) ||
		       atomic_load(&k->rq0->resched_inflight))
			EXPECT_EQ(0, sd_cpu_poll(sd_task_cpu(self)));
		k->one_waits = false;
		k->phase = use;
		if (use == 1) {
			EXPECT_EQ(1, sd_task_wake(self, k->q1, 1));     // use 1, done by its end
		}
	}
	EXPECT_EQ(1, sd_task_wake(self, k->q1, 1));             // use 2: held
	k->second_done = true;
}

// CPU 2: the third sender, once sleeper one runs with interrupts off.
void third_sender(sd_task *self, void *arg)
{
	auto *k = static_cast<Claims *>(arg);
	while (k->phase.load() < 3)
		EXPECT_EQ(0, sd_cpu_poll(sd_task_cpu(self)));
	EXPECT_EQ(1, sd_task_wake(self, k->q2, 1));
	k->third_done = true;
	k->finish = true;
	EXPECT_GE(sd_task_wake(self, k->q2, 0), 0);
}

TEST(SchedRace, AReschedulingRequestIsPostedOnceAtATime)
{
	Machine mach(sdtest::config(3, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	Claims k;
	g_k = &k;
	ASSERT_EQ(0, sd_waitq_create(mach.m, "one", &k.q1));
	ASSERT_EQ(0, sd_waitq_create(mach.m, "two", &k.q2));
	k.one = create_task(mach.m, mm, sleeper_one, &k, 0, "0");
	k.rq0 = &static_cast<sd_sched *>(mach.m->sched)->rq[0];
	create_task(mach.m, mm, sleeper_two, &k, 0, "0");
	create_task(mach.m, mm, target_task, &k, 0, "0");
	create_task(mach.m, mm, first_sender, &k, 1, "1");
	create_task(mach.m, mm, third_sender, &k, 2, "2");
	sd_order_set_hook(hold_the_second_claim);
	{
		Watchdog w("resched claims (a cycle in CPU 0's IPI queue?)", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_TRUE(k.held.load()) << "the second claim was never held: nothing tested";
	EXPECT_EQ(0, sd_waitq_destroy(k.q1));
	EXPECT_EQ(0, sd_waitq_destroy(k.q2));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

}  // namespace

namespace {

// ---- balancing ----

struct Spread {
	std::atomic<unsigned> seen_on[4] = {};
	std::atomic<bool> stop{false};
	unsigned loops = 200;
};

void spreader(sd_task *self, void *arg)
{
	auto *s = static_cast<Spread *>(arg);
	for (unsigned i = 0; i < s->loops; i++) {
		sd_cpu *c = sd_task_cpu(self);
		s->seen_on[sd_cpu_id(c)]++;
		EXPECT_EQ(0, sd_cpu_work(c, 1000));
		EXPECT_EQ(0, sd_task_yield(self));
	}
}

// Four tasks queued on CPU 0 of two: CPU 1, idle, pulls waiting ones
// (newidle balance), so both CPUs run them.
TEST(SchedBalance, AnIdleCpuPullsWaitingTasks)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	Spread s;
	for (int i = 0; i < 4; i++)
		create_task(mach.m, mm, spreader, &s, 0);
	EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	EXPECT_GT(s.seen_on[1].load(), 0u) << "CPU 1 never ran a task queued on CPU 0";
	EXPECT_GE(total(mach.m, SD_STAT_TASK_MIGRATE), 1u);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// An idle CPU with one task queued is about to run it: a newidle pull
// takes only from a queue with more runnable tasks than one
// (detach_tasks()'s nr_running > 1). Taking it let the next idle CPU take
// it back, and so on: at the end of mprotect_threaded on 32 CPUs one task
// moved 480,000 times in 12 ms of modelled time without running. Strict,
// 4 CPUs, one short task queued on CPU 3 in each of 20 runs (the others
// look first: lowest clock, lowest id), the other CPUs idle: no migration
// at all.
void returns_at_once(sd_task *self, void *)
{
	EXPECT_EQ(0, sd_cpu_work(sd_task_cpu(self), 100));
}

TEST(SchedBalance, NoIdleCpuTakesTheOneTaskAnotherIdleCpuIsAboutToRun)
{
	Profile p("pack:1 core:4 pu:1", {{"sched_switch", 800}});
	Machine mach(sdtest::strict_config(4, "ipi", p));
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	Watchdog w("one task, idle CPUs", 60);
	for (int run = 0; run < 20; run++) {
		create_task(mach.m, mm, returns_at_once, nullptr, 3);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	EXPECT_EQ(0u, total(mach.m, SD_STAT_TASK_MIGRATE));
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

struct Busy {
	std::atomic<bool> stop{false};
	std::atomic<unsigned> pulled{0};
	std::atomic<unsigned> left{4};          // queued tasks not yet done
};

void busy_forever(sd_task *self, void *arg)
{
	auto *b = static_cast<Busy *>(arg);
	while (!b->stop) {
		EXPECT_EQ(0, sd_cpu_work(sd_task_cpu(self), 2000));
		EXPECT_EQ(0, sd_task_yield(self));
	}
}

void queued_on_cpu0(sd_task *self, void *arg)
{
	auto *b = static_cast<Busy *>(arg);
	for (int i = 0; i < 50; i++) {
		if (sd_cpu_id(sd_task_cpu(self)) == 1)
			b->pulled++;
		EXPECT_EQ(0, sd_cpu_work(sd_task_cpu(self), 2000));
		EXPECT_EQ(0, sd_task_yield(self));
	}
	if (--b->left == 0)
		b->stop = true;
}

// CPU 1 never idles (a task pinned there computes and yields), CPU 0 has
// three more waiting: the periodic balance, every sched_balance_interval
// of CPU 1's modelled time, pulls from the queue two or more longer.
TEST(SchedBalance, PeriodicBalanceMovesWorkToABusyButShorterQueue)
{
	Profile p("pack:1 core:2 pu:1", {{"sched_balance_interval", 20000}});
	sd_machine_config cfg = sdtest::strict_config(2, "ipi", p);
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	sd_mm *mm = mapped_mm(mach.m, 1);
	Busy b;
	create_task(mach.m, mm, busy_forever, &b, 1, "1");
	for (int i = 0; i < 4; i++)
		create_task(mach.m, mm, queued_on_cpu0, &b, 0);
	{
		Watchdog w("periodic balance", 60);
		EXPECT_EQ(0, sd_sched_run(mach.m)) << sd_last_error();
	}
	EXPECT_GT(b.pulled.load(), 0u) << "no task queued on CPU 0 ever ran on CPU 1";
	EXPECT_GE(total(mach.m, SD_STAT_TASK_MIGRATE), 1u);
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

}  // namespace
