/* SPDX-License-Identifier: MIT */
/**
 * @file task.h
 * @brief Tasks and a scheduler: run queues, sleeping, wakeups, idle, migration, fork, exec.
 * @ingroup task
 *
 * A task is a host thread that runs only while it holds an emulated CPU.
 * Each CPU has a run queue; sd_sched_run() gives each CPU an idle thread
 * (the kernel's swapper) and runs the tasks created with sd_task_create()
 * until every one has returned. A task that waits on a wait queue
 * (sd_task_wait()), sleeps (sd_task_sleep()) or yields gives its CPU to the
 * next task of the queue, or to the idle thread, which keeps the last mm
 * loaded lazily (enter_lazy_tlb()) and is woken by a reschedule IPI when a
 * task is queued on it from another CPU (ttwu_queue_wakelist(),
 * smp_send_reschedule()). A task that sd_task_fork() creates gets a
 * copy-on-write copy of its parent's mm (sd_mm_fork()); sd_task_exec()
 * replaces a task's mm by a new, empty one.
 *
 * Scheduling is cooperative: a task keeps its CPU until it waits, sleeps,
 * yields, changes its affinity or returns, or a wakeup preempts it at a call
 * of this header (the kernel's return to user from a system call). The run
 * queues are FIFO, but a woken task goes to the head of its queue (CFS
 * places a task that slept ahead of the others, place_entity()) and, if a
 * task runs there, preempts it (check_preempt_wakeup_fair(), resched_curr()):
 * a waker on the same CPU yields to it as sd_task_wake() returns; a task on
 * another CPU is sent a reschedule IPI and yields at its next call of this
 * header (a wait whose condition holds, a wake, a change of another task's
 * affinity). The library's other calls are not preemption points, and a
 * task that makes none keeps its CPU. A wakeup queues the task on its last
 * CPU if that CPU is idle and allowed, else on an idle allowed CPU, else on
 * the allowed CPU with the fewest tasks (select_task_rq_fair()'s preference
 * for an idle CPU, without its domains). A CPU about to go idle pulls a
 * waiting task from the busiest other queue it may run (newidle balance),
 * and every sched_balance_interval of its clock (profile parameter; 4 ms
 * of real time without a model) a CPU at a scheduling point pulls one from
 * a queue two or more tasks longer than its own.
 *
 * The library's own locks (an mm's mmap_lock, a page table's lock) are not
 * scheduling points: a task waiting for one keeps its CPU and spins, as
 * every CPU does without tasks. Two tasks that wait for each other must do
 * it through a wait queue; a spin in the program's code (sd_cpu_poll())
 * for a task queued behind the spinner on the same CPU never ends.
 *
 * Every step is an event through the CPU's counters and trace
 * (task_switches, task_wakeups, wakeup_ipis, task_migrations, task_forks,
 * task_execs; stats.h), charged in modelled time from the profile
 * (sched_switch, sched_wakeup, sched_migrate, task_fork; model.h).
 */
#ifndef SHOOTDOWN_TASK_H
#define SHOOTDOWN_TASK_H

#include <stdbool.h>
#include <stdint.h>
#include "export.h"
#include "machine.h"
#include "mm.h"

SD_BEGIN_DECLS

/**
 * @defgroup task Tasks and the scheduler
 * Tasks multiplexed on emulated CPUs: run queues, wait queues, idle, wakeups, migration, fork, exec.
 * @{
 */

struct sd_task;
struct sd_waitq;

/** A task's body: @self is the task, @arg what sd_task_create() was given. */
typedef void (*sd_task_fn)(struct sd_task *self, void *arg);

/** Any CPU the task's affinity allows: sd_task_config.cpu. */
#define SD_TASK_ANY_CPU UINT32_MAX

/** How to create a task (sd_task_create()). Added in 0.3.0. */
struct sd_task_config {
	/** sizeof(struct sd_task_config) as the caller compiled it. */
	size_t size;
	/** The task's address space: a thread of @mm. Not NULL. The program
	 *  keeps owning it (it destroys it after sd_sched_run()); tasks that
	 *  share an mm are threads of one process. */
	struct sd_mm *mm;
	/** The CPU whose run queue it starts on, or SD_TASK_ANY_CPU (then
	 *  the allowed CPU with the fewest tasks, the lowest id first). */
	unsigned cpu;
	/** CPUs it may run on, as a list of emulated CPU ids ("0-3,8"); NULL
	 *  or "" = all. The string is not kept. */
	const char *affinity;
};

/** Initialiser for struct sd_task_config: all defaults (its mm must be set). */
#define SD_TASK_CONFIG_INIT { sizeof(struct sd_task_config), NULL, SD_TASK_ANY_CPU, NULL }

/**
 * sd_task_create() - create a task that runs @fn(task, @arg) on @m.
 *
 * Before sd_sched_run() the task waits on its run queue for the run to
 * start; from a task during a run it is queued at once (wake_up_new_task()).
 * The task's host thread exists from now on; its struct lives until
 * sd_sched_run() returns.
 *
 * Return: 0 and the task in *@out (if @out is not NULL); -EINVAL for a NULL
 * @m, @cfg or @fn, a @cfg whose size is not sizeof(struct sd_task_config),
 * a NULL mm or one of another machine, a cpu out of range or not in the
 * affinity, an affinity that is not a CPU list or names no CPU of @m, or a
 * call from a thread that is neither a task of @m nor any CPU during a run
 * of @m; -EDEADLK from a task with interrupts off; -EAGAIN if the thread
 * cannot be created; -ENOMEM. Nothing is created on failure. Any thread
 * that is not a CPU, or a task of @m (interrupts on).
 */
SD_EXPORT int sd_task_create(struct sd_machine *m, const struct sd_task_config *cfg,
			     sd_task_fn fn, void *arg, struct sd_task **out);

/**
 * sd_sched_run() - run every task of @m until all have returned.
 *
 * Starts one idle thread per CPU (through sd_machine_run(): bound, attached,
 * answering IPIs), hands each CPU to the first task of its run queue, and
 * returns when the last task has returned and every CPU is detached. Tasks
 * that fork are waited for too. Then every task's thread is joined and its
 * struct freed; mms a task created (sd_task_fork(), sd_task_exec()) are
 * destroyed by their last task, and the ones the program gave stay its.
 *
 * A wait that can never end is reported, never hung on: when every task
 * that has not returned is waiting on a wait queue (none sleeps, none runs),
 * each of those waits returns -EDEADLK and stderr names the tasks and
 * their wait queues.
 *
 * Return: 0; -EINVAL for a NULL @m, or a machine with no task; -EBUSY if a
 * CPU is attached or a run is in progress; a task body that returned with
 * interrupts off: -EDEADLK (they are turned back on); sd_machine_run()'s
 * errors. Only the first error is returned. Any thread that is not a CPU.
 */
SD_EXPORT int sd_sched_run(struct sd_machine *m);

/**
 * sd_task_cpu() - the CPU @self runs on now: what its library calls take.
 * It may change at every call of this header that @self makes (a wait, a
 * sleep, a yield, a change of affinity), never in between. NULL (and
 * sd_last_error()) if @self is NULL or the caller is not @self's thread.
 * Task thread. Never waits for another CPU: may be called with interrupts
 * off.
 */
SD_EXPORT struct sd_cpu *sd_task_cpu(struct sd_task *self);

/**
 * sd_task_mm() - the mm @task runs in (NULL for NULL). Any thread. Never
 * waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT struct sd_mm *sd_task_mm(const struct sd_task *task);

/**
 * sd_task_id() - a number that names @task, from 1, in creation order
 * (0 for NULL). Any thread. Never waits for another CPU: may be called
 * with interrupts off.
 */
SD_EXPORT unsigned sd_task_id(const struct sd_task *task);

/**
 * sd_task_yield() - give the CPU to the next task of its run queue, if any
 * (sched_yield()); the caller goes to the queue's tail. Also a point where
 * a periodic balance may run. With nothing else queued, the calling host
 * thread yields its PU to the host (a sched_yield() system call), so that
 * a loop of yields does not starve the host threads of other tasks.
 * Return: 0; -EPERM if the caller is not @self's thread; -EDEADLK with
 * interrupts off. Task thread.
 */
SD_EXPORT int sd_task_yield(struct sd_task *self);

/**
 * sd_task_preempt_point() - where the program would return to user mode
 * (after a system call, or between steps of a long computation, where
 * the kernel's tick would land): the task switches if it must, as
 * exit_to_user_mode_loop() does on TIF_NEED_RESCHED. That is when a
 * woken task preempted it, when its affinity (set by another task) no
 * longer has its CPU (the task moves, as migration_cpu_stop() moves it),
 * or when it has run one EEVDF base slice since it took the CPU and
 * another task waits there (it goes behind them). The slice is the
 * kernel's sysctl_sched_base_slice, 0.75 ms scaled by 1 + ilog2(min(CPUs,
 * 8)) (SCHED_TUNABLESCALING_LOG), on the CPU's clock: modelled time in a
 * modelled machine. The other library calls never switch a task; without
 * this call a task that only computes keeps its CPU. Call sd_task_cpu()
 * again afterwards: the task may run on another CPU.
 * Return: 0; -EPERM if the caller is not @self's thread; -EDEADLK with
 * interrupts off. Task thread.
 */
SD_EXPORT int sd_task_preempt_point(struct sd_task *self);

/** A condition a waiter waits for (sd_task_wait()): true ends the wait. */
typedef bool (*sd_wait_cond)(void *arg);

/**
 * sd_waitq_create() - a wait queue for tasks of @m (a pipe's, a lock's).
 * @m: the machine whose tasks wait on it.
 * @name: what a deadlock report calls it (copied, at most 31 characters
 *        kept; NULL: "waitq").
 * @out: receives the wait queue.
 * Return: 0; -EINVAL for a NULL @m or @out; -ENOMEM. Any thread. Never
 * waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_waitq_create(struct sd_machine *m, const char *name, struct sd_waitq **out);

/**
 * sd_waitq_destroy() - free @q. Return: 0; -EINVAL for NULL; -EBUSY while a
 * task waits on it. Any thread. Never waits for another CPU: may be called
 * with interrupts off.
 */
SD_EXPORT int sd_waitq_destroy(struct sd_waitq *q);

/**
 * sd_task_wait() - wait on @q until @cond(@arg) is true (wait_event()).
 *
 * @cond is evaluated under @q's lock, first at once and then after each
 * wakeup: a waker that makes it true before calling sd_task_wake() on @q
 * cannot be missed. A wait that does not block is still a preemption point
 * (a wakeup may have asked this CPU to reschedule). While it is false the task leaves its CPU (the next
 * task, or idle, runs there) and waits for sd_task_wake(); it may come back
 * on another CPU (sd_task_cpu()).
 * Return: 0 once @cond is true; -EDEADLK if every task that has not
 * returned waits (the wait could never end: see sd_sched_run()), or with
 * interrupts off; -EPERM if the caller is not @self's thread; -EINVAL for a
 * NULL @q or @cond, or a @q of another machine. Task thread.
 */
SD_EXPORT int sd_task_wait(struct sd_task *self, struct sd_waitq *q, sd_wait_cond cond, void *arg);

/**
 * sd_task_wake() - wake up to @nr tasks waiting on @q (0: all), in the
 * order they began to wait (__wake_up()): each is queued on a CPU chosen as
 * the header says, at the head of its queue, and that CPU, if idle or
 * running a task of another CPU's, is sent a reschedule IPI. A woken task
 * looks at its condition again and may wait again. A woken task queued on
 * the caller's own CPU preempts the caller: it runs before this call
 * returns, and the caller may come back on another CPU (sd_task_cpu()).
 * Return: the number of tasks woken (>= 0); -EPERM if the caller is not
 * @self's thread; -EINVAL for a NULL @q or one of another machine. Task
 * thread; interrupts may be off.
 */
SD_EXPORT int sd_task_wake(struct sd_task *self, struct sd_waitq *q, unsigned nr);

/**
 * sd_task_sleep() - sleep @ns (modelled ns in modelled time, real ns
 * otherwise): the CPU runs other tasks or idles meanwhile, and the task is
 * woken on its CPU when that CPU's clock has passed the end (checked at
 * that CPU's scheduling points and while it idles).
 * Return: 0; -EPERM if the caller is not @self's thread; -EDEADLK with
 * interrupts off; -EINVAL for @ns above 1000 s. Task thread.
 */
SD_EXPORT int sd_task_sleep(struct sd_task *self, uint64_t ns);

/**
 * sd_task_set_affinity() - let @task run only on the CPUs of @cpus ("0-3,8";
 * NULL or "": all). A queued task not on an allowed CPU moves to one
 * (a migration); @self moves at once if its own CPU is not allowed.
 * Return: 0; -EINVAL for a NULL @task, a list that is not one or names no
 * CPU of the machine, or a task of another machine; -ESRCH if @task has
 * returned; -EPERM if the caller is not @self's thread; -EDEADLK with
 * interrupts off. Task thread (@self), interrupts on; @task may be any task
 * of the same machine.
 */
SD_EXPORT int sd_task_set_affinity(struct sd_task *self, struct sd_task *task, const char *cpus);

/**
 * sd_task_fork() - create a task in a copy of @self's mm, as fork() does:
 * sd_mm_fork() (copy-on-write pages, @self's TLBs flushed), then the child
 * runs @fn(child, @arg) with @self's affinity, queued on the allowed CPU
 * with the fewest tasks (sched_balance_fork). The child's mm is the
 * child's: destroyed when its last task returns or execs.
 * Return: 0 and the child in *@child (if not NULL); -EPERM if the caller is
 * not @self's thread; -EINVAL for a NULL @fn or with interrupts off;
 * -EAGAIN, -ENOMEM (nothing created). Task thread.
 */
SD_EXPORT int sd_task_fork(struct sd_task *self, sd_task_fn fn, void *arg, struct sd_task **child);

/**
 * sd_task_exec() - give @self a new, empty mm (exec_mmap()): it switches to
 * it, and the old one, if a task created it, is destroyed by its last task
 * (an mm the program gave stays the program's).
 * Return: 0; -EPERM if the caller is not @self's thread; -EINVAL with
 * interrupts off; -ENOMEM (@self keeps its mm); sd_mm_destroy()'s errors
 * for the old mm (@self has the new one all the same). Task thread.
 */
SD_EXPORT int sd_task_exec(struct sd_task *self);

/** @} */

SD_END_DECLS

#endif
