// SPDX-License-Identifier: MIT
//
// The arm64 range TLBI decomposition patch: one flush of P pages through
// the strategy (sd_flush_tlb_range(), no PTE changed), per range order, on
// 2 CPUs (the remote touched the range once, then idles).
//
//   range_flush/broadcast:range={none,ascending,descending}/cpus:2/pages:P
//
// Time, TLBI ops (tlbi_ops) and whole-ASID ops (asid_ops) per flush, and
// the split into range ops by scale, all from the public counters
// (tlbi_ops, tlbi_asid_ops, tlbi_range_ops_scale*, tlbi_page_ops). The
// main set adds P = 2^21 - 1 and 2^21, the boundary the patch moved.
#include "common.hpp"

#include <cstring>

namespace sdbench {
namespace {

// One flush of @pages pages at kRegion per iteration.
void BM_range_flush(State &st, const char *strategy, uint64_t pages)
{
	RunMachine rm(2, SD_ORACLE_OFF, 1, pages, spec_of(strategy));
	sd_cpu *cpu = nullptr;

	if (!rm.ok(st))
		return;
	int err = sd_cpu_attach(rm.m(), 0, &cpu);
	if (!err)
		err = sd_switch_mm(cpu, rm.mm(0));
	for (uint64_t pg = 0; !err && pg < pages && pg < 4096; pg++)
		err = sd_access(cpu, kRegion + pg * SD_PAGE_SIZE, SD_READ, nullptr);
	if (err) {
		fail(st, "range_flush setup", err);
		if (cpu)
			sd_cpu_detach(cpu);
		return;
	}
	sd_stats before = all_stats(rm.m());
	ModelSpan model(rm.m(), cpu);
	for (auto _ : st)
		err |= sd_flush_tlb_range(cpu, rm.mm(0), kRegion, pages * SD_PAGE_SIZE);
	model.report(st, (double)st.iterations());
	sd_stats d = delta(all_stats(rm.m()), before);
	st.counters["tlbi_ops"] = per_iteration(d.counter[SD_STAT_TLBI_OP]);
	st.counters["range_ops_scale0"] = per_iteration(d.counter[SD_STAT_TLBI_RANGE_S0]);
	st.counters["range_ops_scale1"] = per_iteration(d.counter[SD_STAT_TLBI_RANGE_S1]);
	st.counters["range_ops_scale2"] = per_iteration(d.counter[SD_STAT_TLBI_RANGE_S2]);
	st.counters["range_ops_scale3"] = per_iteration(d.counter[SD_STAT_TLBI_RANGE_S3]);
	st.counters["page_ops"] = per_iteration(d.counter[SD_STAT_TLBI_PAGE_OP]);
	st.counters["asid_ops"] = per_iteration(d.counter[SD_STAT_TLBI_ASID_OP]);
	report_machine(st, rm.m());
	if (err)
		st.SkipWithError("sd_flush_tlb_range failed");
	sd_switch_mm(cpu, nullptr);
	sd_cpu_detach(cpu);
}

void register_range_flush(Set set)
{
	static const std::vector<uint64_t> all_pages = { 1, 3, 17, 33, 64, 100, 511, 512,
							 1000, 4097, 65535 };
	static const std::vector<uint64_t> main_pages = { 1, 3, 17, 33, 64, 100, 511, 512,
							  1000, 4097, 65535, 2097151, 2097152 };
	// main: ascending (the patch's "before") first, as scripts/compare reads it.
	static const char *const all_orders[] = { "none", "ascending", "descending" };
	static const char *const main_orders[] = { "ascending", "descending", "none" };

	for (unsigned i = 0; i < 3; i++) {
		// The patch set reads op counts at every size as main does.
		const bool wide = set != Set::all;
		const char *order = wide ? main_orders[i] : all_orders[i];
		for (uint64_t p : wide ? main_pages : all_pages) {
			// Kept for the program's life: the benchmark holds the pointer.
			const char *s = strdup((std::string("broadcast:range=") + order).c_str());
			reg("range_flush/" + std::string(s) + "/cpus:2/pages:" + std::to_string(p),
			    [s, p](State &st) { BM_range_flush(st, s, p); });
		}
	}
}

} // namespace

SD_BENCH_FAMILY(range_flush, 80, register_range_flush);

} // namespace sdbench
