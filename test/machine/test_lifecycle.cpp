// SPDX-License-Identifier: MIT
// Lifecycles with no dead ends.
//
// Lazy mms: an mm that CPUs hold only lazily (idle after running it, or
// after their sd_machine_run body returned) can be destroyed; the lazy CPUs
// are shot with an IPI and switch to no mm, as the kernel's
// cleanup_lazy_tlbs() does with CONFIG_MMU_LAZY_TLB_SHOOTDOWN. A CPU really
// running the mm still makes the destroy fail with -EBUSY.
//
// Zombie CPUs: a body that returns with interrupts off, calls sd_irq_enable()
// once too often, or leaves its thread with pthread_exit() leaves no CPU
// attached to a dead thread: the run reports it, every CPU is detached, and
// flushes aimed at that CPU meanwhile still complete.
//
// Every wait is bounded: a Watchdog aborts with the name of the stuck step.
#include "common.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <cctype>
#include <cstring>

extern "C" {
#include "core/ordering.h"
#include "strategy/ipi.h"
#include "hw/machine_state.h"
#include "mm/flush_ops.h"
#include "strategy/builtin.h"
}

namespace {

using sdtest::Attached;
using sdtest::Machine;
using sdtest::Watchdog;
using sdtest::counter;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
constexpr uint64_t kPage = 0x40000000;
constexpr double kBound = 30;   // seconds before a watchdog calls a step stuck

// Sleep-wait (nanosleep lets IPIs in, TSan included) until @flag is set.
void wait_flag(const std::atomic<int> &flag, int value = 1)
{
	while (flag.load() < value)
		std::this_thread::sleep_for(std::chrono::microseconds(50));
}

bool attached(sd_machine *m, unsigned cpu)
{
	sd_cpu_info ci;
	EXPECT_EQ(0, sd_machine_cpu_info(m, cpu, &ci));
	return ci.attached;
}

// ---- a user strategy: an IPI to every CPU in the mm_cpumask, and a
// switch_out() that notices an mm handed to it after its destruction ----

std::atomic<sd_mm *> dead_mm{nullptr};
std::atomic<int> switched_out_dead{0};
// switch_in() minus switch_out() calls: 0 once every CPU left every mm,
// if the library tells the strategy of every departure (a shot lazy CPU's
// included).
std::atomic<int> user_loaded{0};

void user_ipi_target(sd_cpu *target, void *arg)
{
	auto *mm = static_cast<sd_mm *>(arg);
	sd_tlb_invalidate_local(target, mm, 0, 0);
}

void user_flush(sd_cpu *cpu, sd_mm *mm, uint64_t, uint64_t, unsigned, void *)
{
	const unsigned me = sd_cpu_id(cpu), n = sd_machine_nr_cpus(sd_cpu_machine(cpu));

	sd_tlb_invalidate_local(cpu, mm, 0, 0);
	for (unsigned c = sd_mm_cpumask_next(mm, 0); c < n; c = sd_mm_cpumask_next(mm, c + 1))
		if (c != me) {
			EXPECT_EQ(0, sd_smp_call_single(cpu, c, user_ipi_target, mm)) << sd_last_error();
		}
}

void user_switch_in(sd_cpu *, sd_mm *, void *)
{
	user_loaded.fetch_add(1);
}

void user_switch_out(sd_cpu *, sd_mm *mm, void *)
{
	user_loaded.fetch_sub(1);
	// Only compares the pointer value: the mm behind it is gone.
	if (mm && mm == dead_mm.load())
		switched_out_dead.fetch_add(1);
}

struct UserStrategy {
	UserStrategy()
	{
		sd_strategy s = SD_STRATEGY_INIT;
		s.name = "lifecycle";
		s.flush = user_flush;
		s.switch_in = user_switch_in;
		s.switch_out = user_switch_out;
		user_loaded.store(0);
		EXPECT_EQ(0, sd_strategy_register(&s)) << sd_last_error();
	}
	~UserStrategy()
	{
		EXPECT_EQ(0, user_loaded.load()) << "a CPU left an mm without switch_out()";
		EXPECT_EQ(0, sd_strategy_unregister("lifecycle")) << sd_last_error();
	}
};

// ================================ lazy mms ================================

class LazyMm : public ::testing::TestWithParam<const char *> {
protected:
	void SetUp() override
	{
		if (std::string(GetParam()) == "lifecycle")
			user_.reset(new UserStrategy);
	}
	std::unique_ptr<UserStrategy> user_;
};

// The case: CPU 1's body runs mm A and returns; its CPU idles,
// lazily on A, until every body is done. CPU 0's body then destroys A.
// Before the fix: -EBUSY (a lazy user counted as a user) for as long as
// the run lasts.
struct ReturnedLazy {
	sd_mm *a = nullptr;
	std::atomic<int> body1_done{0};
	std::atomic<int> destroy_err{1};
	std::atomic<int> cpu1_mm_after{-1};     // 1 if CPU 1 still had an mm
	std::atomic<int> ipi_loaded_after{0};   // `ipi`: CPU 1's loaded_mm is A
	std::string detail;
};

TEST_P(LazyMm, DestroyAfterTheBodyThatRanItReturned)
{
	Machine mach(sdtest::config(2, GetParam()));
	ASSERT_NE(nullptr, mach.m);
	ReturnedLazy s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	Watchdog w("LazyMm.DestroyAfterTheBodyThatRanItReturned: a CPU stuck in the run", kBound);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<ReturnedLazy *>(p);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_switch_mm(c, s->a));
			EXPECT_EQ(0, sd_mmap(c, s->a, kPage, P, RW));
			EXPECT_EQ(0, sd_access(c, kPage, SD_WRITE, nullptr));
			// Return with A loaded: the run idles this CPU, lazily on A.
			s->body1_done.store(1);
			return;
		}
		wait_flag(s->body1_done);
		// Its thread goes idle (lazy) just after the return: wait for
		// that (internal flag), then destroy once.
		sd_cpu *c1 = sd_machine_cpu_at(sd_cpu_machine(c), 1);
		while (!atomic_load(&c1->lazy))
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		int err = sd_mm_destroy(s->a);
		s->destroy_err.store(err);
		if (err)
			s->detail = sd_last_error();
		s->cpu1_mm_after.store(sd_cpu_current_mm(c1) != nullptr);
		// The strategy's own view (x86's cpu_tlbstate.loaded_mm) must
		// have let go of A too, or its next switch would touch A.
		const sd_machine *m = sd_cpu_machine(c);
		if (!strncmp(m->ops->name, "ipi", 3) || !strcmp(m->ops->name, "gbcast")) {
			auto *ipi = static_cast<sd_ipi *>(m->strategy);
			s->ipi_loaded_after.store(atomic_load(&ipi->percpu[1].loaded_mm) ==
						  (uintptr_t)s->a);
		}
	}, &s)) << sd_last_error();
	EXPECT_EQ(0, s.destroy_err.load()) << "a CPU lazy on A after its body returned kept A "
					      "alive: " << s.detail;
	EXPECT_EQ(0, s.cpu1_mm_after.load()) << "the lazy CPU still names the destroyed mm";
	EXPECT_EQ(0, s.ipi_loaded_after.load()) << "the strategy still has the destroyed mm loaded";
	EXPECT_GE(counter(mach.m, 1, SD_STAT_IPI_RECV), 1u) << "the lazy CPU was never shot";
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	if (s.destroy_err.load()) {
		EXPECT_EQ(0, sd_mm_destroy(s.a)) << "after the run every CPU is detached";
	}
}

// A lazy CPU that is still inside its body (sleeping, interrupts on) is
// shot, and its strategy state is clean afterwards: it switches to mm B,
// caches a writable page, and a write-protect of that page by CPU 0 (a
// flush that must reach CPU 1 by whatever the strategy uses) takes effect.
struct ShotThenReused {
	sd_mm *a = nullptr, *b = nullptr;
	std::atomic<int> step{0};
	std::atomic<int> destroy_err{1};
	std::atomic<int> write_after{1};
	std::string detail;
};

TEST_P(LazyMm, LazyCpuShotInItsBodyThenRunsAnotherMm)
{
	Machine mach(sdtest::config(2, GetParam()));
	ASSERT_NE(nullptr, mach.m);
	ShotThenReused s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.b));
	Watchdog w("LazyMm.LazyCpuShotInItsBodyThenRunsAnotherMm: a CPU stuck", kBound);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<ShotThenReused *>(p);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_switch_mm(c, s->a));
			EXPECT_EQ(0, sd_mmap(c, s->a, kPage, P, RW));
			EXPECT_EQ(0, sd_access(c, kPage, SD_WRITE, nullptr));
			EXPECT_EQ(0, sd_cpu_idle(c));
			s->step.store(1);                 // lazy on A
			wait_flag(s->step, 2);            // A destroyed
			EXPECT_EQ(nullptr, sd_cpu_current_mm(c));
			EXPECT_EQ(0, sd_switch_mm(c, s->b));
			EXPECT_EQ(0, sd_access(c, kPage, SD_WRITE, nullptr));
			s->step.store(3);                 // B's page cached writable
			wait_flag(s->step, 4);            // write-protected
			s->write_after.store(sd_access(c, kPage, SD_WRITE, nullptr));
			return;
		}
		EXPECT_EQ(0, sd_switch_mm(c, s->b));
		EXPECT_EQ(0, sd_mmap(c, s->b, kPage, P, RW));
		wait_flag(s->step, 1);
		s->destroy_err.store(sd_mm_destroy(s->a));
		if (s->destroy_err.load())
			s->detail = sd_last_error();
		s->step.store(2);
		wait_flag(s->step, 3);
		EXPECT_EQ(0, sd_mprotect(c, s->b, kPage, P, SD_PROT_READ));
		s->step.store(4);
	}, &s)) << sd_last_error();
	EXPECT_EQ(0, s.destroy_err.load()) << s.detail;
	EXPECT_EQ(-EACCES, s.write_after.load()) << "a write went through a stale writable entry";
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	EXPECT_EQ(0, sd_mm_destroy(s.b)) << sd_last_error();
	if (s.destroy_err.load()) {
		EXPECT_EQ(0, sd_mm_destroy(s.a)) << sd_last_error();
	}
}

// A CPU that idled on A (sd_cpu_idle() reads A) and then switched to B is
// done with A: a destroyer that sees it on B frees A without an IPI, so
// the switch's store of its loaded mm must publish (release) everything it
// did with A to the destroyer's scan (acquire). CPU 0 learns of the switch
// only through the library's own view (sd_cpu_current_mm()), no test
// flag, so no other synchronisation hides a missing release: under TSan,
// a relaxed store there is reported as a race between CPU 1's last use of
// A and the free (strategy_stress found it 2 runs in 6).
struct SwitchedAway {
	sd_mm *a = nullptr, *b = nullptr;
	std::atomic<int> destroy_err{1};
	std::atomic<int> destroyed{0};   // CPU 0 to CPU 1 only
};

TEST_P(LazyMm, CpuThatSwitchedAwayIsDoneWithTheMmItLeft)
{
	Machine mach(sdtest::config(2, GetParam()));
	ASSERT_NE(nullptr, mach.m);
	SwitchedAway s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.b));
	Watchdog w("LazyMm.CpuThatSwitchedAwayIsDoneWithTheMmItLeft: a CPU stuck", kBound);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<SwitchedAway *>(p);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_switch_mm(c, s->a));
			EXPECT_EQ(0, sd_cpu_idle(c));
			EXPECT_EQ(0, sd_switch_mm(c, s->b));
			wait_flag(s->destroyed);
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			return;
		}
		sd_cpu *c1 = sd_machine_cpu_at(sd_cpu_machine(c), 1);
		while (sd_cpu_current_mm(c1) != s->b)
			std::this_thread::sleep_for(std::chrono::microseconds(20));
		s->destroy_err.store(sd_mm_destroy(s->a));
		s->destroyed.store(1);
	}, &s)) << sd_last_error();
	EXPECT_EQ(0, s.destroy_err.load()) << sd_last_error();
	EXPECT_EQ(0, sd_mm_destroy(s.b)) << sd_last_error();
}

INSTANTIATE_TEST_SUITE_P(Strategies, LazyMm,
			 ::testing::Values("broadcast", "local", "ipi", "ipi:cpumask=eager", "ipi:cpumask=lazy",
					   "gbcast", "lifecycle"),
			 [](const ::testing::TestParamInfo<const char *> &i) {
				 std::string n(i.param);
				 for (char &ch : n)
					 if (!isalnum((unsigned char)ch))
						 ch = '_';
				 return n;
			 });

// The destroyer is a plain thread (no CPU): it can still shoot the lazy CPU.
TEST(LazyMmAnyThread, PlainThreadDestroysALazilyLoadedMm)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_mm *a = nullptr;
		std::atomic<int> lazy{0}, destroyed{0};
		std::atomic<int> err{1};
	} s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	Watchdog w("LazyMmAnyThread: the plain destroyer or CPU 1 stuck", kBound);
	std::thread destroyer([&s] {
		wait_flag(s.lazy);
		ASSERT_EQ(nullptr, sd_cpu_self()) << "the destroyer must be no CPU";
		s.err.store(sd_mm_destroy(s.a));
		if (s.err.load())
			ADD_FAILURE() << sd_last_error();
		s.destroyed.store(1);
	});
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) != 1)
			return;
		EXPECT_EQ(0, sd_switch_mm(c, s->a));
		EXPECT_EQ(0, sd_cpu_idle(c));
		s->lazy.store(1);
		// Bounded: without the fix the destroyer fails and says so.
		for (int i = 0; i < 100000 && !s->destroyed.load(); i++)
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		EXPECT_EQ(nullptr, sd_cpu_current_mm(c));
	}, &s)) << sd_last_error();
	destroyer.join();
	EXPECT_EQ(0, s.err.load());
	if (s.err.load()) {
		EXPECT_EQ(0, sd_mm_destroy(s.a));
	}
}

// A lazy CPU that runs with interrupts off holds the destroy until it turns
// them on: the shoot is deferred, never lost, and never skipped.
TEST(LazyMmAnyThread, LazyCpuWithInterruptsOffDelaysTheDestroy)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_mm *a = nullptr;
		std::atomic<int> off{0}, destroying{0}, destroyed{0};
		std::atomic<int> done_while_off{-1};
		std::atomic<int> err{1};
	} s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	Watchdog w("LazyMmAnyThread.LazyCpuWithInterruptsOff: the destroyer waiting for CPU 1's "
		   "ack after it turned interrupts on", kBound);
	std::thread destroyer([&s] {
		wait_flag(s.off);
		s.destroying.store(1);
		s.err.store(sd_mm_destroy(s.a));
		s.destroyed.store(1);
	});
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) != 1)
			return;
		EXPECT_EQ(0, sd_switch_mm(c, s->a));
		EXPECT_EQ(0, sd_cpu_idle(c));
		sd_irq_disable(c);
		s->off.store(1);
		wait_flag(s->destroying);
		// Whether or not its IPI is here yet, the destroy needs our ack,
		// which cannot happen with interrupts off. Longer than the
		// watchdog's resend period, so the plain-thread destroyer's
		// parked wait resends (it has no CPU to count on).
		std::this_thread::sleep_for(std::chrono::milliseconds(60));
		s->done_while_off.store(s->destroyed.load());
		EXPECT_EQ(s->a, sd_cpu_current_mm(c));
		EXPECT_EQ(0, sd_irq_enable(c));
		wait_flag(s->destroyed);
		EXPECT_EQ(nullptr, sd_cpu_current_mm(c));
	}, &s)) << sd_last_error();
	destroyer.join();
	EXPECT_EQ(0, s.done_while_off.load()) << "the destroy did not wait for the lazy CPU";
	EXPECT_EQ(0, s.err.load());
	if (s.err.load()) {
		EXPECT_EQ(0, sd_mm_destroy(s.a));
	}
}

// The destroyer is itself the lazy CPU: it drops the mm on itself.
TEST(LazyMmAnyThread, DestroyerIsTheLazyCpu)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	sd_mm *mm = nullptr, *other = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	ASSERT_EQ(0, sd_mm_create(mach.m, &other));
	ASSERT_EQ(0, sd_switch_mm(a.c, mm));
	ASSERT_EQ(0, sd_mmap(a.c, mm, kPage, P, RW));
	ASSERT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
	EXPECT_EQ(-EBUSY, sd_mm_destroy(mm)) << "running it for real";
	ASSERT_EQ(0, sd_cpu_idle(a.c));
	ASSERT_EQ(0, sd_mm_destroy(mm)) << sd_last_error();
	EXPECT_EQ(nullptr, sd_cpu_current_mm(a.c));
	EXPECT_EQ(-ESRCH, sd_access(a.c, kPage, SD_READ, nullptr)) << "still idle";
	ASSERT_EQ(0, sd_switch_mm(a.c, other));
	ASSERT_EQ(0, sd_mmap(a.c, other, kPage, P, RW));
	EXPECT_EQ(0, sd_access(a.c, kPage, SD_WRITE, nullptr));
	ASSERT_EQ(0, sd_switch_mm(a.c, nullptr));
	EXPECT_EQ(0, sd_mm_destroy(other));
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
}

// A CPU that runs the mm for real (not lazily) still refuses the destroy,
// and nothing is freed: its page keeps its frame.
TEST(LazyMmAnyThread, RunningCpuStillRefusesAndNothingIsFreed)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_mm *a = nullptr;
		std::atomic<int> step{0};
		std::atomic<int> err{0};
		uint64_t pfn_before = 0, pfn_after = 1;
	} s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	Watchdog w("LazyMmAnyThread.RunningCpuStillRefuses: a CPU stuck", kBound);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_switch_mm(c, s->a));
			EXPECT_EQ(0, sd_mmap(c, s->a, kPage, P, RW));
			EXPECT_EQ(0, sd_access(c, kPage, SD_WRITE, &s->pfn_before));
			s->step.store(1);
			wait_flag(s->step, 2);
			EXPECT_EQ(0, sd_access(c, kPage, SD_READ, &s->pfn_after));
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			return;
		}
		wait_flag(s->step);
		s->err.store(sd_mm_destroy(s->a));
		EXPECT_NE(std::string::npos, std::string(sd_last_error()).find("CPU 1"))
			<< sd_last_error();
		s->step.store(2);
	}, &s)) << sd_last_error();
	EXPECT_EQ(-EBUSY, s.err.load());
	EXPECT_EQ(s.pfn_before, s.pfn_after);
	EXPECT_EQ(0, sd_mm_destroy(s.a)) << sd_last_error();
}

// The race: a lazy CPU switches to another mm just as the destroyer shoots
// it. The order-point hook stops CPU 1 inside sd_switch_mm(), interrupts
// still on, until the destroy has returned; the destroyer's IPI lands
// there. The switch must then see that it no longer holds A: a switch that
// read its loaded mm before turning interrupts off would hand the freed A
// to the strategy (here: to the user strategy's switch_out()).
std::atomic<int> race_armed{0}, race_at_enter{0}, race_destroyed{0}, race_timed_out{0};

void race_hook(enum sd_order_point p, unsigned cpu)
{
	if (p != SD_ORDER_SWITCH_ENTER || cpu != 1 || !race_armed.exchange(0))
		return;
	race_at_enter.store(1);
	for (int i = 0; !race_destroyed.load(); i++) {
		if (i > 400000) {
			race_timed_out.store(1);
			return;
		}
		std::this_thread::sleep_for(std::chrono::microseconds(50));
	}
}

TEST(LazyMmRace, SwitchAwayWhileBeingShot)
{
	UserStrategy user;
	Machine mach(sdtest::config(2, "lifecycle"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_mm *a = nullptr, *b = nullptr;
		std::atomic<int> lazy{0};
		std::atomic<int> err{1};
	} s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.a));
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.b));
	dead_mm.store(nullptr);
	switched_out_dead.store(0);
	race_at_enter.store(0);
	race_destroyed.store(0);
	race_timed_out.store(0);
	sd_order_set_hook(race_hook);
	{
		Watchdog w("LazyMmRace: CPU 1 in sd_switch_mm or CPU 0 in sd_mm_destroy stuck", kBound);
		EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
			auto *s = static_cast<S *>(p);
			if (sd_cpu_id(c) == 1) {
				EXPECT_EQ(0, sd_switch_mm(c, s->a));
				EXPECT_EQ(0, sd_cpu_idle(c));
				race_armed.store(1);
				s->lazy.store(1);
				EXPECT_EQ(0, sd_switch_mm(c, s->b));   // stops at the hook
				EXPECT_EQ(s->b, sd_cpu_current_mm(c));
				EXPECT_EQ(0, sd_switch_mm(c, nullptr));
				return;
			}
			wait_flag(s->lazy);
			wait_flag(race_at_enter);
			// Its own switch_out() during the shoot is legitimate:
			// only what comes after the destroy returned is not.
			s->err.store(sd_mm_destroy(s->a));
			dead_mm.store(s->a);
			race_destroyed.store(1);
		}, &s)) << sd_last_error();
	}
	sd_order_set_hook(nullptr);
	EXPECT_EQ(0, race_timed_out.load()) << "the destroy never returned while CPU 1 waited";
	EXPECT_EQ(0, s.err.load());
	EXPECT_EQ(0, switched_out_dead.load())
		<< "sd_switch_mm() handed the strategy the mm destroyed under it";
	EXPECT_EQ(0, sd_mm_destroy(s.b));
	dead_mm.store(nullptr);
}

// ============================== zombie CPUs ==============================

// A body returns with interrupts off: the run says so (naming the CPU and
// its depth), every CPU is detached, the machine can be destroyed, and a
// second run works. Before the fix: 0, CPU 1 attached to a dead thread,
// sd_machine_destroy() -EBUSY and every later run -EBUSY.
TEST(ZombieCpu, BodyReturnsWithInterruptsOff)
{
	sd_machine *m = nullptr;
	sd_machine_config cfg = sdtest::config(2, "ipi");
	ASSERT_EQ(0, sd_machine_create(&cfg, &m)) << sd_last_error();
	Watchdog w("ZombieCpu.BodyReturnsWithInterruptsOff: the run stuck", kBound);
	int err = sd_machine_run(m, [](sd_cpu *c, void *) {
		if (sd_cpu_id(c) == 1) {
			sd_irq_disable(c);
			sd_irq_disable(c);
		}
	}, nullptr);
	EXPECT_EQ(-EDEADLK, err);
	std::string msg = sd_last_error();
	EXPECT_NE(std::string::npos, msg.find("CPU 1")) << msg;
	EXPECT_NE(std::string::npos, msg.find("depth 2")) << msg;
	EXPECT_FALSE(attached(m, 0));
	EXPECT_FALSE(attached(m, 1)) << "a zombie CPU: attached to a thread that is gone";
	EXPECT_EQ(0, sd_machine_run(m, [](sd_cpu *c, void *) {
		EXPECT_EQ(0, sd_irqs_disabled(c)) << "a CPU starts a run with interrupts on";
	}, nullptr)) << sd_last_error();
	EXPECT_EQ(0, sd_machine_destroy(m)) << sd_last_error();
}

// A CPU whose body returned with interrupts off must still answer the IPIs
// of the bodies that run on: CPU 0 calls it after it returned. Before the
// fix CPU 0 waits forever (the watchdog names it).
TEST(ZombieCpu, IpiToACpuWhoseBodyLeftInterruptsOffCompletes)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		std::atomic<int> body1_done{0};
		std::atomic<int> ran{0};
		std::atomic<int> call_err{1};
	} s;
	Watchdog w("ZombieCpu.IpiToACpuWhoseBodyLeftInterruptsOff: CPU 0 in sd_smp_call_single() "
		   "to CPU 1 (its interrupts left off)", kBound);
	int err = sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) == 1) {
			sd_irq_disable(c);
			s->body1_done.store(1);
			return;
		}
		wait_flag(s->body1_done);
		s->call_err.store(sd_smp_call_single(c, 1, [](sd_cpu *, void *arg) {
			static_cast<S *>(arg)->ran.store(1);
		}, s));
	}, &s);
	EXPECT_EQ(-EDEADLK, err) << sd_last_error();
	EXPECT_EQ(0, s.call_err.load());
	EXPECT_EQ(1, s.ran.load());
	EXPECT_FALSE(attached(mach.m, 1));
}

// An unbalanced sd_irq_enable() is refused and reported; interrupts stay
// on, so a remote flush to that CPU completes (before the fix the depth
// went to -1, the CPU read as interrupts-off for good, and CPU 0's
// write-protect waited forever for its ack). The run reports it too.
TEST(ZombieCpu, UnbalancedEnableIsReportedAndFlushesStillComplete)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	struct S {
		sd_mm *mm = nullptr;
		std::atomic<int> step{0};
		std::atomic<int> enable_err{0};
		std::atomic<int> disabled_after{1};
		std::atomic<int> write_after{0};
		std::string msg;
	} s;
	ASSERT_EQ(0, sd_mm_create(mach.m, &s.mm));
	Watchdog w("ZombieCpu.UnbalancedEnable: CPU 0's write-protect waiting for CPU 1's ack",
		   kBound);
	int err = sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		EXPECT_EQ(0, sd_switch_mm(c, s->mm));
		if (sd_cpu_id(c) == 1) {
			wait_flag(s->step);
			EXPECT_EQ(0, sd_access(c, kPage, SD_WRITE, nullptr));
			s->enable_err.store(sd_irq_enable(c));
			s->msg = sd_last_error();
			s->disabled_after.store(sd_irqs_disabled(c));
			s->step.store(2);
			wait_flag(s->step, 3);
			s->write_after.store(sd_access(c, kPage, SD_WRITE, nullptr));
			EXPECT_EQ(0, sd_switch_mm(c, nullptr));
			return;
		}
		EXPECT_EQ(0, sd_mmap(c, s->mm, kPage, P, RW));
		s->step.store(1);
		wait_flag(s->step, 2);
		EXPECT_EQ(0, sd_mprotect(c, s->mm, kPage, P, SD_PROT_READ));
		s->step.store(3);
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	}, &s);
	EXPECT_EQ(-EINVAL, s.enable_err.load());
	EXPECT_NE(std::string::npos, s.msg.find("already on")) << s.msg;
	EXPECT_EQ(0, s.disabled_after.load()) << "an unbalanced enable turned interrupts off";
	EXPECT_EQ(-EACCES, s.write_after.load());
	EXPECT_EQ(-EINVAL, err);
	std::string msg = sd_last_error();
	EXPECT_NE(std::string::npos, msg.find("CPU 1")) << msg;
	EXPECT_NE(std::string::npos, msg.find("sd_irq_enable")) << msg;
	EXPECT_EQ(0u, sd_oracle_violations(mach.m));
	EXPECT_EQ(0, sd_mm_destroy(s.mm)) << sd_last_error();
}

// Outside a run too: the depth never goes below 0, and the next balanced
// pair still works.
TEST(ZombieCpu, UnbalancedEnableOnAnAttachedThread)
{
	Machine mach(sdtest::config(1, "broadcast"));
	ASSERT_NE(nullptr, mach.m);
	Attached a(mach.m, 0);
	EXPECT_EQ(-EINVAL, sd_irq_enable(a.c));
	EXPECT_EQ(-EINVAL, sd_irq_enable(a.c));
	EXPECT_EQ(0, sd_irqs_disabled(a.c));
	sd_irq_disable(a.c);
	EXPECT_EQ(1, sd_irqs_disabled(a.c)) << "one disable after two refused enables is off";
	EXPECT_EQ(0, sd_irq_enable(a.c));
	EXPECT_EQ(0, sd_irqs_disabled(a.c));
	EXPECT_EQ(-EPERM, sd_irq_enable(nullptr)) << "NULL is a CPU the caller is not attached as";
}

// A body that leaves its thread with pthread_exit() (or is cancelled): its
// CPU is detached on the way out, the other bodies are not left waiting for
// it, and the run ends. Before the fix the run never returned.
TEST(ZombieCpu, BodyThatExitsItsThreadIsDetached)
{
	Machine mach(sdtest::config(2, "ipi"));
	ASSERT_NE(nullptr, mach.m);
	std::atomic<int> exited{0}, call_err{1};
	struct S {
		std::atomic<int> *exited, *call_err;
	} s{&exited, &call_err};
	Watchdog w("ZombieCpu.BodyThatExitsItsThread: sd_machine_run waiting for a thread "
		   "that exited attached", kBound);
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *p) {
		auto *s = static_cast<S *>(p);
		if (sd_cpu_id(c) == 1) {
			s->exited->store(1);
			pthread_exit(nullptr);
		}
		wait_flag(*s->exited);
		// It may be detaching already; either way this must not hang.
		int err = sd_smp_call_single(c, 1, [](sd_cpu *, void *) {}, nullptr);
		s->call_err->store(err == -EINVAL ? 0 : err);
	}, &s)) << sd_last_error();
	EXPECT_EQ(0, call_err.load());
	EXPECT_FALSE(attached(mach.m, 1));
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *, void *) {}, nullptr)) << sd_last_error();
}

} // namespace
