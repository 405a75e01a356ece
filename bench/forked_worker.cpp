// SPDX-License-Identifier: MIT
//
// The x86/mm lazy mm_cpumask patch, Dave Hansen's case from its review: a
// task migrates, then frees memory (a flush) on the CPU it moved to.
//
//   forked_worker/ipi:cpumask={eager,lazy,lazy,trim_ms=1}/cpus:{2,4}
//                                            one worker mm migrates CPU to CPU, and frees
//                                            (a flush) after each migration
//
// The main set runs eager and lazy at every --sd_cpus of 2 or more; none
// runs with --sd_profile (see register_forked_worker()).
#include "common.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>

namespace sdbench {
namespace {

// A turn word one CPU waits on and another passes to it: the waiter spins
// up to @spins pauses, then sleeps on a futex, so that on an oversubscribed
// machine the CPU whose turn it is gets a PU. (IPIs still reach a sleeper:
// the signal interrupts the futex wait, which SA_RESTART resumes.)
struct Turn {
	alignas(64) std::atomic<uint32_t> v{0};
	alignas(64) std::atomic<uint32_t> sleepers{0};
};

void turn_wait(Turn &t, uint32_t want, unsigned spins)
{
	for (unsigned n = 0; t.v.load(std::memory_order_acquire) != want; n++) {
		if (n < spins) {
			cpu_relax();
			continue;
		}
		// Dekker with turn_pass(): count ourselves, then re-read; it
		// stores, then reads the count. seq_cst on both sides.
		t.sleepers.fetch_add(1);
		uint32_t cur = t.v.load();
		if (cur != want)
			syscall(SYS_futex, &t.v, FUTEX_WAIT_PRIVATE, cur, nullptr, nullptr, 0);
		t.sleepers.fetch_sub(1);
	}
}

void turn_pass(Turn &t, uint32_t next)
{
	t.v.store(next);
	if (t.sleepers.load())
		syscall(SYS_futex, &t.v, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

// Dave Hansen's case: a task runs on CPU A, migrates to
// CPU B, and there frees memory, which needs a flush. One worker mm hops
// around the CPUs in turn (hop h runs on CPU h % N); every CPU also has its
// own mm, the other process it runs while the worker is elsewhere. A hop:
// switch to the worker (the migration), read two of its pages, write a third
// (malloc), madvise(DONTNEED) it (free: the flush), switch back to the CPU's
// own mm, pass the turn on. With the lazy mask, the CPUs the worker left
// stay in its mm_cpumask, running another mm: an IPI goes to them only when
// the mask is trimmed (once per trim_ms per mm) and then clears their bit.
// Time per iteration: one hop (one migration and one flush). Every switch to
// the worker finds its generation moved on (the last hop flushed), so it
// flushes the worker's PCID: the TLB is kSwitchTlb (common.hpp).
constexpr uint64_t kFwPages = 4;
constexpr uint64_t kFwBatch = 2000;

struct FwArg : RunArg {
	std::unique_ptr<Turn[]> turn;   // per CPU: the hop it may run next
	unsigned spins = 0;             // pauses before a waiter sleeps
};

void forked_worker_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<FwArg *>(static_cast<RunArg *>(p));
	const unsigned id = sd_cpu_id(c);
	const unsigned n = sd_machine_nr_cpus(sd_cpu_machine(c));
	sd_mm *worker = r->rm->mm(0), *own = r->rm->mm(1 + id);
	int err = sd_switch_mm(c, own);

	if (!err)
		err = sd_access(c, kRegion, SD_WRITE, nullptr);
	for (uint64_t h = id; h < r->count; h += n) {
		turn_wait(r->turn[id], (uint32_t)h, r->spins);
		if (!err)
			err = sd_switch_mm(c, worker);
		for (uint64_t pg = 1; !err && pg < 3; pg++)
			err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
		if (!err)
			err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_madvise_dontneed(c, worker, kRegion, SD_PAGE_SIZE);
		if (!err)
			err = sd_switch_mm(c, own);
		// The last hop of a run hands the first hop of the next run to
		// CPU 0 (whose own last wait of this run is over by then).
		if (h + 1 == r->count)
			turn_pass(r->turn[0], 0);
		else
			turn_pass(r->turn[(h + 1) % n], (uint32_t)(h + 1));
	}
	int serr = sd_switch_mm(c, nullptr);
	note_error(r, err ? err : serr);
}

void BM_forked_worker(State &st, const char *strategy, unsigned cpus)
{
	MachineSpec spec = spec_of(strategy);
	spec.tlb = kSwitchTlb;
	RunMachine rm(cpus, SD_ORACLE_OFF, 1 + cpus, kFwPages, spec);
	FwArg arg;
	sd_stats d = SD_STATS_INIT;

	RunTimes times;

	if (!rm.ok(st))
		return;
	arg.turn.reset(new Turn[cpus]);
	// Pinned, a waiter spins (for a millisecond or so, many hops); when
	// oversubscribed it would keep the next CPU off its PU, so it sleeps.
	arg.spins = oversubscribed(rm.m()) ? 64 : 1u << 16;
	if (!run_batches(st, rm, forked_worker_body, kFwBatch, "forked_worker run", &d, &arg, &times))
		return;
	st.counters["pu_share"] = times.pu_share;
	const uint64_t hops = st.iterations();
	report_ipi_common(st, d);
	st.counters["ipis_per_migration"] = ratio(d.counter[SD_STAT_IPI_SENT], hops);
	st.counters["unneeded_ipis_per_migration"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], hops);
	st.counters["cpumask_writes_per_migration"] = ratio(d.counter[SD_STAT_CPUMASK_WRITE], hops);
	st.counters["flushes_per_migration"] = ratio(d.counter[SD_STAT_FLUSH], hops);
	report_machine(st, rm.m());
}

void register_forked_worker(Set set)
{
	// Not in modelled time: the worker's turn passes from CPU to CPU by a
	// host-level handoff that carries no modelled time, so each CPU's
	// clock counts only its own hops and the time per hop would shrink
	// with the number of CPUs (495 ns at 2, 106 ns at 36 on milan-36).
	// Carrying the passer's clock needs a wait that holds nobody back in
	// the window while a CPU waits for its turn outside the library.
	if (set == Set::patches || !g_opt.profile.empty())
		return;
	static const std::vector<unsigned> all_cpus = { 2, 4 };
	static const std::vector<const char *> all = { "ipi:cpumask=eager", "ipi:cpumask=lazy",
						       "ipi:cpumask=lazy,trim_ms=1" };
	static const std::vector<const char *> main_set = { "ipi:cpumask=eager",
							    "ipi:cpumask=lazy" };

	for (unsigned n : set == Set::main ? g_opt.cpus : all_cpus) {
		if (n < 2)
			continue;
		for (const char *s : set == Set::main ? main_set : all)
			reg("forked_worker/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_forked_worker(st, s, n); });
	}
}

} // namespace

SD_BENCH_FAMILY(forked_worker, 110, register_forked_worker);

} // namespace sdbench
