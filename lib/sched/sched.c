/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's core: run queues, __schedule() and the hand-over of a
 * CPU from one host thread to another, try_to_wake_up() with the
 * reschedule IPI, newidle and periodic balancing, and the idle thread.
 * kernel/sched/core.c is the model; fair.c's policy is replaced by FIFO
 * run queues and the simple placement task.h describes.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <shootdown/mm.h>

#include "../core/error.h"
#include "../core/futex.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../mm/mm.h"
#include "sched.h"

SD_THREAD_LOCAL struct sd_task *sd_current_task;

/* ---- run-queue locks, as events ---- */

static void rq_lock(struct sd_cpu *c, struct sd_rq *rq)
{
	if (!c) {
		sd_spin_lock(&rq->lock);
		return;
	}
	if (unlikely(!sd_spin_trylock(&rq->lock))) {
		sd_event(c, SD_EV_LOCK_WAIT_BEGIN, SD_LOCK_RQ, 0);
		sd_spin_lock_slow(&rq->lock);
		sd_event(c, SD_EV_LOCK_WAIT_END, SD_LOCK_RQ, 0);
	}
	sd_event(c, SD_EV_LOCK_ACQUIRE, SD_LOCK_RQ, (uint64_t)(uintptr_t)&rq->lock_model);
}

static void rq_unlock(struct sd_cpu *c, struct sd_rq *rq)
{
	if (!c) {
		sd_spin_unlock(&rq->lock);
		return;
	}
	sd_event(c, SD_EV_LOCK_RELEASE, SD_LOCK_RQ, (uint64_t)(uintptr_t)&rq->lock_model);
	sd_spin_unlock(&rq->lock);
	sd_event_unlocked(c);
}

/* double_rq_lock(): the lower CPU id first. */
static void double_rq_lock(struct sd_cpu *c, struct sd_rq *a, struct sd_rq *b)
{
	if (a < b) {
		rq_lock(c, a);
		rq_lock(c, b);
	} else {
		rq_lock(c, b);
		rq_lock(c, a);
	}
}

static void enqueue_at(struct sd_rq *rq, struct sd_task *t, bool head)
{
	if (head)
		cds_list_add(&t->rq_node, &rq->queue);
	else
		cds_list_add_tail(&t->rq_node, &rq->queue);
	atomic_store(&rq->nr_queued, atomic_load_explicit(&rq->nr_queued, memory_order_relaxed) + 1);
}

static void enqueue(struct sd_rq *rq, struct sd_task *t)
{
	enqueue_at(rq, t, false);
}

static void dequeue(struct sd_rq *rq, struct sd_task *t)
{
	cds_list_del(&t->rq_node);
	atomic_store(&rq->nr_queued, atomic_load_explicit(&rq->nr_queued, memory_order_relaxed) - 1);
}

static struct sd_task *first_queued(struct sd_rq *rq)
{
	if (cds_list_empty(&rq->queue))
		return NULL;
	return cds_list_entry(rq->queue.next, struct sd_task, rq_node);
}

/* ---- errors ---- */

void sd_sched_error(struct sd_sched *s, int err, const char *fmt, ...)
{
	int none = 0;
	va_list ap;

	if (!atomic_compare_exchange_strong(&s->error, &none, err))
		return;
	va_start(ap, fmt);
	vsnprintf(s->error_msg, sizeof(s->error_msg), fmt, ap);
	va_end(ap);
}

/* ---- the reschedule IPI ---- */

/* On the target, in its IPI handler: its idle thread's futex word moves
 * (a futex wait that the signal interrupted, restarted, sees it). */
static void resched_ipi(struct sd_cpu *c, void *arg)
{
	struct sd_rq *rq = arg;

	(void)c;
	atomic_fetch_add(&rq->resched_seq, 1);
}

/*
 * smp_send_reschedule() to an idle @target. One request per run queue in
 * flight: the idle thread retires it (idle_retire_resched()) once it has
 * run, before it looks at its queue again. Against that look: we queued the
 * task (under the run-queue lock) before this exchange, and it clears the
 * flag before its look (both seq_cst), so either we send or it sees the task.
 */
static void send_resched(struct sd_cpu *c, struct sd_sched *s, unsigned target)
{
	struct sd_rq *rq = &s->rq[target];

	if (atomic_exchange(&rq->resched_inflight, 1))
		return;
	/* Test instrumentation: the target may retire the last use now. */
	sd_order_point(SD_ORDER_RESCHED_CLAIMED, target);
	rq->resched_req.fn = resched_ipi;
	rq->resched_req.arg = rq;
	rq->resched_req.async = true;
	if (c)
		sd_event(c, SD_EV_WAKEUP_IPI, target, 0);
	if (!sd_smp_call_post(c, s->m->cpus[target], &rq->resched_req))
		atomic_store(&rq->resched_inflight, 0);   /* no thread: nothing to wake */
}

static void idle_retire_resched(struct sd_rq *rq)
{
	/* Acquire, pairing with ipi_run_one()'s release of DONE: the
	 * request is ours to reuse. Its state goes back to PENDING before
	 * the flag is released: the next sender claims the flag before it
	 * posts, and a DONE left from this use, seen by a retire between its
	 * claim and its post, would free the request under it (a second
	 * sender's push of a request still queued made a cycle in the IPI
	 * queue, which its target then ran for ever). */
	if (atomic_load(&rq->resched_inflight) &&
	    atomic_load_explicit(&rq->resched_req.state, memory_order_acquire) == SD_SMP_CALL_DONE) {
		atomic_store_explicit(&rq->resched_req.state, SD_SMP_CALL_PENDING,
				      memory_order_relaxed);
		atomic_store(&rq->resched_inflight, 0);
	}
}

/* ---- placement ---- */

static bool allowed(const struct sd_task *t, unsigned cpu)
{
	return hwloc_bitmap_isset(t->allowed, cpu);
}

/* The task running on @cpu, read without its run-queue lock (a hint for
 * placement). Acquire, pairing with the release where a switch publishes
 * it: the task's fields (->idle) were written before by whoever made it. */
static struct sd_task *curr_of(struct sd_sched *s, unsigned cpu)
{
	return atomic_load_explicit(&s->rq[cpu].curr, memory_order_acquire);
}

static bool cpu_idle_now(struct sd_sched *s, unsigned cpu)
{
	struct sd_task *curr = curr_of(s, cpu);

	return (!curr || curr->idle) && !atomic_load_explicit(&s->rq[cpu].nr_queued,
							      memory_order_relaxed);
}

static unsigned load_of(struct sd_sched *s, unsigned cpu)
{
	struct sd_task *curr = curr_of(s, cpu);

	return atomic_load_explicit(&s->rq[cpu].nr_queued, memory_order_relaxed) +
	       (curr && !curr->idle);
}

unsigned sd_sched_pick_cpu(struct sd_sched *s, struct sd_task *t)
{
	unsigned best = UINT32_MAX, best_load = UINT32_MAX;

	for (unsigned i = 0; i < s->nr_cpus; i++) {
		unsigned load;

		if (!allowed(t, i))
			continue;
		load = load_of(s, i);
		if (load < best_load) {
			best = i;
			best_load = load;
		}
	}
	return best;
}

/* select_task_rq(): its last CPU if idle, else an idle one after it,
 * else the last if allowed, else the least loaded. Under pi_lock. */
static unsigned select_task_rq(struct sd_sched *s, struct sd_task *t)
{
	unsigned prev = t->cpu;

	if (prev < s->nr_cpus && allowed(t, prev) && cpu_idle_now(s, prev))
		return prev;
	for (unsigned k = 1; k <= s->nr_cpus; k++) {
		unsigned i = (prev + k) % s->nr_cpus;

		if (allowed(t, i) && cpu_idle_now(s, i))
			return i;
	}
	if (prev < s->nr_cpus && allowed(t, prev))
		return prev;
	return sd_sched_pick_cpu(s, t);
}

/* Queue @t (pi_lock held, not on a run queue) on @target, at the head for
 * a wakeup (@head: CFS places a task that slept at min_vruntime less half
 * the latency, place_entity(), so it is usually the next picked); sends the
 * reschedule IPI if @target idles. */
static void activate_at(struct sd_cpu *c, struct sd_sched *s, struct sd_task *t, unsigned target,
			bool head)
{
	struct sd_rq *rq = &s->rq[target];
	struct sd_task *curr;

	if (c && t->cpu != target && t->cpu != UINT32_MAX)
		sd_event(c, SD_EV_TASK_MIGRATE, t->id, target);
	rq_lock(c, rq);
	t->cpu = target;
	t->on_rq = true;
	enqueue_at(rq, t, head);
	curr = atomic_load_explicit(&rq->curr, memory_order_relaxed);
	/* check_preempt_wakeup_fair(): a woken task ahead of a running one
	 * preempts it (resched_curr()): on this CPU at the wake's return, on
	 * another through a reschedule IPI and its next scheduling point. */
	const bool preempt = head && curr && !curr->idle;
	if (preempt)
		atomic_store(&rq->need_resched, 1);
	rq_unlock(c, rq);
	if ((!curr || curr->idle || preempt) && (!c || c->id != target))
		send_resched(c, s, target);
}

static void activate(struct sd_cpu *c, struct sd_sched *s, struct sd_task *t, unsigned target)
{
	activate_at(c, s, t, target, false);
}

bool sd_try_to_wake_up(struct sd_cpu *c, struct sd_task *t)
{
	struct sd_sched *s = t->s;

	sd_spin_lock(&t->pi_lock);
	if (t->state != SD_TASK_BLOCKED && t->state != SD_TASK_SLEEPING) {
		sd_spin_unlock(&t->pi_lock);
		return false;
	}
	if (t->state == SD_TASK_SLEEPING) {
		struct sd_rq *timer_rq = &s->rq[t->cpu];

		rq_lock(c, timer_rq);
		cds_list_del(&t->rq_node);
		rq_unlock(c, timer_rq);
	}
	if (t->blocked_counted) {
		t->blocked_counted = false;
		atomic_fetch_sub(&s->nr_blocked, 1);
	}
	t->state = SD_TASK_RUNNING;
	if (c)
		sd_event(c, SD_EV_TASK_WAKEUP, t->id, 0);
	/* Still on its CPU, not yet switched out (ttwu_runnable()): its
	 * __schedule() sees RUNNING and keeps running. A sleeper's timer
	 * node was its rq_node, so it was off the queue. */
	if (!t->on_rq)
		activate_at(c, s, t, select_task_rq(s, t), true);
	sd_spin_unlock(&t->pi_lock);
	return true;
}

void sd_wake_up_new_task(struct sd_cpu *c, struct sd_task *t)
{
	sd_spin_lock(&t->pi_lock);
	t->state = SD_TASK_RUNNING;
	activate(c, t->s, t, t->cpu);
	sd_spin_unlock(&t->pi_lock);
}

/* A queued @t whose CPU it may no longer use moves to one it may. */
void sd_sched_move_queued(struct sd_cpu *c, struct sd_task *t)
{
	struct sd_sched *s = t->s;
	struct sd_rq *from;

	sd_spin_lock(&t->pi_lock);
	if (t->state != SD_TASK_RUNNING || !t->on_rq || allowed(t, t->cpu)) {
		sd_spin_unlock(&t->pi_lock);
		return;
	}
	from = &s->rq[t->cpu];
	rq_lock(c, from);
	if (atomic_load_explicit(&from->curr, memory_order_relaxed) == t) {
		/* Running: set_cpus_allowed_ptr() has migration_cpu_stop()
		 * preempt it. Here its CPU is told to reschedule, and the
		 * task moves itself at its next scheduling point
		 * (sd_schedule() finds its CPU no longer allowed). */
		const unsigned cpu = t->cpu;

		atomic_store(&from->need_resched, 1);
		rq_unlock(c, from);
		sd_spin_unlock(&t->pi_lock);
		if (!c || c->id != cpu)
			send_resched(c, s, cpu);
		return;
	}
	dequeue(from, t);
	t->on_rq = false;
	rq_unlock(c, from);
	activate(c, s, t, sd_sched_pick_cpu(s, t));
	sd_spin_unlock(&t->pi_lock);
}

/* ---- balancing ---- */

/* Pull one queued task that may run on @c from the busiest other queue
 * with at least @min_queued (sched_balance_rq(), one task at a time). */
static bool pull_task(struct sd_cpu *c, struct sd_sched *s, unsigned min_queued)
{
	struct sd_rq *here = &s->rq[c->id], *busiest = NULL;
	struct sd_task *t, *moved = NULL;
	unsigned most = 0;

	for (unsigned i = 0; i < s->nr_cpus; i++) {
		struct sd_rq *rq = &s->rq[i];
		unsigned n = atomic_load_explicit(&rq->nr_queued, memory_order_relaxed);
		/* Acquire: pairs with the release stores of rq->curr in
		 * sd_schedule() and the idle body, so curr->idle is seen. */
		struct sd_task *curr = atomic_load_explicit(&rq->curr, memory_order_acquire);

		/* detach_tasks() leaves a queue with one runnable task: a
		 * CPU in idle (or not yet started) with one queued is about
		 * to run it. Taking it let the next idle CPU take it back,
		 * and so on: at the end of mprotect_threaded on 32 CPUs one
		 * task moved 480,000 times in 12 ms of modelled time and
		 * never ran. */
		if ((!curr || curr->idle) && n < 2)
			continue;
		if (i != c->id && n >= min_queued && n > most) {
			most = n;
			busiest = &s->rq[i];
		}
	}
	if (!busiest)
		return false;
	double_rq_lock(c, here, busiest);
	cds_list_for_each_entry(t, &busiest->queue, rq_node) {
		/* pi_lock is outside the rq locks: only a try here, as
		 * can_migrate_task() skips what it cannot take now. */
		if (!sd_spin_trylock(&t->pi_lock))
			continue;
		if (allowed(t, c->id)) {
			dequeue(busiest, t);
			t->cpu = c->id;
			enqueue(here, t);
			moved = t;
		}
		sd_spin_unlock(&t->pi_lock);
		if (moved)
			break;
	}
	rq_unlock(c, busiest);
	rq_unlock(c, here);
	if (moved)
		sd_event(c, SD_EV_TASK_MIGRATE, moved->id, c->id);
	return moved != NULL;
}

static uint64_t balance_interval_ns(struct sd_machine *m)
{
	uint64_t ns = m->model.on ? m->model.param_ps[SD_MP_SCHED_BALANCE_INTERVAL] / PS_PER_NS : 0;

	return ns ? ns : 4000000;
}

/* scheduler_tick()'s share: wake this CPU's expired sleepers, and pull a
 * task once a balance interval if a queue is two longer than ours. */
static void sched_tick(struct sd_cpu *c, struct sd_sched *s)
{
	struct sd_rq *rq = &s->rq[c->id];
	uint64_t now = sd_cpu_now_ns(c);
	struct sd_task *t;

	for (;;) {
		struct sd_task *due = NULL;

		rq_lock(c, rq);
		cds_list_for_each_entry(t, &rq->sleepers, rq_node)
			if (t->sleep_until_ns <= now) {
				due = t;
				break;
			}
		rq_unlock(c, rq);
		if (!due || !sd_try_to_wake_up(c, due))
			break;
	}
	if (now >= rq->next_balance_ns) {
		rq->next_balance_ns = now + balance_interval_ns(s->m);
		pull_task(c, s, atomic_load_explicit(&rq->nr_queued, memory_order_relaxed) + 2);
	}
}

static uint64_t earliest_sleeper(struct sd_cpu *c, struct sd_rq *rq)
{
	uint64_t until = UINT64_MAX;
	struct sd_task *t;

	rq_lock(c, rq);
	cds_list_for_each_entry(t, &rq->sleepers, rq_node)
		if (t->sleep_until_ns < until)
			until = t->sleep_until_ns;
	rq_unlock(c, rq);
	return until;
}

/* ---- the switch ---- */

/*
 * switch_to(): hand @c to @next's thread and, unless @prev is dead, park
 * until some CPU is given back to @prev. The CPU's interrupts stay off
 * across (the incoming thread's sd_irq_on() ends the switch, as
 * finish_task_switch() does).
 */
static struct sd_cpu *context_switch(struct sd_cpu *c, struct sd_task *prev,
				     struct sd_task *next, bool dead)
{
	sd_cpu_hand_out(c, atomic_load_explicit(&next->tid, memory_order_relaxed));
	/* Test instrumentation: the CPU between threads. */
	sd_order_point(SD_ORDER_CPU_HANDED, c->id);
	/* Release: everything this thread did as the CPU happens before
	 * the incoming thread's acquire of go (sd_sched_wait_for_cpu()). */
	atomic_store_explicit(&next->go, (int)c->id + 1, memory_order_release);
	sd_futex_wake(&next->go, 1);
	if (dead)
		return NULL;
	return sd_sched_wait_for_cpu(prev);
}

struct sd_cpu *sd_sched_wait_for_cpu(struct sd_task *t)
{
	struct sd_machine *m = t->s->m;
	struct sd_cpu *c;
	int go;

	while ((go = atomic_load_explicit(&t->go, memory_order_acquire)) == 0)
		sd_futex_wait(&t->go, 0);
	if (go == SD_TASK_GO_CANCEL)
		return NULL;
	atomic_store_explicit(&t->go, 0, memory_order_relaxed);
	c = m->cpus[go - 1];
	if (sd_cpu_hand_in(c, t->bound_cpu != c->id, &t->binding))
		sd_sched_error(t->s, -EPERM, "task %u could not bind to CPU %u's PU", t->id, c->id);
	t->bound_cpu = c->id;
	return c;
}

struct sd_cpu *sd_schedule(struct sd_cpu *c, struct sd_task *prev, bool yield)
{
	struct sd_sched *s = prev->s;
	struct sd_rq *rq = &s->rq[c->id];
	struct sd_task *next;
	bool leaving = false, dead;

	if (!prev->idle)
		sched_tick(c, s);
	sd_irq_off(c);
	sd_spin_lock(&prev->pi_lock);
	/* Read under pi_lock: once it is dropped a wakeup may change it. */
	dead = !prev->idle && prev->state == SD_TASK_DEAD;
	rq_lock(c, rq);
	if (!prev->idle && prev->state != SD_TASK_RUNNING) {
		/* deactivate_task(): off the CPU; a sleeper's timer node goes
		 * on the sleepers list now, under this same lock. */
		prev->on_rq = false;
		if (prev->state == SD_TASK_SLEEPING)
			cds_list_add_tail(&prev->rq_node, &rq->sleepers);
		leaving = true;
	} else if (!prev->idle && !allowed(prev, c->id)) {
		/* Its affinity no longer has this CPU: off this queue, onto
		 * one it may use once this switch has let go. */
		prev->on_rq = false;
		leaving = true;
	} else if (!prev->idle && yield && first_queued(rq)) {
		enqueue(rq, prev);
	}
	/* pick_next_task(): the queue's head; the idle thread when the
	 * queue is empty and prev leaves; prev itself otherwise (a wakeup
	 * that came before the switch, a yield with nobody queued). */
	next = first_queued(rq);
	if (next && (prev->idle || leaving || yield))
		dequeue(rq, next);
	else
		next = leaving ? &rq->idle : prev;
	/* The slice sd_sched_return_to_user() measures starts when a task
	 * takes the CPU, not when it keeps it. */
	if (next != prev)
		rq->slice_start_ns = sd_cpu_now_ns(c);
	/* Release: pairs with curr_of()'s acquire. */
	atomic_store_explicit(&rq->curr, next, memory_order_release);
	atomic_store_explicit(&rq->need_resched, 0, memory_order_relaxed);
	rq_unlock(c, rq);
	if (leaving && prev->state == SD_TASK_RUNNING) {
		/* set_cpus_allowed_ptr() of a running task: moved by its own
		 * CPU, still holding pi_lock so that no wakeup races it. */
		activate(c, s, prev, sd_sched_pick_cpu(s, prev));
	}
	sd_spin_unlock(&prev->pi_lock);
	if (next == prev) {
		sd_irq_on(c);
		return c;
	}
	/* rseq_preempt(prev) in prepare_task_switch(): a task switched out
	 * loses its restartable sequence, wherever it runs next. */
	if (sd_cpu_rseq_abort(c))
		sd_event(c, SD_EV_RSEQ_ABORT,
			 atomic_load_explicit(&c->rseq_seq, memory_order_relaxed), 0);
	sd_event(c, SD_EV_TASK_SWITCH, next->id, prev->id);
	/* context_switch(): a task's mm, unless it is loaded already; the
	 * idle thread keeps the last one, and enter_lazy_tlb() marks it lazy
	 * here, before the CPU is handed over. Left to the idle thread's own
	 * loop, the CPU ran the mm non-lazily until that thread woke, and a
	 * task that moved away and exec'd meanwhile found its old mm "still
	 * loaded" when its last put destroyed it (the fuzzer: -EBUSY).
	 * The lazy store is relaxed. When the mm is a task's (one the
	 * scheduler destroys), prev holds a reference to it and drops it
	 * later in owner_put(), whose fetch_sub releases this store; the last
	 * user's fetch_sub there is the acquire before its running_anywhere()
	 * reads the flag: the pairing exit_mm()'s enter_lazy_tlb() uses. */
	if (next->idle)
		sd_cpu_enter_lazy(c);
	else if (sd_cpu_current_mm(c) != next->mm ||
		 atomic_load_explicit(&c->lazy, memory_order_relaxed))
		sd_switch_mm(c, next->mm);
	c = context_switch(c, prev, next, dead);
	if (c)
		sd_irq_on(c);
	return c;
}

struct sd_cpu *sd_sched_preempt_point(struct sd_cpu *c, struct sd_task *self)
{
	struct sd_rq *rq = &self->s->rq[c->id];

	/* A reschedule IPI that has run frees its request for the next
	 * waker at once, or a busy CPU would take every later preemption
	 * without its IPI. */
	idle_retire_resched(rq);
	if (likely(!atomic_load_explicit(&rq->need_resched, memory_order_relaxed)) ||
	    c->irq_depth)
		return c;
	return sd_schedule(c, self, true);
}

/* sysctl_sched_base_slice (kernel/sched/fair.c): 0.75 ms normalized,
 * scaled by get_update_sysctl_factor() under SCHED_TUNABLESCALING_LOG,
 * 1 + ilog2(min(online CPUs, 8)). */
static uint64_t base_slice_ns(const struct sd_sched *s)
{
	unsigned cpus = s->nr_cpus < 8 ? s->nr_cpus : 8, log2 = 0;

	while (cpus >>= 1)
		log2++;
	return 750000ull * (1 + log2);
}

struct sd_cpu *sd_sched_return_to_user(struct sd_cpu *c, struct sd_task *self)
{
	struct sd_rq *rq = &self->s->rq[c->id];

	/* The tick's check_preempt_tick()/update_deadline(): a slice used up
	 * with others waiting puts the task behind them. nr_queued is read
	 * racily, as the kernel's tick reads nr_running: a task queued a
	 * moment later waits for the next point. */
	if (!c->irq_depth && atomic_load_explicit(&rq->nr_queued, memory_order_relaxed) &&
	    sd_cpu_now_ns(c) - rq->slice_start_ns >= base_slice_ns(self->s))
		return sd_schedule(c, self, true);
	return sd_sched_preempt_point(c, self);
}

/* ---- deadlock and the end ---- */

bool sd_sched_block_counted(struct sd_sched *s, struct sd_task *t)
{
	t->blocked_counted = true;
	return atomic_fetch_add(&s->nr_blocked, 1) + 1 == atomic_load(&s->nr_alive);
}

/*
 * Every task that has not returned waits on a wait queue (none runs or
 * sleeps), so none of those waits can end: each returns -EDEADLK, and
 * stderr says who waited on what. Called by the task that completed the
 * circle, or by the last one to return.
 */
void sd_sched_break_deadlock(struct sd_cpu *c, struct sd_sched *s, struct sd_task *self)
{
	struct sd_task *t, *victims[64];
	unsigned n = 0, total = 0;
	char line[256] = "";
	int len = 0;

	pthread_mutex_lock(&s->lock);
	cds_list_for_each_entry(t, &s->all, all_node) {
		if (t == self || t->idle)
			continue;
		sd_spin_lock(&t->pi_lock);
		if (t->state == SD_TASK_BLOCKED) {
			total++;
			if (len < (int)sizeof(line) - 40)
				len += snprintf(line + len, sizeof(line) - (size_t)len, " task %u on '%s';",
						t->id, t->waiting_on ? t->waiting_on->name : "?");
			if (n < SD_ARRAY_SIZE(victims))
				victims[n++] = t;
		}
		sd_spin_unlock(&t->pi_lock);
	}
	pthread_mutex_unlock(&s->lock);
	fprintf(stderr, "libshootdown: sd_task_wait: every live task waits (%u%s):%s%s\n",
		total + (self != NULL), self ? ", the caller included" : "", line,
		self ? " their waits return -EDEADLK" : " they return -EDEADLK");
	for (unsigned i = 0; i < n; i++) {
		t = victims[i];
		/* Under pi_lock, which its writers hold; checked again below
		 * under the queue's lock too (the order is queue, then pi). */
		sd_spin_lock(&t->pi_lock);
		struct sd_waitq *q = t->waiting_on;
		sd_spin_unlock(&t->pi_lock);

		/* Taken off and woken in one hold of the queue's lock, as
		 * sd_task_wake() does; one no longer on it was taken off and
		 * woken by a waker already. */
		if (!q)
			continue;
		sd_spin_lock(&q->lock);
		sd_spin_lock(&t->pi_lock);
		bool mine = t->state == SD_TASK_BLOCKED && t->waiting_on == q;
		if (mine) {
			cds_list_del(&t->wq_node);
			q->nr_waiters--;
			t->waiting_on = NULL;
			t->wait_result = -EDEADLK;
		}
		sd_spin_unlock(&t->pi_lock);
		if (mine)
			sd_try_to_wake_up(c, t);
		sd_spin_unlock(&q->lock);
	}
}

void sd_sched_stop(struct sd_cpu *c, struct sd_sched *s)
{
	atomic_store(&s->stop, 1);
	for (unsigned i = 0; i < s->nr_cpus; i++) {
		if (c && i == c->id)
			continue;
		/* The flag first, then the same protocol as a wakeup: an idle
		 * thread that cleared its flag looks at stop after. */
		send_resched(c, s, i);
	}
}

/* ---- idle ---- */

static bool idle_has_work(struct sd_sched *s, struct sd_rq *rq)
{
	return atomic_load(&rq->nr_queued) || atomic_load(&s->stop);
}

/*
 * do_idle(): with nothing queued, keep the last mm lazily and wait for a
 * reschedule IPI, a timer of this CPU, or the end; with something queued,
 * switch to it. Before waiting, pull a task from a busier queue (newidle
 * balance).
 */
void sd_sched_idle_body(struct sd_cpu *c, void *arg)
{
	struct sd_sched *s = arg;
	struct sd_rq *rq = &s->rq[c->id];
	struct sd_task *idle = &rq->idle;
	bool lazy = false;

	sd_current_task = idle;
	idle->bound_cpu = c->id;
	atomic_store(&idle->tid, (int)syscall(SYS_gettid));
	rq_lock(c, rq);
	atomic_store_explicit(&rq->curr, idle, memory_order_release);
	rq_unlock(c, rq);
	/* The first periodic balance an interval in (sd->last_balance starts
	 * at the domain's creation); an idle CPU pulls at once anyway. */
	rq->next_balance_ns = sd_cpu_now_ns(c) + balance_interval_ns(s->m);
	while (!atomic_load(&s->stop) || atomic_load(&rq->nr_queued)) {
		int seq;

		sched_tick(c, s);
		if (atomic_load(&rq->nr_queued) || pull_task(c, s, 1)) {
			c = sd_schedule(c, idle, false);
			/* Test instrumentation: the idle thread back on its
			 * CPU, before its loop runs. */
			sd_order_point(SD_ORDER_IDLE_RESUMED, c->id);
			lazy = false;
			continue;
		}
		if (!lazy) {
			/* Lax and real time leave the running set too; strict
			 * mode waits in the machine (sd_cpu_idle_wait()). */
			if (c->model.seq)
				sd_cpu_enter_lazy(c);
			else
				sd_cpu_idle(c);
			lazy = true;
		}
		seq = atomic_load(&rq->resched_seq);
		idle_retire_resched(rq);
		if (idle_has_work(s, rq))
			continue;
		sd_cpu_idle_wait(c, &rq->resched_seq, seq, earliest_sleeper(c, rq));
	}
	sd_current_task = NULL;
}

/* ---- the scheduler's state ---- */


void sd_sched_free(struct sd_machine *m)
{
	struct sd_sched *s = m->sched;
	struct sd_task *t, *tmp;

	if (!s)
		return;
	/* Tasks that never ran: their threads wait to be given a CPU. */
	cds_list_for_each_entry(t, &s->all, all_node) {
		if (t->idle || !t->thread_started)
			continue;
		atomic_store(&t->go, SD_TASK_GO_CANCEL);
		sd_futex_wake(&t->go, 1);
	}
	cds_list_for_each_entry_safe(t, tmp, &s->all, all_node) {
		if (t->thread_started)
			pthread_join(t->thread, NULL);
		cds_list_del(&t->all_node);
		hwloc_bitmap_free(t->allowed);
		free(t);
	}
	for (unsigned i = 0; i < s->nr_cpus; i++)
		if (s->rq[i].idle.allowed)
			hwloc_bitmap_free(s->rq[i].idle.allowed);
	free(s->rq);
	pthread_mutex_destroy(&s->lock);
	free(s);
	m->sched = NULL;
	m->sched_free = NULL;
}

int sd_sched_get(struct sd_machine *m, struct sd_sched **out)
{
	struct sd_sched *s = m->sched;

	if (s) {
		*out = s;
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return sd_fail(-ENOMEM, "sd_task_create: no memory for the scheduler");
	s->rq = aligned_alloc(SD_CACHELINE, sd_round_up(m->nr_cpus * sizeof(*s->rq), SD_CACHELINE));
	if (!s->rq) {
		free(s);
		return sd_fail(-ENOMEM, "sd_task_create: no memory for the run queues");
	}
	memset(s->rq, 0, m->nr_cpus * sizeof(*s->rq));
	s->m = m;
	s->nr_cpus = m->nr_cpus;
	pthread_mutex_init(&s->lock, NULL);
	CDS_INIT_LIST_HEAD(&s->all);
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_rq *rq = &s->rq[i];
		struct sd_task *idle = &rq->idle;

		sd_spin_init(&rq->lock);
		rq->lock_model = (struct sd_model_lock)SD_MODEL_LOCK_INIT;
		CDS_INIT_LIST_HEAD(&rq->queue);
		CDS_INIT_LIST_HEAD(&rq->sleepers);
		atomic_init(&rq->nr_queued, 0);
		atomic_init(&rq->curr, NULL);
		atomic_init(&rq->resched_seq, 0);
		atomic_init(&rq->resched_inflight, 0);
		atomic_init(&rq->need_resched, 0);
		idle->s = s;
		idle->idle = true;
		idle->cpu = i;
		idle->state = SD_TASK_RUNNING;
		idle->bound_cpu = i;
		sd_spin_init(&idle->pi_lock);
		atomic_init(&idle->go, 0);
		atomic_init(&idle->tid, 0);
		idle->allowed = hwloc_bitmap_alloc();
		if (!idle->allowed) {
			m->sched = s;
			sd_sched_free(m);
			return sd_fail(-ENOMEM, "sd_task_create: no memory for the run queues");
		}
		hwloc_bitmap_only(idle->allowed, i);
	}
	m->sched = s;
	m->sched_free = sd_sched_free;
	*out = s;
	return 0;
}
