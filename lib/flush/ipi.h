/* SPDX-License-Identifier: MIT */
#ifndef SD_FLUSH_IPI_H
#define SD_FLUSH_IPI_H

#include "../asid/global_asid.h"
#include "../core/cpumask.h"
#include "../cpu/cpu.h"
#include "invlpgb.h"

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
/* Global ASIDs (gbcast): 4094 - 6 - 1 without PTI. */
#define SD_GBCAST_POOL 4087
/* mm_active_cpus_exceeds(mm, 3): a global ASID from 4 active CPUs on. */
#define SD_GBCAST_THRESHOLD 3
/* consider_global_asid() samples 1 flush in 32. */
#define SD_GBCAST_SAMPLE 32
/* invlpgb_count_max: pages per INVLPGB (CPUID 0x80000008 EDX[15:0] + 1). */
#define SD_GBCAST_COUNT_MAX 8
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
	SD_IPI_CPUMASK_LAZY,    /* seed 002: set if unset, cleared by IPIs */
};

/* Test-only planted bugs, to see the race tests fail (sd_ipi_test_break). */
enum {
	SD_IPI_BREAK_SWITCHING_RULE = 1 << 0, /* CVE-2025-37964: skip SWITCHING CPUs */
	SD_IPI_BREAK_SWITCH_FENCE = 1 << 1,   /* CVE-2025-40174: no smp_mb when set */
	SD_IPI_BREAK_BATCH_GLOBAL_ONLY = 1 << 2, /* v4 reclaim: INVLPGB the global PCID only */
	SD_IPI_BREAK_NO_TRANSITION = 1 << 3,  /* never IPI dynamic-ASID stragglers */
	SD_IPI_BREAK_CSD_REUSE = 1 << 4,      /* reuse a ring slot without waiting */
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
	sd_cacheline_aligned struct sd_ipi_flush_info info;
	struct sd_ipi_req *csd;                /* the ring: sd_ipi.csd_window of them */
};

struct sd_ipi_mm {
	uint64_t ctx_id;                       /* never reused (no ABA) */
	/* Every flush RMWs tlb_gen: a contended line of its own. */
	sd_cacheline_aligned SD_ATOMIC(uint64_t) tlb_gen;
	SD_ATOMIC(uint64_t) next_trim_ns;      /* next_trim_cpumask */
	/* gbcast: the mm's global ASID (0: none) and asid_transition. The
	 * flag is set before the ASID is published with release ordering. */
	SD_ATOMIC(uint16_t) global_asid;
	SD_ATOMIC(bool) asid_transition;
	struct sd_cpumask cpumask;             /* words on their own line */
};

/* Machine-wide state. */
struct sd_ipi {
	enum sd_ipi_cpumask_mode mode;
	unsigned ceiling;
	unsigned csd_window;                   /* requests per CPU, <= nr_cpus - 1 */
	uint64_t trim_ns;
	unsigned broken;                       /* SD_IPI_BREAK_*, tests only */
	/* gbcast only: INVLPGB, the global ASID space and its policy. */
	bool invlpgb;
	unsigned pool, threshold, sample, count_max;
	bool threshold_growth;                 /* an assumption: see gbcast */
	struct sd_global_asid gasid;
	struct sd_invlpgb ib;
	SD_ATOMIC(uint64_t) last_ctx_id;
	struct sd_ipi_cpu *percpu;
	struct sd_ipi_req *csd_all;            /* nr_cpus * csd_window */
};

/* Plant a bug (tests only): @mask of SD_IPI_BREAK_*; 0 repairs. The machine
 * must run the `ipi` strategy. */
int sd_ipi_test_break(struct sd_machine *m, unsigned mask);

#endif
