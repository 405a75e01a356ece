/* SPDX-License-Identifier: MIT */
/*
 * Modelled clocks kept in step (time/sync.h says what for): lax
 * synchronisation's window (Graphite's LaxP2P family, Miller et al.,
 * HPCA 2010: each CPU runs on while it is within a window of the slowest
 * running one), the stalls broadcasts owe a clock, a virtual machine's
 * preemption ticks, and strict mode's sync points around the sequencer.
 * It works on clocks (time/clock.h) and the machine's model (time/model.h),
 * never on a CPU.
 */
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "../core/backoff.h"
#include "sync.h"

/* A CPU that makes no modelled progress for this long in real time while
 * its thread sleeps is taken to be blocked outside the library... */
#define STALL_SLEEPING_NS (2u * 1000000u)
/* ...and after this long even while it runs (a busy-wait on a flag). */
#define STALL_RUNNING_NS (200u * 1000000u)

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Host time, for the stall check alone: it decides only whether a
 * laggard stops holding the others back, which the run reports. */
static uint64_t host_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}


static void publish(struct sd_cpu_model *c)
{
	/* Relaxed: a clock is a hint for others' waits, never data they
	 * depend on (the IPIs carry their own times). */
	atomic_store_explicit(&c->pub->clock_ps, c->clock_ps, memory_order_relaxed);
}

/* The slowest running CPU other than @c, its clock in @min (UINT64_MAX if
 * none runs). Returns its id. */
static unsigned slowest_running(const struct sd_cpu_model *c, uint64_t *min)
{
	const struct sd_model *mod = c->mod;
	unsigned who = UINT32_MAX;

	*min = UINT64_MAX;
	for (unsigned i = 0; i < mod->nr_clk; i++) {
		const struct sd_model_pub *t = mod->peer[i].pub;
		if (i == c->id || atomic_load_explicit(&t->state, memory_order_relaxed) !=
				      SD_MODEL_RUNNING)
			continue;
		uint64_t v = atomic_load_explicit(&t->clock_ps, memory_order_relaxed);
		if (v < *min) {
			*min = v;
			who = i;
		}
	}
	return who;
}

/* The latest clock any other attached CPU published (0 if none). */
static uint64_t latest_attached(const struct sd_cpu_model *c)
{
	const struct sd_model *mod = c->mod;
	uint64_t max = 0;

	for (unsigned i = 0; i < mod->nr_clk; i++) {
		const struct sd_model_pub *t = mod->peer[i].pub;
		if (i == c->id || atomic_load_explicit(&t->state, memory_order_relaxed) ==
				      SD_MODEL_OFF)
			continue;
		uint64_t v = atomic_load_explicit(&t->clock_ps, memory_order_relaxed);
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
static bool recv_pay(struct sd_cpu_model *c)
{
	if (!atomic_load_explicit(c->recv_stall_ps, memory_order_relaxed))
		return false;
	c->clock_ps += atomic_exchange_explicit(c->recv_stall_ps, 0, memory_order_relaxed);
	return true;
}

/* Back after time away (idle, stalled, detached): broadcasts that reached
 * the CPU meanwhile cost nothing, as they stalled no work of its own. */
static void recv_forget(struct sd_cpu_model *c)
{
	atomic_store_explicit(c->recv_stall_ps, 0, memory_order_relaxed);
}

/* The host's first preemption of this vCPU after its clock: the same
 * instants on every vCPU, as the host's ticks are unless skew_tick=1
 * (kernel/time/tick-sched.c). */
static void next_preempt(struct sd_cpu_model *c)
{
	uint64_t every = c->mod->param_ps[SD_MP_VCPU_PREEMPT_INTERVAL];

	c->preempt_at_ps = every ? (c->clock_ps / every + 1) * every : UINT64_MAX;
}

/* Back in the running set after idle, a stall or attach: time went on
 * while the CPU was away, so it moves up to the slowest running CPU, or,
 * if none runs, to the latest time any CPU reached. */
static void rejoin(struct sd_cpu_model *c)
{
	struct sd_model *mod = c->mod;
	uint64_t min;

	recv_forget(c);
	slowest_running(c, &min);
	if (min == UINT64_MAX)
		min = latest_attached(c);
	if (c->clock_ps < min)
		c->clock_ps = min;
	/* Preemptions while away were not on the CPU's way. */
	next_preempt(c);
	publish(c);
	atomic_store_explicit(&c->pub->state, SD_MODEL_RUNNING, memory_order_relaxed);
	atomic_fetch_add_explicit(&mod->rejoins, 1, memory_order_relaxed);
}

void sd_clock_set_run(struct sd_cpu_model *c, int state)
{
	int old = atomic_load_explicit(&c->pub->state, memory_order_relaxed);

	if (!c->ev_ps)
		return;
	if (c->seq) {
		/* Idle leaves the machine; a switch brings it back, at its
		 * own clock (sequencer.c). What was owed while away is
		 * dropped once it holds the token, where no add races. */
		if (state == SD_MODEL_RUNNING) {
			sd_seq_join(c);
			if (old != SD_MODEL_RUNNING)
				recv_forget(c);
		} else {
			sd_seq_leave(c);
		}
		atomic_store_explicit(&c->pub->state, state, memory_order_relaxed);
		return;
	}
	if (old == state)
		return;
	publish(c);
	if (state == SD_MODEL_RUNNING) {
		rejoin(c);
		return;
	}
	atomic_store_explicit(&c->pub->state, state, memory_order_relaxed);
	c->sync_at_ps = c->clock_ps;
}

void sd_clock_lax_poll(struct sd_cpu_model *c)
{
	int running = SD_MODEL_RUNNING;

	if (!c->ev_ps || c->seq)
		return;
	/* Out of the running set, as a CPU taken for stalled is, until its
	 * next event (sd_clock_event()) brings it back at the slowest
	 * running CPU's time: what it waits for happens in their time. Not
	 * counted as a stall: the program said it waits. */
	publish(c);
	atomic_compare_exchange_strong_explicit(&c->pub->state, &running, SD_MODEL_STALLED,
						memory_order_relaxed, memory_order_relaxed);
}

/* Is @t's thread asleep (not runnable) right now? Read from /proc on the
 * slow path of a wait that has already lasted milliseconds. */
static bool thread_sleeping(const struct sd_model_peer *t)
{
	int tid = atomic_load_explicit(t->tid, memory_order_relaxed);

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
static void check_stall(struct sd_cpu_model *c, struct laggard *l, unsigned who, uint64_t min)
{
	uint64_t now = host_now_ns();
	const struct sd_model_peer *t;
	int running = SD_MODEL_RUNNING;

	if (who != l->who || min != l->clock_ps) {
		l->who = who;
		l->clock_ps = min;
		l->since_ns = now;
		return;
	}
	if (now - l->since_ns < STALL_SLEEPING_NS)
		return;
	t = &c->mod->peer[who];
	if (now - l->since_ns < STALL_RUNNING_NS && !thread_sleeping(t))
		return;
	/* Relaxed, as every run state: it steers waits only. If the laggard
	 * changes its own state first, the CAS fails and nothing is lost; if
	 * it comes back after it, it rejoins (sd_clock_event()). Only the
	 * CAS's winner counts: a stall is where host time decided the run. */
	if (atomic_compare_exchange_strong_explicit(&t->pub->state, &running,
						    SD_MODEL_STALLED, memory_order_relaxed,
						    memory_order_relaxed))
		atomic_fetch_add_explicit(&c->mod->stalls, 1, memory_order_relaxed);
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
static void window_backoff(struct sd_cpu_model *c, struct sd_backoff *b)
{
	if (!c->mod->oversubscribed) {
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
 * Wait (interrupts on, no modelled lock held: see sd_clock_sync()) until
 * no running CPU is more than a window behind. Spin, yield, then sleep
 * (sd_backoff, invariant 6); IPIs are answered meanwhile, since interrupts
 * are on.
 */
static uint64_t window_wait(struct sd_cpu_model *c, uint64_t min)
{
	struct sd_model *mod = c->mod;
	struct laggard l = { UINT32_MAX, 0, 0 };
	struct sd_backoff b = SD_BACKOFF_INIT;
	unsigned who;

	own_inc(&c->pub->window_waits);
	do {
		window_backoff(c, &b);
		who = slowest_running(c, &min);
		if (who != UINT32_MAX)
			check_stall(c, &l, who, min);
	} while (min != UINT64_MAX && c->clock_ps > min + mod->window_ps);
	return min;
}

/* The vCPU's clock reached a host preemption: it is off its physical CPU
 * for vcpu_preempt, whatever it was doing, a lock it holds included
 * (lock-holder preemption: the guest's spinlock cannot yield, so the
 * waiters spin on). The step that crossed the preemption is pushed back
 * by it whole; a vCPU spinning for a lock meanwhile pays it again after
 * the lock, which overcharges a waiter by at most vcpu_preempt a tick. */
static void vcpu_preempt(struct sd_cpu_model *c)
{
	c->clock_ps += c->mod->param_ps[SD_MP_VCPU_PREEMPT];
	next_preempt(c);
	own_inc(&c->pub->preemptions);
	if (c->locks_held)
		own_inc(&c->pub->preemptions_locked);
}

/* The next synchronisation point: a quantum on, or sooner where the
 * window would run out above @min, the slowest clock known (UINT64_MAX:
 * none runs). */
static void next_sync(struct sd_cpu_model *c, uint64_t min)
{
	const struct sd_model *mod = c->mod;

	c->sync_at_ps = c->clock_ps + mod->quantum_ps;
	if (min != UINT64_MAX && min + mod->window_ps < c->sync_at_ps)
		c->sync_at_ps = max_u64(min + mod->window_ps, c->clock_ps + 1);
	if (c->preempt_at_ps < c->sync_at_ps)
		c->sync_at_ps = c->preempt_at_ps;
}

static void lax_sync(struct sd_cpu_model *c)
{
	struct sd_model *mod = c->mod;
	int state = atomic_load_explicit(&c->pub->state, memory_order_relaxed);
	uint64_t min;

	(void)recv_pay(c);
	/* The host preempts a vCPU whatever the guest is doing: in a lock,
	 * with interrupts off, before any window wait. */
	if (c->clock_ps >= c->preempt_at_ps)
		vcpu_preempt(c);
	publish(c);
	if (state == SD_MODEL_STALLED) {
		rejoin(c);
		state = SD_MODEL_RUNNING;
	}
	/* Only a running CPU with interrupts on and no modelled lock may
	 * wait: with interrupts off it could hold up a CPU that waits for
	 * its ack, and a lock holder one that waits for the lock. The
	 * mmap_lock counts here too: in lax mode its waiters block in the
	 * host's rwlock, where their clocks stand still. */
	if (state != SD_MODEL_RUNNING || *c->irq_depth || c->locks_held || c->rwsems_held) {
		/* Retry where the section ends (sd_model_resync()):
		 * a CPU whose syncs all fell inside its sections would never
		 * wait at all (a locked trap loop whose steps outside the lock
		 * are shorter than the quantum). Not from an IPI handler
		 * (irq_batch): it would wait in the handler at its exit, with
		 * its clock just pulled up to its sender's. */
		if (state == SD_MODEL_RUNNING && !c->irq_batch)
			c->sync_deferred = true;
		next_sync(c, UINT64_MAX);
		return;
	}
	c->sync_deferred = false;
	/* The slowest running clock only grows (a CPU joins or rejoins at
	 * it or above), so one seen before is a lower bound: while this CPU
	 * is within a window of it, it is within a window of the slowest, and
	 * the scan of every CPU's clock (a cache miss each) is not needed.
	 * Owner-private: only this CPU reads or writes seen_min_ps. */
	if (c->clock_ps <= c->seen_min_ps + mod->window_ps) {
		next_sync(c, c->seen_min_ps);
		return;
	}
	slowest_running(c, &min);
	if (min != UINT64_MAX && c->clock_ps > min + mod->window_ps)
		min = window_wait(c, min);
	if (min != UINT64_MAX && min > c->seen_min_ps)
		c->seen_min_ps = min;
	note_lead(mod, c->clock_ps, min);
	next_sync(c, min);
}


/* ---- strict mode's synchronisation (sequencer.h) ---- */

/* The watchdog's sign of life: the holder made progress. */
static inline void seq_beat(struct sd_cpu_model *c)
{
	own_inc(&c->sq->go[c->id].beats);
}

/* The next sync point of a holder: where it passes the next CPU, its
 * first IPI arrives, the host preempts it, or a quantum on (to see CPUs
 * that came back from away meanwhile). */
static void seq_next_sync(struct sd_cpu_model *c, uint64_t arrival)
{
	uint64_t at = c->clock_ps + c->mod->seq_quantum_ps;

	if (c->until_ps != SD_SEQ_NEVER) {
		uint64_t pass = c->until_ps + (c->id < c->until_id ? 1 : 0);
		at = pass < at ? pass : at;
	}
	at = arrival < at ? arrival : at;
	at = c->preempt_at_ps < at ? c->preempt_at_ps : at;
	c->sync_at_ps = at > c->clock_ps ? at : c->clock_ps + 1;
}

static bool seq_sync(struct sd_cpu_model *c)
{
	uint64_t arrival;

	seq_beat(c);
	if (c->clock_ps >= c->preempt_at_ps)
		vcpu_preempt(c);
	publish(c);
	sd_seq_join(c);         /* at once if it holds the token and runs */
	/* Holding the token: every add made earlier in modelled time is
	 * in. A preemption the stall crosses is met at the next sync. */
	if (recv_pay(c))
		publish(c);
	/* With interrupts off or a modelled spinlock held the CPU neither
	 * runs IPIs nor gives the token away: a CPU parked holding a lock
	 * would leave its next acquirer polling. The section's end syncs
	 * again (sd_model_resync()). Not the mmap_lock: the kernel holds
	 * that rwsem with interrupts on and may sleep in it, so its holder
	 * runs the IPIs that reach it (a flush under the read hold answers
	 * the others', as in zap_page_range_single()) and its waiters park
	 * in the wait hook until its release (sd_mmap_lock_slow()). */
	if (*c->irq_depth || c->locks_held || c->irq_batch) {
		if (!c->irq_batch)
			c->sync_deferred = true;
		/* Still a sync point at the next IPI's arrival (the owner's
		 * copy: sd_seq_ipis_ran() put it there when a batch left an
		 * IPI for later). Forgetting it moved the IPI to wherever the
		 * quantum put the next sync point: on an 8-CPU ipi run, a
		 * handler ran 140 to 170 ns late at a 1 us quantum, on time
		 * at 250 ns, and every clock after it differed. */
		seq_next_sync(c, c->arrival_ps);
		return false;
	}
	c->sync_deferred = false;
	/* The quantum's sync point: a CPU back from away meanwhile. */
	sd_seq_joined(c);
	for (;;) {
		arrival = sd_seq_arrival(c, NULL);
		if (arrival <= c->clock_ps || *c->ipi_pending)
			return true;
		if (c->clock_ps < c->until_ps ||
		    (c->clock_ps == c->until_ps && c->id < c->until_id))
			break;
		sd_seq_sync(c);
	}
	publish(c);
	seq_next_sync(c, arrival);
	return false;
}

uint64_t sd_clock_work_wait(struct sd_cpu_model *c, uint64_t left)
{
	/* In the machine first: the time spent away (idle, or until a
	 * summons' grant) is no work done. */
	if (!sd_seq_running(c))
		sd_seq_join(c);

	uint64_t start = c->clock_ps, wake = start + left;

	if (c->preempt_at_ps > start && c->preempt_at_ps < wake)
		wake = c->preempt_at_ps;
	uint64_t stalled = sd_seq_work(c, wake);
	uint64_t passed = c->clock_ps - start;
	uint64_t done = passed - (stalled < passed ? stalled : passed);

	return done < left ? done : left;
}

bool sd_clock_sync(struct sd_cpu_model *c)
{
	if (c->seq)
		return seq_sync(c);
	lax_sync(c);
	return false;
}

/* ---- an event's start, and the clock's life ---- */

void sd_clock_event(struct sd_cpu_model *c)
{
	if (c->seq)
		seq_beat(c);
	/* Taken for stalled while blocked outside the library: back now. */
	else if (unlikely(atomic_load_explicit(&c->pub->state, memory_order_relaxed) ==
			  SD_MODEL_STALLED))
		rejoin(c);
}

void sd_clock_online(struct sd_cpu_model *c)
{
	recv_forget(c);
	c->arrival_ps = SD_SEQ_NEVER;
	if (c->seq) {
		/* In at the run's epoch, away until its first event. */
		sd_seq_cpu_online(c);
		next_preempt(c);
		publish(c);
		atomic_store_explicit(&c->pub->state, SD_MODEL_IDLE, memory_order_relaxed);
	} else {
		rejoin(c);
	}
	c->sync_at_ps = c->clock_ps;
}

void sd_clock_offline(struct sd_cpu_model *c)
{
	/* The endpoint's offline already left strict mode (hw/smp.c). */
	if (c->mod->seq.on)
		sd_seq_cpu_offline(c);
	publish(c);
	atomic_store_explicit(&c->pub->state, SD_MODEL_OFF, memory_order_relaxed);
}
