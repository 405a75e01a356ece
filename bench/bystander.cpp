// SPDX-License-Identifier: MIT
//
// Receivers pay (issue 23, item 5): what another mm's flushes cost CPUs
// that never run it. CPUs 0..F-1 share one mm and flip a touched page's
// protection (two flushes a loop, as mprotect_threaded); the B CPUs after
// them never load an mm and only do their own work (sd_cpu_work()).
// Each flusher flips a page of its own, so no flusher faults on another's.
// A broadcast (TLBI IS under broadcast, and under local once the mm runs
// on more than one CPU; INVLPGB under gbcast once it has a global ASID)
// reaches them anyway and stalls them by the profile's tlbi_recv or
// invlpgb_recv; an IPI reaches mm_cpumask only, so under ipi they pay
// nothing.
//
//   bystander/{broadcast,local,ipi,gbcast,rar}/flushers:F/bystanders:B
//
// Counters (modelled time only: without --sd_profile nothing is charged
// and the family reports just the flushers' real time):
//   bystander_slowdown  the bystanders' modelled time per unit of work,
//                       over the work alone, minus 1 (0: untouched)
//   bystander_stall_ns  modelled stall per bystander per flusher loop
// (a bystander's span also holds up to a window of work past the
// flushers' end, unstalled: the slowdown is, if anything, understated)
#include "common.hpp"

namespace sdbench {
namespace {

// A bystander's unit of work, modelled ns: short against a flusher's loop
// (two mprotects, microseconds), so a unit seldom straddles the end.
constexpr uint64_t kWorkNs = 100;
constexpr uint64_t kBatch = 2000;

struct BystanderArg : RunArg {
	unsigned flushers = 0;
	std::atomic<uint64_t> work_ns{0}, span_ns{0};
	std::atomic<uint64_t> flushers_done{0};   // over every run of the machine
};

void flusher(sd_cpu *c, BystanderArg *r)
{
	sd_mm *mm = r->rm->mm(0);
	const uint64_t va = kRegion + sd_cpu_id(c) * SD_PAGE_SIZE;    /* its own page */
	int err = sd_switch_mm(c, mm);

	for (uint64_t i = 0; !err && i < r->count; i++) {
		err = sd_access(c, va, SD_WRITE, nullptr);
		if (!err)
			err = sd_mprotect(c, mm, va, SD_PAGE_SIZE, SD_PROT_READ);
		if (!err)
			err = sd_mprotect(c, mm, va, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	}
	note_error(r, err);
	sd_switch_mm(c, nullptr);
	r->flushers_done.fetch_add(1);
}

// Works until this run's flushers are done, so its span covers theirs
// (gbcast, for one, uses IPIs until it has sampled the mm onto a global
// ASID). The owner's clock is exact (what broadcasts owe it included).
void bystander(sd_cpu *c, BystanderArg *r)
{
	const uint64_t goal = (r->flushers_done.load() / r->flushers + 1) * r->flushers;
	const uint64_t t0 = sd_cpu_clock_ns(c);
	uint64_t units = 0;
	int err = 0;

	for (; !err && !r->err.load() && r->flushers_done.load() < goal; units++)
		err = sd_cpu_work(c, kWorkNs);
	note_error(r, err);
	r->span_ns.fetch_add(sd_cpu_clock_ns(c) - t0, std::memory_order_relaxed);
	r->work_ns.fetch_add(units * kWorkNs, std::memory_order_relaxed);
}

void bystander_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<BystanderArg *>(p);

	if (sd_cpu_id(c) < r->flushers)
		flusher(c, r);
	else
		bystander(c, r);
}

void BM_bystander(State &st, const char *strategy, unsigned flushers, unsigned bystanders)
{
	RunMachine rm(flushers + bystanders, SD_ORACLE_OFF, 1, flushers, spec_of(strategy));
	BystanderArg arg;
	sd_stats d = SD_STATS_INIT;

	arg.flushers = flushers;
	if (!rm.ok(st) ||
	    !run_batches(st, rm, bystander_body, kBatch, "bystander run", &d, &arg))
		return;
	const double work = (double)arg.work_ns.load(), span = (double)arg.span_ns.load();
	if (work > 0 && span > 0) {
		st.counters["bystander_slowdown"] = span / work - 1;
		st.counters["bystander_stall_ns"] =
			(span - work) / (double)bystanders / (double)st.iterations();
	}
	st.counters["flushes"] = Counter((double)d.counter[SD_STAT_FLUSH], Counter::kAvgIterations);
	st.counters["broadcasts"] = Counter(
		(double)(d.counter[SD_STAT_TLBI_OP] + d.counter[SD_STAT_INVLPGB]),
		Counter::kAvgIterations);
	report_machine(st, rm.m());
}

void register_bystander(Set set)
{
	static const char *const strategies[] = {
		"broadcast", "local", "ipi", "gbcast", "rar", "broadcast:select=active_cpu",
		"broadcast:select=tlb_mode,ipi_max=4", "broadcast:select=ipi" };

	// Not in the comparison run's matrix nor the patches': no patch
	// measured bystanders, so there is nothing to compare it with (the
	// main job's mechanisms section runs it, scripts/shootdown_report/
	// mechanisms.py).
	if (set != Set::all)
		return;
	// 4 flushers: above gbcast's threshold of 3 CPUs (a global ASID, so
	// INVLPGB) and above local's single CPU (so it broadcasts too).
	for (const char *s : strategies)
		reg("bystander/" + std::string(s) + "/flushers:4/bystanders:2",
		    [s](State &st) { BM_bystander(st, s, 4, 2); });
}

} // namespace

SD_BENCH_FAMILY(bystander, 65, register_bystander);

} // namespace sdbench
