/* SPDX-License-Identifier: MIT */
/*
 * Modelled time: the charges, the shared resources and lax synchronisation
 * (include/shootdown/model.h for what, docs/design.md "Modelled time" for
 * why it is built this way). The profile file is read by profile.c.
 *
 * The scheme is Graphite's (Miller et al., HPCA 2010): the real threads run
 * as they will, each emulated CPU advances its own clock by the cost of
 * what it did, shared resources keep a "free at" time that serialises
 * their users in modelled time, and a CPU that gets more than a window
 * ahead of the slowest running CPU waits for it in real time. Messages (an
 * IPI, an ack) carry the sender's time; the receiver's clock moves up to
 * the message's arrival if it is behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/backoff.h"
#include "../core/error.h"
#include "event.h"
#include "machine.h"
#include "model.h"

_Static_assert(SD_LOCK_KIND_NR <= SD_MODEL_LOCK_KINDS, "model.h: too few lock kinds");
_Static_assert(SD_EV_NR <= 256, "model.h: ev_ps is too small for the event list");

/* A CPU that makes no modelled progress for this long in real time while
 * its thread sleeps is taken to be blocked outside the library... */
#define STALL_SLEEPING_NS (2u * 1000000u)
/* ...and after this long even while it runs (a busy-wait on a flag). */
#define STALL_RUNNING_NS (200u * 1000000u)

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* ---- distances ---- */

enum sd_model_distance sd_model_distance_of(const struct sd_model *mod, unsigned a, unsigned b)
{
	const struct sd_model_place *pa = &mod->place[a], *pb = &mod->place[b];

	if (pa->core == pb->core)
		return SD_DIST_CORE;
	if (pa->llc == pb->llc)
		return SD_DIST_LLC;
	if (pa->package == pb->package)
		return SD_DIST_PACKAGE;
	return SD_DIST_SYSTEM;
}

static uint64_t dist_cost(const struct sd_model *mod, enum sd_model_dist_param p, unsigned a,
			  unsigned b)
{
	return mod->dist_ps[p][sd_model_distance_of(mod, a, b)];
}

/* The first gap of @occ at or after @t in @q, under its lock. */
static uint64_t queue_reserve(struct sd_cpu *c, struct sd_model_queue *q, uint64_t t,
			      uint64_t occ)
{
	struct sd_backoff b = SD_BACKOFF_INIT;
	uint64_t start;

	/* An IPI handler that interrupted this very CPU inside the queue
	 * (none reserves today, but a user strategy's handler could) must
	 * not wait for itself: it queues behind everything instead. */
	while (!sd_spin_trylock(&q->lock)) {
		/* Relaxed: an owner equal to us was written by this thread
		 * (the handler interrupted it), so no ordering is needed to
		 * see it; any other value just means wait. */
		if (atomic_load_explicit(&q->owner, memory_order_relaxed) == c->id + 1)
			return max_u64(t, q->last_end_ps);
		sd_backoff_wait(&b);
	}
	atomic_store_explicit(&q->owner, c->id + 1, memory_order_relaxed);
	start = sd_model_queue_reserve(q, t, occ);
	atomic_store_explicit(&q->owner, 0, memory_order_relaxed);
	sd_spin_unlock(&q->lock);
	return start;
}

/* ---- lax synchronisation ---- */

static void publish(struct sd_cpu *c)
{
	/* Relaxed: a clock is a hint for others' waits, never data they
	 * depend on (the IPIs carry their own times). */
	atomic_store_explicit(&c->model_pub.clock_ps, c->model.clock_ps, memory_order_relaxed);
}

/* The slowest running CPU other than @c, its clock in @min (UINT64_MAX if
 * none runs). Returns its id. */
static unsigned slowest_running(const struct sd_cpu *c, uint64_t *min)
{
	const struct sd_machine *m = c->m;
	unsigned who = UINT32_MAX;

	*min = UINT64_MAX;
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		const struct sd_cpu *t = m->cpus[i];
		if (t == c || atomic_load_explicit(&t->model_pub.state, memory_order_relaxed) !=
				      SD_MODEL_RUNNING)
			continue;
		uint64_t v = atomic_load_explicit(&t->model_pub.clock_ps, memory_order_relaxed);
		if (v < *min) {
			*min = v;
			who = i;
		}
	}
	return who;
}

/* The latest clock any other attached CPU published (0 if none). */
static uint64_t latest_attached(const struct sd_cpu *c)
{
	const struct sd_machine *m = c->m;
	uint64_t max = 0;

	for (unsigned i = 0; i < m->nr_cpus; i++) {
		const struct sd_cpu *t = m->cpus[i];
		if (t == c || atomic_load_explicit(&t->model_pub.state, memory_order_relaxed) ==
				      SD_MODEL_OFF)
			continue;
		uint64_t v = atomic_load_explicit(&t->model_pub.clock_ps, memory_order_relaxed);
		max = v > max ? v : max;
	}
	return max;
}

/* One more on a counter of the CPU's public line that only the CPU itself
 * writes: a plain load and store, no read-modify-write, since no other
 * writer can race it; relaxed, as its readers (stats snapshots,
 * sd_machine_model_info()) only sum it. */
static inline void own_inc(SD_ATOMIC(uint64_t) *v)
{
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* The stalls other CPUs' broadcasts owe @c, into its clock (recv_owe()
 * says how the word is shared). At sync points only: their places are
 * fixed in modelled time, so strict runs stay the same run after run. */
static bool recv_pay(struct sd_cpu *c)
{
	if (!atomic_load_explicit(&c->recv_stall_ps, memory_order_relaxed))
		return false;
	c->model.clock_ps += atomic_exchange_explicit(&c->recv_stall_ps, 0, memory_order_relaxed);
	return true;
}

/* Back after time away (idle, stalled, detached): broadcasts that reached
 * the CPU meanwhile cost nothing, as they stalled no work of its own. */
static void recv_forget(struct sd_cpu *c)
{
	atomic_store_explicit(&c->recv_stall_ps, 0, memory_order_relaxed);
}

/* The host's first preemption of this vCPU after its clock: the same
 * instants on every vCPU, as the host's ticks are unless skew_tick=1
 * (kernel/time/tick-sched.c). */
static void next_preempt(struct sd_cpu *c)
{
	uint64_t every = c->m->model.param_ps[SD_MP_VCPU_PREEMPT_INTERVAL];

	c->model.preempt_at_ps = every ? (c->model.clock_ps / every + 1) * every : UINT64_MAX;
}

/* Back in the running set after idle, a stall or attach: time went on
 * while the CPU was away, so it moves up to the slowest running CPU, or,
 * if none runs, to the latest time any CPU reached. */
static void rejoin(struct sd_cpu *c)
{
	struct sd_model *mod = &c->m->model;
	uint64_t min;

	recv_forget(c);
	slowest_running(c, &min);
	if (min == UINT64_MAX)
		min = latest_attached(c);
	if (c->model.clock_ps < min)
		c->model.clock_ps = min;
	/* Preemptions while away were not on the CPU's way. */
	next_preempt(c);
	publish(c);
	atomic_store_explicit(&c->model_pub.state, SD_MODEL_RUNNING, memory_order_relaxed);
	atomic_fetch_add_explicit(&mod->rejoins, 1, memory_order_relaxed);
}

void sd_model_set_run(struct sd_cpu *c, int state)
{
	int old = atomic_load_explicit(&c->model_pub.state, memory_order_relaxed);

	if (!c->model.ev_ps)
		return;
	if (c->model.seq) {
		/* Idle leaves the machine; a switch brings it back, at its
		 * own clock (sequencer.c). What was owed while away is
		 * dropped once it holds the token, where no add races. */
		if (state == SD_MODEL_RUNNING) {
			sd_seq_join(&c->model);
			if (old != SD_MODEL_RUNNING)
				recv_forget(c);
		} else {
			sd_seq_leave(&c->model);
		}
		atomic_store_explicit(&c->model_pub.state, state, memory_order_relaxed);
		return;
	}
	if (old == state)
		return;
	publish(c);
	if (state == SD_MODEL_RUNNING) {
		rejoin(c);
		return;
	}
	atomic_store_explicit(&c->model_pub.state, state, memory_order_relaxed);
	c->model.sync_at_ps = c->model.clock_ps;
}

void sd_model_lax_poll(struct sd_cpu *c)
{
	int running = SD_MODEL_RUNNING;

	if (!c->model.ev_ps || c->model.seq)
		return;
	/* Out of the running set, as a CPU taken for stalled is, until its
	 * next event (sd_model_event()) brings it back at the slowest
	 * running CPU's time: what it waits for happens in their time. Not
	 * counted as a stall: the program said it waits. */
	publish(c);
	atomic_compare_exchange_strong_explicit(&c->model_pub.state, &running, SD_MODEL_STALLED,
						memory_order_relaxed, memory_order_relaxed);
}

/* Is @t's thread asleep (not runnable) right now? Read from /proc on the
 * slow path of a wait that has already lasted milliseconds. */
static bool thread_sleeping(const struct sd_cpu *t)
{
	int tid = atomic_load_explicit(&t->tid, memory_order_relaxed);

	/* No thread: nothing runs it. */
	return !tid || sd_tid_sleeping(tid);
}

struct laggard {
	unsigned who;
	uint64_t clock_ps;
	uint64_t since_ns;
};

/* The slowest CPU has not moved for a while: if its thread is blocked
 * outside the library (or has spun for very long), it stops holding the
 * others back until it comes back (rejoin()). */
static void check_stall(struct sd_cpu *c, struct laggard *l, unsigned who, uint64_t min)
{
	uint64_t now = sd_now_ns();
	struct sd_cpu *t;
	int running = SD_MODEL_RUNNING;

	if (who != l->who || min != l->clock_ps) {
		l->who = who;
		l->clock_ps = min;
		l->since_ns = now;
		return;
	}
	if (now - l->since_ns < STALL_SLEEPING_NS)
		return;
	t = c->m->cpus[who];
	if (now - l->since_ns < STALL_RUNNING_NS && !thread_sleeping(t))
		return;
	/* Relaxed, as every run state: it steers waits only. If the laggard
	 * changes its own state first, the CAS fails and nothing is lost; if
	 * it comes back after it, it rejoins (sd_model_event()). Only the
	 * CAS's winner counts: a stall is where host time decided the run. */
	if (atomic_compare_exchange_strong_explicit(&t->model_pub.state, &running,
						    SD_MODEL_STALLED, memory_order_relaxed,
						    memory_order_relaxed))
		atomic_fetch_add_explicit(&c->m->model.stalls, 1, memory_order_relaxed);
	l->since_ns = now;
}

static void note_lead(struct sd_model *mod, uint64_t clock, uint64_t min)
{
	if (min == UINT64_MAX || clock <= min)
		return;
	uint64_t lead = clock - min, seen = atomic_load_explicit(&mod->max_lead_ps,
								 memory_order_relaxed);
	while (lead > seen && !atomic_compare_exchange_weak_explicit(&mod->max_lead_ps, &seen, lead,
								      memory_order_relaxed,
								      memory_order_relaxed))
		;
}

/*
 * One step of a window wait. The CPU waited for is usually runnable but
 * not running (more emulated CPUs than PUs: that is what the window is
 * for), so spinning only delays it: give the PU away at once, and nap
 * briefly now and then so a long wait does not burn a core (invariant 6:
 * spin, yield, sleep). With a PU each, spin first as every wait does.
 */
static void window_backoff(struct sd_cpu *c, struct sd_backoff *b)
{
	const struct sd_machine *m = c->m;

	if (!sd_topology_oversubscribed(&m->topo)) {
		sd_backoff_wait(b);
		return;
	}
	if (++b->n % 64) {
		sched_yield();
	} else {
		struct timespec nap = { 0, 10000 };
		nanosleep(&nap, NULL);
	}
}

/*
 * Wait (interrupts on, no modelled lock held: see sd_model_sync()) until
 * no running CPU is more than a window behind. Spin, yield, then sleep
 * (sd_backoff, invariant 6); IPIs are answered meanwhile, since interrupts
 * are on.
 */
static uint64_t window_wait(struct sd_cpu *c, uint64_t min)
{
	struct sd_model *mod = &c->m->model;
	struct laggard l = { UINT32_MAX, 0, 0 };
	struct sd_backoff b = SD_BACKOFF_INIT;
	unsigned who;

	own_inc(&c->model_pub.window_waits);
	do {
		window_backoff(c, &b);
		who = slowest_running(c, &min);
		if (who != UINT32_MAX)
			check_stall(c, &l, who, min);
	} while (min != UINT64_MAX && c->model.clock_ps > min + mod->window_ps);
	return min;
}

/* The vCPU's clock reached a host preemption: it is off its physical CPU
 * for vcpu_preempt, whatever it was doing, a lock it holds included
 * (lock-holder preemption: the guest's spinlock cannot yield, so the
 * waiters spin on). The step that crossed the preemption is pushed back
 * by it whole; a vCPU spinning for a lock meanwhile pays it again after
 * the lock, which overcharges a waiter by at most vcpu_preempt a tick. */
static void vcpu_preempt(struct sd_cpu *c)
{
	c->model.clock_ps += c->m->model.param_ps[SD_MP_VCPU_PREEMPT];
	next_preempt(c);
	own_inc(&c->model_pub.preemptions);
	if (c->model.locks_held)
		own_inc(&c->model_pub.preemptions_locked);
}

/* The next synchronisation point: a quantum on, or sooner where the
 * window would run out above @min, the slowest clock known (UINT64_MAX:
 * none runs). */
static void next_sync(struct sd_cpu *c, uint64_t min)
{
	const struct sd_model *mod = &c->m->model;

	c->model.sync_at_ps = c->model.clock_ps + mod->quantum_ps;
	if (min != UINT64_MAX && min + mod->window_ps < c->model.sync_at_ps)
		c->model.sync_at_ps = max_u64(min + mod->window_ps, c->model.clock_ps + 1);
	if (c->model.preempt_at_ps < c->model.sync_at_ps)
		c->model.sync_at_ps = c->model.preempt_at_ps;
}

static void lax_sync(struct sd_cpu *c)
{
	struct sd_model *mod = &c->m->model;
	int state = atomic_load_explicit(&c->model_pub.state, memory_order_relaxed);
	uint64_t min;

	(void)recv_pay(c);
	/* The host preempts a vCPU whatever the guest is doing: in a lock,
	 * with interrupts off, before any window wait. */
	if (c->model.clock_ps >= c->model.preempt_at_ps)
		vcpu_preempt(c);
	publish(c);
	if (state == SD_MODEL_STALLED) {
		rejoin(c);
		state = SD_MODEL_RUNNING;
	}
	/* Only a running CPU with interrupts on and no modelled lock may
	 * wait: with interrupts off it could hold up a CPU that waits for
	 * its ack, and a lock holder one that waits for the lock. */
	if (state != SD_MODEL_RUNNING || c->irq_depth || c->model.locks_held) {
		/* Retry where the section ends (sd_model_resync()):
		 * a CPU whose syncs all fell inside its sections would never
		 * wait at all (a locked trap loop whose steps outside the lock
		 * are shorter than the quantum). Not from an IPI handler
		 * (irq_batch): it would wait in the handler at its exit, with
		 * its clock just pulled up to its sender's. */
		if (state == SD_MODEL_RUNNING && !c->model.irq_batch)
			c->model.sync_deferred = true;
		next_sync(c, UINT64_MAX);
		return;
	}
	c->model.sync_deferred = false;
	/* The slowest running clock only grows (a CPU joins or rejoins at
	 * it or above), so one seen before is a lower bound: while this CPU
	 * is within a window of it, it is within a window of the slowest, and
	 * the scan of every CPU's clock (a cache miss each) is not needed.
	 * Owner-private: only this CPU reads or writes seen_min_ps. */
	if (c->model.clock_ps <= c->model.seen_min_ps + mod->window_ps) {
		next_sync(c, c->model.seen_min_ps);
		return;
	}
	slowest_running(c, &min);
	if (min != UINT64_MAX && c->model.clock_ps > min + mod->window_ps)
		min = window_wait(c, min);
	if (min != UINT64_MAX && min > c->model.seen_min_ps)
		c->model.seen_min_ps = min;
	note_lead(mod, c->model.clock_ps, min);
	next_sync(c, min);
}


/* ---- strict mode's synchronisation (sequencer.h) ---- */

/* The watchdog's sign of life: the holder made progress. */
static inline void seq_beat(struct sd_cpu *c)
{
	own_inc(&c->m->model.seq.go[c->id].beats);
}

/* The next sync point of a holder: where it passes the next CPU, its
 * first IPI arrives, the host preempts it, or a quantum on (to see CPUs
 * that came back from away meanwhile). */
/* Strict mode's quantum: how soon a holder looks again without a reason
 * (a CPU back from away is seen within it). Not the window, which strict
 * mode does not have. Where the sync points fall moves no clock since
 * broadcast stalls go into the sequencer's clocks (sd_seq_recv_owe()):
 * the main job's rows are the same at 250 ns, 1 us and 4 us. */
#define SEQ_QUANTUM_PS (1000u * PS_PER_NS)

static void seq_next_sync(struct sd_cpu *c, uint64_t arrival)
{
	uint64_t at = c->model.clock_ps + SEQ_QUANTUM_PS;

	if (c->model.until_ps != SD_SEQ_NEVER) {
		uint64_t pass = c->model.until_ps + (c->id < c->model.until_id ? 1 : 0);
		at = pass < at ? pass : at;
	}
	at = arrival < at ? arrival : at;
	at = c->model.preempt_at_ps < at ? c->model.preempt_at_ps : at;
	c->model.sync_at_ps = at > c->model.clock_ps ? at : c->model.clock_ps + 1;
}

static bool seq_sync(struct sd_cpu *c)
{
	uint64_t arrival;

	seq_beat(c);
	if (c->model.clock_ps >= c->model.preempt_at_ps)
		vcpu_preempt(c);
	publish(c);
	sd_seq_join(&c->model);         /* at once if it holds the token and runs */
	/* Holding the token: every add made earlier in modelled time is
	 * in. A preemption the stall crosses is met at the next sync. */
	if (recv_pay(c))
		publish(c);
	/* With interrupts off or a modelled lock held the CPU neither runs
	 * IPIs nor gives the token away: a CPU parked holding a lock would
	 * leave its next acquirer polling. The section's end syncs again
	 * (sd_model_resync()). */
	if (c->irq_depth || c->model.locks_held || c->model.irq_batch) {
		if (!c->model.irq_batch)
			c->model.sync_deferred = true;
		seq_next_sync(c, SD_SEQ_NEVER);
		return false;
	}
	c->model.sync_deferred = false;
	for (;;) {
		arrival = sd_seq_arrival(&c->model, NULL);
		if (arrival <= c->model.clock_ps || c->ipi_pending)
			return true;
		if (c->model.clock_ps < c->model.until_ps ||
		    (c->model.clock_ps == c->model.until_ps && c->id < c->model.until_id))
			break;
		sd_seq_sync(&c->model);
	}
	publish(c);
	seq_next_sync(c, arrival);
	return false;
}

uint64_t sd_model_work_wait(struct sd_cpu *c, uint64_t left)
{
	/* In the machine first: the time spent away (idle, or until a
	 * summons' grant) is no work done. */
	if (!sd_seq_running(&c->model))
		sd_seq_join(&c->model);

	uint64_t start = c->model.clock_ps, wake = start + left;

	if (c->model.preempt_at_ps > start && c->model.preempt_at_ps < wake)
		wake = c->model.preempt_at_ps;
	uint64_t stalled = sd_seq_work(&c->model, wake);
	uint64_t passed = c->model.clock_ps - start;
	uint64_t done = passed - (stalled < passed ? stalled : passed);

	return done < left ? done : left;
}

bool sd_model_sync(struct sd_cpu *c)
{
	if (c->model.seq)
		return seq_sync(c);
	lax_sync(c);
	return false;
}

/* ---- charges out of line ---- */

/*
 * A broadcast stalls the CPUs it reaches: @ps owed by each CPU but the
 * issuer (whose own TLB is in issue_ps). TLBI ...IS reaches every PE of
 * the inner-shareable domain, whatever runs there (Arm ARM, DDI 0487,
 * "TLB maintenance instructions": the IS forms apply to all PEs in the
 * same Inner Shareable shareability domain; Linux puts every CPU in one),
 * and INVLPGB every logical processor of the system (AMD64 APM vol. 3,
 * INVLPGB): lib/strategy/broadcast.c and lib/arch/invlpgb.c invalidate
 * every CPU's TLB, not mm_cpumask's, and every CPU pays likewise.
 *
 * Only a CPU writes its own clock, so the issuer adds to the receiver's
 * recv_stall_ps and the receiver takes it at its next sync point
 * (recv_pay()). Relaxed: the word carries a sum and publishes nothing
 * else; its RMWs are in one modification order, so no add is lost or
 * taken twice, and one the receiver's exchange misses is taken at its
 * next sync (lax mode lets a stall land a sync late, within the window).
 * Strict mode needs every add made earlier in modelled time to be seen by
 * the take: adds and takes are both made by the token's holder, and the
 * token's handoff orders them: the release store of go in grant()
 * (sequencer.c) pairs with the acquire load in park().
 */
static void recv_owe(struct sd_cpu *c, uint64_t ps)
{
	const struct sd_machine *m = c->m;

	if (!ps)
		return;
	if (c->model.seq && sd_seq_running(&c->model)) {
		sd_seq_recv_owe(&c->model, ps);
		return;
	}
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_cpu *t = m->cpus[i];

		if (t != c)
			atomic_fetch_add_explicit(&t->recv_stall_ps, ps, memory_order_relaxed);
	}
}

/* @whole: the op drops a whole ASID or the whole TLB, which scans each
 * TLB it reaches where the profile says invalidation scans (scan_ps). */
static void charge_broadcast(struct sd_cpu *c, uint64_t issue_ps, uint64_t targets,
			     uint64_t completion_ps, uint64_t *done_ps, uint64_t recv_ps,
			     bool whole)
{
	struct sd_model *mod = &c->m->model;
	uint64_t occ = mod->param_ps[SD_MP_DVM_MESSAGE] + mod->param_ps[SD_MP_DVM_TARGET] * targets;

	c->model.clock_ps += issue_ps;
	uint64_t start = queue_reserve(c, &mod->interconnect, c->model.clock_ps, occ);
	*done_ps = max_u64(*done_ps, start + occ + completion_ps);
	recv_owe(c, recv_ps + (whole ? mod->scan_ps : 0));
}

/* The count's line moves to @c for a down or an up (an atomic RMW), after
 * the moves before it: lock_handoff at the distance from its last owner. */
static void charge_count(struct sd_cpu *c, struct sd_model_rwsem *rw)
{
	struct sd_model *mod = &c->m->model;

	if (rw->count_owner != UINT32_MAX && rw->count_owner != c->id) {
		uint64_t cost = dist_cost(mod, SD_MDP_LOCK_HANDOFF, rw->count_owner, c->id);
		c->model.clock_ps = sd_model_reserve(&rw->count_free_ps, c->model.clock_ps, cost,
						     c->model.seq) + cost;
	}
	rw->count_owner = c->id;
}

/*
 * down_read() / down_write() and their ups on an mm's mmap_lock (struct
 * sd_model_rwsem). Taken under the real rwlock, and @rw->lock orders the
 * modelled state among the readers that share it. A CPU holds at most one
 * read hold at a time (the library never nests them): its start is kept
 * in the CPU's own state.
 */
static void charge_rwsem(struct sd_cpu *c, uint64_t kind, struct sd_model_rwsem *rw, bool acquire)
{
	struct sd_model *mod = &c->m->model;
	bool write = kind == SD_LOCK_MM, vma = kind == SD_LOCK_MM_VMA;

	sd_spin_lock(&rw->lock);
	if (!acquire) {
		if (!vma)
			charge_count(c, rw);
		if (write)
			sd_model_lock_record(&rw->writers, rw->writers.cur_start_ps,
					     max_u64(c->model.clock_ps, rw->writers.cur_start_ps),
					     c->id);
		else
			sd_model_lock_record(&rw->readers, c->model.read_start_ps,
					     max_u64(c->model.clock_ps, c->model.read_start_ps),
					     c->id);
		sd_spin_unlock(&rw->lock);
		c->model.locks_held--;
		return;
	}
	/* The RMW that takes the lock comes once it is free (a waiter's
	 * spin ends at the release), as charge_lock() adds the handoff
	 * after the gap. */
	uint64_t t = write ? sd_model_rwsem_write_gap(rw, c->model.clock_ps, rw->writers.hold_ps)
			   : sd_model_rwsem_read_gap(rw, c->model.clock_ps);
	if (write)
		rw->writers.cur_start_ps = t;
	else
		c->model.read_start_ps = t;
	c->model.clock_ps = t;
	if (!vma)
		charge_count(c, rw);
	sd_spin_unlock(&rw->lock);
	c->model.clock_ps += mod->param_ps[SD_MP_LOCK_ACQUIRE];
	c->model.locks_held++;
}

static void charge_lock(struct sd_cpu *c, uint64_t kind, uint64_t aux, bool acquire)
{
	struct sd_model *mod = &c->m->model;
	struct sd_model_lock *l = aux ? (struct sd_model_lock *)(uintptr_t)aux : &mod->lock[kind];
	uint32_t prev;

	/* The DVM lock is the interconnect, modelled as a resource. */
	if (kind == SD_LOCK_DVM)
		return;
	if (kind == SD_LOCK_MM || kind == SD_LOCK_MM_READ || kind == SD_LOCK_MM_VMA) {
		charge_rwsem(c, kind, (struct sd_model_rwsem *)(uintptr_t)aux, acquire);
		return;
	}
	if (!acquire) {
		uint64_t end = max_u64(c->model.clock_ps, l->cur_start_ps);

		if (l->cal)
			sd_model_cal_record(l->cal, l->cur_start_ps, end - l->cur_start_ps, c->id);
		else
			sd_model_lock_record(l, l->cur_start_ps, end, c->id);
		l->last_cpu = c->id;
		c->model.locks_held--;
		return;
	}
	prev = l->last_cpu;
	uint64_t t = l->cal ? sd_model_cal_gap(l->cal, c->model.clock_ps, &prev)
			    : sd_model_lock_gap(l, c->model.clock_ps, l->hold_ps, &prev);

	l->cur_start_ps = t;
	t += mod->param_ps[SD_MP_LOCK_ACQUIRE];
	if (prev != UINT32_MAX && prev != c->id)
		t += dist_cost(mod, SD_MDP_LOCK_HANDOFF, prev, c->id);
	c->model.clock_ps = t;
	c->model.locks_held++;
}

/*
 * A hot line (resource.h, sd_model_line_access()): a fetch costs a
 * transfer at the distance from its last writer, the invalidation of
 * other copies one at LLC distance; transfers of one line serialise.
 */
static void charge_line(struct sd_cpu *c, struct sd_model_line *line, bool write)
{
	struct sd_model *mod = &c->m->model;
	uint32_t from = SD_MODEL_NONE;
	uint64_t cost = 0;

	switch (sd_model_line_access(line, c->id, write, &from)) {
	case SD_LINE_FETCH:
		cost = dist_cost(mod, SD_MDP_LINE_TRANSFER, from, c->id);
		break;
	case SD_LINE_INVALIDATE:
		cost = mod->dist_ps[SD_MDP_LINE_TRANSFER][SD_DIST_LLC];
		break;
	case SD_LINE_HIT:
		break;
	}
	if (cost)
		c->model.clock_ps = sd_model_reserve(&line->free_at_ps, c->model.clock_ps, cost,
						     c->model.seq) + cost;
}

void sd_model_event(struct sd_cpu *c, enum sd_event ev, uint64_t arg, uint64_t aux)
{
	struct sd_model *mod = &c->m->model;
	const uint64_t *p = mod->param_ps;

	if (c->model.seq)
		seq_beat(c);
	/* Taken for stalled while blocked outside the library: back now. */
	else if (unlikely(atomic_load_explicit(&c->model_pub.state, memory_order_relaxed) ==
			  SD_MODEL_STALLED))
		rejoin(c);
	/* Per unit of the argument: levels read, PTEs, frames, tables, pages. */
	if (sd_event_desc[ev].cost == SD_COST_EACH) {
		c->model.clock_ps += c->model.ev_ps[ev] * arg;
		return;
	}
	/* The rules of the events marked OUT in SD_EVENT_LIST. */
	switch (ev) {
	case SD_EV_LOCAL_FLUSH_RANGE:
		c->model.clock_ps += p[SD_MP_LOCAL_FLUSH_RANGE] + p[SD_MP_LOCAL_FLUSH_RANGE_PAGE] * aux;
		break;
	case SD_EV_TLBI_OP:
		charge_broadcast(c, p[SD_MP_TLBI_ISSUE], arg, p[SD_MP_DVM_COMPLETION],
				 &c->model.dvm_done_ps, p[SD_MP_TLBI_RECV], !aux);
		break;
	case SD_EV_DSB:
		c->model.clock_ps = max_u64(c->model.clock_ps, c->model.dvm_done_ps) + p[SD_MP_DSB];
		break;
	case SD_EV_INVLPGB:
		charge_broadcast(c, p[SD_MP_INVLPGB_ISSUE], c->m->nr_cpus - 1,
				 p[SD_MP_INVLPGB_COMPLETION], &c->model.invlpgb_done_ps,
				 p[SD_MP_INVLPGB_RECV], !aux);
		break;
	case SD_EV_TLBSYNC:
		c->model.clock_ps = max_u64(c->model.clock_ps, c->model.invlpgb_done_ps) +
				    p[SD_MP_TLBSYNC];
		break;
	case SD_EV_LOCK_ACQUIRE:
	case SD_EV_LOCK_RELEASE:
		charge_lock(c, arg, aux, ev == SD_EV_LOCK_ACQUIRE);
		break;
	case SD_EV_LINE_READ:
	case SD_EV_LINE_WRITE:
		charge_line(c, (struct sd_model_line *)(uintptr_t)aux, ev == SD_EV_LINE_WRITE);
		break;
	case SD_EV_LRU_LOCKED_OPS:
		/* list_add()/list_del() at the head write the head and its
		 * neighbour, both last written by the lock's previous holder
		 * when that was another CPU: fetched once per hold. */
		charge_line(c, &mod->lru_lines[0], true);
		charge_line(c, &mod->lru_lines[1], true);
		c->model.clock_ps += p[SD_MP_LRU_PAGE] * arg;
		break;
	case SD_EV_WORK:
		c->model.clock_ps += arg * PS_PER_NS;
		break;
	default:
		/* A row marked OUT with no rule here. */
		c->model.clock_ps += c->model.ev_ps[ev];
		break;
	}
	/* The caller (sd_model_charge()) syncs: it can run IPIs. */
}

/* ---- IPIs ---- */

uint64_t sd_model_ipi_posted(struct sd_cpu *from, struct sd_cpu *t)
{
	const uint64_t *p = from->m->model.param_ps;

	/* The first target of a shootdown pays the send, the others the
	 * multicast's per-target part (until the initiator waits). */
	from->model.clock_ps += from->model.ipi_posts++ ? p[SD_MP_IPI_SEND_TARGET]
							: p[SD_MP_IPI_SEND];
	charge_line(from, &t->ipi_line, true);
	return from->model.clock_ps;
}

void sd_model_ipi_run(struct sd_cpu *c, uint64_t sent_ps)
{
	const uint64_t *p = c->m->model.param_ps;

	/* The handler starts at the later of the IPI's arrival and this
	 * CPU's own time: a CPU ahead of the sender takes it at its time. */
	if (sent_ps)
		c->model.clock_ps = max_u64(c->model.clock_ps, sent_ps + p[SD_MP_IPI_DELIVERY]);
	if (!c->model.irq_batch) {
		c->model.clock_ps += p[SD_MP_IRQ_ENTRY];
		c->model.irq_batch = 1;
	}
	c->model.clock_ps += p[SD_MP_IPI_HANDLER];
	charge_line(c, &c->ipi_line, true);
}

void sd_model_irq_exit(struct sd_cpu *c)
{
	if (!c->model.irq_batch)
		return;
	c->model.clock_ps += c->m->model.param_ps[SD_MP_IRQ_EXIT];
	/* Still in the handler (irq_batch set): a sync here is only put
	 * off, and the interrupted code retries its own at its section's
	 * end, not because of us. */
	if (c->model.clock_ps >= c->model.sync_at_ps)
		(void)sd_model_sync(c);
	c->model.irq_batch = 0;
}

void sd_model_ipi_acked(struct sd_cpu *from, struct sd_cpu *t, uint64_t acked_ps)
{
	struct sd_model *mod = &from->m->model;

	from->model.ipi_posts = 0;
	/* The wait ends when the ack's line reaches the initiator. */
	if (acked_ps)
		from->model.clock_ps = max_u64(from->model.clock_ps,
					       acked_ps + dist_cost(mod, SD_MDP_LINE_TRANSFER,
								    t->id, from->id));
}

/* ---- lifecycle ---- */

void sd_model_cpu_init(struct sd_cpu *c)
{
	struct sd_model *mod = &c->m->model;

	memset(&c->model, 0, sizeof(c->model));
	c->model.ev_ps = mod->on ? mod->ev_ps : NULL;
	c->model.seq = mod->seq.on;
	c->model.until_ps = SD_SEQ_NEVER;
	c->model.id = c->id;
	c->model.irq_depth = &c->irq_depth;
	c->model.recv_stall_ps = &c->recv_stall_ps;
	c->model.sq = &mod->seq;
	atomic_init(&c->model_pub.clock_ps, 0);
	atomic_init(&c->model_pub.state, SD_MODEL_OFF);
	atomic_init(&c->model_pub.window_waits, 0);
	atomic_init(&c->model_pub.preemptions, 0);
	atomic_init(&c->model_pub.preemptions_locked, 0);
	atomic_init(&c->recv_stall_ps, 0);
	c->model.preempt_at_ps = UINT64_MAX;
	sd_model_line_init(&c->ipi_line);
}

void sd_model_cpu_online(struct sd_cpu *c)
{
	if (!c->model.ev_ps)
		return;
	c->model.ipi_posts = 0;
	c->model.locks_held = 0;
	c->model.sync_deferred = false;
	c->model.irq_batch = 0;
	c->model.seq = c->m->model.seq.on;
	recv_forget(c);
	if (c->model.seq) {
		/* In at the run's epoch, away until its first event. */
		sd_seq_cpu_online(&c->model);
		next_preempt(c);
		publish(c);
		atomic_store_explicit(&c->model_pub.state, SD_MODEL_IDLE, memory_order_relaxed);
	} else {
		rejoin(c);
	}
	c->model.sync_at_ps = c->model.clock_ps;
}

void sd_model_cpu_offline(struct sd_cpu *c)
{
	if (!c->model.ev_ps)
		return;
	/* The endpoint's offline already left strict mode (smp.c). */
	if (c->m->model.seq.on)
		sd_seq_cpu_offline(&c->model);
	publish(c);
	atomic_store_explicit(&c->model_pub.state, SD_MODEL_OFF, memory_order_relaxed);
}

/* ---- public calls ---- */

int sd_machine_model_info(const struct sd_machine *m, struct sd_model_info *info)
{
	struct sd_model_info out = SD_MODEL_INFO_INIT;
	const struct sd_model *mod;

	if (!m || !info)
		return sd_fail(-EINVAL, "sd_machine_model_info: NULL argument");
	/* 0.2.0's struct ended at rejoins, 0.2.1's at vcpu_preemptions_locked,
	 * 0.2.2's at seq_summons: fill that much for their callers. */
	const size_t v020 = offsetof(struct sd_model_info, vcpu_preemptions);
	const size_t v021 = offsetof(struct sd_model_info, strict);
	const size_t v022 = offsetof(struct sd_model_info, stalls);
	const size_t size = info->size;

	if (size != sizeof(out) && size != v020 && size != v021 && size != v022)
		return sd_fail(-EINVAL, "sd_machine_model_info: unknown size %zu (this release: %zu, "
			       "0.2.2's %zu, 0.2.1's %zu or 0.2.0's %zu)", size, sizeof(out), v022,
			       v021, v020);
	mod = &m->model;
	out.modelled = mod->on;
	if (mod->on) {
		snprintf(out.profile, sizeof(out.profile), "%s", mod->name);
		snprintf(out.profile_path, sizeof(out.profile_path), "%s", mod->path);
		snprintf(out.topology, sizeof(out.topology), "%s", mod->topology);
		out.nr_pus = mod->nr_pus;
		out.window_ns = mod->window_ps / PS_PER_NS;
		out.clock_min_ns = UINT64_MAX;
		for (unsigned i = 0; i < m->nr_cpus; i++) {
			uint64_t v = atomic_load_explicit(&m->cpus[i]->model_pub.clock_ps,
							  memory_order_relaxed) / PS_PER_NS;
			out.clock_min_ns = v < out.clock_min_ns ? v : out.clock_min_ns;
			out.clock_max_ns = v > out.clock_max_ns ? v : out.clock_max_ns;
			out.window_waits += atomic_load_explicit(&m->cpus[i]->model_pub.window_waits,
								 memory_order_relaxed);
			out.vcpu_preemptions += atomic_load_explicit(
				&m->cpus[i]->model_pub.preemptions, memory_order_relaxed);
			out.vcpu_preemptions_locked += atomic_load_explicit(
				&m->cpus[i]->model_pub.preemptions_locked, memory_order_relaxed);
		}
		out.max_lead_ns = atomic_load_explicit(&mod->max_lead_ps, memory_order_relaxed) /
				  PS_PER_NS;
		out.rejoins = atomic_load_explicit(&mod->rejoins, memory_order_relaxed);
		out.strict = mod->seq.on;
		out.seq_handoffs = atomic_load_explicit(&mod->seq.handoffs, memory_order_relaxed);
		out.seq_stalls = atomic_load_explicit(&mod->seq.stalls, memory_order_relaxed);
		out.seq_late = atomic_load_explicit(&mod->seq.late, memory_order_relaxed);
		out.seq_summons = atomic_load_explicit(&mod->seq.summons, memory_order_relaxed);
		out.stalls = atomic_load_explicit(&mod->stalls, memory_order_relaxed);
	}
	out.size = size;
	memcpy(info, &out, size);
	return 0;
}
