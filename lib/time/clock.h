/* SPDX-License-Identifier: MIT */
#ifndef SD_TIME_CLOCK_H
#define SD_TIME_CLOCK_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_TIME
#error "time/clock.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/compiler.h"

/*
 * A CPU's modelled clock and what others see of it. Embedded in the
 * emulated CPU (hw/cpu.h), but described here so that the layer of
 * modelled time (the sequencer, time/sequencer.h) works on clocks alone,
 * never on a CPU: a clock names its CPU by id.
 */

/* Modelled clocks count picoseconds; the public calls speak ns. */
#define PS_PER_NS 1000u

struct sd_model;
struct sd_seq;

/*
 * Run states of a CPU for lax synchronisation: only RUNNING CPUs hold the
 * others back. A CPU waiting in the library (for an IPI's ack, for a lock)
 * stays RUNNING, its clock standing at the start of the wait: letting the
 * others run on unbounded while it waits would put it, when it comes back,
 * behind uses of shared resources it preceded in modelled time, and make
 * results depend on how long the host made it wait. It cannot deadlock:
 * a window wait has interrupts on (so it answers the waiter's IPI) and no
 * modelled lock held (so it never holds the waiter's lock); the DVM lock's
 * holder takes no event under it.
 */
enum sd_model_run {
	SD_MODEL_OFF,           /* no thread attached */
	SD_MODEL_RUNNING,
	SD_MODEL_IDLE,          /* sd_cpu_idle(), or its run body returned */
	SD_MODEL_STALLED,       /* made no progress while blocked outside */
};

/* What other CPUs read of a CPU's clock: on its own line. */
struct sd_model_pub {
	sd_cacheline_aligned SD_ATOMIC(uint64_t) clock_ps;
	SD_ATOMIC(int) state;          /* enum sd_model_run */
	SD_ATOMIC(uint64_t) window_waits;  /* the CPU's own, for its stats */
	SD_ATOMIC(uint64_t) preemptions;   /* vCPU preemptions charged, owner-written */
	SD_ATOMIC(uint64_t) preemptions_locked;  /* ...of them with a modelled lock held */
};

/* The CPU's own modelled state (owner-private line of struct sd_cpu). */
struct sd_cpu_model {
	const uint64_t *ev_ps;         /* fixed cost per event; NULL: not modelled */
	uint64_t clock_ps;
	uint64_t sync_at_ps;           /* next lax-synchronisation point */
	uint64_t dvm_done_ps;          /* this CPU's broadcasts all done (DSB) */
	uint64_t invlpgb_done_ps;      /* this CPU's INVLPGBs all done (TLBSYNC) */
	unsigned ipi_posts;            /* IPIs posted since the last wait */
	unsigned locks_held;           /* modelled spinlocks held: no IPIs, no hand-off */
	unsigned rwsems_held;          /* modelled mmap_lock holds (a sleeping lock) */
	uint64_t read_start_ps;        /* the start of this CPU's mmap_lock read hold */
	bool sync_deferred;            /* a sync fell in a section: retry at its end */
	unsigned irq_batch;            /* inside ipi_run_batch(): entry charged */
	uint64_t seen_min_ps;          /* the slowest running clock last seen */
	uint64_t preempt_at_ps;        /* the host's next preemption (UINT64_MAX: none) */
	/* Strict mode (sequencer.h): one CPU at a time, lowest clock first. */
	bool seq;
	uint64_t until_ps;             /* the holder runs until the next CPU's time */
	uint32_t until_id;             /* ...that CPU, for ties */
	uint64_t arrival_ps;           /* the earliest IPI arrival known not yet run */
	/* Who the clock is, for the layers below the CPU (set once, at
	 * the CPU's creation): its id, its interrupt state (irq_depth of
	 * struct sd_cpu, which the owner alone writes), the stalls others
	 * owe it, and its machine's sequencer. */
	uint32_t id;
	const volatile sig_atomic_t *irq_depth;
	const volatile sig_atomic_t *ipi_pending;
	SD_ATOMIC(uint64_t) *recv_stall_ps;
	struct sd_model_pub *pub;      /* what others read of it, on its own line */
	struct sd_model *mod;
	struct sd_seq *sq;
};

#endif
