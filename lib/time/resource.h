/* SPDX-License-Identifier: MIT */
#ifndef SD_TIME_RESOURCE_H
#define SD_TIME_RESOURCE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_TIME
#error "time/resource.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stdint.h>

#include "../core/compiler.h"
#include "../core/spinlock.h"

/*
 * The shared resources of modelled time, as state and pure functions of
 * modelled timestamps (picoseconds): which start a use gets, what it
 * leaves behind. No clock, no CPU, no thread: the caller (hw/model.c)
 * says who uses a resource when, charges the answer to that CPU's clock,
 * and orders the calls (under the real lock the resource describes, or
 * its own); test/time/test_resource.cpp checks each against timestamps
 * computed by hand. CPUs are named by their ids (UINT32_MAX: none).
 *
 * Four kinds, each the model of one family of contention:
 *   - a history of busy intervals (struct sd_model_hist): a hot line's
 *     transfers, an rwsem count's atomic RMWs, the interconnect that
 *     broadcasts occupy;
 *   - a lock with a history of holds (struct sd_model_lock), or for a
 *     machine-wide lock a calendar of buckets (struct sd_model_calendar);
 *     and the reader-writer mmap_lock built on two histories;
 *   - a line's coherence state (struct sd_model_line): whether a read or
 *     write fetches it and from whom.
 */

#define SD_MODEL_NONE UINT32_MAX

/*
 * A shared resource that remembers when it is busy (Graphite's queue
 * model with history): a user wanting it at time t gets the first gap of
 * its length at or after t, even if users at later modelled times reached
 * it first. They do in lax mode, where the host orders the threads, and
 * in strict mode too: a CPU with interrupts off, in a batch of IPI
 * handlers or holding a modelled spinlock runs on without handing the
 * machine over, so its uses can be microseconds ahead of the next CPU's.
 * A plain "free at" time would queue the earlier user behind them, and
 * the wait, charged to that user, would move every use it makes after:
 * on a 36-CPU ipi run such false waits were 81 of a loop's 110 us. The
 * oldest intervals are forgotten (floor): a user earlier than all that
 * is remembered queues behind it. The caller orders the calls (its own
 * lock, or the lock the resource lives under).
 */
struct sd_model_busy {
	uint64_t start_ps, end_ps;
};

struct sd_model_hist {
	unsigned n;                    /* intervals in the caller's busy[] */
	uint64_t floor_ps;             /* nothing starts before it */
	uint64_t last_end_ps;          /* the latest end ever reserved */
};

/* The first gap of @occ at or after @t among the @h->n intervals of
 * @busy (kept by start, at most @cap), recorded (occ 0: looked up only).
 * Returns the start. */
uint64_t sd_model_hist_reserve(struct sd_model_hist *h, struct sd_model_busy *busy,
			       unsigned cap, uint64_t t, uint64_t occ);

/* A line's transfers and an rwsem count's RMWs: the uses a few CPUs can
 * make out of modelled order (how far ahead a handler batch or a locked
 * section runs) fit in this many. */
#define SD_MODEL_LINE_SLOTS 32

/* The interconnect: a history under its own lock (@lock, @owner: the
 * caller's). */
#define SD_MODEL_QUEUE_SLOTS 64

struct sd_model_queue {
	struct sd_spinlock lock;
	SD_ATOMIC(unsigned) owner;     /* CPU id + 1 holding the lock, 0: none */
	struct sd_model_hist hist;
	struct sd_model_busy busy[SD_MODEL_QUEUE_SLOTS];
};

static inline uint64_t sd_model_queue_reserve(struct sd_model_queue *q, uint64_t t,
					      uint64_t occ)
{
	return sd_model_hist_reserve(&q->hist, q->busy, SD_MODEL_QUEUE_SLOTS, t, occ);
}

/*
 * A modelled lock, under the real lock it describes: its recent holds in
 * modelled time, sorted by start. The real lock orders holders as they
 * come in real time; a CPU that comes later in real time but earlier in
 * modelled time takes the first free gap at or after its own time, so it
 * is not pulled up to the clock of whoever happened to run first (which,
 * with N CPUs on few PUs, would ratchet every clock up to the leader's).
 * Holds older than the history are forgotten (sd_model_lock_record()).
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

#define SD_MODEL_LOCK_INIT { .last_cpu = SD_MODEL_NONE }

/* The first gap of @need ps among @l's remembered holds at or after @t;
 * the CPU that held it last before that gap in *@prev (left as it is if
 * none is remembered). Holds may overlap (an rwsem's readers). */
uint64_t sd_model_lock_gap(const struct sd_model_lock *l, uint64_t t, uint64_t need,
			   uint32_t *prev);
/* Record a hold [@start, @end) by @cpu; when full, the earliest is
 * forgotten. @l->hold_ps follows the holds' lengths (a 3:1 average). */
void sd_model_lock_record(struct sd_model_lock *l, uint64_t start, uint64_t end, uint32_t cpu);

/* A calendar of @nr buckets (a power of two) of @bucket_ps: 0, or -ENOMEM
 * (nothing allocated). sd_model_cal_fini() frees it (also after a failed
 * init, or twice). */
int sd_model_cal_init(struct sd_model_calendar *cal, uint32_t nr, uint64_t bucket_ps);
void sd_model_cal_fini(struct sd_model_calendar *cal);
/* The first free capacity at or after @t; the CPU that held the lock last
 * before it in *@prev (left as it is if none). */
uint64_t sd_model_cal_gap(struct sd_model_calendar *cal, uint64_t t, uint32_t *prev);
/* Pour a hold of @len by @cpu from @start into the buckets' free capacity. */
void sd_model_cal_record(struct sd_model_calendar *cal, uint64_t start, uint64_t len,
			 uint32_t cpu);

/*
 * An mm's mmap_lock in modelled time: a reader-writer semaphore. Readers
 * share the real lock, so the modelled state has a lock of its own
 * (@lock, taken only when modelling, never waited on for long: every use
 * is a few dozen instructions). Write holds and read holds are two
 * histories. A reader starts at the first gap in the write holds at or
 * after its time, a writer at the first gap in both. A down or up of the
 * kernel's rwsem is an atomic RMW of its count: the count's line moves to
 * the acquirer (lock_handoff at the distance from its last owner), and
 * those moves serialise (a history, @count). A fault is charged as the
 * kernel's per-VMA lock (lock_vma_under_rcu(), Linux 6.4 on): no count
 * transfer, but it waits for a writer's hold as vma_start_write() makes
 * it. Read holds beyond the history are forgotten, as in
 * sd_model_lock_record().
 */
struct sd_model_rwsem {
	struct sd_spinlock lock;
	uint32_t count_owner;          /* the CPU whose RMW of the count was last */
	struct sd_model_hist count;
	struct sd_model_busy count_busy[SD_MODEL_LINE_SLOTS];
	struct sd_model_lock writers;
	struct sd_model_lock readers;
};

#define SD_MODEL_RWSEM_INIT                                                           \
	{ .count_owner = SD_MODEL_NONE, .writers = SD_MODEL_LOCK_INIT,                  \
	  .readers = SD_MODEL_LOCK_INIT }

/* A writer's start: the first time at or after @t with a gap of @need in
 * both histories. */
uint64_t sd_model_rwsem_write_gap(const struct sd_model_rwsem *rw, uint64_t t, uint64_t need);
/* A reader's start: the first gap of the read holds' length among the
 * write holds at or after @t. */
uint64_t sd_model_rwsem_read_gap(const struct sd_model_rwsem *rw, uint64_t t);

/*
 * A hot cache line the algorithms fight over (mm_cpumask, tlb_gen, active
 * counts, IPI queue heads): its transfers, a history under its own lock
 * (@lock, @owner: the caller's), and its coherence state, a hint read and
 * written with relaxed atomics outside that lock.
 */
struct sd_model_line {
	struct sd_spinlock lock;
	SD_ATOMIC(unsigned) owner;     /* CPU id + 1 holding the lock, 0: none */
	struct sd_model_hist hist;
	struct sd_model_busy busy[SD_MODEL_LINE_SLOTS];
	SD_ATOMIC(uint32_t) writer;    /* last writer's CPU id + 1, 0: none */
	SD_ATOMIC(uint64_t) readers;   /* CPUs (id mod 64) that read it since */
};

static inline void sd_model_line_init(struct sd_model_line *l)
{
	sd_spin_init(&l->lock);
	atomic_init(&l->owner, 0);
	l->hist.n = 0;
	l->hist.floor_ps = 0;
	l->hist.last_end_ps = 0;
	atomic_init(&l->writer, 0);
	atomic_init(&l->readers, 0);
}

/* What an access to a line costs, in kind: */
enum sd_model_line_cost {
	SD_LINE_HIT,            /* this CPU has it */
	SD_LINE_FETCH,          /* a transfer from the last writer */
	SD_LINE_INVALIDATE,     /* a write while others hold copies */
};

/*
 * @cpu reads or writes (@write) the line: what it costs, with the CPU
 * it comes from in *@from for a fetch, and the line's new state. It is a
 * hit if this CPU wrote it last and nobody read it since, or read it
 * since the last write; a write while others hold copies invalidates them
 * (the sharers are known only modulo 64). The caller prices the kind by
 * distance and reserves the line's transfers (sd_model_hist_reserve() on
 * @hist, under @lock), which serialise. Relaxed atomics: the state is a hint for
 * what a fetch costs, not data anyone depends on; two CPUs racing on it
 * in lax mode can lose one transfer's charge, never a correct result.
 */
enum sd_model_line_cost sd_model_line_access(struct sd_model_line *line, uint32_t cpu,
					     bool write, uint32_t *from);

#endif
