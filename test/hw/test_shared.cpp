// SPDX-License-Identifier: MIT
// The program's own lock and line (shared.h): their errors, the lock's
// exclusion among more CPUs than PUs, its stuck-wait report, and their
// modelled charges against answers computed by hand (every cost 0 but the
// ones a test names, as in test_model.cpp).
#include "common.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "profile.hpp"

namespace {

using sdtest::Attached;
using sdtest::Machine;
using sdtest::Profile;
using sdtest::Watchdog;

TEST(SharedApi, CallsRefuseBadArguments)
{
	Machine mach(sdtest::config(2));
	Machine other(sdtest::config(1));
	ASSERT_NE(nullptr, mach.m);
	ASSERT_NE(nullptr, other.m);
	sd_lock *l = nullptr, *foreign = nullptr;
	sd_line *line = nullptr, *foreign_line = nullptr;

	EXPECT_EQ(-EINVAL, sd_lock_create(nullptr, "x", &l));
	EXPECT_EQ(-EINVAL, sd_lock_create(mach.m, "x", nullptr));
	EXPECT_EQ(-EINVAL, sd_line_create(nullptr, &line));
	EXPECT_EQ(-EINVAL, sd_line_create(mach.m, nullptr));
	EXPECT_EQ(-EINVAL, sd_lock_destroy(nullptr));
	EXPECT_EQ(-EINVAL, sd_line_destroy(nullptr));
	EXPECT_EQ(-EINVAL, sd_lock_holder(nullptr));
	ASSERT_EQ(0, sd_lock_create(mach.m, nullptr, &l));
	ASSERT_EQ(0, sd_lock_create(other.m, "theirs", &foreign));
	ASSERT_EQ(0, sd_line_create(mach.m, &line));
	ASSERT_EQ(0, sd_line_create(other.m, &foreign_line));
	EXPECT_EQ(-1, sd_lock_holder(l));

	// Not attached: refused before anything is looked at.
	EXPECT_EQ(-EPERM, sd_lock_acquire(nullptr, l));
	EXPECT_EQ(-EPERM, sd_lock_release(nullptr, l));
	EXPECT_EQ(-EPERM, sd_line_access(nullptr, line, 1));
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		EXPECT_EQ(-EINVAL, sd_lock_acquire(a.c, nullptr));
		EXPECT_EQ(-EINVAL, sd_lock_acquire(a.c, foreign));
		EXPECT_NE(nullptr, strstr(sd_last_error(), "another machine"));
		EXPECT_EQ(-EINVAL, sd_line_access(a.c, nullptr, 0));
		EXPECT_EQ(-EINVAL, sd_line_access(a.c, foreign_line, 0));
		EXPECT_EQ(0, sd_line_access(a.c, line, 1));
		EXPECT_EQ(-EPERM, sd_lock_release(a.c, l)) << "released while free";
		EXPECT_NE(nullptr, strstr(sd_last_error(), "not held"));
		ASSERT_EQ(0, sd_lock_acquire(a.c, l));
		EXPECT_EQ(0, sd_lock_holder(l));
		EXPECT_EQ(-EDEADLK, sd_lock_acquire(a.c, l)) << "a recursive acquisition";
		EXPECT_EQ(-EBUSY, sd_lock_destroy(l));
		EXPECT_NE(nullptr, strstr(sd_last_error(), "CPU 0 holds lock 'lock'"));
		// Another CPU that does not hold it cannot release it.
		std::thread([&] {
			Attached b(mach.m, 1);
			ASSERT_NE(nullptr, b.c);
			EXPECT_EQ(-EPERM, sd_lock_release(b.c, l));
			EXPECT_NE(nullptr, strstr(sd_last_error(), "held by CPU 0, not CPU 1"));
		}).join();
		EXPECT_EQ(0, sd_lock_holder(l)) << "a refused release changed nothing";
		EXPECT_EQ(0, sd_lock_release(a.c, l));
		EXPECT_EQ(-1, sd_lock_holder(l));
	}
	EXPECT_EQ(0, sd_lock_destroy(l));
	EXPECT_EQ(0, sd_lock_destroy(foreign));
	EXPECT_EQ(0, sd_line_destroy(line));
	EXPECT_EQ(0, sd_line_destroy(foreign_line));
}

// ---- exclusion: a plain counter under the lock, more CPUs than PUs ----

// Enough for a lost update to show without the lock among 8 CPUs on 2
// PUs; strict mode runs one CPU at a time, handing over at every
// acquisition, so it proves progress (no livelock) with fewer.
constexpr int kIncrements = 20000, kStrictIncrements = 2000;

struct Counted {
	int increments = kIncrements;
	sd_lock *lock = nullptr;
	uint64_t value = 0;             // plain: only the lock protects it
	std::atomic<int> err{0};
};

void count_under_lock(sd_cpu *c, void *p)
{
	auto *s = static_cast<Counted *>(p);

	for (int i = 0; i < s->increments; i++) {
		int err = sd_lock_acquire(c, s->lock);
		if (err) {
			s->err.store(err);
			return;
		}
		s->value++;
		err = sd_lock_release(c, s->lock);
		if (err) {
			s->err.store(err);
			return;
		}
	}
}

void expect_exclusion(const sd_machine_config &cfg, int increments = kIncrements)
{
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	Counted s;
	s.increments = increments;
	ASSERT_EQ(0, sd_lock_create(mach.m, "counter", &s.lock));
	Watchdog w("a CPU stuck on an sd_lock", 120);
	ASSERT_EQ(0, sd_machine_run(mach.m, count_under_lock, &s)) << sd_last_error();
	EXPECT_EQ(0, s.err.load());
	EXPECT_EQ((uint64_t)cfg.nr_cpus * increments, s.value) << "an increment was lost";
	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &st));
	EXPECT_EQ(0u, st.counter[SD_STAT_LOCK_STUCK]);
	EXPECT_EQ(0, sd_lock_destroy(s.lock));
}

TEST(SharedLock, ExcludesAmongMoreCpusThanPus)
{
	// 8 CPUs on 2 PUs: a waiter may wait a whole host time slice, and on
	// a loaded host (TSan beside other work) 1 s went by 10 times. The
	// watchdog here reports only a wait of a minute, which is a hang.
	sd_machine_config cfg = sdtest::config(8, "ipi");
	cfg.ipi_timeout_ms = 60000;
	expect_exclusion(cfg);
}

TEST(SharedLock, ExcludesInStrictModelledTime)
{
	Profile p("pack:2 core:4 pu:1", {{"lock_acquire", 7}, {"lock_handoff.system", 300},
					 {"lock_handoff.llc", 50}});
	expect_exclusion(sdtest::strict_config(8, "ipi", p), kStrictIncrements);
}

TEST(SharedLock, ExcludesInLaxModelledTime)
{
	Profile p("pack:2 core:4 pu:1", {{"lock_acquire", 7}, {"lock_handoff.system", 300},
					 {"lock_handoff.llc", 50}});
	sd_machine_config c = sdtest::strict_config(8, "ipi", p, 2000);
	c.flags = (c.flags & ~SD_MACHINE_MODEL_STRICT) | SD_MACHINE_MODEL_LAX;
	expect_exclusion(c);
}

// A holder that keeps the lock past ipi_timeout_ms: the waiter says who it
// waits for, is counted, and gets the lock once it is released. The holder
// lets go only once the waiter has reported (the counter), not after a
// fixed sleep: under a loaded CI host the waiter's report once came after
// the release, naming no holder.
TEST(SharedLock, StuckWaitIsReportedWithItsHolder)
{
	sd_machine_config cfg = sdtest::config(2, "ipi");
	cfg.ipi_timeout_ms = 40;
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_machine *m = nullptr;
		sd_lock *lock = nullptr;
		std::atomic<int> held{0};
		int got = -1;
	} s;
	s.m = mach.m;
	ASSERT_EQ(0, sd_lock_create(mach.m, "slow", &s.lock));
	testing::internal::CaptureStderr();
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) == 0) {
			EXPECT_EQ(0, sd_lock_acquire(c, s->lock));
			s->held.store(1);
			// Bounded, so a waiter that never reports fails the
			// test below rather than hanging it.
			for (int i = 0; i < 3000; i++) {
				sd_stats st = SD_STATS_INIT;
				EXPECT_EQ(0, sd_stats_snapshot(s->m, &st));
				if (st.counter[SD_STAT_LOCK_STUCK] >= 1)
					break;
				std::this_thread::sleep_for(std::chrono::milliseconds(10));
			}
			EXPECT_EQ(0, sd_lock_release(c, s->lock));
			return;
		}
		while (!s->held.load())
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		s->got = sd_lock_acquire(c, s->lock);
		EXPECT_EQ(0, sd_lock_release(c, s->lock));
	}, &s)) << sd_last_error();
	const std::string err = testing::internal::GetCapturedStderr();
	EXPECT_EQ(0, s.got);
	EXPECT_NE(std::string::npos, err.find("CPU 1 has waited")) << err;
	EXPECT_NE(std::string::npos, err.find("for lock 'slow', held by CPU 0")) << err;
	sd_stats st = SD_STATS_INIT;
	ASSERT_EQ(0, sd_stats_snapshot(mach.m, &st));
	EXPECT_GE(st.counter[SD_STAT_LOCK_STUCK], 1u);
	EXPECT_GE(st.counter[SD_STAT_LOCK_WAIT], 1u);
	EXPECT_EQ(0, sd_lock_destroy(s.lock));
}

// An IPI's function on the holder's own CPU that wants the lock would spin
// for ever: refused.
TEST(SharedLock, HandlerOnTheHoldersCpuIsRefused)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_lock *lock = nullptr;
		std::atomic<int> held{0}, done{0};
		int in_handler = 0;
	} s;
	ASSERT_EQ(0, sd_lock_create(mach.m, "held", &s.lock));
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_lock_acquire(c, s->lock));
			s->held.store(1);
			while (!s->done.load())
				EXPECT_EQ(0, sd_cpu_poll(c));   // runs the IPI
			EXPECT_EQ(0, sd_lock_release(c, s->lock));
			return;
		}
		while (!s->held.load())
			std::this_thread::yield();
		EXPECT_EQ(0, sd_smp_call_single(c, 1, [](sd_cpu *t, void *p) {
			auto *s = static_cast<S *>(p);
			s->in_handler = sd_lock_acquire(t, s->lock);
		}, s));
		s->done.store(1);
	}, &s)) << sd_last_error();
	EXPECT_EQ(-EDEADLK, s.in_handler);
	EXPECT_EQ(0, sd_lock_destroy(s.lock));
}

// ---- modelled charges by hand ----

// Two CPUs in different packages take the lock in turn: every acquisition
// pays lock_acquire A, every one after the other CPU's release the handoff
// K at the system distance: the i-th ends at i * K + (i + 1) * A. The
// other classes' costs are set, to see the right one is used.
TEST(SharedModel, LockHandedBackAndForthPaysTheHandoffEachTime)
{
	constexpr double K = 300, A = 7;
	constexpr int kRounds = 10;
	Profile p("pack:2 core:1 pu:1", {{"lock_handoff.core", 1}, {"lock_handoff.llc", 2},
					 {"lock_handoff.package", 3}, {"lock_handoff.system", K},
					 {"lock_acquire", A}});
	Machine mach(sdtest::strict_config(2, "ipi", p, 1000000000));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_lock *lock = nullptr;
		std::atomic<int> turn{0};
		uint64_t end[2 * kRounds] = {};
	} s;
	ASSERT_EQ(0, sd_lock_create(mach.m, "turns", &s.lock));
	Watchdog w("SharedModel: a CPU stuck", 30);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *s = static_cast<S *>(arg);
		for (int i = (int)sd_cpu_id(c); i < 2 * kRounds; i += 2) {
			while (s->turn.load() != i)
				std::this_thread::sleep_for(std::chrono::microseconds(20));
			EXPECT_EQ(0, sd_lock_acquire(c, s->lock));
			EXPECT_EQ(0, sd_lock_release(c, s->lock));
			s->end[i] = sd_cpu_clock_ns(c);
			s->turn.store(i + 1);
		}
	}, &s)) << sd_last_error();
	for (int i = 0; i < 2 * kRounds; i++)
		EXPECT_EQ((uint64_t)(i * K + (i + 1) * A), s.end[i]) << "acquisition " << i;
	EXPECT_EQ(0, sd_lock_destroy(s.lock));
}

// A line between two CPUs in different packages: the first write finds
// nobody to fetch from (0); CPU 1's write fetches from CPU 0 (T, the
// system distance); CPU 0's read fetches it back (T), its second read
// hits (0); CPU 1's write then invalidates CPU 0's copy (I, the LLC
// distance by the model's rule). Each step first works kApart, so it
// starts after every transfer before it and pays its own access alone.
TEST(SharedModel, LineCostsFollowItsCoherenceState)
{
	constexpr double T = 500, I = 20;
	static constexpr uint64_t kApart = 10000;
	Profile p("pack:2 core:1 pu:1", {{"line_transfer.system", T}, {"line_transfer.llc", I},
					 {"line_transfer.package", 3}, {"line_transfer.core", 1}});
	Machine mach(sdtest::strict_config(2, "ipi", p, 1000000000));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_line *line = nullptr;
		std::atomic<int> turn{0};
		uint64_t cost[5] = {};
	} s;
	ASSERT_EQ(0, sd_line_create(mach.m, &s.line));
	// turn: CPU, write
	static constexpr struct { unsigned cpu; int write; } kSteps[] = {
		{0, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}};
	Watchdog w("SharedModel: a CPU stuck", 30);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *s = static_cast<S *>(arg);
		for (int i = 0; i < 5; i++) {
			if (kSteps[i].cpu != sd_cpu_id(c))
				continue;
			while (s->turn.load() != i)
				std::this_thread::sleep_for(std::chrono::microseconds(20));
			EXPECT_EQ(0, sd_cpu_work(c, kApart));
			const uint64_t t0 = sd_cpu_clock_ns(c);
			EXPECT_EQ(0, sd_line_access(c, s->line, kSteps[i].write));
			s->cost[i] = sd_cpu_clock_ns(c) - t0;
			s->turn.store(i + 1);
		}
	}, &s)) << sd_last_error();
	const uint64_t want[5] = {0, (uint64_t)T, (uint64_t)T, 0, (uint64_t)I};
	for (int i = 0; i < 5; i++)
		EXPECT_EQ(want[i], s.cost[i]) << "step " << i;
	EXPECT_EQ(0, sd_line_destroy(s.line));
}

// Transfers of a line serialise in modelled order, whatever order the
// CPUs reach it in. Strict mode hands the machine over at sync points,
// but a CPU with interrupts off makes none: CPU 0 below runs 10 us ahead
// and writes the line at 10.1 us (a fetch from CPU 1: T) before CPU 1,
// parked at 1 us, writes it. CPU 1's write is the earlier one in
// modelled time and finds the line free then: it pays its own transfer,
// T, not a wait behind CPU 0's (a "free at" time would have charged it
// 10.1 us - 1 us + 2 T). The line's coherence state is kept in the order
// the accesses ran, so CPU 1's write still fetches from CPU 0.
TEST(SharedModel, AnEarlierUseIsNotQueuedBehindOneThatRanAhead)
{
	constexpr double T = 500;
	Profile p("pack:2 core:1 pu:1", {{"line_transfer.system", T}, {"line_transfer.llc", 20},
					 {"line_transfer.package", 3}, {"line_transfer.core", 1}});
	Machine mach(sdtest::strict_config(2, "ipi", p, 1000000000));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_line *line = nullptr;
		uint64_t at[2] = {}, cost[2] = {};
	} s;
	ASSERT_EQ(0, sd_line_create(mach.m, &s.line));
	Watchdog w("SharedModel: a CPU stuck", 30);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *arg) {
		auto *s = static_cast<S *>(arg);
		const unsigned id = sd_cpu_id(c);

		if (id == 0) {
			EXPECT_EQ(0, sd_cpu_work(c, 100));      // CPU 1 writes first, at 0
			sd_irq_disable(c);
			EXPECT_EQ(0, sd_cpu_work(c, 10000));    // no hand-over: runs ahead
		} else {
			EXPECT_EQ(0, sd_line_access(c, s->line, 1));
			EXPECT_EQ(0, sd_cpu_work(c, 1000));
		}
		s->at[id] = sd_cpu_clock_ns(c);
		EXPECT_EQ(0, sd_line_access(c, s->line, 1));
		s->cost[id] = sd_cpu_clock_ns(c) - s->at[id];
		if (id == 0)
			sd_irq_enable(c);
	}, &s)) << sd_last_error();
	EXPECT_EQ(10100u, s.at[0]);
	EXPECT_EQ(1000u, s.at[1]);
	EXPECT_EQ((uint64_t)T, s.cost[0]) << "CPU 0 fetches the line from CPU 1";
	EXPECT_EQ((uint64_t)T, s.cost[1]) << "CPU 1 waited behind a later use";
	EXPECT_EQ(0, sd_line_destroy(s.line));
}

// Without a profile the line charges nothing and the calls still check.
TEST(SharedModel, WithoutAProfileNothingIsCharged)
{
	Machine mach(sdtest::config(1));
	ASSERT_NE(nullptr, mach.m);
	sd_line *line = nullptr;
	ASSERT_EQ(0, sd_line_create(mach.m, &line));
	{
		Attached a(mach.m, 0);
		ASSERT_NE(nullptr, a.c);
		EXPECT_EQ(0, sd_line_access(a.c, line, 1));
		EXPECT_EQ(0u, sd_cpu_clock_ns(a.c));
	}
	EXPECT_EQ(0, sd_line_destroy(line));
}

} // namespace
