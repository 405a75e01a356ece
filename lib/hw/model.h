/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_MODEL_H
#define SD_HW_MODEL_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/model.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stdint.h>

#include <shootdown/model.h>

#include "../core/compiler.h"
#include "../core/spinlock.h"
#include "model_params.h"
#include "sequencer.h"

/*
 * Modelled time (include/shootdown/model.h says what it is for). Times are
 * kept in picoseconds so that sub-ns costs (an L1 TLB hit) add up exactly;
 * the public calls speak ns.
 *
 * Who writes what:
 *   - a CPU's clock and everything in struct sd_cpu_model: the CPU alone
 *     (its IPI handler included: the same thread), so plain fields;
 *   - the stalls broadcasts owe a CPU (struct sd_cpu's recv_stall_ps):
 *     the issuers add, the CPU takes them into its clock at its sync
 *     points (model.c, recv_pay());
 *   - its published clock and run state (struct sd_model_pub): the CPU
 *     stores, every CPU reads (lax synchronisation); a waiter may mark a
 *     laggard STALLED with a CAS;
 *   - shared resources (the interconnect, hot lines): a CAS on their
 *     free-at time, since they are used without a real lock;
 *   - modelled locks (struct sd_model_lock): only under the real lock
 *     they describe, which orders them, so plain fields.
 */

/* Modelled clocks count picoseconds; the public calls speak ns. */
#define PS_PER_NS 1000u

enum sd_model_param {
#define SD_MP_ENUM(id, key, what) SD_MP_##id,
	SD_MODEL_PARAM_LIST(SD_MP_ENUM)
#undef SD_MP_ENUM
	SD_MP_NR
};

enum sd_model_dist_param {
#define SD_MDP_ENUM(id, key, what) SD_MDP_##id,
	SD_MODEL_DIST_PARAM_LIST(SD_MDP_ENUM)
#undef SD_MDP_ENUM
	SD_MDP_NR
};

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
	unsigned locks_held;           /* modelled locks held: no window wait */
	uint64_t read_start_ps;        /* the start of this CPU's mmap_lock read hold */
	bool sync_deferred;            /* a sync fell in a section: retry at its end */
	unsigned irq_batch;            /* inside ipi_run_batch(): entry charged */
	uint64_t seen_min_ps;          /* the slowest running clock last seen */
	uint64_t preempt_at_ps;        /* the host's next preemption (UINT64_MAX: none) */
	/* Strict mode (sequencer.h): one CPU at a time, lowest clock first. */
	bool seq;
	uint64_t until_ps;             /* the holder runs until the next CPU's time */
	uint32_t until_id;             /* ...that CPU, for ties */
};

/*
 * A modelled lock, under the real lock it describes: its recent holds in
 * modelled time, sorted by start. The real lock orders holders as they
 * come in real time; a CPU that comes later in real time but earlier in
 * modelled time takes the first free gap at or after its own time, so it
 * is not pulled up to the clock of whoever happened to run first (which,
 * with N CPUs on few PUs, would ratchet every clock up to the leader's).
 * Holds older than the history are forgotten (model.c, lock_record()).
 */
#define SD_MODEL_LOCK_SLOTS 8

/*
 * A machine-wide lock's occupancy by modelled time (the trap-hook, LRU,
 * ASID and global-ASID locks, which every CPU may take millions of times a
 * second): a ring of buckets of @bucket_ps, each the hold time that falls
 * in it and who added to it last. Eight remembered holds cover a few
 * nanoseconds of such a lock, far less than the CPUs drift apart inside
 * the window; the buckets cover the window and more, so an acquirer
 * behind the others still finds the holds around its own time, and a
 * saturated lock serialises. Holds are packed from each bucket's start
 * (an error of at most a bucket in where a gap lies).
 */
struct sd_model_calendar {
	uint64_t bucket_ps;
	uint32_t nr;                   /* buckets, a power of two */
	struct sd_model_bucket {
		uint64_t epoch;        /* time / bucket_ps + 1 it holds; 0: unused */
		uint64_t busy_ps;
		uint32_t last_cpu;
	} *b;
};

struct sd_model_lock {
	uint32_t last_cpu;             /* the last to release it, real time */
	uint32_t n;
	uint64_t hold_ps;              /* recent hold time: the gap an acquirer needs */
	uint64_t cur_start_ps;         /* the current hold's modelled start */
	struct { uint64_t start_ps, end_ps; uint32_t cpu; } busy[SD_MODEL_LOCK_SLOTS];
	struct sd_model_calendar *cal; /* machine-wide locks: used instead of busy[] */
};

#define SD_MODEL_LOCK_INIT { .last_cpu = 0xffffffffu }

/*
 * An mm's mmap_lock in modelled time: a reader-writer semaphore. Readers
 * share the real lock, so the modelled state has a lock of its own
 * (@lock, taken only when modelling, never waited on for long: every use
 * is a few dozen instructions). Write holds and read holds are two
 * histories. A reader starts at the first gap in the write holds at or
 * after its time, a writer at the first gap in both. A down or up of the
 * kernel's rwsem is an atomic RMW of its count: the count's line moves to
 * the acquirer (lock_handoff at the distance from its last owner), and
 * those moves serialise (@count_free_ps). A fault is charged as the
 * kernel's per-VMA lock (lock_vma_under_rcu(), Linux 6.4 on): no count
 * transfer, but it waits for a writer's hold as vma_start_write() makes
 * it. Read holds beyond the history are forgotten, as in lock_record().
 */
struct sd_model_rwsem {
	struct sd_spinlock lock;
	uint32_t count_owner;          /* the CPU whose RMW of the count was last */
	SD_ATOMIC(uint64_t) count_free_ps;
	struct sd_model_lock writers;
	struct sd_model_lock readers;
};

#define SD_MODEL_RWSEM_INIT                                                           \
	{ .count_owner = 0xffffffffu, .writers = SD_MODEL_LOCK_INIT,                    \
	  .readers = SD_MODEL_LOCK_INIT }

/* At least enum sd_lock_kind's SD_LOCK_KIND_NR (model.c checks). */
#define SD_MODEL_LOCK_KINDS 10

/* A hot cache line the algorithms fight over (mm_cpumask, tlb_gen, active
 * counts, IPI queue heads). */
struct sd_model_line {
	SD_ATOMIC(uint64_t) free_at_ps;
	SD_ATOMIC(uint32_t) writer;    /* last writer's CPU id + 1, 0: none */
	SD_ATOMIC(uint64_t) readers;   /* CPUs (id mod 64) that read it since */
};

static inline void sd_model_line_init(struct sd_model_line *l)
{
	atomic_init(&l->free_at_ps, 0);
	atomic_init(&l->writer, 0);
	atomic_init(&l->readers, 0);
}

/*
 * A shared resource that remembers when it is busy (Graphite's queue
 * model with history): a user wanting it at time t gets the first gap of
 * its length at or after t, even if users at later modelled times reached
 * it first in real time. A plain "free at" time would queue such a user
 * behind them, an error of up to the window per use, which grows with
 * how unevenly the host runs the threads (host load). The oldest
 * intervals are forgotten (floor): a user earlier than all of them queues
 * behind them. Used under its own lock.
 */
#define SD_MODEL_QUEUE_SLOTS 64

struct sd_model_queue {
	struct sd_spinlock lock;
	SD_ATOMIC(unsigned) owner;     /* CPU id + 1 holding the lock, 0: none */
	unsigned n;
	uint64_t floor_ps;
	uint64_t last_end_ps;          /* the latest end ever reserved */
	struct { uint64_t start_ps, end_ps; } busy[SD_MODEL_QUEUE_SLOTS];  /* by start */
};

/* Where an emulated CPU sits in the modelled topology. */
struct sd_model_place {
	uint32_t core, llc, package;
};

/* The machine-wide model (in struct sd_machine). */
struct sd_model {
	bool on;
	char name[64];
	char path[256];
	char topology[128];
	unsigned nr_pus;
	uint64_t window_ps;
	uint64_t quantum_ps;           /* a CPU publishes at least this often */
	double param_ns[SD_MP_NR];
	double dist_ns[SD_MDP_NR][SD_DIST_NR];
	uint64_t param_ps[SD_MP_NR];
	uint64_t dist_ps[SD_MDP_NR][SD_DIST_NR];
	uint64_t ev_ps[256];           /* per enum sd_event; sized for any list */
	uint64_t scan_ps;              /* one whole-ASID/whole-TLB scan of a TLB */
	struct sd_model_place *place;  /* nr_cpus entries */
	/* The machine-wide modelled locks, by enum sd_lock_kind (the mm
	 * lock is per mm: struct sd_mm has its own). */
	struct sd_model_lock lock[SD_MODEL_LOCK_KINDS];
	struct sd_model_calendar cal[SD_MODEL_LOCK_KINDS];

	/* The lruvec's lines a hold of the LRU lock writes: the list head
	 * and size counters, and the folio last linked or unlinked next to
	 * them (mm/lru.c). */
	struct sd_model_line lru_lines[2];
	sd_cacheline_aligned struct sd_model_queue interconnect;
	sd_cacheline_aligned SD_ATOMIC(uint64_t) max_lead_ps;
	SD_ATOMIC(uint64_t) rejoins;
	SD_ATOMIC(uint64_t) stalls;    /* laggards a window wait took for stalled */
	struct sd_seq seq;             /* strict mode: on or not, fixed at creation */
};

struct sd_cpu;

/* Read the profile (sd_profile_locate() finds it), place @nr_cpus CPUs on
 * its topology (or on @topology, a hwloc synthetic string, if not NULL),
 * and fill the cost tables (@tlb_entries, L1 + L2 of each CPU's TLB, sizes
 * the scan a whole-ASID or whole-TLB invalidation charges, tlb_scan_entry).
 * @profile NULL: no modelling, 0. -EINVAL for a
 * bad file (the detail names the field), -ENOENT, -ENOMEM. profile.c. */
int sd_model_init(struct sd_model *mod, const char *profile, const char *topology,
		  uint64_t window_ns, unsigned nr_cpus, unsigned tlb_entries);
void sd_model_fini(struct sd_model *mod);
enum sd_model_distance sd_model_distance_of(const struct sd_model *mod, unsigned a, unsigned b);

/* A CPU's modelled state: set up with its area, joined to the running set
 * at attach, left at detach (model.c). */
void sd_model_cpu_init(struct sd_cpu *c);
void sd_model_cpu_online(struct sd_cpu *c);
void sd_model_cpu_offline(struct sd_cpu *c);
/* A synchronisation point (model.c): publish the clock and keep within
 * the window (strict mode: give the token away once past the next CPU);
 * deferred inside a lock or interrupt section to its end. Returns true
 * when IPIs have arrived by the CPU's modelled clock (strict mode): the
 * caller runs them (sd_irq_run_pending()) and syncs again, as
 * sd_cpu_model_sync() in cpu.h does. */
bool sd_model_sync(struct sd_cpu *c);
/* Lax mode: the owner @c polls in the program's code (sd_cpu_poll()); it
 * holds nobody back until its next event, which rejoins it. */
void sd_model_lax_poll(struct sd_cpu *c);
/* Strict mode: modelled work of @left ps by the holder (sd_cpu_work()), as
 * a wait for its end, which the next vCPU preemption tick or an IPI's
 * arrival interrupts (the other CPUs run meanwhile). Returns the ps of it
 * done; the caller's next event is the sync point that takes the tick or
 * runs the IPIs. */
uint64_t sd_model_work_wait(struct sd_cpu *c, uint64_t left);

#endif
