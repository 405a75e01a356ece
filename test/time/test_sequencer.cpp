// SPDX-License-Identifier: MIT
// Strict modelled time (lib/time/sequencer.c): one CPU at a time, lowest
// clock first. Nothing here times the host: each test compares modelled
// clocks, between runs or against answers computed by hand.
#include "common.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <csignal>
#include <pthread.h>

extern "C" {
#include "hw/machine_state.h"
#include "mm/mm.h"
#include "time/sequencer.h"
}
#include "hw/line_hammer.h"
#include "hw/profile.hpp"

namespace {


using sdtest::Machine;
using sdtest::Profile;
using sdtest::Watchdog;
using sdtest::Hogs;

constexpr uint64_t P = SD_PAGE_SIZE;
constexpr unsigned RW = SD_PROT_READ | SD_PROT_WRITE;
constexpr uint64_t kRegion = 0x40000000;

sd_machine_config strict(unsigned cpus, const char *strategy, const Profile &p,
			   uint64_t window_ns = 0)
{
	return sdtest::strict_config(cpus, strategy, p, window_ns);
}

// Costs of the contended shape: every kind of shared resource is charged
// (IPIs and their lines, the mm lock, page-table locks, the LRU, frees),
// and broadcasts stall the CPUs they reach.
const std::map<std::string, double> kCosts = {
	{"tlb_l1_hit", 0.5}, {"tlb_l2_hit", 2}, {"page_walk_level", 20}, {"tlb_fill", 3},
	{"local_flush_page", 50}, {"local_flush_asid", 90}, {"page_fault_entry", 150},
	{"syscall_entry", 70}, {"syscall_exit", 60}, {"pte_update", 4}, {"page_free", 30},
	{"lock_acquire", 10}, {"vma_change", 400}, {"ipi_send", 50}, {"ipi_send_target", 20},
	{"ipi_delivery", 500}, {"irq_entry", 100}, {"ipi_handler", 40}, {"irq_exit", 70},
	{"context_switch", 300}, {"pt_alloc", 400}, {"pt_free", 200},
	{"dvm_completion", 100}, {"tlbi_recv", 15}, {"invlpgb_completion", 100},
	{"invlpgb_recv", 12},
	{"line_transfer.core", 20}, {"line_transfer.llc", 60}, {"line_transfer.package", 120},
	{"line_transfer.system", 250}, {"lock_handoff.llc", 80}, {"lock_handoff.package", 150},
	{"lock_handoff.system", 300}};

// will-it-scale's tlb_flush2 in threads mode (its own file: a page
// touched, madvise(DONTNEED), touched again), each CPU in its own part of
// one mm, beside switches between two mms every 16 loops so the cpumask
// and lazy paths are exercised. Returns every CPU's clock at the end.
struct Shape {
	sd_mm *mm[2] = {};
	unsigned loops = 0;
	std::vector<uint64_t> clock;
};

std::vector<uint64_t> run_shape(const sd_machine_config &cfg, unsigned loops,
				sd_model_info *info = nullptr, uint64_t quantum_ps = 0)
{
	Machine mach(cfg);
	EXPECT_NE(nullptr, mach.m) << sd_last_error();
	if (!mach.m)
		return {};
	if (quantum_ps)
		mach.m->model.seq_quantum_ps = quantum_ps;
	Shape s;
	s.loops = loops;
	s.clock.resize(sd_machine_nr_cpus(mach.m));
	EXPECT_EQ(0, sd_mm_create(mach.m, &s.mm[0]));
	EXPECT_EQ(0, sd_mm_create(mach.m, &s.mm[1]));
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *s = static_cast<Shape *>(v);
		const unsigned id = sd_cpu_id(c);
		const uint64_t base = kRegion + (uint64_t)id * 64 * P;
		EXPECT_EQ(0, sd_switch_mm(c, s->mm[0]));
		EXPECT_EQ(0, sd_mmap(c, s->mm[0], base, 4 * P, RW));
		for (unsigned i = 0; i < s->loops; i++) {
			const uint64_t va = base + (i % 4) * P;
			EXPECT_EQ(0, sd_access(c, va, SD_WRITE, nullptr));
			EXPECT_EQ(0, sd_madvise_dontneed(c, s->mm[0], va, P));
			EXPECT_EQ(0, sd_access(c, va, SD_READ, nullptr));
			if (i % 16 == 15) {
				EXPECT_EQ(0, sd_switch_mm(c, s->mm[1]));
				EXPECT_EQ(0, sd_cpu_work(c, 200 + 37 * id));
				EXPECT_EQ(0, sd_switch_mm(c, s->mm[0]));
			}
		}
		EXPECT_EQ(0, sd_munmap(c, s->mm[0], base, 4 * P));
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
		s->clock[id] = sd_cpu_clock_ns(c);
	}, &s)) << sd_last_error();
	if (info) {
		*info = SD_MODEL_INFO_INIT;
		EXPECT_EQ(0, sd_machine_model_info(mach.m, info));
	}
	EXPECT_EQ(0, sd_mm_destroy(s.mm[0]));
	EXPECT_EQ(0, sd_mm_destroy(s.mm[1]));
	return s.clock;
}

// The shape's loop count: 96 (six switches between the mms) at full
// scale, fewer under SD_STRESS_SCALE (TSan runs these strict comparisons
// at 0.35, where 96 loops took 44 s of CI's time), never fewer than 32 so
// that every run still switches mms twice.
unsigned shape_loops()
{
	const unsigned sixteens = (unsigned)std::lround(6 * sdtest::stress_scale());
	return 16 * std::max(2u, std::min(6u, sixteens));
}


// The same strict run three times, the last beside a busy loop on every
// PU and with more CPUs than PUs: every clock bit-identical, and nothing
// the run had to give up exactness for.
TEST(Strict, RunsAreBitIdenticalWhateverTheHostDoes)
{
	const char *only = std::getenv("SD_TEST_STRATEGY");
	// Under TSan, as above: its stalls leave most runs uncompared anyway.
	const std::vector<const char *> all = {"ipi", "ipi:cpumask=lazy", "broadcast", "gbcast"};
	const std::vector<const char *> tsan = {"ipi", "broadcast"};
	for (const char *strategy : sdtest::under_tsan ? tsan : all) {
		if (only && std::strcmp(only, strategy))
			continue;
		Profile p("pack:1 l3:2 core:4 pu:1", kCosts);
		Watchdog w("Strict: a run stuck", 240);
		sd_model_info info[3];
		auto first = run_shape(strict(6, strategy, p), shape_loops(), &info[0]);
		auto second = run_shape(strict(6, strategy, p), shape_loops(), &info[1]);
		std::vector<uint64_t> loaded;
		{
			Hogs hogs(std::thread::hardware_concurrency() + 1);
			loaded = run_shape(strict(6, strategy, p), shape_loops(), &info[2]);
		}
		ASSERT_EQ(6u, first.size());
		EXPECT_GT(first[0], 0u) << strategy;
		EXPECT_EQ(1, info[0].strict);
		EXPECT_GT(info[0].seq_handoffs, 0u) << strategy;
		const uint64_t stalls = info[0].seq_stalls + info[1].seq_stalls + info[2].seq_stalls;
		if (sdtest::tsan_stalled(strategy, stalls))
			continue;
		EXPECT_EQ(0u, stalls) << strategy;
		EXPECT_EQ(first, second) << strategy << ": two quiet runs differ";
		EXPECT_EQ(first, loaded) << strategy << ": a loaded run differs";
	}
}

// A run's end is in modelled order too. Bodies that end at different
// times and leave their mm loaded detach after every body has returned,
// and the detach's switch_mm() to no mm writes the mm's cpumask line (ipi,
// eager). Those detaches once rejoined one by one as the host woke their
// threads, behind the frontier (seq_late 1 or more in every run), and the
// order the line saw them in moved the run's last clock with host load
// (hackbench on tasks at 36 CPUs, 11 ns in 1.3 ms). They now come back
// together (sd_seq_end_cpu()): nobody is late, and the last clock is the
// same quiet or loaded.
uint64_t run_ending_apart(const sd_machine_config &cfg, sd_model_info *info)
{
	Machine mach(cfg);
	EXPECT_NE(nullptr, mach.m) << sd_last_error();
	if (!mach.m)
		return 0;
	sd_mm *mm = nullptr;
	EXPECT_EQ(0, sd_mm_create(mach.m, &mm));
	EXPECT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *mm = static_cast<sd_mm *>(v);
		const unsigned id = sd_cpu_id(c);
		const uint64_t va = kRegion + (uint64_t)id * 4 * P;
		EXPECT_EQ(0, sd_switch_mm(c, mm));
		EXPECT_EQ(0, sd_mmap(c, mm, va, P, RW));
		EXPECT_EQ(0, sd_access(c, va, SD_WRITE, nullptr));
		EXPECT_EQ(0, sd_cpu_work(c, 1000 + 777 * (id % 3)));
	}, mm)) << sd_last_error();
	*info = SD_MODEL_INFO_INIT;
	EXPECT_EQ(0, sd_machine_model_info(mach.m, info));
	EXPECT_EQ(0, sd_mm_destroy(mm));
	return info->clock_max_ns;
}

TEST(Strict, RunEndsInClockOrder)
{
	Profile p("pack:1 l3:2 core:4 pu:1", kCosts);
	Watchdog w("Strict end: a run stuck", 120);
	sd_model_info quiet, again, busy;
	const uint64_t first = run_ending_apart(strict(6, "ipi", p), &quiet);
	const uint64_t second = run_ending_apart(strict(6, "ipi", p), &again);
	uint64_t loaded;
	{
		Hogs hogs(std::thread::hardware_concurrency() + 1);
		loaded = run_ending_apart(strict(6, "ipi", p), &busy);
	}
	EXPECT_GT(first, 0u);
	for (const sd_model_info *i : {&quiet, &again, &busy})
		EXPECT_EQ(0u, i->seq_late) << "a detach came back behind the frontier";
	if (sdtest::tsan_stalled("run end", quiet.seq_stalls + again.seq_stalls + busy.seq_stalls))
		return;
	for (const sd_model_info *i : {&quiet, &again, &busy})
		EXPECT_EQ(0u, i->seq_stalls);
	EXPECT_EQ(first, second);
	EXPECT_EQ(first, loaded) << "a loaded run's end differs";
}

// The window is lax synchronisation's; strict mode has no window to
// depend on: 50 ns and 1 ms give the same clocks.
TEST(Strict, RunsDoNotDependOnTheWindow)
{
	Profile p("pack:1 l3:2 core:4 pu:1", kCosts);
	Watchdog w("Strict window: a run stuck", 120);
	auto narrow = run_shape(strict(4, "ipi", p, 50), 64);
	auto wide = run_shape(strict(4, "ipi", p, 1000000), 64);
	EXPECT_EQ(narrow, wide);
}

// Strict mode's quantum (how soon a holder looks again without a reason)
// places sync points, and nothing else: 250 ns, 1 us (the default) and
// 4 us give the same clocks on 8 CPUs. A holder that synced at the quantum
// alone, ignoring where it passes the next CPU (seq_next_sync()), fails
// this for every family. One that forgot an IPI left for later when its
// sync point fell in a handler or a section (sync.c, seq_sync()) failed it
// for ipi alone: its clocks differed by up to 1% between 250 ns and 1 us.
TEST(Strict, RunsDoNotDependOnTheQuantum)
{
	// Under TSan (sdtest::under_tsan), the IPI path and the broadcast one:
	// the sequencer's paths are the same for the others, 7 s a strategy.
	const std::vector<const char *> all = {"ipi", "ipi:cpumask=lazy", "broadcast", "local",
					       "gbcast"};
	const std::vector<const char *> tsan = {"ipi", "broadcast"};
	for (const char *strategy : sdtest::under_tsan ? tsan : all) {
		Profile p("pack:1 l3:2 core:4 pu:1", kCosts);
		Watchdog w("Strict quantum: a run stuck", 120);
		auto fine = run_shape(strict(8, strategy, p), shape_loops(), nullptr, 250 * 1000);
		auto dflt = run_shape(strict(8, strategy, p), shape_loops());
		auto coarse = run_shape(strict(8, strategy, p), shape_loops(), nullptr, 4000 * 1000);
		ASSERT_EQ(8u, dflt.size());
		EXPECT_EQ(dflt, fine) << strategy << ": 250 ns against 1 us";
		EXPECT_EQ(dflt, coarse) << strategy << ": 4 us against 1 us";
	}
}

// Four CPUs in one LLC write one line, with W of their own work between
// writes, far less than the transfer T: the line is the bottleneck, and a
// saturated line moves at most once per T. Each write by a CPU other than
// the line's last writer transfers it, and in modelled order that is
// every write but a CPU's first when it runs alone: at least N*K - N.
TEST(Strict, SaturatedLineLimitsThroughput)
{
	constexpr unsigned N = 4, K = 100;
	constexpr double T = 100, W = 10;
	Profile p("pack:1 core:4 pu:1", {{"line_transfer.llc", T}});
	Machine mach(strict(N, "broadcast", p));
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	struct Arg {
		sd_model_line *line;
		uint64_t end[N] = {};
	} a{sd_test_line_new()};
	Watchdog w("Strict line: a run stuck", 60);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		for (unsigned k = 0; k < K; k++) {
			sd_test_line_write(c, a->line);
			EXPECT_EQ(0, sd_cpu_work(c, (uint64_t)W));
		}
		a->end[sd_cpu_id(c)] = sd_cpu_clock_ns(c);
	}, &a)) << sd_last_error();
	uint64_t last = 0;
	for (uint64_t e : a.end)
		last = std::max(last, e);
	std::printf("[strict] %u writes of a line, T %.0f ns: last CPU done at %llu ns "
		    "(saturated: >= %.0f)\n", N * K, T, (unsigned long long)last,
		    (N * K - N) * T);
	EXPECT_GE((double)last, (N * K - N) * T);
	EXPECT_LE((double)last, N * K * (T + W) + W);
}

// An IPI to a CPU inside a second of modelled work is handled when it
// arrives, not after the work: the sender's wait is the IPI's round trip,
// and the target's work ends a handler later than it would have alone.
// An IPI's costs, distinct so that each sum says which were charged: send,
// delivery, the handler's entry, body and exit, a line transfer.
constexpr double S = 50, D = 500, E = 100, H = 10, Q = 70, T = 30;
const std::map<std::string, double> kIpiCosts = {
	{"ipi_send", S}, {"ipi_delivery", D}, {"irq_entry", E},
	{"ipi_handler", H}, {"irq_exit", Q}, {"line_transfer.llc", T}};

TEST(Strict, WorkIsInterruptedByAnIpi)
{
	constexpr uint64_t kWork = 1000000000;      // 1 s
	Profile p("pack:1 core:2 pu:1", kIpiCosts);
	Machine mach(strict(2, "ipi", p));
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	struct Arg {
		uint64_t sender = 0, target = 0;
	} a;
	Watchdog w("Strict work: a run stuck", 60);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_cpu_work(c, kWork));
			a->target = sd_cpu_clock_ns(c);
			return;
		}
		EXPECT_EQ(0, sd_smp_call_single(c, 1, [](sd_cpu *, void *) {}, nullptr));
		a->sender = sd_cpu_clock_ns(c);
	}, &a)) << sd_last_error();
	// Sent at S, runs at S + D, acks E + H + T later (its handler writes
	// the queue head the sender wrote), seen T later by the sender.
	EXPECT_EQ((uint64_t)(S + D + E + H + T + T), a.sender);
	EXPECT_EQ(kWork + (uint64_t)(E + H + T + Q), a.target);
}

// The mmap_lock is a sleeping lock the kernel holds with interrupts on: an
// IPI that reaches its holder runs at its arrival, as it does in the
// kernel (a flush under the read hold answers the others'). A spinlock
// (here the trap-dispatch lock, taken with interrupts off in the kernel)
// holds it back to the section's end. CPU 1 works kWork inside the lock;
// CPU 0's IPI is sent at S. Counting the mmap_lock with the spinlocks in
// seq_sync() moves the first answer to the second.
TEST(Strict, MmapLockHolderRunsIpisASpinlockHolderDefersThem)
{
	constexpr uint64_t kWork = 1000000;          // 1 ms
	Profile p("pack:1 core:2 pu:1", kIpiCosts);
	for (const bool rwsem : {true, false}) {
		SCOPED_TRACE(rwsem ? "mmap_lock (read)" : "a spinlock");
		Machine mach(strict(2, "ipi", p));
		ASSERT_NE(nullptr, mach.m) << sd_last_error();
		struct Arg {
			bool rwsem;
			sd_mm *mm = nullptr;
			sd_spinlock spin;
			uint64_t sender = 0;
		} a;
		a.rwsem = rwsem;
		sd_spin_init(&a.spin);
		ASSERT_EQ(0, sd_mm_create(mach.m, &a.mm));
		Watchdog w("Strict lock holder and IPI: a run stuck", 60);
		ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
			auto *a = static_cast<Arg *>(v);
			if (sd_cpu_id(c) == 0) {
				EXPECT_EQ(0, sd_smp_call_single(c, 1, [](sd_cpu *, void *) {},
								nullptr));
				a->sender = sd_cpu_clock_ns(c);
				return;
			}
			if (a->rwsem)
				sd_mmap_lock(c, a->mm, SD_LOCK_MM_READ);
			else
				sd_event_spin_lock(c, &a->spin, SD_LOCK_TRAP);
			EXPECT_EQ(0, sd_cpu_work(c, kWork));
			if (a->rwsem)
				sd_mmap_unlock(c, a->mm, SD_LOCK_MM_READ);
			else
				sd_event_spin_unlock(c, &a->spin, SD_LOCK_TRAP);
		}, &a)) << sd_last_error();
		EXPECT_EQ(0, sd_mm_destroy(a.mm));
		if (rwsem)
			EXPECT_EQ((uint64_t)(S + D + E + H + T + T), a.sender)
				<< "the IPI waited for the mmap_lock's release";
		else
			EXPECT_GT(a.sender, kWork) << "the IPI ran inside the spinlock's section";
	}
}

// A wait in the program's own code through sd_cpu_poll(): CPU 0 polls a
// flag that CPU 1 sets after W ns of its own work and announces with
// sd_cpu_poll_wake(). CPU 0 comes back with its clock at the moment of
// the wake, W (both start at 0 and make no other event), and the machine
// was never taken from a spinning thread. A spin on sched_yield() instead
// held the machine until the watchdog took it (a stall), 100 ms of host
// CPU time per wait.
TEST(Strict, PolledWaitEndsAtTheWake)
{
	constexpr uint64_t W = 5000;
	Profile p("pack:1 core:2 pu:1", {{"tlb_l1_hit", 1}});
	Machine mach(strict(2, "ipi", p));
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	struct Arg {
		std::atomic<int> flag{0};
		uint64_t seen = 0, polls = 0;
	} a;
	Watchdog w("Strict poll: a run stuck", 60);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		if (sd_cpu_id(c) == 1) {
			EXPECT_EQ(0, sd_cpu_work(c, W));
			a->flag.store(1, std::memory_order_release);
			EXPECT_EQ(0, sd_cpu_poll_wake(c));
			return;
		}
		while (!a->flag.load(std::memory_order_acquire)) {
			EXPECT_EQ(0, sd_cpu_poll(c));
			a->polls++;
		}
		a->seen = sd_cpu_clock_ns(c);
	}, &a)) << sd_last_error();
	sd_model_info info = SD_MODEL_INFO_INIT;
	ASSERT_EQ(0, sd_machine_model_info(mach.m, &info));
	EXPECT_EQ(W, a.seen);
	EXPECT_EQ(0u, info.seq_stalls);
	EXPECT_LE(a.polls, 2u) << "the poller looked again only at the wake";
}

// A CPU's thread that blocks outside the library while it holds the
// machine (a program's own barrier) loses it to the watchdog; the run
// finishes and says it was not exact.
TEST(Strict, HolderBlockedOutsideTheLibraryIsReported)
{
	Profile p("pack:1 core:2 pu:1", kCosts);
	Machine mach(strict(2, "ipi", p));
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	std::atomic<int> step{0};
	Watchdog w("Strict stall: a run stuck", 60);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *step = static_cast<std::atomic<int> *>(v);
		EXPECT_EQ(0, sd_cpu_work(c, 100));
		if (sd_cpu_id(c) == 0) {
			// CPU 0 holds the machine first (lowest id at the same
			// time) and waits here for CPU 1, which can only run once
			// the watchdog takes the machine from CPU 0.
			while (step->load() == 0)
				std::this_thread::sleep_for(std::chrono::microseconds(100));
		} else {
			step->store(1);
		}
		EXPECT_EQ(0, sd_cpu_work(c, 100));
	}, &step)) << sd_last_error();
	sd_model_info info = SD_MODEL_INFO_INIT;
	ASSERT_EQ(0, sd_machine_model_info(mach.m, &info));
	EXPECT_GE(info.seq_stalls, 1u);
	EXPECT_EQ(0u, info.stalls) << "strict mode's stalls are seq_stalls, not lax mode's";
}

// A CPU that comes back into the machine while another holds it gets its
// turn at the holder's next sync point, even when the holder never waits.
// CPU 0 holds the machine first and blocks outside the library until the
// watchdog has taken it and CPU 1 is well into a loop of TLB hits; CPU 0
// then comes back. The holder's horizon was computed without CPU 0, and
// only the holder computes it: before sd_seq_join() left the holder a
// word to look at (joined_ps), CPU 0 waited for the whole loop, and a
// longer loop (compare_guard's ipi_roundtrip, on a loaded host) made it
// wait for ever.
TEST(Strict, ACpuBackWhileAnotherHoldsGetsItsTurnBeforeTheHolderEnds)
{
	constexpr uint64_t kHits = 3000000;
	Profile p("pack:1 core:2 pu:1", kCosts);
	Machine mach(strict(2, "ipi", p));
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	sd_mm *mm = nullptr;
	ASSERT_EQ(0, sd_mm_create(mach.m, &mm));
	struct Arg {
		sd_mm *mm;
		std::atomic<uint64_t> hits{0}, seen{UINT64_MAX};
	} a{mm};
	Watchdog w("Strict join: a run stuck", 120);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		EXPECT_EQ(0, sd_cpu_work(c, 100));
		if (sd_cpu_id(c) == 0) {
			// Off the machine until CPU 1 runs its loop: the watchdog
			// takes the machine from this blocked holder.
			while (a->hits.load() < 1000)
				std::this_thread::sleep_for(std::chrono::microseconds(100));
			EXPECT_EQ(0, sd_cpu_work(c, 100));    // back in
			a->seen.store(a->hits.load());
			return;
		}
		EXPECT_EQ(0, sd_mmap(c, a->mm, kRegion, P, RW));
		EXPECT_EQ(0, sd_switch_mm(c, a->mm));
		for (uint64_t i = 0; i < kHits; i++) {
			EXPECT_EQ(0, sd_access(c, kRegion, SD_READ, nullptr));
			a->hits.store(i + 1, std::memory_order_relaxed);
		}
		EXPECT_EQ(0, sd_switch_mm(c, nullptr));
	}, &a)) << sd_last_error();
	EXPECT_LT(a.seen.load(), kHits) << "CPU 0 came back only after CPU 1's whole loop";
	EXPECT_EQ(0, sd_mm_destroy(mm));
}

// An IPI's signal that lands while its CPU's thread holds the sequencer's
// lock runs after the unlock, never inside it: the handler's own path
// takes that lock (a non-recursive mutex). Forced here: CPU 1, idle and
// so away from the machine, keeps the signal blocked until CPU 0's IPI
// has made it pending, then unblocks it from inside the lock (the
// test-only hook sd_seq_test_locked), which delivers it there. A
// ThreadSanitizer build does the same by itself, now and then: it holds
// a signal back until the interceptor of pthread_mutex_lock() returns,
// with the lock taken; soak8_broadcast_strict hung there. With the
// handler taking the lock again, this test deadlocks (its watchdog).
int g_ipi_signal;

void unblock_ipi_signal()
{
	sigset_t s;

	sd_seq_test_locked = nullptr;
	sigemptyset(&s);
	sigaddset(&s, g_ipi_signal);
	pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
}

TEST(Strict, IpiSignalInsideTheSequencerLockRunsAfterIt)
{
	Profile p("pack:1 core:2 pu:1", kCosts);
	sd_machine_config cfg = strict(2, "ipi", p);
	g_ipi_signal = cfg.ipi_signal = SIGRTMIN + 4;
	Machine mach(cfg);
	ASSERT_NE(nullptr, mach.m) << sd_last_error();
	struct Arg {
		std::atomic<int> ran{0};
		bool hook_ran = false;
	} a;
	Watchdog w("Strict signal under the sequencer's lock: a run stuck", 10);
	ASSERT_EQ(0, sd_machine_run(mach.m, [](sd_cpu *c, void *v) {
		auto *a = static_cast<Arg *>(v);
		if (sd_cpu_id(c) == 0) {
			// CPU 1 runs meanwhile (its clock is lower), into idle.
			EXPECT_EQ(0, sd_cpu_work(c, 1000000));
			EXPECT_EQ(0, sd_smp_call_single(c, 1, [](sd_cpu *, void *v) {
				static_cast<Arg *>(v)->ran.fetch_add(1);
			}, a));
			return;
		}
		sigset_t s, pending;
		sigemptyset(&s);
		sigaddset(&s, g_ipi_signal);
		pthread_sigmask(SIG_BLOCK, &s, nullptr);
		EXPECT_EQ(0, sd_cpu_idle(c));
		// Away: CPU 0's IPI summons it with a real signal.
		for (;;) {
			sigpending(&pending);
			if (sigismember(&pending, g_ipi_signal))
				break;
			std::this_thread::sleep_for(std::chrono::microseconds(100));
		}
		// Back from idle, it takes the token it was granted (at the
		// IPI's arrival) under the lock: sd_seq_join().
		sd_seq_test_locked = unblock_ipi_signal;
		EXPECT_EQ(0, sd_cpu_work(c, 10));
		a->hook_ran = sd_seq_test_locked == nullptr;
		pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
	}, &a)) << sd_last_error();
	EXPECT_TRUE(a.hook_ran) << "the signal was not delivered inside the lock";
	EXPECT_EQ(1, a.ran.load());
}

}  // namespace
