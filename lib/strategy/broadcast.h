/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_BROADCAST_H
#define SD_STRATEGY_BROADCAST_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/broadcast.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../arch/arm64_asid.h"
#include "../core/spinlock.h"
#include "../hw/tlb.h"
#include "../time/resource.h"
#include "../arch/tlbi_range.h"

struct sd_cpu;
struct sd_mm;
struct sd_machine;

/* arm64 MAX_TLBI_OPS (PTRS_PER_PTE for 4 KiB pages): from this many pages on,
 * one ASID flush replaces per-page operations. */
#define SD_MAX_TLBI_OPS 512

/* Machine-wide state of the broadcast strategy (and of those built on it). */
struct sd_broadcast {
	struct sd_arm64_asid asid;
	/* The interconnect: one broadcast message in flight at a time, as DVM
	 * messages serialise, so concurrent initiators really contend. */
	sd_cacheline_aligned struct sd_spinlock dvm;
	/* How ranges are encoded: range=none|ascending|descending, lpa2=0|1,
	 * max_tlbi_ops=N. */
	struct sd_tlbi_split_cfg split;
	/* The kernel runs with KPTI (the profile's features): every user
	 * TLBI is issued twice, __tlbi_user(). Read-only after creation. */
	bool kpti;
	/* ARM64_WORKAROUND_REPEAT_TLBI (the profile's repeat_tlbi): every
	 * TLBI is followed by DSB ISH and issued again. Read-only. */
	bool repeat_tlbi;
	/* How a flush chooses between ...IS and local TLBIs: select=always
	 * (broadcast every time), active_cpu (active_cpu.c) with reset=0|1
	 * (v2's reset at a fresh ASID), tlb_mode or ipi (tlb_mode.c) with
	 * ipi_max=, tlb_local=, tlb_none= (-1: not given, the select's
	 * default). */
	unsigned select;
	int active_cpu_reset;
	int tm_ipi_max, tm_local, tm_none;
	/* wp_reuse=local (Linux 6.19, the default) or tlbi (before): the
	 * flush of a page a write fault reused in place. */
	bool wp_reuse_tlbi;
	/* batch=1 (Linux 6.5, the default): reclaim's TLBIs go out at once,
	 * one DSB for the batch; batch=0: each page flushed on its own. */
	bool batch;
	struct sd_tlb_mode *tm;        /* select=tlb_mode|ipi: its state */
};

enum { SD_SELECT_ALWAYS, SD_SELECT_ACTIVE_CPU, SD_SELECT_TLB_MODE, SD_SELECT_IPI };

/* mm_context_t::active_cpu's sentinels; any other value is a CPU's id. */
#define SD_ACTIVE_CPU_NONE ((uintptr_t)-1)
#define SD_ACTIVE_CPU_MULTIPLE ((uintptr_t)-2)

/* Per-mm state: the arm64 context id (generation | ASID), and for
 * select=active_cpu the CPUs it ran on (SD_ACTIVE_CPU_*) with its line. */
struct sd_broadcast_mm {
	sd_cacheline_aligned SD_ATOMIC(uint64_t) ctx_id;
	SD_ATOMIC(uintptr_t) active_cpu;
	/* select=tlb_mode|ipi: the CPUs that may hold its entries (no bits
	 * otherwise: nbits 0). */
	struct sd_cpumask cpus;
	/* The line of active_cpu, or of the cpus mask, in modelled time. */
	struct sd_model_line active_cpu_line;
};

struct sd_opt;

/*
 * Building blocks for the strategies built on broadcast (local, none, user).
 * Each embeds struct sd_broadcast in its machine state and struct
 * sd_broadcast_mm in its per-mm state, and points m->strategy and
 * mm->strategy at those members (mm/flush_ops.h), so these functions, which
 * read them as broadcast's own, serve every one of them.
 */
int sd_broadcast_machine_init(struct sd_machine *m, struct sd_broadcast *b);
/* Allocate and init, taking broadcast's options (max_tlbi_ops=); errors name @name. */
int sd_broadcast_machine_create(struct sd_machine *m, const char *name,
				const struct sd_opt *opts, unsigned nr_opts, void **priv);
void sd_broadcast_machine_fini(struct sd_machine *m, void *priv);
/* state_bytes of sd_broadcast_machine_create()'s machine (broadcast, none). */
size_t sd_broadcast_state_bytes(const struct sd_machine *m, const void *priv);
/* Apply one of broadcast's options (range=, lpa2=, max_tlbi_ops=) to @b. */
int sd_broadcast_option(struct sd_broadcast *b, const char *name, const struct sd_opt *o);
/* After the options: range TLBIs asked for on a profile whose CPU has none
 * are -EOPNOTSUPP, unless the machine allows what-ifs. */
int sd_broadcast_check_range(struct sd_machine *m, const struct sd_broadcast *b,
			     const char *name);
int sd_broadcast_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv);
void sd_broadcast_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv);
void sd_broadcast_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next);
/* check_and_switch_context() for a non-NULL @next; @sw says what it did. */
void sd_broadcast_switch_context(struct sd_cpu *cpu, struct sd_mm *next,
				 struct sd_arm64_switch *sw);
/* TLBI ... IS: one message, applied to every CPU's TLB. */
void sd_broadcast_tlbi(struct sd_cpu *cpu, const struct sd_tlb_inval *op);
/*
 * Flush [vpn, vpn + nr) of @mm (nr == 0: the whole ASID) as the configured
 * sequence of TLBI ops: broadcast ones, or with @local_only the
 * non-shareable ones that reach the initiator's TLB alone.
 */
void sd_broadcast_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool freed_tables, bool local_only);
/* The same broadcast ops without the closing DSB (__flush_tlb_page_nosync()):
 * the caller's own later dsb(ish) completes them. False if the mm never ran
 * (nothing was issued). */
bool sd_broadcast_flush_nosync(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr);
/* A new mm's context: no ASID, active_cpu NONE. */
void sd_broadcast_mm_ctx_init(struct sd_broadcast_mm *bm);
/* select=active_cpu (active_cpu.c): check_and_switch_context()'s update
 * of active_cpu, and flush_tlb_user_pre()'s choice (true: local TLBIs). */
void sd_active_cpu_init(struct sd_broadcast_mm *bm);
void sd_active_cpu_reset(struct sd_broadcast_mm *bm, bool fresh);
void sd_active_cpu_switch(struct sd_cpu *cpu, struct sd_broadcast_mm *bm,
			  const struct sd_arm64_switch *sw);
bool sd_active_cpu_local(struct sd_cpu *cpu, struct sd_broadcast_mm *bm);
/* select=tlb_mode|ipi (tlb_mode.c): its state from the options, freed by
 * destroy; the switch's mask update before TTBR0 (it loads sw->asid); a
 * flush by the mode the mask's weight chooses. */
struct sd_tlb_mode;
int sd_tlb_mode_create(struct sd_machine *m, struct sd_broadcast *b);
void sd_tlb_mode_destroy(struct sd_broadcast *b);
size_t sd_tlb_mode_bytes(const struct sd_machine *m, const struct sd_broadcast *b);
void sd_tlb_mode_reset(struct sd_broadcast_mm *bm, bool fresh);
void sd_tlb_mode_switch(struct sd_cpu *cpu, struct sd_broadcast_mm *bm,
			const struct sd_arm64_switch *sw);
void sd_tlb_mode_flush(struct sd_cpu *cpu, struct sd_broadcast *b, struct sd_mm *mm,
		       struct sd_broadcast_mm *bm, uint64_t vpn, uint64_t nr, bool freed_tables);
/* Test only: planted bugs (test/strategy/test_active_cpu.cpp, and the
 * switcher's barrier in test_tlb_mode.cpp). */
enum {
	SD_ACTIVE_CPU_BREAK_NO_DSB = 1u << 0,          /* the switcher's dsb(ishst) removed */
	SD_ACTIVE_CPU_BREAK_RESET_RESERVED = 1u << 1,  /* reset at any new_context() */
	SD_ACTIVE_CPU_BREAK_RESET_LATE = 1u << 2,      /* reset after the new id is public */
};
extern SD_ATOMIC(unsigned) sd_active_cpu_test_break;
/* The ASID @mm runs with now; 0 if it never ran (nothing to flush). */
bool sd_broadcast_mm_asid(struct sd_cpu *cpu, struct sd_mm *mm, uint16_t *asid);

#endif
