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
 *
 * **Which clock the flush latencies use.** A flush's latency (one sample of
 * the histogram, flush_ns_hist, and of flush_ns_total) is the initiating
 * CPU's clock at the flush's end minus the same clock at its start, as the
 * kernel's tlb_flush tracepoints would time it on the initiator: the
 * strategy's whole flush, its waits for acknowledgements or locks and any
 * IPI the initiator handled meanwhile included; the system call around it
 * excluded. On a machine that models time (a profile: model.h) that clock
 * is the CPU's modelled clock, so the latency is modelled ns on the
 * profile's machine and no host time enters it (a host delay inside the
 * flush adds nothing); otherwise it is the host's CLOCK_MONOTONIC, real ns
 * on this host. One machine uses one clock for all its samples, so every
 * snapshot, delta, quantile and print of it speaks one unit. Flushes sent
 * with sd_flush_tlb_range() are counted but not timed.
 */
#ifndef SHOOTDOWN_STATS_H
#define SHOOTDOWN_STATS_H

#include <stddef.h>
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
 *  sd_stat and into the names sd_stat_name() returns. A new counter goes at
 *  the END of the list: its id and its slot in struct sd_stats must not
 *  move what callers compiled against an older list see (struct sd_stats). */
#define SD_STAT_LIST(X)                                                          \
	X(TLB_HIT, "tlb_hits")                  /* lookups served by the TLB (L1 + L2) */ \
	X(TLB_L1_HIT, "tlb_l1_hits")                                            \
	X(TLB_L2_HIT, "tlb_l2_hits")                                            \
	X(TLB_MISS, "tlb_misses")                                               \
	X(PAGE_WALK, "page_walks")              /* lockless table walks */      \
	X(WALK_CACHE_HIT, "walk_cache_hits")    /* walks that skipped levels */ \
	X(TLB_FILL, "tlb_fills")                                                \
	X(TLB_FILL_RACED, "tlb_fills_raced")    /* fills dropped: invalidated meanwhile */ \
	X(PAGE_FAULT, "page_faults")            /* populations and copy-on-write breaks */ \
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
	X(VIOLATION, "violations")              /* oracle: stale or foreign hits */ \
	X(LRU_LOCK_PAGES, "lru_lock_pages")     /* folios added to or taken off the LRU under its lock */ \
	X(LOCK_WAIT, "lock_waits")              /* contended DVM, LRU, global ASID locks */ \
	X(TRACE_DROPPED, "trace_records_dropped") /* trace ring full (guide: Tracing) */ \
	X(MODEL_NS, "model_ns")                 /* modelled time: the CPU's clock, ns (model.h) */ \
	X(MODEL_WINDOW_WAITS, "model_window_waits") /* modelled time: waits a window ahead */ \
	X(ZERO_PAGE_FAULT, "zero_page_faults")  /* read faults that mapped the zero page */ \
	X(WP_FAULT, "wp_faults")                /* copy-on-write breaks (do_wp_page) */ \
	X(TASK_SWITCH, "task_switches")         /* task.h: switches between tasks or idle */ \
	X(TASK_WAKEUP, "task_wakeups")          /* task.h: try_to_wake_up() that queued a task */ \
	X(WAKEUP_IPI, "wakeup_ipis")            /* task.h: reschedule IPIs sent to idle CPUs */ \
	X(TASK_MIGRATE, "task_migrations")      /* task.h: queued tasks moved to another CPU */ \
	X(TASK_FORK, "task_forks")              /* task.h: sd_task_fork() */ \
	X(TASK_EXEC, "task_execs")              /* task.h: sd_task_exec() */ \
	X(TASK_EXIT, "task_exits")              /* task.h: task bodies that returned */ \
	X(VMA_SPLIT, "vma_splits")              /* mm.h: VMAs split (__split_vma) */ \
	X(VMA_MERGE, "vma_merges")              /* mm.h: VMAs merged into a neighbour (vma_merge) */ \
	X(LOCK_STUCK, "lock_stuck_reports")     /* shared.h: an sd_lock wait reported stuck */ \
	/* events.h: the program's own counters, named by sd_user_event_register() */ \
	X(USER_0, "user_0") X(USER_1, "user_1") X(USER_2, "user_2") X(USER_3, "user_3") \
	X(USER_4, "user_4") X(USER_5, "user_5") X(USER_6, "user_6") X(USER_7, "user_7") \
	X(USER_8, "user_8") X(USER_9, "user_9") X(USER_10, "user_10") X(USER_11, "user_11") \
	X(USER_12, "user_12") X(USER_13, "user_13") X(USER_14, "user_14") X(USER_15, "user_15") \
	/* handshake.h: a runtime's handshakes */ \
	X(HANDSHAKE, "handshakes")              /* handshakes run to the end */ \
	X(HANDSHAKE_ACK, "handshake_acks")      /* targets that ran the function */ \
	X(HANDSHAKE_ON_BEHALF, "handshakes_on_behalf") /* targets in a safe state, done for them */ \
	X(HANDSHAKE_REFUSED, "handshake_refusals") /* signal: not at a safe point */ \
	X(HANDSHAKE_RESENT, "handshake_resends") /* signal: sent again */ \
	X(HANDSHAKE_UNREACHED, "handshake_targets_unreached") /* the check: no barrier, no run */ \
	/* rseq.h: restartable sequences */ \
	X(RSEQ_COMMIT, "rseq_commits")          /* sections that committed */ \
	X(RSEQ_ABORT, "rseq_aborts")            /* sections aborted: preempted, signalled, fenced */ \
	X(SPURIOUS_FAULT, "spurious_faults")    /* faults on a PTE that allowed the access: a stale entry */ \
	X(RAR_PAYLOAD, "rar_payloads")          /* rar: payload slots filled (two a flush under PTI) */ \
	X(RAR_SENT, "rar_signals_sent")         /* rar: CPUs signalled (one per target and payload) */ \
	X(RAR_DONE, "rar_actions_done")         /* rar: action entries this CPU's microcode completed */ \
	X(RAR_SLOT_WAIT, "rar_slot_waits")      /* rar: initiators that found the payload table full */ \
	X(RAR_NEW_CPU_FLUSH, "rar_new_cpu_flushes") /* rar: switches flushing a global ASID (new_cpu) */ \
	X(RAR_IRQS_OFF, "rar_irqs_off_services") /* rar: services run while interrupts were off */ \
	X(DSB, "dsbs")                          /* arm64: DSBs that completed TLBIs */ \
	X(SBI_ECALL, "sbi_rfence_calls")        /* riscv: SBI remote-fence calls made */ \
	X(SBI_SENT, "sbi_rfence_targets")       /* riscv: other harts an SBI remote fence reached */ \
	X(SBI_IRQS_OFF, "sbi_irqs_off_services") /* riscv: fences serviced in M-mode while S-mode interrupts were off */ \
	X(SBI_RANGE_WIDENED, "sbi_ranges_widened") /* riscv: ranges the firmware flushed as the whole ASID */ \
	X(FAULT_AROUND, "fault_around_pages")   /* cached neighbours a file read fault mapped (do_fault_around()) */

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

/**
 * struct sd_stats - a snapshot: counters summed over the CPUs it covers.
 *
 * Start from SD_STATS_INIT: @size records which version of the struct the
 * caller compiled against (like struct sd_machine_config's). Every function
 * that takes a struct sd_stats reads and writes at most @size bytes of it:
 * a caller built against an older release, which knew fewer counters, gets
 * exactly the prefix it knows, and the library never writes past it. That
 * works because the counters come last and new ones are only ever appended
 * (SD_STAT_LIST). A known size is SD_STATS_SIZE(n) for 0 <= n <= SD_STAT_NR;
 * 0, anything larger than sizeof(struct sd_stats) or between two known sizes
 * is -EINVAL with the detail in sd_last_error(). A struct a function filled
 * keeps the caller's @size, so snapshots pass on to sd_stats_delta() and
 * sd_stats_print() as they are.
 */
struct sd_stats {
	/** sizeof(struct sd_stats) as the caller compiled it (SD_STATS_INIT). */
	size_t size;
	/** CPUs summed */
	unsigned nr_cpus;
	/** sum of flush latencies in ns (for the mean): modelled ns on a
	 *  modelled machine, host ns otherwise (the file comment says how a
	 *  flush is timed) */
	uint64_t flush_ns_total;
	/** flush latency seen by the initiator, log2 ns buckets, in the same
	 *  clock as flush_ns_total */
	uint64_t flush_ns_hist[SD_STAT_HIST_BUCKETS];
	/** Event counts, indexed by enum sd_stat. Last, so that new counters
	 *  extend the struct without moving anything an old caller reads. */
	uint64_t counter[SD_STAT_NR];
};

/** Size of a struct sd_stats that knows the first @nr_counters counters: what
 *  sizeof(struct sd_stats) was in a release that had that many. */
#define SD_STATS_SIZE(nr_counters) \
	(offsetof(struct sd_stats, counter) + (size_t)(nr_counters) * sizeof(uint64_t))

/** Initialiser for struct sd_stats: @size set to this version's, all else 0. */
#define SD_STATS_INIT { sizeof(struct sd_stats), 0, 0, { 0 }, { 0 } }

/**
 * sd_stat_name() - printed name of counter @id, or NULL if out of range. A
 * program's own counter (SD_STAT_USER_0 + k, events.h) has the name it was
 * registered with, and "user_<k>" until then. Any thread. Never waits for
 * another CPU: may be called with interrupts off.
 */
SD_EXPORT const char *sd_stat_name(enum sd_stat id);

/**
 * sd_stats_snapshot() - sum every CPU's counters into @out, whose @size the
 * caller set (SD_STATS_INIT); at most that many bytes are written. The flush
 * latencies are modelled ns on a modelled machine, host ns otherwise.
 * Return: 0; -EINVAL for NULL arguments or an unknown @out->size (nothing
 * written). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_stats_snapshot(const struct sd_machine *m, struct sd_stats *out);

/**
 * sd_stats_cpu() - counters of CPU @cpu alone, into at most @out->size bytes
 * of @out (the caller sets @size, as for sd_stats_snapshot()). The flush
 * latencies are those of the flushes @cpu initiated, in @m's clock (modelled
 * ns on a modelled machine, host ns otherwise).
 * Return: 0; -EINVAL for NULL arguments, @cpu out of range or an unknown
 * @out->size (nothing written). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_stats_cpu(const struct sd_machine *m, unsigned cpu, struct sd_stats *out);

/**
 * sd_stats_delta() - @out = @after - @before, counter by counter, into at
 * most @out->size bytes of @out; a counter that @after or @before is too
 * small to hold counts as 0 there. The flush latencies keep the clock of
 * the snapshots' machine (modelled ns if it models time, else host ns);
 * subtracting snapshots of two machines with different clocks means
 * nothing. A NULL argument or an unknown size in any
 * of the three: nothing done, detail in sd_last_error(). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT void sd_stats_delta(const struct sd_stats *after, const struct sd_stats *before,
			      struct sd_stats *out);

/**
 * sd_stats_flush_ns_quantile() - a flush-latency quantile (0 <= @q <= 1) from
 * the histogram, as the upper bound of its bucket in ns: modelled ns if @s
 * came from a machine that models time, host ns otherwise; 0 if no flushes,
 * @s is NULL or has an unknown size, or @q is outside [0, 1] (NaN included).
 * Never waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT uint64_t sd_stats_flush_ns_quantile(const struct sd_stats *s, double q);

/**
 * sd_stats_print() - print non-zero counters and the histogram, one per line,
 * of the counters @s->size holds (a NULL argument or an unknown size: nothing
 * printed, detail in sd_last_error()). flush_ns_mean and the flush_ns
 * buckets are in the snapshot's clock: modelled ns on a modelled machine,
 * host ns otherwise.
 * Never waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT void sd_stats_print(const struct sd_stats *s, FILE *f);

/**
 * sd_stats_json() - print @s as one JSON object (the counters @s->size holds,
 * histogram); a NULL argument or an unknown size: nothing printed, detail in
 * sd_last_error(). flush_ns_total and flush_ns_hist are in the snapshot's
 * clock (modelled ns on a modelled machine, host ns otherwise).
 * Never waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT void sd_stats_json(const struct sd_stats *s, FILE *f);

/** @} */

SD_END_DECLS

#endif
