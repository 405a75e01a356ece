/* SPDX-License-Identifier: MIT */
#ifndef SD_TIME_SEQUENCER_H
#define SD_TIME_SEQUENCER_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_TIME
#error "time/sequencer.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/compiler.h"
#include "clock.h"

/*
 * Strict modelled time (SD_MACHINE_MODEL_STRICT): conservative discrete-
 * event simulation with the emulated CPUs' threads as its processes. One
 * CPU at a time holds the machine (the token), and it is always the one
 * whose modelled clock is lowest (ties: the lower id); it gives the token
 * away at its next synchronisation point once its clock passes the next
 * CPU's. Every use of a shared resource, every read of shared state and
 * every IPI therefore happens in modelled-time order, whatever the host
 * does with the threads: a run's modelled results are a function of the
 * workload and the profile alone (Chandy and Misra's conservative rule,
 * with no lookahead). sequencer.c says how waits, IPIs and the threads
 * that leave the machine (idle, blocked outside the library) fit in.
 *
 * It works on clocks (time/clock.h), never on CPUs: the CPU's layer passes
 * its clock (&cpu->model), which names the CPU by id and points at its
 * interrupt state, and gives sd_seq_init() what must reach back up (the
 * signal a summons sends, the handler's replay).
 *
 * The token adds order, never safety: every path of the library stays
 * safe under true concurrency, so a holder that the watchdog must take
 * the token from (its thread blocked outside the library) costs
 * exactness, which the run reports (sd_model_info.seq_stalls), not
 * correctness.
 */

/* Where a CPU stands with the sequencer (under struct sd_seq's lock). */
enum sd_seq_state {
	SD_SEQ_OFF,             /* no thread attached */
	SD_SEQ_AWAY,            /* attached, outside the machine: idle, or blocked in the host */
	SD_SEQ_RUN,             /* in the machine: holds the token or waits for its turn */
	SD_SEQ_WAIT,            /* in the machine, waiting for an event (an ack, a lock) */
};

/* A WAIT with no known wake time that looks again at the next release of
 * anything (sd_seq_released(): a spin on a real lock, whose owner does not
 * say when it is free), or, when no other CPU can run, at once. */
#define SD_SEQ_POLL (UINT64_MAX - 1)
#define SD_SEQ_NEVER UINT64_MAX

struct sd_seq_slot {
	int state;              /* enum sd_seq_state */
	bool summoned;          /* AWAY, brought in to run an IPI */
	bool handover;          /* its thread is changing (lib/sched): not stalled */
	bool stalled;           /* the watchdog took the token: it came back late */
	bool deaf;              /* WAIT with interrupts off: an IPI's arrival does not wake it */
	bool working;           /* WAIT that is modelled work (sd_seq_work()) */
	uint64_t work_stall_ps; /* broadcast stalls that lengthened that work */
	uint64_t clock_ps;      /* its clock when it last gave the token away */
	uint64_t wake_ps;       /* WAIT: when it looks again (SD_SEQ_POLL, SD_SEQ_NEVER) */
	uint64_t arrival_ps;    /* the earliest IPI posted to it and not yet run */
	uint64_t grant_ps;      /* the time it was last given the token at */
	/* What grant() leaves the grantee (read by it without the lock): */
	uint64_t until_ps;      /* the next CPU's time... */
	uint32_t until_id;      /* ...that CPU, for ties */
	uint64_t sync_by_ps;    /* its next sync point at the latest */
	uint64_t grant_arrival_ps;  /* its earliest IPI arrival then */
	uint64_t posts;         /* IPIs posted to it */
	pthread_t thread;       /* for the watchdog's look at its CPU time */
	int tid;
	SD_ATOMIC(uint64_t) *recv_stall_ps;  /* the clock's: what it owes while away */
};

/* A CPU's futex word: parked, granted (not yet running), holding. */
enum { SD_SEQ_GO_NO, SD_SEQ_GO_GRANTED, SD_SEQ_GO_RUNNING };

/* The token's futex word of one CPU, on a line of its own. */
struct sd_seq_go {
	sd_cacheline_aligned SD_ATOMIC(int) go;
	SD_ATOMIC(uint64_t) beats;     /* owner: +1 at each sync; the watchdog reads */
};

struct sd_seq {
	bool on;
	unsigned nr;
	pthread_mutex_t lock;          /* orders everything below but the atomics */
	SD_ATOMIC(int) holder;         /* the CPU holding the token, -1: none */
	int kick;                      /* granted under the lock: wake once it is dropped */
	/* A CPU may be parked polling (SD_SEQ_POLL); written under the lock,
	 * read without it by the holder, the only one that adds pollers. */
	SD_ATOMIC(bool) polling;
	/* The earliest clock of a CPU that came into the machine while
	 * another held the token (sd_seq_join()), not yet in the holder's
	 * horizon, which only the holder computes; SD_SEQ_NEVER: none.
	 * Written under the lock, read without it at the holder's sync
	 * points (sd_seq_sync()). */
	SD_ATOMIC(uint64_t) joined_ps;
	bool missed_release;           /* released from away while nobody polled */
	unsigned expect;               /* CPUs of a sd_machine_run() not yet in */
	unsigned ending;               /* CPUs back in for a run's end so far */
	uint64_t epoch_ps;             /* where a run starts: the latest clock that left */
	uint64_t frontier_ps;          /* the time of the latest grant */
	struct sd_seq_slot *slot;
	struct sd_seq_go *go;
	/* What the run reports (sd_model_info): how often it was exact. */
	SD_ATOMIC(uint64_t) handoffs;
	SD_ATOMIC(uint64_t) stalls;    /* tokens the watchdog took from a blocked holder */
	SD_ATOMIC(uint64_t) late;      /* CPUs that came back behind the frontier */
	SD_ATOMIC(uint64_t) summons;   /* IPIs that brought an away CPU in */
	/* The watchdog: a host thread that looks at the holder every ms. */
	pthread_t watchdog;
	bool watchdog_started;
	SD_ATOMIC(int) stop;
	int ipi_signal;                /* a summons' real signal */
	void (*irq_replay)(void);
};


/* @irq_replay: the IPI handler's work for a signal that landed while its
 * thread held the sequencer's lock (smp.c, sd_irq_replay()), called after
 * the unlock. A pointer, as the handler's own path comes back here. */
int sd_seq_init(struct sd_seq *q, unsigned nr, bool on, int ipi_signal,
		void (*irq_replay)(void));
void sd_seq_fini(struct sd_seq *q);

/* Attach and detach: a CPU comes in AWAY at the run's epoch, and leaves. */
void sd_seq_cpu_online(struct sd_cpu_model *c);
void sd_seq_cpu_offline(struct sd_cpu_model *c);
/* The CPU's thread changes (a context switch between tasks, lib/sched):
 * the outgoing thread says so before it wakes the incoming one, which the
 * watchdog then never takes the token from (its wake is the host's to
 * make, as a summoned CPU's signal is), and the incoming thread says it
 * has come: the watchdog looks at it from now on. */
void sd_seq_cpu_handover(struct sd_cpu_model *c);
void sd_seq_cpu_rethread(struct sd_cpu_model *c);

/* sd_machine_run(): @n CPUs start; nobody gets the token before all are
 * in (sd_seq_start_cpu() from each, once attached), so who goes first is
 * the clocks' choice, not the host's. */
void sd_seq_expect(struct sd_seq *q, unsigned n);
void sd_seq_start_cpu(struct sd_cpu_model *c);
void sd_seq_cancel_start(struct sd_seq *q);
/* The run's end: every body has returned and @n CPUs come back in, each
 * from AWAY at its own clock, for what their detach charges (a last
 * switch_mm() to no mm, the strategy's own). The same rule as the start:
 * nobody gets the token before all @n are in, so the detaches go in
 * modelled-time order, not in the order the host wakes their threads
 * (which made a run's last clocks, and so its span, vary with host load).
 * The CPU leaves again at its offline (sd_seq_cpu_offline()). */
void sd_seq_end_cpu(struct sd_cpu_model *c, unsigned n);

/* Into the machine (from AWAY) and out of it (idle, or a run's end). */
void sd_seq_join(struct sd_cpu_model *c);
void sd_seq_leave(struct sd_cpu_model *c);

/* A synchronisation point of the holder: run the IPIs that have arrived
 * by its clock, and give the token away once it is past the next CPU. */
void sd_seq_sync(struct sd_cpu_model *c);

/* At the holder's sync points (sync.c): if a CPU came into the machine
 * since its horizon was computed (sd_seq_join()), compute it again with
 * that CPU in it, so that it gets its turn. Holder only. */
void sd_seq_joined(struct sd_cpu_model *c);

/* The holder waits for an event that another CPU will make happen, whose
 * time it learns from sd_seq_wake(), or at @wake_ps at the latest
 * (SD_SEQ_NEVER: none known; a spin on a real lock is sd_seq_poll()'s).
 * Returns with the token, the clock at the time it was woken at. IPIs
 * that arrive meanwhile are run (with interrupts on). A caller granted
 * the token while away and not yet running with it (sd_seq_running())
 * only takes it up, and returns. */
void sd_seq_wait(struct sd_cpu_model *c, uint64_t wake_ps);

/* Modelled work as a wait for its end at @wake_ps: sd_seq_wait(), except
 * that broadcast stalls received meanwhile lengthen it. Returns their sum
 * (ps), which is not work done. */
uint64_t sd_seq_work(struct sd_cpu_model *c, uint64_t wake_ps);
/* A spin on a real lock by the holder @c: park until the next release
 * (sd_seq_released()) and look again. False (and nothing done) if no other
 * CPU can run. */
bool sd_seq_poll(struct sd_cpu_model *c);

/* @c released a lock or ended a polled wait (core/backoff.h,
 * sd_wait_released()): the CPUs parked by sd_seq_poll() look again, at @c's
 * clock if it holds the token. Any thread of a CPU of a strict machine. */
void sd_seq_released(struct sd_cpu_model *c);
/* The holder @c broadcast an invalidation that stalls every other CPU in
 * the machine by @ps: on their clocks now, and its horizon again. */
void sd_seq_recv_owe(struct sd_cpu_model *c, uint64_t ps);
/* @self (NULL: a thread that is no CPU) made @t's awaited event happen at
 * modelled @at_ps. */
void sd_seq_wake(struct sd_cpu_model *self, struct sd_cpu_model *t, uint64_t at_ps);

/* An IPI that @self posted (NULL: a thread that is no CPU, arrival 0: at
 * once) to @t arrives at @arrival_ps. Returns true if @t needs a real
 * signal: it is away from the machine (then it is summoned in, to run it
 * at its arrival). */
bool sd_seq_posted(struct sd_cpu_model *self, struct sd_cpu_model *t, uint64_t arrival_ps);

/* The IPI handler of an away CPU that was summoned: take the token at the
 * IPI's time, so it runs in modelled order. Returns true if the caller
 * must sd_seq_unsummon() after running the queue. */
bool sd_seq_summoned_enter(struct sd_cpu_model *c);
void sd_seq_unsummon(struct sd_cpu_model *c);

/* The earliest IPI arrival not yet run on @c, and a count of the posts
 * to it (owner). */
uint64_t sd_seq_arrival(struct sd_cpu_model *c, uint64_t *posts);
/* The owner ran the IPIs that had arrived; those left in its queue arrive
 * at @next_ps the earliest. @posts: sd_seq_arrival()'s count before the
 * queue was taken (a post since then is looked at at once). */
void sd_seq_ipis_ran(struct sd_cpu_model *c, uint64_t next_ps, uint64_t posts);

/* Is thread @tid blocked (not runnable) now? From /proc: for watchdogs,
 * never a hot path. An unreadable file
 * (a thread that is gone) reads as not running. */
bool sd_tid_sleeping(int tid);

/* Is @c the holder? (its own thread asks) */
bool sd_seq_holds(const struct sd_cpu_model *c);
/* ...and running with the token, not granted it while parked or away
 * (its clock not yet taken to the grant's time: resume()). */
bool sd_seq_running(const struct sd_cpu_model *c);

/* The calling thread holds a sequencer's lock (its depth): the IPI
 * handler, whose own path takes that lock, only notes a signal that lands
 * then (irq_missed), and the unlock hands it to irq_replay. Per thread, as
 * the lock is the thread's, whichever CPU it is. */
extern SD_THREAD_LOCAL volatile sig_atomic_t sd_seq_lock_depth
	__attribute__((tls_model("initial-exec")));
extern SD_THREAD_LOCAL volatile sig_atomic_t sd_seq_irq_missed
	__attribute__((tls_model("initial-exec")));

/* Test-only, per thread: called with the sequencer's lock just taken, to
 * force what may happen there (a signal's delivery). NULL in use. */
extern SD_THREAD_LOCAL void (*sd_seq_test_locked)(void);

#endif
