// SPDX-License-Identifier: MIT
//
// The arm64 "skip tlbi broadcast" patch's mprotect-threaded shape
// (examples/compare.c): every CPU its own single-threaded mm, flipping one
// touched page, so a strategy that knows the mm ran nowhere else (`local`)
// need not broadcast.
//
//   mprotect_threaded/{broadcast,local}/cpus:{1,2,4,8,16}   (main: + ipi, gbcast at --sd_cpus)
//   mprotect_threaded/native:mode={processes,threads}/cpus:N  real mprotect of a touched
//                                            page: processes (the patch's for-each-cpu.sh)
//                                            and threads of one process (native.cpp)
#include "common.hpp"

namespace sdbench {
namespace {

// Each CPU its own mm: touch the page (write), mprotect RO, mprotect RW.
// Time per mprotect as each CPU sees it:
// a batch of iterations is one sd_machine_run in which every CPU does that
// many mprotects, so wall time / batch = time per mprotect.
void mprotect_threaded_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	sd_mm *mm = r->rm->mm(sd_cpu_id(c));
	int err = sd_switch_mm(c, mm);

	for (uint64_t i = 0; !err && i < r->count; i += 2) {
		err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_mprotect(c, mm, kRegion, SD_PAGE_SIZE, SD_PROT_READ);
		if (!err)
			err = sd_mprotect(c, mm, kRegion, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	}
	note_error(r, err);
	sd_switch_mm(c, nullptr);
}

constexpr uint64_t kMprotectBatch = 2000;

void BM_mprotect_threaded(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, cpus, 1, spec_of(strategy));
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st) ||
	    !run_batches(st, rm, mprotect_threaded_body, kMprotectBatch, "mprotect_threaded run", &d))
		return;
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	st.counters["flushes"] = Counter((double)flushes, Counter::kAvgIterations);
	st.counters["local_only_flushes_per_flush"] =
		ratio(d.counter[SD_STAT_LOCAL_ONLY_FLUSH], flushes);
	st.counters["stale_switch_flushes"] = (double)d.counter[SD_STAT_STALE_SWITCH_FLUSH];
	report_machine(st, rm.m());
}

void register_mprotect_threaded(Set set)
{
	static const std::vector<unsigned> all_cpus = { 1, 2, 4, 8, 16 };
	// The skip-broadcast patch: one process per CPU on a 32-CPU eMAG.
	static const std::vector<unsigned> patch_cpus = { 1, 2, 4, 8, 16, 32 };
	static const std::vector<const char *> all = { "broadcast", "local" };
	static const std::vector<const char *> main_set = { "broadcast", "local", "ipi", "gbcast" };
	const std::vector<unsigned> &cpus = set == Set::main ? g_opt.cpus
					    : set == Set::patches ? patch_cpus : all_cpus;

	// broadcast ("before") first: scripts/compare divides by it.
	for (unsigned n : cpus)
		for (const char *s : set == Set::main ? main_set : all)
			reg("mprotect_threaded/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_mprotect_threaded(st, s, n); });
	if (set == Set::patches)
		return;         // a native twin of 32 CPUs is not this host's to run
	for (unsigned n : cpus) {
		reg("mprotect_threaded/native:mode=processes" + cpus_tail(n),
		    [n](State &st) { native::BM_mprotect(st, n, true); });
		reg("mprotect_threaded/native:mode=threads" + cpus_tail(n),
		    [n](State &st) { native::BM_mprotect(st, n, false); });
	}
}

} // namespace

SD_BENCH_FAMILY(mprotect_threaded, 60, register_mprotect_threaded);

} // namespace sdbench
