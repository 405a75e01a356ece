// SPDX-License-Identifier: MIT
//
// The x86/mm lazy mm_cpumask patch, Dave Hansen's case from its review: a
// task migrates, then frees memory (a flush) on the CPU it moved to.
//
//   forked_worker/ipi:cpumask={eager,lazy,lazy,trim_ms=1}/cpus:{2,4}
//                                            one worker task migrates CPU to CPU (tasks,
//                                            task.h), and frees (a flush) after each
//                                            migration
//
// The main set runs eager and lazy at every --sd_cpus of 2 or more, in real
// and modelled time.
#include "common.hpp"

#include <string>

namespace sdbench {
namespace {

// Dave Hansen's case: a task runs on CPU A, migrates to CPU B, and there
// frees memory, which needs a flush. One worker task (its own mm) hops
// around the CPUs (hop h to CPU h % N) by changing its affinity, so the
// scheduler migrates it (sd_task_set_affinity()); on each CPU a resident
// task of another process, pinned there, runs while the worker is
// elsewhere and yields to it when it arrives. A hop: the migration, read
// two of the worker's pages, write a third (malloc), madvise(DONTNEED) it
// (free: the flush). With the lazy mask, the CPUs the worker left stay in
// its mm_cpumask, running a resident: an IPI goes to them only when the
// mask is trimmed (once per trim_ms per mm) and then clears their bit.
// An iteration is one hop. Every switch to the worker finds its generation
// moved on (the last hop flushed), so it flushes the worker's PCID: the TLB
// is kSwitchTlb (common.hpp). In modelled time a resident's turn is a
// microsecond of work between yields.
constexpr uint64_t kFwPages = 4;
constexpr uint64_t kFwBatch = 2000;
constexpr uint64_t kFwResidentWorkNs = 1000;

struct FwArg {
	uint64_t hops = 0;
	unsigned cpus = 0;
	std::atomic<bool> done{false};
	std::atomic<int> err{0};
};

void fw_worker(sd_task *self, void *p)
{
	auto *a = static_cast<FwArg *>(p);
	int err = 0;

	for (uint64_t h = 0; !err && h < a->hops; h++) {
		const std::string cpu = std::to_string(h % a->cpus);

		err = sd_task_set_affinity(self, self, cpu.c_str());
		sd_cpu *c = sd_task_cpu(self);
		for (uint64_t pg = 1; !err && pg < 3; pg++)
			err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
		if (!err)
			err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_madvise_dontneed(c, sd_task_mm(self), kRegion, SD_PAGE_SIZE);
	}
	a->done.store(true);
	note_first_error(a->err, err);
}

void fw_resident(sd_task *self, void *p)
{
	auto *a = static_cast<FwArg *>(p);
	int err = 0;

	while (!err && !a->done.load(std::memory_order_relaxed)) {
		sd_cpu *c = sd_task_cpu(self);
		err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_cpu_work(c, kFwResidentWorkNs);
		if (!err)
			err = sd_task_yield(self);
	}
	note_first_error(a->err, err);
}

void BM_forked_worker(State &st, const char *strategy, unsigned cpus)
{
	MachineSpec spec = spec_of(strategy);
	spec.tlb = kSwitchTlb;
	RunMachine rm(cpus, SD_ORACLE_OFF, 1 + cpus, kFwPages, spec);
	FwArg arg;
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	arg.cpus = cpus;
	auto create = [&](sd_machine *m, uint64_t batch) {
		arg.hops = batch;
		arg.done.store(false);
		sd_task_config tc = SD_TASK_CONFIG_INIT;
		tc.mm = rm.mm(0);
		tc.cpu = 0;
		tc.affinity = "0";
		if (int err = sd_task_create(m, &tc, fw_worker, &arg, nullptr))
			return err;
		for (unsigned i = 0; i < cpus; i++) {
			const std::string cpu = std::to_string(i);
			tc.mm = rm.mm(1 + i);
			tc.cpu = i;
			tc.affinity = cpu.c_str();
			if (int err = sd_task_create(m, &tc, fw_resident, &arg, nullptr))
				return err;
		}
		return 0;
	};
	if (!run_task_batches(st, rm, create, kFwBatch, "forked_worker run", &d))
		return;
	if (arg.err.load()) {
		fail(st, "forked_worker task", arg.err.load());
		return;
	}
	const uint64_t hops = st.iterations();
	report_ipi_common(st, d);
	st.counters["migrations_per_hop"] = ratio(d.counter[SD_STAT_TASK_MIGRATE], hops);
	st.counters["ipis_per_migration"] = ratio(d.counter[SD_STAT_IPI_SENT], hops);
	st.counters["unneeded_ipis_per_migration"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], hops);
	st.counters["cpumask_writes_per_migration"] = ratio(d.counter[SD_STAT_CPUMASK_WRITE], hops);
	st.counters["flushes_per_migration"] = ratio(d.counter[SD_STAT_FLUSH], hops);
	report_machine(st, rm.m());
}

void register_forked_worker(Set set)
{
	// In modelled time too: the hop is a migration by the scheduler, so
	// the worker's clock goes with it from CPU to CPU.
	if (set == Set::patches)
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
