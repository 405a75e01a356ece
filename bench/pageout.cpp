// SPDX-License-Identifier: MIT
//
// MADV_PAGEOUT of a process's own pages: the microbenchmark of the arm64
// batched-reclaim series (Barry Song, "mm: arm64: bring up
// BATCHED_UNMAP_TLB_FLUSH", v2 cover letter, 2022; merged as "arm64: support
// batched/deferred tlb shootdown during page reclamation/migration", 6.5).
//
//   pageout/<strategy>/cpus:N/pages:P
//       broadcast           arm64 since 6.5: the TLBIs at the zap, one DSB
//       broadcast:batch=0   arm64 before: ptep_clear_flush() a page
//       ipi                 x86: arch_tlbbatch, one shootdown a batch
//
// The shape, from the cover letter: "paging out one page mapped by only
// one process", on an 8-core Snapdragon 888 (ptep_clear_flush 5.36% of the
// profile) and "the same benchmark" on an arm64 server "with around 100
// cores" (16.99%, Yicong Yang's Kunpeng 920 test). The program itself was
// not posted. Here one process, the benchmark's thread as CPU 0 of an
// N-CPU machine whose other CPUs run nothing, writes its P pages back in
// (a write fault each, as the swap-in would take) and pages them out
// (sd_reclaim() into a batch, then its flush: shrink_folio_list()'s
// try_to_unmap() with TTU_BATCH_FLUSH, then try_to_unmap_flush()). An
// iteration is one madvise(). Not modelled: the swap-out and swap-in I/O,
// which a real run pays and the cover letter's profile counts; the flush
// share here is therefore an upper bound of perf's.
#include "common.hpp"

#include <string>
#include <vector>

namespace sdbench {
namespace {

void BM_pageout(State &st, const char *strategy, unsigned cpus, unsigned pages)
{
	Single s(cpus, SD_ORACLE_OFF, pages, strategy);
	sd_tlbbatch *batch = nullptr;
	int err = 0;

	if (!s.ok(st))
		return;
	if ((err = sd_tlbbatch_create(s.m(), &batch))) {
		fail(st, "sd_tlbbatch_create", err);
		return;
	}
	const uint64_t len = (uint64_t)pages * SD_PAGE_SIZE;
	sd_stats before = cpu_stats(s.m(), 0);
	ModelSpan model(s.m(), s.cpu());
	for (auto _ : st) {
		for (unsigned p = 0; !err && p < pages; p++)
			err = sd_access(s.cpu(), kRegion + p * SD_PAGE_SIZE, SD_WRITE, nullptr);
		if (!err)
			err = sd_reclaim(s.cpu(), batch, s.mm(), kRegion, len);
		if (!err)
			err = sd_tlbbatch_flush(s.cpu(), batch);
		if (err)
			break;
	}
	model.stop();
	sd_tlbbatch_destroy(batch);
	if (err) {
		fail(st, "pageout", err);
		return;
	}
	model.report(st, (double)st.iterations());
	sd_stats d = delta(cpu_stats(s.m(), 0), before);
	st.counters["tlbis_per_pageout"] = ratio(d.counter[SD_STAT_TLBI_OP], st.iterations());
	st.counters["dsbs_per_pageout"] = ratio(d.counter[SD_STAT_DSB], st.iterations());
	st.counters["ipis_per_pageout"] = ratio(d.counter[SD_STAT_IPI_SENT], st.iterations());
	// The share of the modelled time spent flushing, perf's cycles% of
	// the flush functions: the batch's flush and, unbatched, each page's
	// flush at its zap (ptep_clear_flush()), both timed as flushes.
	if (model.span_ns())
		st.counters["flush_share"] = (double)d.flush_ns_total / (double)model.span_ns();
	report_machine(st, s.m());
}

void register_pageout(Set set)
{
	if (set != Set::all)
		return;
	static const std::vector<const char *> strategies = { "broadcast", "broadcast:batch=0",
							      "ipi" };
	for (unsigned n : { 8u, 32u, 64u })
		for (unsigned pages : { 1u, 512u })
			for (const char *s : strategies)
				reg("pageout/" + std::string(s) + cpus_tail(n) + "/pages:" +
					    std::to_string(pages),
				    [s, n, pages](State &st) { BM_pageout(st, s, n, pages); });
}

} // namespace

SD_BENCH_FAMILY(pageout, 118, register_pageout);

} // namespace sdbench
