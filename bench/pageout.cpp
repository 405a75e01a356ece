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
// cores" (16.99%, Yicong Yang's Kunpeng 920 test). The program is in the
// merged commit's message (1 MiB MAP_SHARED|MAP_ANONYMOUS, 10000 times:
// read every page, MADV_PAGEOUT; run under taskset -c 4), which this
// family's 1 and 512 pages predate; pageout_sleepers below has its 256
// pages. Here one process, the benchmark's thread as CPU 0 of an
// N-CPU machine whose other CPUs run nothing, writes its P pages back in
// (a write fault each, as the swap-in would take) and pages them out
// (sd_reclaim() into a batch, then its flush: shrink_folio_list()'s
// try_to_unmap() with TTU_BATCH_FLUSH, then try_to_unmap_flush()). An
// iteration is one madvise(). Not modelled: the swap-out and swap-in I/O,
// which a real run pays and the cover letter's profile counts; the flush
// share here is therefore an upper bound of perf's.
//
//   pageout_sleepers/<strategy>/cpus:N/pages:P
//       riscv               RISC-V since 6.8: a union mask, one fence a batch
//       riscv:batch=0       RISC-V before: flush_tlb_page() at each zap
//
// The RISC-V series' own shape (Alexandre Ghiti, "riscv: Add support for
// BATCHED_UNMAP_TLB_FLUSH" v2, linux-riscv, 8 Jan 2024): the same program
// with SIZE 1 MiB (P = 256 pages) and 10000 madvise()s, "multithreaded to
// force the usage of IPI": four threads pinned to cores 0-3 that sleep
// forever, so every core has run the mm and stays in its mm_cpumask (idle
// keeps the mm loaded, lazily). Here CPUs 1..N-1 switch to the mm, touch
// a page and go idle (sd_cpu_idle()), and CPU 0 runs the loop. Nam Cao ran
// it on a VisionFive 2 (profile starfive-jh7110-4): 36.67 s before, 18.02 s
// after. Counters: flush_ns_per_page, the modelled flush time per page
// paged out (the before/after difference of which is comparable with the
// measured (36.67 - 18.02) s / (10000 x 256) = 7.29 us, the I/O being the
// same in both), and sbi_calls_per_pageout / ipis_per_pageout.
#include "common.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace sdbench {
namespace {

// The timed loop of both families on @s's CPU 0: write the @pages back in,
// page them out into a batch, flush it; the model's span and the shared
// counters reported. @d: CPU 0's counters' delta. False after reporting an
// error.
bool pageout_loop(State &st, const Single &s, unsigned pages, sd_stats *d)
{
	sd_tlbbatch *batch = nullptr;
	int err = sd_tlbbatch_create(s.m(), &batch);

	if (err) {
		fail(st, "sd_tlbbatch_create", err);
		return false;
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
		return false;
	}
	model.report(st, (double)st.iterations());
	*d = delta(cpu_stats(s.m(), 0), before);
	st.counters["ipis_per_pageout"] = ratio(d->counter[SD_STAT_IPI_SENT], st.iterations());
	// The share of the modelled time spent flushing, perf's cycles% of
	// the flush functions: the batch's flush and, unbatched, each page's
	// flush at its zap (ptep_clear_flush()), both timed as flushes.
	if (model.span_ns())
		st.counters["flush_share"] = (double)d->flush_ns_total / (double)model.span_ns();
	return true;
}

void BM_pageout(State &st, const char *strategy, unsigned cpus, unsigned pages)
{
	Single s(cpus, SD_ORACLE_OFF, pages, strategy);
	sd_stats d;

	if (!s.ok(st) || !pageout_loop(st, s, pages, &d))
		return;
	st.counters["tlbis_per_pageout"] = ratio(d.counter[SD_STAT_TLBI_OP], st.iterations());
	st.counters["dsbs_per_pageout"] = ratio(d.counter[SD_STAT_DSB], st.iterations());
	report_machine(st, s.m());
}

// CPUs 1..n-1 of @s's machine: each switches to the mm, touches a page and
// goes idle, keeping the mm loaded lazily (the series' sleeping threads),
// until stopped. Answers what reaches it meanwhile.
class Sleepers {
public:
	Sleepers(const Single &s, unsigned cpus) : s_(s), ready_(cpus)
	{
		for (unsigned id = 1; id < cpus; id++)
			threads_.emplace_back([this, id] { run(id); });
		while (ready_.v.load(std::memory_order_acquire) > 1)
			cpu_relax();
	}
	~Sleepers()
	{
		stop_.v.store(1, std::memory_order_relaxed);
		for (auto &t : threads_)
			t.join();
	}
	int err() const { return err_.load(); }

private:
	void run(unsigned id)
	{
		sd_cpu *c = nullptr;
		int err = sd_cpu_attach(s_.m(), id, &c);

		if (!err)
			err = sd_switch_mm(c, s_.mm());
		if (!err)
			err = sd_access(c, kRegion, SD_READ, nullptr);
		if (!err)
			err = sd_cpu_idle(c);
		if (err)
			note_first_error(err_, err);
		ready_.v.fetch_sub(1, std::memory_order_acq_rel);
		/* Asleep, as the series' threads are: its PU free for CPU 0,
		 * a fence's signal waking it. */
		while (!stop_.v.load(std::memory_order_relaxed))
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		if (c)
			sd_cpu_detach(c);
	}

	const Single &s_;
	std::vector<std::thread> threads_;
	struct alignas(64) Count {
		explicit Count(unsigned n) : v(n) {}
		std::atomic<unsigned> v;
	} ready_;
	Line stop_;
	std::atomic<int> err_{0};
};

void BM_pageout_sleepers(State &st, const char *strategy, unsigned cpus, unsigned pages)
{
	Single s(cpus, SD_ORACLE_OFF, pages, strategy);
	sd_stats d;

	if (!s.ok(st))
		return;
	Sleepers sleepers(s, cpus);
	if (sleepers.err()) {
		fail(st, "pageout_sleepers: a sleeper", sleepers.err());
		return;
	}
	if (!pageout_loop(st, s, pages, &d))
		return;
	const double paged = (double)st.iterations() * pages;
	st.counters["flush_ns_per_page"] = paged ? (double)d.flush_ns_total / paged : 0;
	st.counters["sbi_calls_per_pageout"] = ratio(d.counter[SD_STAT_SBI_ECALL], st.iterations());
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
	for (const char *s : { "riscv", "riscv:batch=0" })
		reg("pageout_sleepers/" + std::string(s) + cpus_tail(4) + "/pages:256",
		    [s](State &st) { BM_pageout_sleepers(st, s, 4, 256); });
}

} // namespace

SD_BENCH_FAMILY(pageout, 118, register_pageout);

} // namespace sdbench
