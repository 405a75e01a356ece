/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_IPI_H
#define SD_STRATEGY_IPI_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/ipi.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/cpumask.h"
#include "../core/options.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "../mm/mm.h"

struct sd_machine;
struct sd_mm;

/* TLB_NR_DYN_ASIDS: PCID slots 0..5 per CPU; a slot's TLB tag is slot + 1
 * (tag 0 is init_mm, which owns no user translations). */
#define SD_IPI_NR_DYN_ASIDS 6
/* tlb_single_page_flush_ceiling: more pages than this is a full flush. */
#define SD_IPI_FLUSH_CEILING 33
/* LOADED_MM_SWITCHING: loaded_mm while CR3 and the cpumask are changing. */
#define SD_IPI_LOADED_SWITCHING ((uintptr_t)1)
/* TLB_GENERATION_INVALID: a batch flush names no generation. */
#define SD_IPI_GEN_INVALID 0
/*
 * Call-single requests one initiator has in flight (csd_window=N). The
 * kernel's cfd_data holds one csd per (initiator, target) pair: n * n. Here
 * each initiator has a ring of this many, and a flush to more targets reuses
 * the oldest request once its target answered: memory is linear in the CPU
 * count, and up to 64 targets a flush is exactly the kernel's (all IPIs out
 * before the first wait).
 */
#define SD_IPI_CSD_WINDOW 64
#define SD_IPI_CSD_WINDOW_MAX 4096

enum sd_ipi_cpumask_mode {
	SD_IPI_CPUMASK_EAGER,   /* clear at switch-out, set at switch-in */
	SD_IPI_CPUMASK_LAZY,    /* the lazy mm_cpumask patch: set if unset, cleared by IPIs */
};

/* Test-only planted bugs, to see the race tests fail (sd_ipi_test_break). */
enum {
	SD_IPI_BREAK_SWITCHING_RULE = 1 << 0, /* CVE-2025-37964: skip SWITCHING CPUs */
	SD_IPI_BREAK_SWITCH_FENCE = 1 << 1,   /* CVE-2025-40174: no smp_mb when set */
	SD_IPI_BREAK_BATCH_GLOBAL_ONLY = 1 << 2, /* v4 reclaim: INVLPGB the global PCID only */
	SD_IPI_BREAK_NO_TRANSITION = 1 << 3,  /* never IPI dynamic-ASID stragglers */
	SD_IPI_BREAK_CSD_REUSE = 1 << 4,      /* reuse a ring slot without waiting */
	SD_IPI_BREAK_RAR_NEW_CPU = 1 << 5,    /* rar: no flush for a CPU new to the mask */
	SD_IPI_BREAK_EARLY_ACK_NO_COPY = 1 << 6, /* ack=early: ack before copying the info */
};

/* flush_tlb_info: one per CPU, filled by its initiator, read by targets. */
struct sd_ipi_flush_info {
	struct sd_mm *mm;          /* NULL: a batch, whatever mm is loaded */
	uint64_t vpn, nr;          /* nr == 0: the whole address space */
	uint64_t new_tlb_gen;      /* SD_IPI_GEN_INVALID for a batch */
	unsigned initiating_cpu;
	bool freed_tables;
	bool trim_cpumask;
};

/* One dynamic ASID slot: entries tagged with it are no older than the
 * page tables of mm ctx_id as of generation tlb_gen. */
struct sd_ipi_ctx {
	uint64_t ctx_id;
	uint64_t tlb_gen;
};

/* cpu_tlbstate, cpu_tlbstate_shared and the CPU's flush_tlb_info. */
struct sd_ipi_cpu {
	/* Written by the owner at switches, read by every flusher. */
	sd_cacheline_aligned SD_ATOMIC(uintptr_t) loaded_mm;  /* sd_mm *, NULL or SWITCHING */
	/* loaded_mm_asid: a slot 0..5, or a global ASID from 6 on; read by
	 * finish_asid_transition() on other CPUs. */
	SD_ATOMIC(uint16_t) loaded_asid;
	uint16_t next_asid;                    /* owner-private from here */
	unsigned flushes_sampled;              /* consider_global_asid() sampling */
	struct sd_ipi_ctx ctxs[SD_IPI_NR_DYN_ASIDS];
	/* is_lazy has a line of its own: remote flushers read it on every
	 * flush, and it must not bounce with the switch-time writes above. */
	sd_cacheline_aligned SD_ATOMIC(bool) is_lazy;
	/* Modelled time, lines=split only: is_lazy's line apart from the
	 * IPI queue's (cpu_tlbstate_shared and call_single_queue, as the
	 * kernel lays them out). Written at lazy entry and exit, read by
	 * every flusher's should_flush_tlb(). */
	struct sd_model_line lazy_line;
	sd_cacheline_aligned struct sd_ipi_flush_info info;
	struct sd_smp_call_req *csd;                /* the ring: sd_ipi.csd_window of them */
};

struct sd_ipi_mm {
	uint64_t ctx_id;                       /* never reused (no ABA) */
	/* Every flush RMWs tlb_gen: a contended line of its own. */
	sd_cacheline_aligned SD_ATOMIC(uint64_t) tlb_gen;
	SD_ATOMIC(uint64_t) next_trim_ns;      /* next_trim_cpumask */
	/* The mm's global ASID (0: none) and asid_transition, as in the
	 * kernel's mm_context_t: only gbcast ever assigns one, but the switch
	 * and flush paths here honour it. The flag is set before the ASID is
	 * published with release ordering. */
	SD_ATOMIC(uint16_t) global_asid;
	SD_ATOMIC(bool) asid_transition;
	struct sd_cpumask cpumask;             /* words on their own line */
	/* tlb_gen's and mm_cpumask's lines, for modelled time: every flush
	 * writes the first and reads the second, every switch the reverse. */
	struct sd_model_line gen_line;
	struct sd_model_line mask_line;
};

/* Machine-wide state. gbcast embeds it (struct sd_gbcast). */
struct sd_ipi {
	enum sd_ipi_cpumask_mode mode;
	unsigned ceiling;
	unsigned csd_window;                   /* requests per CPU, <= nr_cpus - 1 */
	uint64_t trim_ns;
	unsigned broken;                       /* SD_IPI_BREAK_*, tests only */
	/* Global ASIDs kept current by Intel RAR (strategy/rar.c), which
	 * reaches the mm's cpumask only, not by INVLPGB, which reaches every
	 * CPU: a CPU joining the mask flushes the ASID (new_cpu), and IPI
	 * flushes (the trims) are done on a global ASID too. */
	bool rar;
	/* EuroSys 2020's switches: order=serial flushes the initiator before
	 * sending the IPIs (before 5.13; concurrent is the default), ack=early
	 * has targets acknowledge before they flush. */
	bool serial;
	bool early_ack;
	/* lines=split: the initiator pays a read of each target's lazy flag
	 * line besides its queue's (the kernel's layout); consolidated, the
	 * EuroSys 2020 paper's, one line for both (the default). */
	bool split_lines;
	SD_ATOMIC(uint64_t) last_ctx_id;
	struct sd_ipi_cpu *percpu;
	struct sd_smp_call_req *csd_all;            /* nr_cpus * csd_window */
};

/* Plant a bug (tests only): @mask of SD_IPI_BREAK_*; 0 repairs. The machine
 * must run the `ipi`, `gbcast` or `rar` strategy. */
int sd_ipi_test_break(struct sd_machine *m, unsigned mask);

/*
 * m->strategy and mm->strategy under ipi and under gbcast, which embeds
 * struct sd_ipi and points m->strategy at it (mm/flush_ops.h).
 */
static inline struct sd_ipi *sd_ipi_of(struct sd_machine *m)
{
	return (struct sd_ipi *)m->strategy;
}

static inline struct sd_ipi_cpu *sd_ipi_cpu_of(struct sd_cpu *cpu)
{
	return &sd_ipi_of(cpu->m)->percpu[cpu->id];
}

static inline struct sd_ipi_mm *sd_ipi_mm_of(struct sd_mm *mm)
{
	return (struct sd_ipi_mm *)mm->strategy;
}

/* A dynamic slot's TLB tag: slot + 1 (tag 0 is init_mm). A global ASID's
 * tag is the same formula over its number. */
static inline uint16_t sd_ipi_slot_tag(unsigned slot)
{
	return (uint16_t)(slot + 1);
}

/* mm_global_asid(): acquire, pairing with the release in gbcast's
 * mm_assign_global_asid(), so whoever sees the ASID sees the transition. */
static inline uint16_t sd_ipi_mm_global_asid(struct sd_mm *mm)
{
	return atomic_load_explicit(&sd_ipi_mm_of(mm)->global_asid, memory_order_acquire);
}

/* ---- the building blocks gbcast is made of ---- */

/* An option the base does not know, offered to the strategy built on it. */
typedef int (*sd_ipi_extra_opt_fn)(void *arg, const struct sd_opt *o);

/* Fill @ipi (the caller's, maybe embedded) with the defaults and @opts, and
 * allocate the per-CPU state. Options ipi does not know go to @extra (with
 * @extra_arg), or are refused naming @name. Return: 0, -EINVAL, -ENOENT,
 * -ENOMEM; nothing is left allocated on failure. */
int sd_ipi_machine_create(struct sd_machine *m, struct sd_ipi *ipi, const char *name,
			  const struct sd_opt *opts, unsigned nr_opts,
			  sd_ipi_extra_opt_fn extra, void *extra_arg);
void sd_ipi_machine_destroy(struct sd_ipi *ipi);
/* What sd_ipi_machine_create() allocated (not @ipi itself). */
size_t sd_ipi_bytes(const struct sd_machine *m, const struct sd_ipi *ipi);
int sd_ipi_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv);
void sd_ipi_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv);
void sd_ipi_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next);
void sd_ipi_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm);

/* flush_tlb_mm_range(), first half: bump @mm's tlb_gen (a full barrier
 * after the caller's PTE stores) and fill this CPU's flush_tlb_info. */
struct sd_ipi_flush_info *sd_ipi_flush_prepare(struct sd_cpu *cpu, struct sd_mm *mm,
						uint64_t vpn, uint64_t nr, bool freed_tables);
/* Second half, the IPI way: flush_tlb_multi() when another CPU is in the
 * mm's cpumask (returns true), else the local flush if the mm is loaded
 * here (false). */
bool sd_ipi_flush_send(struct sd_cpu *cpu, struct sd_ipi_flush_info *f);
/* native_flush_tlb_multi(): IPI @mask's CPUs that need @f, run it here if
 * this CPU is in @mask, wait for every ack. */
void sd_ipi_flush_tlb_multi(struct sd_cpu *cpu, const struct sd_cpumask *mask,
			    struct sd_ipi_flush_info *f);
/* should_trim_cpumask() for a strategy that decides the way itself (rar:
 * a trim goes by IPI): true at most once per trim period per mm, counted. */
bool sd_ipi_should_trim(struct sd_cpu *cpu, struct sd_mm *mm);

/* RAR v4's trim_cpumask(): IPI the CPUs of @f->mm's mask that run another
 * mm, not lazily, so that they leave it; wait for them. */
void sd_ipi_trim_cpumask(struct sd_cpu *cpu, struct sd_ipi_flush_info *f);

/* flush_tlb_func() on this CPU alone, interrupts off around it. */
void sd_ipi_flush_local(struct sd_cpu *cpu, struct sd_ipi_flush_info *f);

/* arch_tlbbatch_add_pending() and arch_tlbbatch_flush(), the IPI way. */
void sd_ipi_batch_add(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm,
		      uint64_t vpn);
void sd_ipi_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus);

#endif
