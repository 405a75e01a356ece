// SPDX-License-Identifier: MIT
//
// The arm64 "skip tlbi broadcast" patch's sort-compute shape: short-lived
// processes.
//
//   process_churn/{broadcast,local}/cpus:{1,2,4,8,16}   (main: + ipi, gbcast at --sd_cpus)
#include "common.hpp"

namespace sdbench {
namespace {

// Short-lived processes. Each CPU, per
// iteration: create an mm, map and touch 16 pages, run, unmap (a flush that
// frees tables), switch away and destroy it. Exercises ASID allocation (a
// rollover every 65535 mms), exit flushes and, for `local`, mms that never
// run anywhere else.
constexpr uint64_t kChurnPages = 16;
constexpr uint64_t kChurnBatch = 200;

void process_churn_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	sd_machine *m = sd_cpu_machine(c);
	int err = 0;

	for (uint64_t i = 0; !err && i < r->count; i++) {
		sd_mm *mm;
		if ((err = sd_mm_create(m, &mm)))
			break;
		err = sd_mmap(c, mm, kRegion, kChurnPages * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
		if (!err)
			err = sd_switch_mm(c, mm);
		for (uint64_t pg = 0; !err && pg < kChurnPages; pg++)
			err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (!err)
			err = sd_munmap(c, mm, kRegion, kChurnPages * SD_PAGE_SIZE);
		if (!err)
			err = sd_switch_mm(c, nullptr);
		int derr = sd_mm_destroy(mm);
		err = err ? err : derr;
	}
	note_error(r, err);
}

void BM_process_churn(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, 1, 1, spec_of(strategy));
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st) ||
	    !run_batches(st, rm, process_churn_body, kChurnBatch, "process_churn run", &d))
		return;
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	st.counters["asid_allocations"] = (double)d.counter[SD_STAT_ASID_ALLOC];
	st.counters["asid_rollovers"] = (double)d.counter[SD_STAT_ASID_ROLLOVER];
	report_machine(st, rm.m());
}

void register_process_churn(Set set)
{
	if (set == Set::patches)
		return;
	static const std::vector<unsigned> all_cpus = { 1, 2, 4, 8, 16 };
	static const std::vector<const char *> all = { "broadcast", "local" };
	static const std::vector<const char *> main_set = { "broadcast", "local", "ipi", "gbcast" };
	const std::vector<unsigned> &cpus = set == Set::main ? g_opt.cpus : all_cpus;

	for (unsigned n : cpus)
		for (const char *s : set == Set::main ? main_set : all)
			reg("process_churn/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_process_churn(st, s, n); });
}

} // namespace

SD_BENCH_FAMILY(process_churn, 70, register_process_churn);

} // namespace sdbench
