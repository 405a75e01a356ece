/* SPDX-License-Identifier: MIT */
/*
 * Tasks (include/shootdown/task.h): creation, the run, waits and wakes,
 * sleep, affinity, fork, exec and exit. The core they stand on (run
 * queues, the switch, wakeups) is sched.c.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <shootdown/error.h>
#include <shootdown/mm.h>
#include <shootdown/task.h>

#include "../core/error.h"
#include "../core/futex.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../mm/mm.h"
#include "sched.h"

#define SD_TASK_STACK (256 * 1024)
#define SD_TASK_SLEEP_MAX_NS (1000ull * 1000000000ull)

/* -EPERM unless the calling thread is @self, running. */
static int check_self(struct sd_task *self, const char *what)
{
	if (!self || self != sd_current_task || self->idle || !sd_this_cpu)
		return sd_fail(-EPERM, "%s: the caller is not this task's thread", what);
	return 0;
}

/* ---- creation ---- */

static int parse_affinity(struct sd_machine *m, const char *list, hwloc_bitmap_t out)
{
	hwloc_bitmap_t all = hwloc_bitmap_alloc();
	int err = 0;

	if (!all)
		return -ENOMEM;
	hwloc_bitmap_set_range(all, 0, (int)m->nr_cpus - 1);
	if (!list || !*list) {
		hwloc_bitmap_copy(out, all);
	} else if (hwloc_bitmap_list_sscanf(out, list) < 0 || hwloc_bitmap_weight(out) < 0) {
		err = sd_fail(-EINVAL, "affinity '%s' is not a CPU list such as \"0-3,8\"", list);
	} else {
		hwloc_bitmap_and(out, out, all);
		if (hwloc_bitmap_iszero(out))
			err = sd_fail(-EINVAL, "affinity '%s' names no CPU of the machine (0-%u)",
				      list, m->nr_cpus - 1);
	}
	hwloc_bitmap_free(all);
	return err;
}

static void task_exit(struct sd_task *t);

/* The body left with pthread_exit() (or was cancelled): it returns as
 * a task all the same, and its thread must not end holding a CPU. */
static void body_exited(void *p)
{
	struct sd_task *t = p;

	task_exit(t);
	sd_current_task = NULL;
	sd_cpu_thread_finish(t->s->m, &t->binding);
}

static void *task_thread(void *p)
{
	struct sd_task *t = p;
	struct sd_cpu *c;

	sd_cpu_thread_prepare();
	sd_current_task = t;
	atomic_store(&t->tid, (int)syscall(SYS_gettid));
	sd_futex_wake(&t->tid, 1);
	c = sd_sched_wait_for_cpu(t);
	if (c) {
		/* finish_task_switch(): the switch that brought us here left
		 * interrupts off. */
		sd_irq_on(c);
		pthread_cleanup_push(body_exited, t);
		t->fn(t, t->arg);
		pthread_cleanup_pop(0);
		task_exit(t);
	}
	sd_current_task = NULL;
	sd_cpu_thread_finish(t->s->m, &t->binding);
	return NULL;
}

/* A new task of @s in @mm (owned by @owner, or the program's), queued on
 * @cpu; its thread started. @from: the CPU of a creating task, or NULL. */
static int task_new(struct sd_sched *s, struct sd_cpu *from, struct sd_mm *mm,
		    struct sd_mm_owner *owner, unsigned cpu, hwloc_const_bitmap_t allowed,
		    sd_task_fn fn, void *arg, struct sd_task **out)
{
	struct sd_task *t = calloc(1, sizeof(*t));
	pthread_attr_t attr;
	int err;

	if (!t)
		return sd_fail(-ENOMEM, "sd_task_create: no memory");
	t->allowed = hwloc_bitmap_dup(allowed);
	if (!t->allowed) {
		free(t);
		return sd_fail(-ENOMEM, "sd_task_create: no memory");
	}
	t->s = s;
	t->fn = fn;
	t->arg = arg;
	t->mm = mm;
	t->owner = owner;
	t->state = SD_TASK_RUNNING;
	t->cpu = cpu == SD_TASK_ANY_CPU ? sd_sched_pick_cpu(s, t) : cpu;
	t->bound_cpu = UINT32_MAX;
	sd_spin_init(&t->pi_lock);
	atomic_init(&t->go, 0);
	atomic_init(&t->tid, 0);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, SD_TASK_STACK);
	pthread_mutex_lock(&s->lock);
	t->id = ++s->next_id;
	err = pthread_create(&t->thread, &attr, task_thread, t);
	if (err) {
		s->next_id--;
		pthread_mutex_unlock(&s->lock);
		pthread_attr_destroy(&attr);
		hwloc_bitmap_free(t->allowed);
		free(t);
		return sd_fail(-EAGAIN, "sd_task_create: no thread: %s", strerror(err));
	}
	t->thread_started = true;
	cds_list_add_tail(&t->all_node, &s->all);
	pthread_mutex_unlock(&s->lock);
	pthread_attr_destroy(&attr);
	/* Its tid before any CPU can be handed to it (sd_cpu_hand_out()). */
	while (!atomic_load(&t->tid))
		sd_futex_wait(&t->tid, 0);
	atomic_fetch_add(&s->nr_alive, 1);
	sd_wake_up_new_task(from, t);
	if (out)
		*out = t;
	return 0;
}

int sd_task_create(struct sd_machine *m, const struct sd_task_config *cfg, sd_task_fn fn,
		   void *arg, struct sd_task **out)
{
	struct sd_task *self = sd_current_task;
	struct sd_sched *s;
	hwloc_bitmap_t allowed;
	int err;

	if (!m || !cfg || !fn)
		return sd_fail(-EINVAL, "sd_task_create: NULL argument");
	if (cfg->size != sizeof(*cfg))
		return sd_fail(-EINVAL, "sd_task_create: size %zu is not sizeof(struct "
			       "sd_task_config) (%zu): start from SD_TASK_CONFIG_INIT",
			       cfg->size, sizeof(*cfg));
	if (!cfg->mm || cfg->mm->m != m)
		return sd_fail(-EINVAL, "sd_task_create: %s", cfg->mm ? "the mm belongs to another machine"
									: "NULL mm");
	if (cfg->cpu != SD_TASK_ANY_CPU && cfg->cpu >= m->nr_cpus)
		return sd_fail(-EINVAL, "sd_task_create: CPU %u out of range (machine has %u)",
			       cfg->cpu, m->nr_cpus);
	if (self ? (self->idle || self->s->m != m) : sd_this_cpu != NULL)
		return sd_fail(-EINVAL, "sd_task_create: the caller is a CPU but not a task of "
			       "this machine");
	if (self && sd_this_cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_task_create: interrupts are off");
	if (!self && m->sched && atomic_load(&((struct sd_sched *)m->sched)->running))
		return sd_fail(-EINVAL, "sd_task_create: a run of this machine is in progress; "
			       "only its tasks may create tasks now");
	err = sd_sched_get(m, &s);
	if (err)
		return err;
	allowed = hwloc_bitmap_alloc();
	if (!allowed)
		return sd_fail(-ENOMEM, "sd_task_create: no memory");
	err = parse_affinity(m, cfg->affinity, allowed);
	if (!err && cfg->cpu != SD_TASK_ANY_CPU && !hwloc_bitmap_isset(allowed, (int)cfg->cpu))
		err = sd_fail(-EINVAL, "sd_task_create: CPU %u is not in the affinity '%s'",
			      cfg->cpu, cfg->affinity);
	/* A thread of an mm the scheduler made (a forked child's) keeps it
	 * alive too: it goes with its last task. */
	struct sd_mm_owner *owner = self && self->owner && self->owner->mm == cfg->mm ? self->owner
										     : NULL;
	if (!err && owner)
		atomic_fetch_add(&owner->users, 1);
	if (!err) {
		err = task_new(s, self ? sd_this_cpu : NULL, cfg->mm, owner, cfg->cpu, allowed, fn,
			       arg, out);
		if (err && owner)
			atomic_fetch_sub(&owner->users, 1);
	}
	hwloc_bitmap_free(allowed);
	return err;
}

/* ---- the run ---- */

int sd_sched_run(struct sd_machine *m)
{
	struct sd_sched *s;
	struct sd_task *t, *tmp;
	int expected = 0, err;

	if (!m)
		return sd_fail(-EINVAL, "sd_sched_run: NULL machine");
	if (sd_this_cpu)
		return sd_fail(-EBUSY, "sd_sched_run: the caller is itself a CPU");
	s = m->sched;
	if (!s || !atomic_load(&s->nr_alive))
		return sd_fail(-EINVAL, "sd_sched_run: no task to run (sd_task_create() first)");
	if (atomic_load(&m->nr_attached))
		return sd_fail(-EBUSY, "sd_sched_run: %u CPU(s) already attached",
			       atomic_load(&m->nr_attached));
	if (!atomic_compare_exchange_strong(&s->running, &expected, 1))
		return sd_fail(-EBUSY, "sd_sched_run: a run is in progress");
	atomic_store(&s->stop, 0);
	atomic_store(&s->error, 0);
	err = sd_machine_run(m, sd_sched_idle_body, s);
	if (!err && atomic_load(&s->error))
		err = sd_fail(atomic_load(&s->error), "%s", s->error_msg);
	/* Tasks left (a run that failed to start): their threads end unrun. */
	cds_list_for_each_entry(t, &s->all, all_node) {
		int zero = 0;

		if (atomic_compare_exchange_strong(&t->go, &zero, SD_TASK_GO_CANCEL))
			sd_futex_wake(&t->go, 1);
	}
	pthread_mutex_lock(&s->lock);
	cds_list_for_each_entry_safe(t, tmp, &s->all, all_node) {
		pthread_join(t->thread, NULL);
		cds_list_del(&t->all_node);
		hwloc_bitmap_free(t->allowed);
		free(t);
	}
	pthread_mutex_unlock(&s->lock);
	atomic_store(&s->nr_alive, 0);
	atomic_store(&s->nr_blocked, 0);
	for (unsigned i = 0; i < s->nr_cpus; i++) {
		atomic_store(&s->rq[i].curr, NULL);
		atomic_store(&s->rq[i].nr_queued, 0);
		CDS_INIT_LIST_HEAD(&s->rq[i].queue);
		CDS_INIT_LIST_HEAD(&s->rq[i].sleepers);
		atomic_store(&s->rq[i].resched_inflight, 0);
	}
	atomic_store(&s->running, 0);
	return err;
}

/* ---- exit ---- */

/* The mm's user leaves: its last task destroys an mm the scheduler made. */
static int owner_put(struct sd_cpu *c, struct sd_mm_owner *owner)
{
	int err = 0;

	if (!owner)
		return 0;
	/* exit_mm(): enter_lazy_tlb() before the reference goes. The last
	 * user, exiting on another CPU, destroys the mm at once, and
	 * sd_mm_destroy() refuses one that a CPU still runs: this CPU must
	 * already count as lazy there (it is shot like any lazy one). Its
	 * lazy store is released by the fetch_sub below; the partner is the
	 * last user's fetch_sub, read before its running_anywhere(). */
	if (sd_cpu_current_mm(c) == owner->mm)
		sd_cpu_enter_lazy(c);
	if (atomic_fetch_sub(&owner->users, 1) != 1)
		return 0;
	/* exit_mm(), then mmput()'s exit_mmap() on this CPU: off the mm
	 * first, as sd_mm_destroy() refuses one a CPU runs. */
	if (sd_cpu_current_mm(c) == owner->mm)
		sd_switch_mm(c, NULL);
	err = sd_mm_destroy(owner->mm);
	free(owner);
	return err;
}

static int mm_put(struct sd_cpu *c, struct sd_task *t)
{
	struct sd_mm_owner *owner = t->owner;

	t->owner = NULL;
	return owner_put(c, owner);
}

static void task_exit(struct sd_task *t)
{
	struct sd_sched *s = t->s;
	struct sd_cpu *c = sd_this_cpu;
	int err;

	if (c->irq_depth) {
		sd_sched_error(s, -EDEADLK, "sd_sched_run: task %u's body returned with interrupts "
			       "off (depth %d)", t->id, (int)c->irq_depth);
		c->irq_depth = 1;
		sd_irq_on(c);
	}
	err = mm_put(c, t);
	if (err)
		sd_sched_error(s, err, "sd_sched_run: task %u's mm could not be destroyed: %s",
			       t->id, sd_last_error());
	sd_order_point(SD_ORDER_TASK_EXITED, c->id);
	sd_event(c, SD_EV_TASK_EXIT, t->id, 0);
	sd_spin_lock(&t->pi_lock);
	t->state = SD_TASK_DEAD;
	sd_spin_unlock(&t->pi_lock);
	/* The last one out stops the idle threads; one that leaves only
	 * waiters behind leaves a deadlock, which is broken. */
	unsigned alive = atomic_fetch_sub(&s->nr_alive, 1) - 1;

	if (!alive)
		sd_sched_stop(c, s);
	else if (atomic_load(&s->nr_blocked) == alive)
		sd_sched_break_deadlock(c, s, NULL);
	sd_schedule(c, t, false);
}

/* ---- yield, wait, wake, sleep ---- */

int sd_task_yield(struct sd_task *self)
{
	int err = check_self(self, "sd_task_yield");

	if (err)
		return err;
	if (sd_this_cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_task_yield: interrupts are off");
	sd_schedule(sd_this_cpu, self, true);
	/* Nothing else to run here: give the host PU away a moment, as the
	 * kernel's sched_yield() would to other threads. A task thread still
	 * finishing a switch on this PU (its hand-in to another CPU) would
	 * otherwise wait for the host's tick behind a task that only yields
	 * (forked_worker's hops took 4 ms of real time each). */
	sched_yield();
	return 0;
}

int sd_task_preempt_point(struct sd_task *self)
{
	int err = check_self(self, "sd_task_preempt_point");

	if (err)
		return err;
	if (sd_this_cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_task_preempt_point: interrupts are off");
	sd_sched_return_to_user(sd_this_cpu, self);
	return 0;
}

int sd_waitq_create(struct sd_machine *m, const char *name, struct sd_waitq **out)
{
	struct sd_waitq *q;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_waitq_create: NULL argument");
	q = calloc(1, sizeof(*q));
	if (!q)
		return sd_fail(-ENOMEM, "sd_waitq_create: no memory");
	q->m = m;
	sd_spin_init(&q->lock);
	CDS_INIT_LIST_HEAD(&q->waiters);
	snprintf(q->name, sizeof(q->name), "%s", name ? name : "waitq");
	*out = q;
	return 0;
}

int sd_waitq_destroy(struct sd_waitq *q)
{
	unsigned waiters;

	if (!q)
		return sd_fail(-EINVAL, "sd_waitq_destroy: NULL wait queue");
	sd_spin_lock(&q->lock);
	waiters = q->nr_waiters;
	sd_spin_unlock(&q->lock);
	if (waiters)
		return sd_fail(-EBUSY, "sd_waitq_destroy: %u task(s) wait on '%s'", waiters, q->name);
	free(q);
	return 0;
}

int sd_task_wait(struct sd_task *self, struct sd_waitq *q, sd_wait_cond cond, void *arg)
{
	struct sd_cpu *c;
	int err = check_self(self, "sd_task_wait");

	if (err)
		return err;
	if (!q || !cond)
		return sd_fail(-EINVAL, "sd_task_wait: NULL argument");
	if (q->m != self->s->m)
		return sd_fail(-EINVAL, "sd_task_wait: the wait queue belongs to another machine");
	c = sd_this_cpu;
	if (c->irq_depth)
		return sd_fail(-EDEADLK, "sd_task_wait: interrupts are off");
	for (;;) {
		bool deadlock;

		sd_spin_lock(&q->lock);
		if (cond(arg)) {
			sd_spin_unlock(&q->lock);
			sd_sched_preempt_point(c, self);
			return 0;
		}
		/* prepare_to_wait(): on the queue and BLOCKED under its lock,
		 * so a waker that made the condition true before taking the
		 * lock finds us. */
		sd_spin_lock(&self->pi_lock);
		self->state = SD_TASK_BLOCKED;
		self->waiting_on = q;
		self->wait_result = 0;
		deadlock = sd_sched_block_counted(self->s, self);
		if (deadlock) {
			self->state = SD_TASK_RUNNING;
			self->waiting_on = NULL;
			self->blocked_counted = false;
			atomic_fetch_sub(&self->s->nr_blocked, 1);
		} else {
			cds_list_add_tail(&self->wq_node, &q->waiters);
			q->nr_waiters++;
		}
		sd_spin_unlock(&self->pi_lock);
		sd_spin_unlock(&q->lock);
		if (deadlock) {
			sd_sched_break_deadlock(c, self->s, self);
			return sd_fail(-EDEADLK, "sd_task_wait: task %u would wait on '%s' for ever: "
				       "every other live task waits too", self->id, q->name);
		}
		/* Test instrumentation: a wakeup may land before the switch. */
		sd_order_point(SD_ORDER_TASK_BLOCKING, c->id);
		c = sd_schedule(c, self, false);
		if (self->wait_result)
			return sd_fail(self->wait_result, "sd_task_wait: task %u's wait on '%s' "
				       "could never end: every live task waited", self->id, q->name);
	}
}

int sd_task_wake(struct sd_task *self, struct sd_waitq *q, unsigned nr)
{
	struct sd_task *t, *tmp;
	int total = 0;
	int err = check_self(self, "sd_task_wake");

	if (err)
		return err;
	if (!q)
		return sd_fail(-EINVAL, "sd_task_wake: NULL wait queue");
	if (q->m != self->s->m)
		return sd_fail(-EINVAL, "sd_task_wake: the wait queue belongs to another machine");
	/*
	 * Off the queue and woken in one hold of its lock, as the kernel's
	 * autoremove_wake_function() runs under the wait queue's lock: a
	 * waiter taken off and woken only after the unlock could be woken by
	 * another path meanwhile, wait again (on the queue anew), and then
	 * take this late wake as its own while still on the queue (found by
	 * sched_stress under ASan: a queue that ended its run with a
	 * waiter counted and none waiting). Lock order: queue, then the
	 * task's pi_lock, then run queues (sched.h).
	 */
	sd_spin_lock(&q->lock);
	cds_list_for_each_entry_safe(t, tmp, &q->waiters, wq_node) {
		if (nr && (unsigned)total >= nr)
			break;
		cds_list_del(&t->wq_node);
		q->nr_waiters--;
		sd_spin_lock(&t->pi_lock);
		t->waiting_on = NULL;
		sd_spin_unlock(&t->pi_lock);
		total += sd_try_to_wake_up(sd_this_cpu, t);
	}
	sd_spin_unlock(&q->lock);
	sd_sched_preempt_point(sd_this_cpu, self);
	return total;
}

int sd_task_sleep(struct sd_task *self, uint64_t ns)
{
	struct sd_cpu *c;
	int err = check_self(self, "sd_task_sleep");

	if (err)
		return err;
	if (ns > SD_TASK_SLEEP_MAX_NS)
		return sd_fail(-EINVAL, "sd_task_sleep: %llu ns is above 1000 s",
			       (unsigned long long)ns);
	c = sd_this_cpu;
	if (c->irq_depth)
		return sd_fail(-EDEADLK, "sd_task_sleep: interrupts are off");
	sd_spin_lock(&self->pi_lock);
	self->state = SD_TASK_SLEEPING;
	self->sleep_until_ns = sd_cpu_now_ns(c) + ns;
	sd_spin_unlock(&self->pi_lock);
	sd_schedule(c, self, false);
	return 0;
}

/* ---- affinity ---- */

int sd_task_set_affinity(struct sd_task *self, struct sd_task *task, const char *cpus)
{
	hwloc_bitmap_t allowed;
	struct sd_cpu *c;
	int err = check_self(self, "sd_task_set_affinity");

	if (err)
		return err;
	if (!task || task->idle)
		return sd_fail(-EINVAL, "sd_task_set_affinity: NULL task");
	if (sd_this_cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_task_set_affinity: interrupts are off");
	if (task->s != self->s)
		return sd_fail(-EINVAL, "sd_task_set_affinity: a task of another machine");
	allowed = hwloc_bitmap_alloc();
	if (!allowed)
		return sd_fail(-ENOMEM, "sd_task_set_affinity: no memory");
	err = parse_affinity(self->s->m, cpus, allowed);
	if (err) {
		hwloc_bitmap_free(allowed);
		return err;
	}
	sd_spin_lock(&task->pi_lock);
	if (task->state == SD_TASK_DEAD) {
		sd_spin_unlock(&task->pi_lock);
		hwloc_bitmap_free(allowed);
		return sd_fail(-ESRCH, "sd_task_set_affinity: task %u has returned", task->id);
	}
	hwloc_bitmap_copy(task->allowed, allowed);
	sd_spin_unlock(&task->pi_lock);
	hwloc_bitmap_free(allowed);
	c = sd_this_cpu;
	if (task == self) {
		if (!hwloc_bitmap_isset(self->allowed, (int)c->id))
			sd_schedule(c, self, false);
	} else {
		sd_sched_move_queued(c, task);
		sd_sched_preempt_point(c, self);
	}
	return 0;
}

/* ---- fork and exec ---- */

int sd_task_fork(struct sd_task *self, sd_task_fn fn, void *arg, struct sd_task **child)
{
	struct sd_mm_owner *owner;
	struct sd_mm *mm;
	struct sd_cpu *c;
	hwloc_bitmap_t allowed;
	int err = check_self(self, "sd_task_fork");

	if (err)
		return err;
	if (!fn)
		return sd_fail(-EINVAL, "sd_task_fork: NULL body");
	c = sd_this_cpu;
	if (c->irq_depth)
		return sd_fail(-EINVAL, "sd_task_fork: interrupts are off");
	owner = calloc(1, sizeof(*owner));
	if (!owner)
		return sd_fail(-ENOMEM, "sd_task_fork: no memory");
	err = sd_mm_fork(c, self->mm, &mm);
	if (err) {
		free(owner);
		return err;
	}
	owner->mm = mm;
	atomic_init(&owner->users, 1);
	sd_event(c, SD_EV_TASK_FORK, self->id, 0);
	sd_spin_lock(&self->pi_lock);
	allowed = hwloc_bitmap_dup(self->allowed);
	sd_spin_unlock(&self->pi_lock);
	err = allowed ? task_new(self->s, c, mm, owner, SD_TASK_ANY_CPU, allowed, fn, arg, child)
		      : sd_fail(-ENOMEM, "sd_task_fork: no memory");
	hwloc_bitmap_free(allowed);
	if (err) {
		sd_mm_destroy(mm);
		free(owner);
	}
	return err;
}

int sd_task_exec(struct sd_task *self)
{
	struct sd_mm_owner *owner;
	struct sd_mm *mm;
	struct sd_cpu *c;
	int err = check_self(self, "sd_task_exec");

	if (err)
		return err;
	c = sd_this_cpu;
	if (c->irq_depth)
		return sd_fail(-EINVAL, "sd_task_exec: interrupts are off");
	owner = calloc(1, sizeof(*owner));
	if (!owner)
		return sd_fail(-ENOMEM, "sd_task_exec: no memory");
	err = sd_mm_create(self->s->m, &mm);
	if (err) {
		free(owner);
		return err;
	}
	owner->mm = mm;
	atomic_init(&owner->users, 1);
	sd_event(sd_this_cpu, SD_EV_TASK_EXEC, self->id, 0);
	/* exec_mmap(): the task's mm first, then the CPU's, then the old
	 * reference goes. The kernel does the first two with interrupts off;
	 * here a preemption may come between them, and the scheduler switches
	 * a task back in onto its task->mm: set after the switch, a task
	 * preempted there came back onto the old mm, whose last put then
	 * found it loaded and could not destroy it (the fuzzer: -EBUSY, "mm
	 * still loaded on CPU 5"). The task may also resume on another CPU:
	 * each step uses the CPU it runs on then. */
	struct sd_mm_owner *old = self->owner;

	self->mm = mm;
	self->owner = owner;
	sd_switch_mm(sd_this_cpu, mm);
	sd_order_point(SD_ORDER_EXEC_SWITCHED, sd_this_cpu->id);
	return owner_put(sd_this_cpu, old);
}

/* ---- getters ---- */

struct sd_cpu *sd_task_cpu(struct sd_task *self)
{
	if (check_self(self, "sd_task_cpu"))
		return NULL;
	return sd_this_cpu;
}

struct sd_mm *sd_task_mm(const struct sd_task *task)
{
	if (!task) {
		sd_fail(0, "sd_task_mm: NULL task");
		return NULL;
	}
	return task->mm;
}

unsigned sd_task_id(const struct sd_task *task)
{
	if (!task)
		return (unsigned)sd_fail(0, "sd_task_id: NULL task");
	return task->id;
}
