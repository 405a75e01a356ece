/* SPDX-License-Identifier: MIT */
/*
 * Strict modelled time: one CPU at a time, lowest clock first (sequencer.h
 * says why). How the pieces fit:
 *
 *   - The holder runs until its clock passes the next CPU's (the "until"
 *     it computed when it got the token), then, at a synchronisation point
 *     with interrupts on and no modelled lock held, hands the token to the
 *     CPU whose time is lowest. Parked CPUs' clocks cannot change, so
 *     "until" stays right until the holder itself changes someone's state
 *     (a wake, a post), which recomputes it.
 *   - IPIs need no signal to a CPU in the machine: it is parked at a sync
 *     point, and runs the IPIs that have arrived by its clock at its next
 *     sync point; its sync points are placed at the earliest arrival. A CPU
 *     away from the machine (idle, blocked in the host) gets the real
 *     signal and is summoned: its handler takes the token at the IPI's
 *     arrival, so even then the handler runs in modelled order.
 *   - A wait (an ack, a lock) leaves the running set with the time it will
 *     look again: the ack's time (sd_seq_wake() from the handler), an IPI's
 *     arrival, or, for a spin on a real lock, just after the running CPUs'
 *     next step.
 *   - A thread that leaves the machine (idle, the end of its body) keeps
 *     its clock; it comes back at it, never at the host's idea of now. One
 *     that is blocked outside the library while holding the token (a
 *     program's own barrier) is the only case where host time decides: the
 *     watchdog thread takes the token from it after STALL_NS, and the run
 *     says so (seq_stalls); it comes back late (seq_late).
 *
 * Everything under seq->lock, a pthread mutex: never a library spinlock,
 * whose wait would come back here through the backoff hook.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../core/backoff.h"
#include "../core/error.h"
#include "../core/futex.h"
#include "../core/ipi_signal.h"
#include "clock.h"
#include "sequencer.h"

/* The holder made no sync for this long in host time while its thread
 * slept (blocked outside the library)... */
#define STALL_SLEEPING_NS (2u * 1000000u)
/* ...or ran this much CPU time (a spin on a program's own flag). */
#define STALL_SPINNING_NS (100u * 1000000u)
#define WATCHDOG_TICK_NS (1000000u)

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static struct sd_seq *seq_of(const struct sd_cpu_model *c)
{
	return c->sq;
}

/* ---- picking the next holder (under the lock) ---- */

/* A CPU that cannot take an IPI now (interrupts off, or inside a batch of
 * handlers): one that arrives while it waits must not wake it, or it would
 * be given the token back at once, forever, with the IPI still pending. */
static bool irqs_off(const struct sd_cpu_model *c)
{
	return *c->irq_depth || c->irq_batch;
}

/* The modelled time at which slot @s wants the token, SD_SEQ_NEVER if it
 * does not. A WAIT looks again at its wake time or at its first IPI. */
static uint64_t want_at(const struct sd_seq_slot *s)
{
	if (s->state == SD_SEQ_RUN)
		return s->clock_ps;
	if (s->state != SD_SEQ_WAIT)
		return SD_SEQ_NEVER;
	/* A poller looks again at a release (sd_seq_released()) or its
	 * first IPI, never by itself: two pollers must not hand the token
	 * back and forth a picosecond at a time while the lock's owner
	 * waits its turn microseconds ahead. */
	uint64_t w = min_u64(s->wake_ps == SD_SEQ_POLL ? SD_SEQ_NEVER : s->wake_ps,
			     s->deaf ? SD_SEQ_NEVER : s->arrival_ps);
	return w == SD_SEQ_NEVER ? SD_SEQ_NEVER : max_u64(s->clock_ps, w);
}

/* The two CPUs other than @except that want the token earliest (ties:
 * the lower id), -1 if none; their times in @at[0] and @at[1]. One scan
 * serves a hand-off: who gets the token, and whom it runs until. */
static void pick2(const struct sd_seq *q, int except, int best[2], uint64_t at[2])
{
	best[0] = best[1] = -1;
	at[0] = at[1] = SD_SEQ_NEVER;
	for (unsigned i = 0; i < q->nr; i++) {
		if ((int)i == except)
			continue;
		uint64_t t = want_at(&q->slot[i]);
		if (t < at[0]) {
			best[1] = best[0];
			at[1] = at[0];
			best[0] = (int)i;
			at[0] = t;
		} else if (t < at[1]) {
			best[1] = (int)i;
			at[1] = t;
		}
	}
}

/* The CPU other than @except that wants the token earliest, -1 if none;
 * its time in @at. */
static int pick(const struct sd_seq *q, int except, uint64_t *at)
{
	int best[2];
	uint64_t t[2];

	pick2(q, except, best, t);
	*at = t[0];
	return best[0];
}

/* Where CPU @id must make its next sync point, holding the token until
 * @next (-1: nobody) wants it at @at: no later than where it passes that
 * CPU, whatever the quantum (the window) would have put off, and no later
 * than its own first IPI's arrival (one posted while it waited), which it
 * takes at that time. */
static uint64_t sync_by(const struct sd_seq *q, unsigned id, int next, uint64_t at)
{
	uint64_t by = SD_SEQ_NEVER;

	if (at != SD_SEQ_NEVER)
		by = at + (next >= 0 && id < (unsigned)next ? 1 : 0);
	return min_u64(by, q->slot[id].arrival_ps);
}

/*
 * Give the token to @i at @at (the caller has given it up), to hold until
 * @next wants it at @next_at. The grantee reads what it needs from its
 * slot without the lock (resume()): written here, before the release
 * that its park() acquires, and by nobody else until it gives the token
 * up again. Its thread is woken once the lock is dropped (seq_unlock()),
 * so that it does not run into a lock its waker still holds.
 */
static void grant(struct sd_seq *q, int i, uint64_t at, int next, uint64_t next_at)
{
	struct sd_seq_slot *s = &q->slot[i];

	s->state = SD_SEQ_RUN;
	s->wake_ps = SD_SEQ_NEVER;
	s->deaf = false;
	s->working = false;
	s->grant_ps = at;
	s->clock_ps = max_u64(s->clock_ps, at);
	s->until_ps = next_at;
	s->until_id = next < 0 ? UINT32_MAX : (uint32_t)next;
	s->sync_by_ps = sync_by(q, (unsigned)i, next, next_at);
	s->grant_arrival_ps = s->arrival_ps;
	q->frontier_ps = max_u64(q->frontier_ps, at);
	atomic_store_explicit(&q->holder, i, memory_order_relaxed);
	atomic_fetch_add_explicit(&q->handoffs, 1, memory_order_relaxed);
	q->kick = i;
	/* Release: pairs with the acquire in park(); everything the old
	 * holder did is seen by the new one. */
	atomic_store_explicit(&q->go[i].go, SD_SEQ_GO_GRANTED, memory_order_release);
}

SD_THREAD_LOCAL void (*sd_seq_test_locked)(void);
SD_THREAD_LOCAL volatile sig_atomic_t sd_seq_lock_depth __attribute__((tls_model("initial-exec")));
SD_THREAD_LOCAL volatile sig_atomic_t sd_seq_irq_missed __attribute__((tls_model("initial-exec")));

/*
 * A thread that takes the lock says so first (sd_seq_lock_depth): an IPI
 * signal landing while it holds the lock must not run the handler, whose
 * own path takes the lock again (smp.c, ipi_deliver()). seq_unlock()
 * delivers it afterwards.
 */
static void seq_lock(struct sd_seq *q)
{
	sd_seq_lock_depth++;
	/* Pairs with the handler's sd_seq_lock_depth read. */
	atomic_signal_fence(memory_order_seq_cst);
	pthread_mutex_lock(&q->lock);
	if (unlikely(sd_seq_test_locked != NULL))
		sd_seq_test_locked();
}

/* Out of the lock: a signal that landed inside it is delivered now, as
 * if it had come a moment later (any point with interrupts on may take
 * one). One landing after the decrement runs the handler itself. */
static void seq_unlocked(struct sd_seq *q)
{
	/* Pairs with the handler's sd_seq_lock_depth read. */
	atomic_signal_fence(memory_order_seq_cst);
	if (--sd_seq_lock_depth == 0) {
		atomic_signal_fence(memory_order_seq_cst);
		if (unlikely(sd_seq_irq_missed))
			q->irq_replay();
	}
}

/* Drop the lock, then wake the CPU granted the token under it, if any. A
 * wake that comes late only finds the futex word already set (or, if the
 * grantee has since given the token up, makes its park() look again). */
static void seq_unlock(struct sd_seq *q)
{
	int kick = q->kick;

	q->kick = -1;
	pthread_mutex_unlock(&q->lock);
	if (kick >= 0)
		sd_futex_wake(&q->go[kick].go, 1);
	seq_unlocked(q);
}

/* Nobody else can run: the poller with the lowest clock looks again (a
 * release it was not told of, one made from outside the machine), -1 if
 * there is none. */
static int unpark_poller(struct sd_seq *q)
{
	int best = -1;

	for (unsigned i = 0; i < q->nr; i++) {
		const struct sd_seq_slot *s = &q->slot[i];

		if (s->state == SD_SEQ_WAIT && s->wake_ps == SD_SEQ_POLL &&
		    (best < 0 || s->clock_ps < q->slot[best].clock_ps))
			best = (int)i;
	}
	if (best >= 0)
		q->slot[best].wake_ps = q->slot[best].clock_ps;
	return best;
}

/* Nobody holds the token: give it to whoever wants it first. */
static void grant_next(struct sd_seq *q)
{
	int best[2];
	uint64_t at[2];

	if (q->expect)
		return;
	pick2(q, -1, best, at);
	if (best[0] < 0 && unpark_poller(q) >= 0)
		pick2(q, -1, best, at);
	if (best[0] < 0) {
		atomic_store_explicit(&q->holder, -1, memory_order_relaxed);
		return;
	}
	grant(q, best[0], at[0], best[1], at[1]);
}

/* The holder @c gives the token up (it is in q->slot already). */
static void release(struct sd_seq *q, struct sd_cpu_model *c)
{
	atomic_store_explicit(&q->go[c->id].go, SD_SEQ_GO_NO, memory_order_relaxed);
	atomic_store_explicit(&q->holder, -1, memory_order_relaxed);
	grant_next(q);
	/* Given straight back (the earliest still): its park() finds the
	 * word set, and needs no wake. */
	if (q->kick == (int)c->id)
		q->kick = -1;
}

/* The holder's horizon: the time of the next CPU that wants the token.
 * It may run while its clock is below it (or equal, if its id is lower). */
static void set_until(struct sd_cpu_model *c, uint64_t until_ps, uint32_t until_id, uint64_t by_ps)
{
	c->until_ps = until_ps;
	c->until_id = until_id;
	if (by_ps < c->sync_at_ps)
		c->sync_at_ps = by_ps;
}

/* The holder changed another CPU's state: its horizon, again. */
static void compute_until(struct sd_seq *q, struct sd_cpu_model *c)
{
	uint64_t at;
	int next = pick(q, (int)c->id, &at);

	set_until(c, at, next < 0 ? UINT32_MAX : (uint32_t)next, sync_by(q, c->id, next, at));
}

/*
 * Park until this thread holds the token. Interrupts are off meanwhile
 * (a stale signal only marks itself pending), so no handler runs while
 * the CPU is not the holder; the caller's sync point runs what arrived.
 */
static void park(struct sd_seq *q, struct sd_cpu_model *c)
{
	/* The CPU's own word (its thread is the caller): cast from the
	 * read-only view the clock keeps. */
	(*(volatile sig_atomic_t *)c->irq_depth)++;
	/* Pairs with the handler's irq_depth read (smp.c). */
	atomic_signal_fence(memory_order_seq_cst);
	/* Acquire: pairs with the release in grant(). */
	while (atomic_load_explicit(&q->go[c->id].go, memory_order_acquire) == SD_SEQ_GO_NO)
		sd_futex_wait(&q->go[c->id].go, SD_SEQ_GO_NO);
	(*(volatile sig_atomic_t *)c->irq_depth)--;
	atomic_signal_fence(memory_order_seq_cst);
}

/* Back from park(), without the lock: the clock at the time the token was
 * given at, and the horizon grant() left in the slot. From here on the
 * watchdog may judge the holder (a grantee not yet running is asleep). */
static void resume(struct sd_seq *q, struct sd_cpu_model *c)
{
	const struct sd_seq_slot *s = &q->slot[c->id];

	c->clock_ps = max_u64(c->clock_ps, s->grant_ps);
	c->arrival_ps = s->grant_arrival_ps;
	set_until(c, s->until_ps, s->until_id, s->sync_by_ps);
	atomic_store_explicit(&q->go[c->id].go, SD_SEQ_GO_RUNNING, memory_order_relaxed);
}

static uint64_t q_slot_stall(const struct sd_cpu_model *c)
{
	return seq_of(c)->slot[c->id].work_stall_ps;
}

bool sd_seq_holds(const struct sd_cpu_model *c)
{
	return atomic_load_explicit(&seq_of(c)->holder, memory_order_relaxed) == (int)c->id;
}

bool sd_seq_running(const struct sd_cpu_model *c)
{
	/* Relaxed: its own thread wrote SD_SEQ_GO_RUNNING (resume()); any
	 * other value is a grant it has not taken up, or none. */
	return sd_seq_holds(c) &&
	       atomic_load_explicit(&seq_of(c)->go[c->id].go, memory_order_relaxed) ==
		       SD_SEQ_GO_RUNNING;
}

/* If @self holds the token (it changed another CPU's state), its
 * horizon may have come closer. */
static void holder_recompute(struct sd_seq *q, struct sd_cpu_model *self)
{
	if (self && self->sq == q && sd_seq_running(self))
		compute_until(q, self);
}

/* ---- the holder's sync point, waits and wakes ---- */

void sd_seq_joined(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);

	/* Relaxed: a join seen a quantum late only delays the handover. */
	if (__builtin_expect(atomic_load_explicit(&q->joined_ps, memory_order_relaxed) ==
			     SD_SEQ_NEVER, 1) || !sd_seq_running(c))
		return;
	seq_lock(q);
	atomic_store_explicit(&q->joined_ps, SD_SEQ_NEVER, memory_order_relaxed);
	compute_until(q, c);
	seq_unlock(q);
}

void sd_seq_sync(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);

	/* Granted the token while away (summoned) is not running with it:
	 * sd_seq_join() takes it up at the grant's time first. */
	if (!sd_seq_running(c)) {
		sd_seq_join(c);
		return;
	}
	bool past = c->clock_ps > c->until_ps ||
		    (c->clock_ps == c->until_ps && c->id > c->until_id);
	if (!past)
		return;
	seq_lock(q);
	q->slot[c->id].clock_ps = c->clock_ps;
	int best[2];
	uint64_t at[2];
	pick2(q, -1, best, at);
	if (best[0] == (int)c->id) {
		/* Still the earliest (a horizon that moved away). */
		set_until(c, at[1], best[1] < 0 ? UINT32_MAX : (uint32_t)best[1],
			  sync_by(q, c->id, best[1], at[1]));
		seq_unlock(q);
		return;
	}
	atomic_store_explicit(&q->go[c->id].go, SD_SEQ_GO_NO, memory_order_relaxed);
	/* The one scan: best[0] gets the token, and holds it until best[1]
	 * (this CPU, now parked at its clock, or another) wants it. */
	grant(q, best[0], at[0], best[1], at[1]);
	seq_unlock(q);
	park(q, c);
	resume(q, c);
}

/* The holder waits (sd_seq_wait()); @working: the wait is modelled work,
 * which a broadcast's stall lengthens instead of overlapping. */
static void seq_wait(struct sd_cpu_model *c, uint64_t wake_ps, bool working)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	if (!sd_seq_running(c)) {
		sd_seq_join(c);
		return;
	}
	seq_lock(q);
	s->clock_ps = c->clock_ps;
	s->deaf = irqs_off(c);
	s->working = working;
	s->work_stall_ps = 0;
	s->state = SD_SEQ_WAIT;
	s->wake_ps = wake_ps;
	release(q, c);
	seq_unlock(q);
	park(q, c);
	resume(q, c);
}

void sd_seq_wait(struct sd_cpu_model *c, uint64_t wake_ps)
{
	seq_wait(c, wake_ps, false);
}

uint64_t sd_seq_work(struct sd_cpu_model *c, uint64_t wake_ps)
{
	seq_wait(c, wake_ps, true);
	/* Written under the lock before the grant's release, which park()
	 * acquired; nobody writes it until this CPU waits again. */
	return q_slot_stall(c);
}

bool sd_seq_poll(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];
	uint64_t at;

	seq_lock(q);
	/* A thread away from the machine released something since this
	 * CPU last looked: look again at once. */
	if (q->missed_release) {
		q->missed_release = false;
		seq_unlock(q);
		return true;
	}
	/* Nobody else can run, and no IPI of its own is on the way: the
	 * lock's owner is away from the machine, and only the host can
	 * bring it on. An IPI on the way is a step to take first: its
	 * sender may be the owner, waiting for the ack. */
	if (pick(q, (int)c->id, &at) < 0 && (s->arrival_ps == SD_SEQ_NEVER || irqs_off(c))) {
		seq_unlock(q);
		return false;
	}
	/* Look again at the next release, made at the releaser's modelled
	 * time (sd_seq_released()), or at the IPI's arrival (want_at()). */
	s->clock_ps = c->clock_ps;
	s->state = SD_SEQ_WAIT;
	s->deaf = irqs_off(c);
	s->wake_ps = SD_SEQ_POLL;
	atomic_store_explicit(&q->polling, true, memory_order_relaxed);
	release(q, c);
	seq_unlock(q);
	park(q, c);
	resume(q, c);
	return true;
}

void sd_seq_released(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	/* A grantee not yet running has a clock the others do not share. */
	const bool holder = sd_seq_running(c);

	/* Only the holder registers pollers (sd_seq_poll()), so the holder
	 * reads the hint exactly; a thread away from the machine takes the
	 * lock to see it. */
	if (holder && !atomic_load_explicit(&q->polling, memory_order_relaxed))
		return;
	seq_lock(q);
	if (!atomic_load_explicit(&q->polling, memory_order_relaxed)) {
		/* A poller that failed its try before this release and has
		 * not yet parked must not park for good (sd_seq_poll()). */
		if (!holder)
			q->missed_release = true;
		seq_unlock(q);
		return;
	}
	/* The holder released at its clock; one away from the machine
	 * has none the others share: the latest grant stands for it. */
	const uint64_t at = holder ? c->clock_ps : q->frontier_ps;

	for (unsigned i = 0; i < q->nr; i++) {
		struct sd_seq_slot *s = &q->slot[i];

		if (s->state == SD_SEQ_WAIT && s->wake_ps == SD_SEQ_POLL)
			s->wake_ps = at;
	}
	atomic_store_explicit(&q->polling, false, memory_order_relaxed);
	if (holder)
		compute_until(q, c);
	else if (atomic_load_explicit(&q->holder, memory_order_relaxed) < 0)
		grant_next(q);
	seq_unlock(q);
}

void sd_seq_recv_owe(struct sd_cpu_model *c, uint64_t ps)
{
	struct sd_seq *q = seq_of(c);

	/* Into the parked receivers' clocks, which order the machine: paid
	 * at the receiver's next sync point instead, the stall was outside
	 * what the holder's horizon was computed from, so where those sync
	 * points fell (the quantum) moved the run. A CPU away stalls no
	 * work of its own until it returns (and none if it was idle). A
	 * waiting one absorbs it into its wait, unless the wait is work,
	 * which it lengthens. */
	seq_lock(q);
	for (unsigned i = 0; i < q->nr; i++) {
		struct sd_seq_slot *s = &q->slot[i];

		if (i == c->id || s->state == SD_SEQ_OFF)
			continue;
		if (s->state == SD_SEQ_AWAY) {
			/* Taken in at its return (sync.c, recv_pay()), or
			 * dropped if it comes back from idle. */
			atomic_fetch_add_explicit(s->recv_stall_ps, ps, memory_order_relaxed);
			continue;
		}
		s->clock_ps += ps;
		if (s->state == SD_SEQ_WAIT && s->working) {
			if (s->wake_ps < SD_SEQ_POLL)
				s->wake_ps += ps;
			s->work_stall_ps += ps;
		}
	}
	compute_until(q, c);
	seq_unlock(q);
}

void sd_seq_wake(struct sd_cpu_model *self, struct sd_cpu_model *t, uint64_t at_ps)
{
	struct sd_seq *q = seq_of(t);
	struct sd_seq_slot *s = &q->slot[t->id];

	seq_lock(q);
	if (s->state == SD_SEQ_WAIT) {
		s->wake_ps = min_u64(s->wake_ps == SD_SEQ_POLL ? SD_SEQ_NEVER : s->wake_ps, at_ps);
		if (atomic_load_explicit(&q->holder, memory_order_relaxed) < 0)
			grant_next(q);
		else
			holder_recompute(q, self);
	}
	seq_unlock(q);
}

/* ---- IPIs ---- */

bool sd_seq_posted(struct sd_cpu_model *self, struct sd_cpu_model *t, uint64_t arrival_ps)
{
	struct sd_seq *q = seq_of(t);
	struct sd_seq_slot *s = &q->slot[t->id];
	bool signal = false;

	seq_lock(q);
	s->posts++;
	if (!arrival_ps)
		arrival_ps = s->clock_ps;       /* from no CPU: at once */
	s->arrival_ps = min_u64(s->arrival_ps, arrival_ps);
	if (s->state == SD_SEQ_AWAY) {
		/* The IPI brings it in at its arrival, as an interrupt wakes
		 * an idle CPU. */
		s->state = SD_SEQ_RUN;
		s->summoned = true;
		s->clock_ps = max_u64(s->clock_ps, arrival_ps);
		atomic_fetch_add_explicit(&q->summons, 1, memory_order_relaxed);
		signal = true;
	}
	if (atomic_load_explicit(&q->holder, memory_order_relaxed) < 0)
		grant_next(q);
	else
		holder_recompute(q, self);
	seq_unlock(q);
	return signal;
}

uint64_t sd_seq_arrival(struct sd_cpu_model *c, uint64_t *posts)
{
	struct sd_seq *q = seq_of(c);
	uint64_t a;

	seq_lock(q);
	a = q->slot[c->id].arrival_ps;
	if (posts)
		*posts = q->slot[c->id].posts;
	seq_unlock(q);
	c->arrival_ps = a;
	return a;
}

void sd_seq_ipis_ran(struct sd_cpu_model *c, uint64_t next_ps, uint64_t posts)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	/* A post after the queue was taken: look at the queue again at once. */
	s->arrival_ps = s->posts != posts ? min_u64(next_ps, c->clock_ps) : next_ps;
	c->arrival_ps = s->arrival_ps;
	seq_unlock(q);
}

bool sd_seq_summoned_enter(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	bool summoned = s->summoned && s->state == SD_SEQ_RUN;
	/* Claimed: a second signal for the same summons (a real-time
	 * signal is queued, not merged; or one replayed by seq_unlock())
	 * finds it taken, and does not park for a token this handler will
	 * have given up by then. */
	s->summoned = false;
	seq_unlock(q);
	if (!summoned)
		return false;
	/* At once if the token came already: park() is also the acquire
	 * that resume()'s reads of the slot need. */
	park(q, c);
	resume(q, c);
	return true;
}

void sd_seq_unsummon(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	s->summoned = false;
	s->state = SD_SEQ_AWAY;
	s->clock_ps = c->clock_ps;
	if (sd_seq_holds(c))
		release(q, c);
	seq_unlock(q);
}

/* ---- in and out of the machine ---- */

void sd_seq_join(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	if (sd_seq_holds(c)) {
		if (atomic_load_explicit(&q->go[c->id].go, memory_order_relaxed) ==
		    SD_SEQ_GO_RUNNING)
			return;
		/* Granted while away (summoned, its signal still on the way)
		 * and back in the library first: it takes the token up here,
		 * at the grant's time, and its sync points run the IPI; the
		 * signal's handler then finds it holding, not summoned. */
		seq_lock(q);
		s->summoned = false;
		seq_unlock(q);
		park(q, c);
		resume(q, c);
		return;
	}
	seq_lock(q);
	if (s->state == SD_SEQ_RUN && s->summoned) {
		/* Summoned meanwhile: its sync points run the IPI. */
		s->summoned = false;
	} else if (s->state != SD_SEQ_RUN) {
		/* Its own clock, never the host's idea of now: behind the
		 * frontier it is late, and the run says so. */
		if (s->stalled || c->clock_ps < q->frontier_ps)
			atomic_fetch_add_explicit(&q->late, 1, memory_order_relaxed);
		s->stalled = false;
		s->state = SD_SEQ_RUN;
		s->clock_ps = c->clock_ps;
	}
	if (atomic_load_explicit(&q->holder, memory_order_relaxed) < 0) {
		grant_next(q);
	} else if (s->clock_ps < atomic_load_explicit(&q->joined_ps, memory_order_relaxed)) {
		/* The holder's horizon was computed without this CPU, and only
		 * the holder computes it: it looks here at its sync points. A
		 * holder that never waits (a loop of TLB hits) would otherwise
		 * run on for ever while this CPU, taken away by the watchdog
		 * while its thread was off its PU, waits to come back. */
		atomic_store_explicit(&q->joined_ps, s->clock_ps, memory_order_relaxed);
	}
	seq_unlock(q);
	park(q, c);
	resume(q, c);
}

void sd_seq_leave(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	s->state = SD_SEQ_AWAY;
	s->summoned = false;
	s->clock_ps = c->clock_ps;
	if (sd_seq_holds(c))
		release(q, c);
	seq_unlock(q);
	/* Its next event is a sync point, which brings it back in: an away
	 * CPU that went on with library calls would make them outside
	 * modelled order, beside the holder. */
	c->sync_at_ps = 0;
}

void sd_seq_cpu_online(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	/* A run starts where the last one ended: the same time for every
	 * CPU, whatever order the host attached them in. */
	c->clock_ps = max_u64(c->clock_ps, q->epoch_ps);
	s->clock_ps = c->clock_ps;
	s->state = SD_SEQ_AWAY;
	s->summoned = s->stalled = s->handover = false;
	s->wake_ps = s->arrival_ps = SD_SEQ_NEVER;
	s->thread = pthread_self();
	s->tid = (int)syscall(SYS_gettid);
	s->recv_stall_ps = c->recv_stall_ps;
	atomic_store_explicit(&q->go[c->id].go, SD_SEQ_GO_NO, memory_order_relaxed);
	seq_unlock(q);
	c->until_ps = SD_SEQ_NEVER;
}

void sd_seq_cpu_handover(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);

	seq_lock(q);
	q->slot[c->id].handover = true;
	seq_unlock(q);
}

void sd_seq_cpu_rethread(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	s->handover = false;
	s->thread = pthread_self();
	s->tid = (int)syscall(SYS_gettid);
	seq_unlock(q);
}

void sd_seq_cpu_offline(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);
	struct sd_seq_slot *s = &q->slot[c->id];

	seq_lock(q);
	s->state = SD_SEQ_OFF;
	s->summoned = false;
	q->epoch_ps = max_u64(q->epoch_ps, c->clock_ps);
	if (sd_seq_holds(c))
		release(q, c);
	seq_unlock(q);
}

void sd_seq_expect(struct sd_seq *q, unsigned n)
{
	seq_lock(q);
	q->expect = n;
	seq_unlock(q);
}

/* In together (under the lock): RUN at its own clock, the token held back
 * until the last of those expected is in. */
static void enter_together(struct sd_seq *q, struct sd_cpu_model *c)
{
	struct sd_seq_slot *s = &q->slot[c->id];

	s->state = SD_SEQ_RUN;
	/* A post before it started (from a thread that is no CPU) summoned
	 * it: its sync points run the IPI, as in sd_seq_join(). */
	s->summoned = false;
	s->clock_ps = c->clock_ps;
	if (q->expect)
		q->expect--;
	if (atomic_load_explicit(&q->holder, memory_order_relaxed) < 0)
		grant_next(q);
}

void sd_seq_start_cpu(struct sd_cpu_model *c)
{
	struct sd_seq *q = seq_of(c);

	seq_lock(q);
	enter_together(q, c);
	seq_unlock(q);
	park(q, c);
	resume(q, c);
}

void sd_seq_end_cpu(struct sd_cpu_model *c, unsigned n)
{
	struct sd_seq *q = seq_of(c);

	seq_lock(q);
	/* The first of the @n to come back holds the token back for the
	 * others; no CPU is in the machine now (every body has ended), so
	 * nobody holds it meanwhile. */
	if (!q->ending)
		q->expect = n;
	if (++q->ending == n)
		q->ending = 0;
	enter_together(q, c);
	seq_unlock(q);
	park(q, c);
	resume(q, c);
}

void sd_seq_cancel_start(struct sd_seq *q)
{
	seq_lock(q);
	q->expect = 0;
	if (atomic_load_explicit(&q->holder, memory_order_relaxed) < 0)
		grant_next(q);
	seq_unlock(q);
}

/* ---- the watchdog ---- */

static uint64_t host_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(pthread_t t)
{
	clockid_t id;
	struct timespec ts;

	if (pthread_getcpuclockid(t, &id) || clock_gettime(id, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool sd_tid_sleeping(int tid)
{
	char path[64], buf[256];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'R';
}

struct watch {
	int holder;
	uint64_t beats, since_ns, cpu_ns, report_ns;
};

#define REPORT_NS (2000u * 1000000u)

/* Say who is stuck: the holder, and every CPU in the machine. */
static void report_stuck(struct sd_seq *q, int h, uint64_t ns)
{
	static const char *const names[] = { "off", "away", "run", "wait" };

	seq_lock(q);
	int go = atomic_load_explicit(&q->go[h].go, memory_order_relaxed);
	fprintf(stderr, "libshootdown: strict modelled time: CPU %d (tid %d%s%s) has held the "
		"machine for %llu ms without a sync point; the others:", h, q->slot[h].tid,
		q->slot[h].summoned ? ", summoned by an IPI it has not taken yet" : "",
		go == SD_SEQ_GO_GRANTED ? ", granted and not yet running" : "",
		(unsigned long long)(ns / 1000000));
	for (unsigned i = 0; i < q->nr; i++)
		if ((int)i != h && q->slot[i].state != SD_SEQ_OFF)
			fprintf(stderr, " %u:%s@%llu", i, names[q->slot[i].state],
				(unsigned long long)(q->slot[i].clock_ps / 1000));
	fprintf(stderr, "\n");
	seq_unlock(q);
}

/*
 * Take the token from holder @h, blocked outside the library (under the
 * lock). IPIs posted to it while it held the token wait in its queue for
 * a sync point it will not reach: it is summoned as a post to an away CPU
 * would summon it (true: the caller sends the signal once the lock is
 * dropped), else it is simply away.
 */
static bool take_token(struct sd_seq *q, int h)
{
	struct sd_seq_slot *s = &q->slot[h];
	bool summon = s->arrival_ps != SD_SEQ_NEVER;

	s->stalled = true;
	s->state = summon ? SD_SEQ_RUN : SD_SEQ_AWAY;
	s->summoned = summon;
	if (summon) {
		s->clock_ps = max_u64(s->clock_ps, s->arrival_ps);
		atomic_fetch_add_explicit(&q->summons, 1, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&q->stalls, 1, memory_order_relaxed);
	atomic_store_explicit(&q->go[h].go, SD_SEQ_GO_NO, memory_order_relaxed);
	atomic_store_explicit(&q->holder, -1, memory_order_relaxed);
	grant_next(q);
	return summon;
}

/* One look at the holder: a holder that made no sync for STALL_* while
 * blocked or spinning outside the library loses the token. A summoned
 * holder is never forced: its signal is on the way, and it runs the IPI
 * however late the host delivers it. */
static void watch_tick(struct sd_seq *q, struct watch *w)
{
	uint64_t now = host_now_ns();
	int h = atomic_load_explicit(&q->holder, memory_order_relaxed);

	if (h < 0) {
		w->holder = -1;
		return;
	}
	uint64_t beats = atomic_load_explicit(&q->go[h].beats, memory_order_relaxed);
	seq_lock(q);
	pthread_t thread = q->slot[h].thread;
	int tid = q->slot[h].tid;
	bool summoned = q->slot[h].summoned || q->slot[h].handover;
	seq_unlock(q);
	if (h != w->holder || beats != w->beats) {
		w->holder = h;
		w->beats = beats;
		w->since_ns = now;
		w->cpu_ns = thread_cpu_ns(thread);
		w->report_ns = REPORT_NS;
		return;
	}
	if (now - w->since_ns >= w->report_ns) {
		report_stuck(q, h, now - w->since_ns);
		w->report_ns += REPORT_NS;
	}
	if (now - w->since_ns < STALL_SLEEPING_NS || summoned)
		return;
	bool stalled = sd_tid_sleeping(tid) || thread_cpu_ns(thread) - w->cpu_ns >= STALL_SPINNING_NS;
	bool signal = false;
	if (!stalled)
		return;
	seq_lock(q);
	/* Never a grantee that has not run yet: it sleeps until its wake,
	 * which seq_unlock() makes after the lock is dropped. */
	if (atomic_load_explicit(&q->holder, memory_order_relaxed) == h &&
	    atomic_load_explicit(&q->go[h].go, memory_order_relaxed) == SD_SEQ_GO_RUNNING &&
	    atomic_load_explicit(&q->go[h].beats, memory_order_relaxed) == beats)
		signal = take_token(q, h);
	seq_unlock(q);
	if (signal)
		sd_ipi_signal_send(q->ipi_signal, tid);
	w->holder = -1;
}

static void *watchdog_main(void *p)
{
	struct sd_seq *q = p;
	struct watch w = { -1, 0, 0, 0, REPORT_NS };
	sigset_t all;

	/* No IPI signal may land on a thread that is no CPU. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	while (!atomic_load_explicit(&q->stop, memory_order_relaxed)) {
		struct timespec tick = { 0, WATCHDOG_TICK_NS };
		nanosleep(&tick, NULL);
		watch_tick(q, &w);
	}
	return NULL;
}

/* ---- set up ---- */

int sd_seq_init(struct sd_seq *q, unsigned nr, bool on, int ipi_signal,
		void (*irq_replay)(void))
{
	memset(q, 0, sizeof(*q));
	q->ipi_signal = ipi_signal;
	q->irq_replay = irq_replay;
	atomic_init(&q->holder, -1);
	atomic_init(&q->joined_ps, SD_SEQ_NEVER);
	atomic_init(&q->polling, false);
	q->kick = -1;
	if (!on)
		return 0;
	q->nr = nr;
	q->slot = calloc(q->nr, sizeof(*q->slot));
	q->go = aligned_alloc(SD_CACHELINE, q->nr * sizeof(*q->go));
	if (!q->slot || !q->go) {
		free(q->slot);
		free(q->go);
		return sd_fail(-ENOMEM, "strict modelled time: no memory for %u CPUs", q->nr);
	}
	for (unsigned i = 0; i < q->nr; i++) {
		q->slot[i].state = SD_SEQ_OFF;
		q->slot[i].wake_ps = q->slot[i].arrival_ps = SD_SEQ_NEVER;
		atomic_init(&q->go[i].go, 0);
		atomic_init(&q->go[i].beats, 0);
	}
	pthread_mutex_init(&q->lock, NULL);
	if (pthread_create(&q->watchdog, NULL, watchdog_main, q)) {
		pthread_mutex_destroy(&q->lock);
		free(q->slot);
		free(q->go);
		return sd_fail(-EAGAIN, "strict modelled time: could not start the watchdog thread");
	}
	q->watchdog_started = true;
	q->on = true;
	return 0;
}

void sd_seq_fini(struct sd_seq *q)
{
	if (!q->on)
		return;
	atomic_store(&q->stop, 1);
	if (q->watchdog_started)
		pthread_join(q->watchdog, NULL);
	pthread_mutex_destroy(&q->lock);
	free(q->slot);
	free(q->go);
	q->on = false;
}
