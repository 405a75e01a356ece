// SPDX-License-Identifier: MIT
//
//   scale/broadcast/cpus:{64,256,1024}   oversubscribed run, oracle checked: no livelock
//
// --sd_set=all only.
#include "common.hpp"

namespace sdbench {
namespace {

constexpr unsigned kScaleMms = 4;
constexpr uint64_t kScalePages = 4;

// The scale body: switch to one of 4 shared mms, read 4 pages; every 8th CPU
// flips one page RO/RW four times (four broadcasts to every CPU); read again.
void scale_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	unsigned id = sd_cpu_id(c);
	sd_mm *mm = r->rm->mm(id);
	r->clocks.begin(c);
	int err = sd_switch_mm(c, mm);

	for (uint64_t pg = 0; !err && pg < kScalePages; pg++)
		err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
	if (id % 8 == 0) {
		uint64_t va = kRegion + ((id / 8) % kScalePages) * SD_PAGE_SIZE;
		for (unsigned j = 0; !err && j < 4; j++)
			err = sd_mprotect(c, mm, va, SD_PAGE_SIZE,
					  (j & 1) ? SD_PROT_READ | SD_PROT_WRITE : SD_PROT_READ);
	}
	for (uint64_t pg = 0; !err && pg < kScalePages; pg++)
		err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
	note_error(r, err);
	sd_switch_mm(c, nullptr);
	r->clocks.end(c);
}

// A whole oversubscribed run per iteration, oracle checked: it must end (no
// livelock) with no violation.
void BM_scale(State &st, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_CHECKED, kScaleMms, kScalePages);

	if (!rm.ok(st))
		return;
	RunArg r;
	r.rm = &rm;
	r.clocks.reset(cpus);
	sd_stats before = all_stats(rm.m());
	int err = 0;
	ModelSpan model(rm.m());
	for (auto _ : st) {
		err = sd_machine_run(rm.m(), scale_body, &r);
		if (err || r.err.load())
			break;
	}
	model.stop(r.clocks.span_ns());
	if (err || r.err.load()) {
		fail(st, "scale run", err ? err : r.err.load());
		return;
	}
	sd_stats d = delta(all_stats(rm.m()), before);
	st.counters["flushes"] = Counter((double)d.counter[SD_STAT_FLUSH], Counter::kAvgIterations);
	st.counters["tlbi_ops"] = Counter((double)d.counter[SD_STAT_TLBI_OP], Counter::kAvgIterations);
	st.counters["remote_invalidations"] =
		Counter((double)d.counter[SD_STAT_REMOTE_INVAL], Counter::kAvgIterations);
	st.counters["violations"] = (double)sd_oracle_violations(rm.m());
	st.counters["flush_ns"] = flush_ns_mean(d);
	model.report(st, (double)st.iterations());      // one whole run per iteration
	report_machine(st, rm.m());
}

void register_scale(Set set)
{
	if (set != Set::all)
		return;
	for (unsigned n : { 64u, 256u, 1024u })
		reg("scale/broadcast" + cpus_tail(n), [n](State &st) { BM_scale(st, n); });
}

} // namespace

SD_BENCH_FAMILY(scale, 90, register_scale);

} // namespace sdbench
