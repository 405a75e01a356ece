// SPDX-License-Identifier: MIT
//
// The AMD INVLPGB series (van Riel): will-it-scale tlb_flush2 under the x86
// and arm64 strategies, with page reclaim's LRU lock as a machine setting
// (sd_machine_config.lru), so its names carry it:
// <workload>/<strategy spec>/lru:<global|percpu>/cpus:<n>.
//
//   tlb_flush2_threads/{broadcast,local}/lru:percpu/cpus:{1,2,4,8}
//   tlb_flush2_threads/{ipi,gbcast,gbcast:threshold=0}/lru:{global,percpu}/cpus:{1,2,4,8}
//   tlb_flush2_threads/{rar,rar:threshold=0}/lru:percpu/cpus:{1,2,4,8}
//   tlb_flush2_threads/{ipi,gbcast,rar}/lru:percpu/cpus:{16,32,36,64,112}  the curves
//   tlb_flush2_threads/{ipi:order=serial,ipi:ack=early,ipi:lines=split}/lru:percpu/cpus:{2,...,36}  EuroSys 2020
//   tlb_flush2_threads/riscv:rfence={sbi,ipi}/lru:percpu/cpus:{2,4}  RISC-V's two remote fences
//                                            threads of one mm: write a page,
//                                            madvise(DONTNEED) it, read it. The series'
//                                            four configurations back to back: vanilla
//                                            (ipi, global LRU lock), the lru_add_drain
//                                            removal (ipi, per-CPU), INVLPGB alone
//                                            (gbcast, global) and both (gbcast, per-CPU);
//                                            gbcast goes global on > threshold active
//                                            CPUs (3 merged, 0 so 2 CPUs qualify). 4 and
//                                            8 are oversubscribed on 2 PUs. Untimed
//                                            warm-up until the mm is global (warmup_*).
//   tlb_flush2_threads/native/cpus:N         real madvise(MADV_DONTNEED), threads of one
//                                            process (native.cpp; no LRU setting)
//   tlb_flush2_processes/ipi/lru:{global,percpu}/cpus:{1,2,4,8}
//                                            the same loop, every CPU its own mm: what the
//                                            LRU lock costs with nothing else shared
//
// The main set: the series' four configurations (ipi and gbcast, each with
// lru:global and lru:percpu), broadcast and local (lru:percpu) and the
// native twin, threads mode, at --sd_cpus.
#include "common.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace sdbench {
namespace {

// will-it-scale tlb_flush2 (tests/tlb_flush2.c, antonblanchard/will-it-scale
// at 75f66e4), threads mode: the CPUs are threads of one mm, each bound to
// its own core (will-it-scale's default affinity), each with a private
// 1 MiB region. A loop: write a page, madvise(DONTNEED) it (a flush), read
// it again (will-it-scale asserts it reads 0: the read maps the shared zero
// page, no frame). After each pass over the 256 pages the region is
// unmapped and mapped again. Time per iteration: one loop, as each thread
// sees it; loops_per_s is the total over all threads. Processes mode is the
// same loop with every CPU in its own mm.
//
// The regions sit side by side, as mmap(NULL, 1 MiB) places them: the
// kernel's top-down search hands out the highest free gap below the last
// mapping, so the threads' first mmaps are adjacent, and each munmap leaves
// a 1 MiB hole its own thread's next mmap fills again. Being adjacent,
// anonymous and of one protection, they merge into one VMA (vma_merge():
// a new anonymous mapping has no anon_vma yet, so nothing keeps it apart);
// every munmap splits that VMA and every mmap merges it back, and two
// regions share each 2 MiB page-table leaf. Where this differs: here a
// thread's region keeps its address (the kernel may hand a thread the hole
// another thread left higher up).
//
// Every loop frees one page, the madvise's (the zero page the read maps is
// on no LRU, and its munmap frees nothing): with SD_LRU_GLOBAL (a machine
// setting, whatever the strategy) each free takes the machine-wide LRU lock,
// as release_pages() takes the lruvec lock in vanilla; SD_LRU_PERCPU is the
// INVLPGB series' lru_add_drain removal. Besides that lock and the flush,
// the threads share the mm's mmap_lock (read: each madvise; write: the
// munmap and mmap of each pass), its tlb_gen line, and the one VMA's lock,
// which faults take for read and a munmap or mmap takes for write (a fault
// that finds it write-locked falls back to the mmap_lock, as the kernel's
// lock_vma_under_rcu() retry does).
constexpr uint64_t kTf2Pages = 256;
constexpr uint64_t kTf2Batch = 1024;

// Side by side from the 2 MiB boundary above RunMachine's page at kRegion
// (a leaf table apart, so that page never joins their VMA).
inline uint64_t tf2_region(unsigned id)
{
	return kRegion + (512 + (uint64_t)id * kTf2Pages) * SD_PAGE_SIZE;
}

void tlb_flush2_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	// Threads mode: one mm (RunMachine's only one); processes mode: one
	// per CPU (mm(i) wraps around the RunMachine's mms).
	sd_mm *mm = r->rm->mm(sd_cpu_id(c));
	const uint64_t base = tf2_region(sd_cpu_id(c));
	const uint64_t len = kTf2Pages * SD_PAGE_SIZE;
	bool mapped = false;
	int err = sd_switch_mm(c, mm);

	for (uint64_t i = 0; !err && i < r->count; i++) {
		const uint64_t va = base + (i % kTf2Pages) * SD_PAGE_SIZE;
		if (i % kTf2Pages == 0) {
			if (mapped)
				err = sd_munmap(c, mm, base, len);
			if (!err)
				err = sd_mmap(c, mm, base, len, SD_PROT_READ | SD_PROT_WRITE);
			mapped = !err;
		}
		if (!err)
			err = write_dontneed_read(c, mm, va);
	}
	if (mapped) {
		int uerr = sd_munmap(c, mm, base, len);
		err = err ? err : uerr;
	}
	int serr = sd_switch_mm(c, nullptr);
	note_error(r, err ? err : serr);
}

// The merged series' threshold: an mm goes global on more than 3 active
// CPUs (gbcast's default, README.md's strategy table).
constexpr unsigned kGbcastDefaultThreshold = 3;

// gbcast's threshold on @m: its spec's threshold= option, else the default.
unsigned gbcast_threshold(const sd_machine *m)
{
	struct sd_machine_info info;

	if (sd_machine_info(m, &info))
		return kGbcastDefaultThreshold;
	const char *opts = std::strchr(info.strategy, ':');
	for (const char *o = opts; o; o = std::strchr(o + 1, ',')) {
		if (!std::strncmp(o + 1, "threshold=", 10))
			return (unsigned)std::strtoul(o + 11, nullptr, 10);
	}
	return kGbcastDefaultThreshold;
}

// The mms of @m that hold a global ASID now: gbcast frees one only when its
// mm is destroyed (destroy_context_free_global_asid()), and a benchmark's
// mms live as long as its machine.
uint64_t mms_with_global_asid(const sd_machine *m)
{
	sd_stats s = all_stats(m);
	return s.counter[SD_STAT_GLOBAL_ASID_ALLOC] - s.counter[SD_STAT_GLOBAL_ASID_FREE];
}

// Untimed batches before the timed ones: one, or for gbcast with more CPUs
// than its threshold as many as it takes the mm (CPU 0's) to get its
// global ASID (at most kTf2WarmupMax batches or kTf2WarmupSeconds). Until
// then every flush takes the IPI path, and only 1 in 32 of those looks at
// the threshold; with oversubscribed CPUs that takes hundreds of flushes of
// 100+ us each, a transient that would fill a good part of a 0.2 s
// measurement, where will-it-scale's seconds-long runs never see it.
constexpr unsigned kTf2WarmupMax = 16;
constexpr double kTf2WarmupSeconds = 0.5;

struct Tf2Warmup {
	unsigned batches = 0;
	sd_stats d = SD_STATS_INIT;
};

bool tf2_warmup(State &st, RunMachine &rm, Tf2Warmup *w)
{
	RunArg r;
	sd_stats before = all_stats(rm.m());
	// Only an mm active on more than `threshold` CPUs goes global, and
	// only after an IPI-path flush (another CPU in its mask): with fewer
	// CPUs than that, or one, waiting for it is pointless.
	const bool gbcast = (strategy_is(rm.m(), "gbcast") || strategy_is(rm.m(), "rar")) &&
			    sd_machine_nr_cpus(rm.m()) > std::max(1u, gbcast_threshold(rm.m()));
	const auto t0 = std::chrono::steady_clock::now();

	r.rm = &rm;
	r.count = kTf2Batch;
	do {
		int err = sd_machine_run(rm.m(), tlb_flush2_body, &r);
		if (err || r.err.load()) {
			fail(st, "tlb_flush2 warm-up", err ? err : r.err.load());
			return false;
		}
		w->batches++;
	} while (gbcast && !mms_with_global_asid(rm.m()) && w->batches < kTf2WarmupMax &&
		 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <
			 kTf2WarmupSeconds);
	w->d = delta(all_stats(rm.m()), before);
	return true;
}

// @processes: will-it-scale's processes mode, every CPU its own mm (no
// IPI, no shared mm lock or tlb_gen; the LRU lock, when global, is still
// machine-wide: what is left to contend).
void BM_tlb_flush2(State &st, const char *strategy, unsigned lru, unsigned cpus, bool processes)
{
	MachineSpec spec = spec_of(strategy);
	spec.lru = lru;
	RunMachine rm(cpus, SD_ORACLE_OFF, processes ? cpus : 1, 1, spec);
	RunArg arg;
	Tf2Warmup warm;
	sd_stats d = SD_STATS_INIT;
	RunTimes times;

	if (!rm.ok(st) || !tf2_warmup(st, rm, &warm))
		return;
	if (!run_batches(st, rm, tlb_flush2_body, kTf2Batch, "tlb_flush2 run", &d, &arg, &times))
		return;
	const double wall = times.wall_s;
	st.counters["pu_share"] = times.pu_share;
	const uint64_t flushes = d.counter[SD_STAT_FLUSH];
	const double loops = (double)st.iterations() * cpus;
	report_ipi_common(st, d);
	st.counters["loops_per_s"] = wall > 0 ? loops / wall : 0;
	st.counters["loops_per_s_per_thread"] = wall > 0 ? loops / wall / cpus : 0;
	// CPU time the CPUs' threads spent per loop (spinning on locks and
	// acks included, time off their PU or asleep not): against real time,
	// what oversubscription and sleeping hide.
	st.counters["cpu_ns_per_loop"] = loops > 0 ? (double)arg.thread_cpu_ns.load() / loops : 0;
	st.counters["flushes_per_loop"] = loops > 0 ? (double)flushes / loops : 0;
	// Per pass over a region (kTf2Pages loops): its munmap splits the
	// threads' shared VMA (two splits in its middle, one at an end) and
	// its mmap merges it back.
	const double passes = loops / kTf2Pages;
	st.counters["vma_splits_per_pass"] = ratio(d.counter[SD_STAT_VMA_SPLIT], passes);
	st.counters["vma_merges_per_pass"] = ratio(d.counter[SD_STAT_VMA_MERGE], passes);
	st.counters["remote_invalidations_per_flush"] = ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	// The machine-wide LRU lock: folios added or removed under it per
	// loop, 0 with SD_LRU_PERCPU, else 2: the write fault's page added and
	// the madvise's removed (the read maps the zero page, on no LRU).
	st.counters["lru_lock_pages_per_loop"] =
		loops > 0 ? (double)d.counter[SD_STAT_LRU_LOCK_PAGES] / loops : 0;
	st.counters["warmup_batches"] = (double)warm.batches;
	if (strategy_is(rm.m(), "rar")) {
		// rar, timed part: RAR payloads (one a flush once the mm is
		// global), signals and actions per flush, slot waits.
		st.counters["rar_payloads_per_flush"] = ratio(d.counter[SD_STAT_RAR_PAYLOAD], flushes);
		st.counters["rar_signals_per_flush"] = ratio(d.counter[SD_STAT_RAR_SENT], flushes);
		st.counters["rar_slot_waits"] = (double)d.counter[SD_STAT_RAR_SLOT_WAIT];
		st.counters["rar_new_cpu_flushes"] = (double)d.counter[SD_STAT_RAR_NEW_CPU_FLUSH];
		st.counters["fallback_ipi_flushes_per_flush"] =
			ratio(d.counter[SD_STAT_FALLBACK_IPI_FLUSH], flushes);
		st.counters["mms_global"] = (double)mms_with_global_asid(rm.m());
	}
	if (strategy_is(rm.m(), "gbcast")) {
		// gbcast, timed part: INVLPGBs and one TLBSYNC per flush once
		// the mm has its global ASID; fallback_ipi_flushes are IPI-path
		// flushes of the mm without one. The warm-up's own counts (the
		// allocation and the flushes before it) are reported apart.
		st.counters["invlpgbs_per_flush"] = ratio(d.counter[SD_STAT_INVLPGB], flushes);
		st.counters["tlbsyncs_per_flush"] = ratio(d.counter[SD_STAT_TLBSYNC], flushes);
		st.counters["fallback_ipi_flushes"] = (double)d.counter[SD_STAT_FALLBACK_IPI_FLUSH];
		st.counters["fallback_ipi_flushes_per_flush"] =
			ratio(d.counter[SD_STAT_FALLBACK_IPI_FLUSH], flushes);
		st.counters["transition_ipis"] = (double)d.counter[SD_STAT_TRANSITION_IPI];
		st.counters["global_asid_allocations"] = (double)d.counter[SD_STAT_GLOBAL_ASID_ALLOC];
		st.counters["global_asid_resets"] = (double)d.counter[SD_STAT_GLOBAL_ASID_RESET];
		st.counters["warmup_fallback_ipi_flushes"] =
			(double)warm.d.counter[SD_STAT_FALLBACK_IPI_FLUSH];
		st.counters["warmup_transition_ipis"] = (double)warm.d.counter[SD_STAT_TRANSITION_IPI];
		st.counters["warmup_global_asid_allocations"] =
			(double)warm.d.counter[SD_STAT_GLOBAL_ASID_ALLOC];
		st.counters["mms_global"] = (double)mms_with_global_asid(rm.m());
	}
	report_machine(st, rm.m());
}

// A strategy spec with the LRU setting its machine gets.
struct Tf2Config {
	const char *strategy;
	unsigned lru;
};

void reg_tlb_flush2(const char *workload, Tf2Config c, unsigned n, bool processes)
{
	reg(std::string(workload) + "/" + c.strategy + "/" + lru_name(c.lru) + cpus_tail(n),
	    [c, n, processes](State &st) { BM_tlb_flush2(st, c.strategy, c.lru, n, processes); });
}

void register_tlb_flush2(Set set)
{
	// The INVLPGB series' four-way table on a 36-core Milan (vanilla, the
	// LRU fix alone, INVLPGB alone, both) and the merged commit's scaling
	// by threads, up to 36.
	if (set == Set::patches) {
		static const Tf2Config four[] = {
			{ "ipi", SD_LRU_GLOBAL }, { "ipi", SD_LRU_PERCPU },
			{ "gbcast", SD_LRU_GLOBAL }, { "gbcast", SD_LRU_PERCPU },
		};
		for (unsigned n : { 1u, 2u, 4u, 8u, 16u, 32u, 36u })
			for (const Tf2Config &c : four)
				reg_tlb_flush2("tlb_flush2_threads", c, n, false);
		return;
	}
	if (set == Set::main) {
		// The series' four configurations, so each change is seen alone
		// (the LRU fix, INVLPGB) and together; the arm64 strategies at
		// the per-CPU LRU setting.
		static const Tf2Config main_set[] = {
			{ "ipi", SD_LRU_GLOBAL }, { "ipi", SD_LRU_PERCPU },
			{ "gbcast", SD_LRU_GLOBAL }, { "gbcast", SD_LRU_PERCPU },
			{ "broadcast", SD_LRU_PERCPU }, { "local", SD_LRU_PERCPU },
		};
		for (unsigned n : g_opt.cpus) {
			for (const Tf2Config &c : main_set)
				reg_tlb_flush2("tlb_flush2_threads", c, n, false);
			reg("tlb_flush2_threads/native" + cpus_tail(n),
			    [n](State &st) { native::BM_tlb_flush2(st, n); });
		}
		return;
	}
	// The arm64 strategies, then the series' four configurations back to
	// back, with the merged threshold and with threshold=0 (global once 2
	// CPUs run the mm: what 2 CPUs can show).
	static const Tf2Config all[] = {
		{ "broadcast", SD_LRU_PERCPU },	{ "local", SD_LRU_PERCPU },
		{ "ipi", SD_LRU_GLOBAL },	{ "ipi", SD_LRU_PERCPU },
		{ "gbcast", SD_LRU_GLOBAL },	{ "gbcast", SD_LRU_PERCPU },
		{ "gbcast:threshold=0", SD_LRU_GLOBAL }, { "gbcast:threshold=0", SD_LRU_PERCPU },
		{ "rar", SD_LRU_PERCPU }, { "rar:threshold=0", SD_LRU_PERCPU },
	};
	// The RAR, INVLPGB and IPI curves to a two-socket machine's 112 CPUs
	// (BENCHMARKS.md: each on the profile of a machine that has it; a
	// strategy its profile lacks is refused, its row n/a).
	static const Tf2Config curve[] = {
		{ "ipi", SD_LRU_PERCPU }, { "gbcast", SD_LRU_PERCPU }, { "rar", SD_LRU_PERCPU },
	};
	for (unsigned n : { 16u, 32u, 36u, 64u, 112u })
		for (const Tf2Config &c : curve)
			reg_tlb_flush2("tlb_flush2_threads", c, n, false);
	// The EuroSys 2020 switches on ipi (order=serial: before 5.13; ack=early:
	// never merged; lines=split: the kernel's layout, against the paper's
	// consolidated line, ipi's default), beside ipi's default.
	static const Tf2Config eurosys[] = {
		{ "ipi:order=serial", SD_LRU_PERCPU }, { "ipi:ack=early", SD_LRU_PERCPU },
		{ "ipi:lines=split", SD_LRU_PERCPU },
	};
	for (unsigned n : { 2u, 4u, 8u, 16u, 32u, 36u })
		for (const Tf2Config &c : eurosys)
			reg_tlb_flush2("tlb_flush2_threads", c, n, false);
	// RISC-V's two remote fences (Samuel Holland's rule picks one from the
	// board's IPI device): on a 4-hart board's profile, 2 and 4 CPUs.
	static const Tf2Config riscv[] = {
		{ "riscv:rfence=sbi", SD_LRU_PERCPU }, { "riscv:rfence=ipi", SD_LRU_PERCPU },
	};
	for (unsigned n : { 2u, 4u })
		for (const Tf2Config &c : riscv)
			reg_tlb_flush2("tlb_flush2_threads", c, n, false);
	// Processes mode: the global LRU lock alone, the mm shared by nobody.
	static const Tf2Config processes[] = { { "ipi", SD_LRU_GLOBAL }, { "ipi", SD_LRU_PERCPU } };
	for (unsigned n : { 1u, 2u, 4u, 8u }) {
		for (const Tf2Config &c : all)
			reg_tlb_flush2("tlb_flush2_threads", c, n, false);
		reg("tlb_flush2_threads/native" + cpus_tail(n),
		    [n](State &st) { native::BM_tlb_flush2(st, n); });
		for (const Tf2Config &c : processes)
			reg_tlb_flush2("tlb_flush2_processes", c, n, true);
	}
}

} // namespace

SD_BENCH_FAMILY(tlb_flush2, 120, register_tlb_flush2);

} // namespace sdbench
