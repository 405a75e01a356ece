/* SPDX-License-Identifier: MIT */
#ifndef SD_SCHED_SCHED_H
#define SD_SCHED_SCHED_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_SCHED
#error "sched/sched.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <hwloc.h>
#include <pthread.h>
#include <urcu/list.h>

#include <shootdown/task.h>

#include "../core/spinlock.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "../time/resource.h"

/*
 * Tasks and run queues (task.h says what they do). Locks, outermost
 * first, as kernel/sched/core.c orders them: a wait queue's lock, a task's
 * pi_lock (its state, its CPU, whether it is on a run queue), then run-
 * queue locks, two of them in CPU-id order (double_rq_lock()).
 */

enum sd_task_state {
	SD_TASK_RUNNING,        /* on a run queue, or running: on_rq */
	SD_TASK_BLOCKED,        /* on a wait queue, with no deadline */
	SD_TASK_SLEEPING,       /* on its CPU's sleepers, until sleep_until_ns */
	SD_TASK_DEAD,           /* its body returned */
};

/* A task's go word: 0 parked, CPU id + 1 given that CPU, or cancelled. */
#define SD_TASK_GO_CANCEL (-1)

/* An mm the scheduler created (fork, exec): destroyed by its last task. */
struct sd_mm_owner {
	struct sd_mm *mm;
	SD_ATOMIC(unsigned) users;
};

struct sd_task {
	struct sd_sched *s;
	unsigned id;
	bool idle;                     /* a CPU's idle thread (swapper) */
	sd_task_fn fn;
	void *arg;
	struct sd_mm *mm;              /* written by its own thread alone (exec) */
	struct sd_mm_owner *owner;     /* NULL: the program's mm */

	struct sd_spinlock pi_lock;
	/* Under pi_lock: */
	int state;                     /* enum sd_task_state */
	bool on_rq;                    /* queued or running: a wakeup only sets RUNNING */
	unsigned cpu;                  /* the run queue it is on, or last ran on */
	hwloc_bitmap_t allowed;        /* emulated CPU ids it may run on */
	bool blocked_counted;          /* counted in nr_blocked */
	int wait_result;               /* -EDEADLK from the deadlock breaker */
	struct sd_waitq *waiting_on;   /* for the deadlock report */
	uint64_t sleep_until_ns;       /* SLEEPING: its CPU's time to wake at */

	struct cds_list_head rq_node;  /* under its run queue's lock */
	struct cds_list_head wq_node;  /* under its wait queue's lock */
	struct cds_list_head all_node; /* under the scheduler's lock */

	/* The hand-over (sched.c, context_switch()): a CPU's id + 1 once it
	 * is given one; its own thread clears it. */
	SD_ATOMIC(int) go;
	unsigned bound_cpu;            /* whose PU its thread is bound to, UINT_MAX none */
	struct sd_topology_binding binding;
	pthread_t thread;
	bool thread_started;
	/* Its host thread's id, published once the thread runs (task_new()
	 * waits for it): where a CPU handed to it sends IPIs meanwhile. */
	SD_ATOMIC(int) tid;
};

struct sd_rq {
	sd_cacheline_aligned struct sd_spinlock lock;
	struct sd_model_lock lock_model;
	/* Under lock: */
	struct cds_list_head queue;    /* runnable tasks, not the one running */
	struct cds_list_head sleepers; /* sleeping tasks whose timer is here */
	SD_ATOMIC(unsigned) nr_queued; /* written under lock, read racily by balancers */
	SD_ATOMIC(struct sd_task *) curr;  /* written under lock, read racily */
	/* TIF_NEED_RESCHED: a woken task was queued ahead of the one running,
	 * or the running one's affinity left this CPU; it switches at its
	 * next scheduling point (sd_sched_preempt_point()). */
	SD_ATOMIC(int) need_resched;
	struct sd_task idle;           /* this CPU's idle thread */
	/* The reschedule IPI (smp_send_reschedule()): one in flight at a time,
	 * its request reused once the idle thread saw it done. */
	sd_cacheline_aligned SD_ATOMIC(int) resched_seq;  /* the idle thread's futex word */
	SD_ATOMIC(int) resched_inflight;
	struct sd_smp_call_req resched_req;
	uint64_t next_balance_ns;      /* the CPU's own (its holder's) */
	uint64_t slice_start_ns;       /* when curr took the CPU (its holder's) */
};

struct sd_waitq {
	struct sd_machine *m;
	struct sd_spinlock lock;
	struct cds_list_head waiters;  /* under lock, in the order they began */
	unsigned nr_waiters;           /* under lock */
	char name[32];
};

struct sd_sched {
	struct sd_machine *m;
	unsigned nr_cpus;
	struct sd_rq *rq;
	pthread_mutex_t lock;          /* the task list, ids, creation */
	struct cds_list_head all;
	unsigned next_id;
	SD_ATOMIC(int) running;        /* sd_sched_run() in progress */
	SD_ATOMIC(unsigned) nr_alive;  /* tasks whose body has not returned */
	SD_ATOMIC(unsigned) nr_blocked;    /* of them, waiting with no deadline */
	SD_ATOMIC(int) stop;           /* every task returned: idle threads leave */
	SD_ATOMIC(int) error;          /* the run's first error */
	char error_msg[200];
};

/* The task the calling thread is, NULL for none. */
extern SD_THREAD_LOCAL struct sd_task *sd_current_task;

/* sched.c: the core. */
int sd_sched_get(struct sd_machine *m, struct sd_sched **out);
void sd_sched_free(struct sd_machine *m);
void sd_sched_error(struct sd_sched *s, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* __schedule(): @prev's thread, on @c with interrupts on, gives the CPU
 * up to the next task (re-queued first when @yield and still running);
 * returns the CPU it runs on afterwards, interrupts on, or NULL for a
 * dead @prev (its thread must end). */
struct sd_cpu *sd_schedule(struct sd_cpu *c, struct sd_task *prev, bool yield);
/* try_to_wake_up(): from @c (NULL: no CPU). True if @t was woken. */
bool sd_try_to_wake_up(struct sd_cpu *c, struct sd_task *t);
/* wake_up_new_task(): queue a new task on a CPU of its choice. */
void sd_wake_up_new_task(struct sd_cpu *c, struct sd_task *t);
/* The least loaded CPU @t may run on (the lowest id first). Under pi_lock. */
unsigned sd_sched_pick_cpu(struct sd_sched *s, struct sd_task *t);
/* Move @t, queued somewhere, onto a CPU it is allowed (set_cpus_allowed). */
void sd_sched_move_queued(struct sd_cpu *c, struct sd_task *t);
/* The return to user of a call of task.h: if a wakeup asked this CPU to
 * reschedule, @self yields to the task queued ahead of it. Returns the CPU
 * @self runs on afterwards. */
struct sd_cpu *sd_sched_preempt_point(struct sd_cpu *c, struct sd_task *self);
/* sd_task_preempt_point(): a switch if @self was preempted, moved, or has
 * used its slice with others queued. Returns the CPU it runs on after. */
struct sd_cpu *sd_sched_return_to_user(struct sd_cpu *c, struct sd_task *self);
/* The idle thread's body (sd_machine_run()'s, one per CPU). */
void sd_sched_idle_body(struct sd_cpu *c, void *arg);
/* The task's thread waits to be given a CPU and takes it over; NULL if
 * cancelled. Interrupts are left off: the caller's sd_irq_on() ends the
 * switch. */
struct sd_cpu *sd_sched_wait_for_cpu(struct sd_task *t);
/* Counting a task blocked; true if every live task is blocked (the
 * caller breaks the deadlock). */
bool sd_sched_block_counted(struct sd_sched *s, struct sd_task *t);
void sd_sched_break_deadlock(struct sd_cpu *c, struct sd_sched *s, struct sd_task *self);
/* Every task has returned: the idle threads leave. */
void sd_sched_stop(struct sd_cpu *c, struct sd_sched *s);

#endif
