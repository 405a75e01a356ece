/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_MACHINE_STATE_H
#define SD_HW_MACHINE_STATE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/machine_state.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <pthread.h>

#include <shootdown/machine.h>

#include "../core/compiler.h"
#include "../core/spinlock.h"
#include "cpu.h"
#include "frame.h"
#include "model.h"
#include "oracle.h"
#include "topology.h"
#include "trace.h"
#include "trap.h"

/* Declared by the mm layer (mm/flush_ops.h), filled by a strategy. */
struct sd_strategy_ops;

/*
 * The emulated machine: its hardware (CPUs, topology, frames, trap table,
 * oracle) and what was chosen for it at creation. Defined here, at the
 * bottom, because every layer reads it; each field belongs to one layer,
 * which alone writes it: the machine layer creates and destroys (lib/
 * machine), the mm layer reaches the strategy only through @ops, and the
 * strategy alone reads @strategy.
 */
struct sd_machine {
	struct sd_machine_config cfg;  /* normalised: every default filled in */
	struct sd_topology topo;
	unsigned nr_cpus;
	struct sd_cpu **cpus;
	size_t cpu_area_size;
	bool checked;                  /* oracle mode, fixed at creation */

	const struct sd_strategy_ops *ops;    /* the mm layer's door to the strategy */
	void *strategy;                        /* the strategy's machine-wide state */
	char strategy_spec[64];
	/* enum sd_mechanism: the strategy needs them, the profile lacks them,
	 * the creator said run anyway (SD_MACHINE_ANY_MECHANISM). */
	unsigned mechanisms_missing;
	/* What the strategy needs and is judged by (model.h): its ops'
	 * mechanisms, or what its options chose (sd_mechanisms_require()). */
	unsigned mechanisms_needed;
	unsigned mechanisms_primary;
	/* What the modelled CPU has that changes how arm64 flushes (the
	 * profile's "features"; the emulator's own without a profile: range
	 * TLBIs, no KPTI), for the strategies, which read no profile. */
	bool arch_range_tlbi;
	bool arch_kpti;
	bool arch_repeat_tlbi;          /* the profile's repeat_tlbi erratum workaround */
	/* The strategy sends requests serviced below the kernel (smp.h: Intel
	 * RAR's microcode, RISC-V SBI firmware in M-mode): an IPI handler that
	 * finds interrupts off marks them for the next instruction boundary.
	 * Set by the strategy's machine_init, before any CPU attaches. */
	bool boundary_requests;

	struct sd_frame_pool frames;
	struct sd_traps traps;
	struct sd_oracle oracle;
	struct sd_trace trace;         /* the file and ring size; off if no path */
	struct sd_model model;         /* modelled time; model.on false: none */

	/* The lruvec lock (mm/lru.c): taken to move a CPU's lru_add batch
	 * onto the LRU and to take freed pages off it, per cfg.lru. lru_pages
	 * is the shared LRU line those write: nobody reads it, it is there so
	 * the line really moves between CPUs (lru_lock_pages counts the
	 * folios). */
	sd_cacheline_aligned struct sd_spinlock lru_lock;
	uint64_t lru_pages;            /* under lru_lock */

	/* The scheduler's state (lib/sched), created by the first
	 * sd_task_create(); freed through @sched_free by the machine's
	 * destruction, which cannot name the layer above it. */
	void *sched;
	void (*sched_free)(struct sd_machine *m);

	sd_cacheline_aligned SD_ATOMIC(unsigned) nr_attached;
	SD_ATOMIC(unsigned) nr_mms;
	SD_ATOMIC(uint64_t) nr_files;   /* files of mm/file.c, until their last put */
	SD_ATOMIC(uint64_t) next_mm_id;
	SD_ATOMIC(int) any_unpinned;
	char pin_note[128];
	pthread_mutex_t pin_note_lock;
};

static inline struct sd_cpu *sd_machine_cpu_at(const struct sd_machine *m, unsigned id)
{
	return m->cpus[id];
}

#endif
