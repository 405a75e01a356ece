/* SPDX-License-Identifier: MIT */
/**
 * @file stats.h
 * @brief Per-CPU event counters and the flush-latency histogram.
 * @ingroup stats
 *
 * Each CPU counts its own events in its own cache lines with plain
 * (relaxed, non-RMW) stores: no shared atomics on any hot path. A snapshot
 * reads every CPU's counters and sums them; it may run concurrently with the
 * CPUs and is then a consistent-enough sample, exact once they are quiet.
 * Names follow the kernel's vm events where one exists.
 */
#ifndef SHOOTDOWN_STATS_H
#define SHOOTDOWN_STATS_H

#include <stdint.h>
#include <stdio.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup stats Counters
 * Per-CPU event counters and the flush-latency histogram.
 * @{
 */

/** X(enum suffix, printed name): one line per counter, expanded into enum
 *  sd_stat and into the names sd_stat_name() returns. */
#define SD_STAT_LIST(X)                                                          \
	X(TLB_HIT, "tlb_hits")                  /* lookups served by the TLB (L1 + L2) */ \
	X(TLB_L1_HIT, "tlb_l1_hits")                                            \
	X(TLB_L2_HIT, "tlb_l2_hits")                                            \
	X(TLB_MISS, "tlb_misses")                                               \
	X(PAGE_WALK, "page_walks")              /* lockless table walks */      \
	X(WALK_CACHE_HIT, "walk_cache_hits")    /* walks that skipped levels */ \
	X(TLB_FILL, "tlb_fills")                                                \
	X(TLB_FILL_RACED, "tlb_fills_raced")    /* fills dropped: invalidated meanwhile */ \
	X(PAGE_FAULT, "page_faults")            /* first-touch populations */   \
	X(FLUSH, "flushes")                     /* strategy flushes initiated */\
	X(LOCAL_FLUSH_ALL, "nr_tlb_local_flush_all")                            \
	X(LOCAL_FLUSH_ASID, "nr_tlb_local_flush_asid")                          \
	X(LOCAL_FLUSH_ONE, "nr_tlb_local_flush_one")                            \
	X(LOCAL_FLUSH_RANGE, "nr_tlb_local_flush_range")                        \
	X(REMOTE_FLUSH, "nr_tlb_remote_flush")  /* flushes that reached other CPUs */ \
	X(REMOTE_INVAL, "remote_invalidations") /* target TLB ops done for others */ \
	X(REMOTE_INVAL_RECV, "nr_tlb_remote_flush_received") /* IPI flushes run */ \
	X(TLB_INVALS, "tlb_invalidations")      /* invalidations that reached this TLB */ \
	X(TLBI_OP, "tlbi_ops")                  /* broadcast messages issued */ \
	X(TLBI_ASID_OP, "tlbi_asid_ops")        /* ...of them whole-ASID */     \
	X(TLBI_PAGE_OP, "tlbi_page_ops")        /* single-page ops, any scope */ \
	X(TLBI_RANGE_S0, "tlbi_range_ops_scale0") /* range ops by scale */      \
	X(TLBI_RANGE_S1, "tlbi_range_ops_scale1")                               \
	X(TLBI_RANGE_S2, "tlbi_range_ops_scale2")                               \
	X(TLBI_RANGE_S3, "tlbi_range_ops_scale3")                               \
	X(LOCAL_ONLY_FLUSH, "local_only_flushes") /* `local`: LOCAL decisions */ \
	X(FLUSH_SKIPPED, "flushes_skipped")     /* `local`: NO decisions */      \
	X(STALE_SWITCH_FLUSH, "stale_switch_flushes") /* deferred to switch-in */ \
	X(IPI_SENT, "ipis_sent")                                                \
	X(IPI_RECV, "ipis_received")                                            \
	X(IPI_DEFERRED, "ipis_deferred")        /* arrived with interrupts off */ \
	X(IPI_UNNEEDED, "ipis_unneeded")        /* x86: mm not loaded (REMOTE_WRONG_CPU) */ \
	X(IPI_RESENT, "ipis_resent")            /* watchdog: signal sent again */ \
	X(IPI_STUCK, "ipi_stuck_reports")       /* watchdog: stuck target reported */ \
	X(IPI_TARGET_GONE, "ipi_targets_gone")  /* target thread exited while attached */ \
	X(CPUMASK_WRITE, "cpumask_writes")      /* x86: atomic RMWs on an mm_cpumask */ \
	X(FLUSH_FULL, "tlb_flushes_full")       /* x86: flush_tlb_func, whole PCID */ \
	X(FLUSH_PARTIAL, "tlb_flushes_partial") /* x86: flush_tlb_func, per page */ \
	X(FLUSH_GEN_SKIP, "flushes_skipped_gen") /* x86: already at that tlb_gen */ \
	X(LAZY_SKIP, "lazy_cpus_skipped")       /* x86: lazy targets not IPI'd */ \
	X(CPUMASK_TRIM, "cpumask_trims")        /* x86: flushes that trimmed */ \
	X(SWITCH_FLUSH, "switch_flushes")       /* x86: flushes at switch-in */ \
	X(INVLPGB, "invlpgb_ops")               /* gbcast: broadcasts issued */ \
	X(TLBSYNC, "tlbsyncs")                  /* gbcast: TLBSYNCs */ \
	X(GLOBAL_ASID_ALLOC, "global_asid_allocations") \
	X(GLOBAL_ASID_FREE, "global_asid_frees")    \
	X(GLOBAL_ASID_RESET, "global_asid_resets")  /* wrap-around flushes */ \
	X(TRANSITION_IPI, "transition_ipis")    /* gbcast: IPI flushes for stragglers */ \
	X(FALLBACK_IPI_FLUSH, "fallback_ipi_flushes") /* gbcast: mm without a global ASID */ \
	X(ASID_ALLOC, "asid_allocations")                                       \
	X(ASID_ROLLOVER, "asid_rollovers")                                      \
	X(CTX_SWITCH, "context_switches")                                       \
	X(TRAP, "traps")                        /* sd_trap() calls */           \
	X(TRAP_UNDEF, "traps_undefined")        /* no hook matched (SIGILL) */  \
	X(VIOLATION, "violations")              /* oracle: stale or foreign hits */

/** Counter ids. */
enum sd_stat {
/** @cond */
#define SD_STAT_ENUM(id, name) SD_STAT_##id,
	SD_STAT_LIST(SD_STAT_ENUM)
#undef SD_STAT_ENUM
/** @endcond */
	SD_STAT_NR
};

/** Buckets of the flush-latency histogram: bucket i counts [2^i, 2^(i+1)) ns. */
#define SD_STAT_HIST_BUCKETS 40

/** A snapshot: counters summed over the CPUs it covers. */
struct sd_stats {
	/** Event counts, indexed by enum sd_stat. */
	uint64_t counter[SD_STAT_NR];
	/** flush latency seen by the initiator, log2 ns buckets */
	uint64_t flush_ns_hist[SD_STAT_HIST_BUCKETS];
	/** sum of flush latencies in ns (for the mean) */
	uint64_t flush_ns_total;
	/** CPUs summed */
	unsigned nr_cpus;
};

/**
 * sd_stat_name() - printed name of counter @id, or NULL if out of range. Any
 * thread. Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT const char *sd_stat_name(enum sd_stat id);

/**
 * sd_stats_snapshot() - sum every CPU's counters into @out.
 * Return: 0; -EINVAL for NULL arguments. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_stats_snapshot(const struct sd_machine *m, struct sd_stats *out);

/**
 * sd_stats_cpu() - counters of CPU @cpu alone.
 * Return: 0; -EINVAL for NULL arguments or @cpu out of range. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_stats_cpu(const struct sd_machine *m, unsigned cpu, struct sd_stats *out);

/**
 * sd_stats_delta() - @out = @after - @before, counter by counter (a NULL
 * argument: nothing done, detail in sd_last_error()). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT void sd_stats_delta(const struct sd_stats *after, const struct sd_stats *before,
			      struct sd_stats *out);

/**
 * sd_stats_flush_ns_quantile() - a flush-latency quantile (0 <= @q <= 1) from
 * the histogram, as the upper bound of its bucket in ns; 0 if no flushes,
 * @s is NULL or @q is outside [0, 1] (NaN included).
 * Never waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT uint64_t sd_stats_flush_ns_quantile(const struct sd_stats *s, double q);

/**
 * sd_stats_print() - print non-zero counters and the histogram, one per line
 * (a NULL argument: nothing printed, detail in sd_last_error()).
 * Never waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT void sd_stats_print(const struct sd_stats *s, FILE *f);

/**
 * sd_stats_json() - print @s as one JSON object (all counters, histogram);
 * a NULL argument: nothing printed, detail in sd_last_error().
 * Never waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT void sd_stats_json(const struct sd_stats *s, FILE *f);

/** @} */

SD_END_DECLS

#endif
