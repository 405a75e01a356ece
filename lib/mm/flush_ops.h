/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_FLUSH_OPS_H
#define SD_MM_FLUSH_OPS_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/flush_ops.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/options.h"

struct sd_machine;
struct sd_cpu;
struct sd_mm;
struct sd_cpumask;
struct sd_strategy;

/* One flush request from the mm layer: [vpn, vpn + nr) of @mm changed. */
struct sd_flush_req {
	struct sd_mm *mm;
	uint64_t vpn;
	uint64_t nr;
	bool freed_tables;     /* page-table pages were unlinked: not leaf-only */
};

/*
 * The ops table behind every strategy: the only way the mm layer (and the
 * machine) reaches a strategy. The mm layer declares it and the strategies
 * fill it, as the kernel's generic mm code calls flush_tlb_mm_range() and
 * switch_mm_irqs_off() without knowing which architecture answers.
 *
 * State: machine_init sets *priv, which the machine keeps as m->strategy;
 * mm_init sets *mm_priv, kept as mm->strategy. A strategy built on another
 * embeds the other's state struct and hands out a pointer to that member,
 * so the base's functions read m->strategy as their own type; the derived
 * strategy gets back to its own struct with caa_container_of().
 *
 * flush_range and flush_mm run on the initiating CPU with interrupts on and
 * return only when invariant 1 holds for the range. switch_mm runs with
 * interrupts off and must leave cpu->asid set for @next. enter_lazy runs
 * with interrupts off when the CPU goes idle keeping @mm loaded.
 */
/* A batch_add that names no page: sd_tlbbatch_add(), the whole mm. */
#define SD_BATCH_NO_VPN UINT64_MAX

struct sd_strategy_ops {
	const char *name;
	const char *summary;
	/* The user's registration, for a user strategy's ops; NULL for a
	 * built-in one. */
	const struct sd_strategy *user;
	/* enum sd_mechanism (model.h): the mechanisms the strategy needs from
	 * a profile's machine, and of them the one that sets it apart, by
	 * which sd_machine_mechanisms() judges whether a run used it. */
	unsigned mechanisms;
	unsigned primary_mechanism;
	/* Why a run may not have used it, for sd_machine_mechanisms()'s note
	 * (NULL: no reason to give). */
	const char *unused_why;
	int (*machine_init)(struct sd_machine *m, const struct sd_opt *opts, unsigned nr_opts,
			    void **priv);
	void (*machine_fini)(struct sd_machine *m, void *priv);
	int (*mm_init)(struct sd_machine *m, struct sd_mm *mm, void **mm_priv);
	void (*mm_fini)(struct sd_machine *m, struct sd_mm *mm, void *mm_priv);
	void (*flush_range)(struct sd_cpu *cpu, const struct sd_flush_req *req);
	void (*flush_mm)(struct sd_cpu *cpu, struct sd_mm *mm);
	void (*switch_mm)(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next);
	void (*enter_lazy)(struct sd_cpu *cpu, struct sd_mm *mm);
	/*
	 * Optional, both arm64's. wp_reuse_flush: __ptep_set_access_flags()'s
	 * flush of @vpn when a write fault reuses a write-protected page in
	 * place (wp_page_reuse(): the PTE made writable, the same frame), which
	 * is flush_tlb_page() (TLBI IS) before Linux 6.19 and
	 * local_flush_tlb_page() since (Huang Ying, "arm64, tlbflush: don't
	 * TLBI broadcast if page reused in write fault"). spurious_fixup:
	 * flush_tlb_fix_spurious_fault(), the local invalidate of @vpn by a CPU
	 * whose stale read-only entry faulted on a page now writable. NULL
	 * for both (x86): no flush at the reuse, and the faulting entry is
	 * evicted by the fault itself, the hardware walking again.
	 */
	void (*wp_reuse_flush)(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn);
	void (*spurious_fixup)(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn);
	/*
	 * Optional batched flushes (arch_tlbbatch_*). batch_add notes a
	 * deferred flush of @mm's page @vpn (SD_BATCH_NO_VPN: the add names no
	 * page, the whole mm) in the batch's @cpus; batch_flush then runs one
	 * flush for everything noted and returns only when invariant 1 holds
	 * for all of it. Without them, a batch flushes each noted mm with
	 * flush_mm.
	 */
	void (*batch_add)(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm,
			  uint64_t vpn);
	void (*batch_flush)(struct sd_cpu *cpu, struct sd_cpumask *cpus);
	/*
	 * Optional: @cpu's thread is about to leave it (sd_cpu_detach(), on
	 * that thread, interrupts on, after the switch to no mm). Finish
	 * whatever the thread started as this CPU and that no other CPU can
	 * finish: gbcast's TLBSYNC of its own INVLPGBs (the kernel syncs
	 * before migrate_enable()).
	 */
	void (*cpu_detach)(struct sd_cpu *cpu);
	/*
	 * Optional: the bytes machine_init allocated (machine-wide state and
	 * per-CPU arrays, not per-mm state), for sd_machine_info()'s
	 * bytes_per_cpu. NULL counts nothing. Any thread.
	 */
	size_t (*state_bytes)(const struct sd_machine *m, const void *priv);
};

#endif
