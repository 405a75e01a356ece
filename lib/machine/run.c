/* SPDX-License-Identifier: MIT */
/*
 * sd_machine_run(): a thread per CPU, attached, its body run, and the CPUs
 * brought back together at the end (in modelled-clock order in strict mode).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <shootdown/error.h>
#include <shootdown/mm.h>

#include "../core/error.h"
#include "../core/futex.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"

#define SD_CPU_THREAD_STACK (256 * 1024)

/* ---- sd_machine_run ---- */

struct run_state {
	struct sd_machine *m;
	sd_cpu_fn fn;
	void *arg;
	SD_ATOMIC(int) attached;       /* threads past attach (ok or not) */
	SD_ATOMIC(int) attach_failed;  /* bodies must not start */
	SD_ATOMIC(int) error;          /* the first error of the run */
	char error_msg[200];           /* its detail: written by whoever set error */
	SD_ATOMIC(int) running;        /* fns not yet returned */
	SD_ATOMIC(int) ending;         /* CPUs of this machine that will detach */
};

struct run_thread {
	struct run_state *rs;
	unsigned id;
	unsigned unbalanced;           /* the CPU's irq_unbalanced before the body */
};

/* Record @err as the run's error unless one is recorded already; the
 * caller's thread reads the detail after pthread_join(), which orders it. */
static void run_error(struct run_state *rs, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void run_error(struct run_state *rs, int err, const char *fmt, ...)
{
	int none = 0;
	va_list ap;

	if (!atomic_compare_exchange_strong(&rs->error, &none, err))
		return;
	va_start(ap, fmt);
	vsnprintf(rs->error_msg, sizeof(rs->error_msg), fmt, ap);
	va_end(ap);
}

/* Add @delta to a gate counter; whoever moves it to @target wakes all. */
static void gate_add(SD_ATOMIC(int) *word, int delta, int target)
{
	if (atomic_fetch_add(word, delta) + delta == target)
		sd_futex_wake(word, INT_MAX);
}

/* Park until the counter reaches @target; IPIs are answered meanwhile. */
static void gate_wait(SD_ATOMIC(int) *word, int target)
{
	int v;

	while ((v = atomic_load(word)) != target)
		sd_wait_while_eq(word, v);
}

/*
 * The body has ended: whatever interrupt state it left, make @c a CPU that
 * answers IPIs again, and report what the body got wrong. A CPU left with
 * interrupts off would defer every IPI for good, so every flush that must
 * reach it would hang, and it could not detach.
 */
static void settle_irqs(struct run_thread *t, struct sd_cpu *c)
{
	int depth = c->irq_depth;

	if (depth) {
		run_error(t->rs, -EDEADLK, "sd_machine_run: CPU %u's body returned with "
			  "interrupts off (depth %d)", c->id, depth);
		/* Back to one level and through sd_irq_on(), so IPIs that
		 * were deferred meanwhile run now (a signal landing between
		 * the two stores only marks itself pending). */
		c->irq_depth = 1;
		sd_irq_on(c);
	}
	/* Requests it posted and never waited for: their memory was the
	 * body's, so this is a bug of the body's; they are answered now, so
	 * that the CPU can detach and no target is left with a request
	 * whose sender has gone. */
	if (c->nr_async_posted) {
		run_error(t->rs, -EBUSY, "sd_machine_run: CPU %u's body returned with %u "
			  "request(s) of sd_smp_call_async() not waited for", c->id,
			  c->nr_async_posted);
		sd_smp_async_settle(c);
	}
	if (c->m == t->rs->m && c->id == t->id && c->irq_unbalanced != t->unbalanced)
		run_error(t->rs, -EINVAL, "sd_machine_run: CPU %u's body called "
			  "sd_irq_enable() %u time(s) with interrupts on", c->id,
			  c->irq_unbalanced - t->unbalanced);
}

/*
 * After the body, by return or by thread exit: go idle (lazily keeping the
 * last mm: sd_mm_destroy() shoots it), stay a CPU answering IPIs until
 * every body has ended (a late shootdown must never wait on a thread that
 * is gone), then detach. Works on the CPU the thread is attached as now,
 * should the body have detached (none) or moved.
 */
static void finish_cpu(struct run_thread *t)
{
	struct run_state *rs = t->rs;
	struct sd_cpu *c = sd_this_cpu;
	bool sequenced = c && c->m == rs->m && c->model.seq;

	if (c) {
		settle_irqs(t, c);
		sd_cpu_idle(c);
	}
	/* Counted before the gate below opens: whoever passes it reads the
	 * final count. */
	if (sequenced)
		atomic_fetch_add(&rs->ending, 1);
	gate_add(&rs->running, -1, 0);
	if (!c)
		return;
	gate_wait(&rs->running, 0);
	/* Strict modelled time: the detaches charge (a switch_mm() to no mm
	 * writes the mm's cpumask line), so they go in together, in clock
	 * order, as the bodies started (sd_seq_end_cpu()). */
	if (sequenced)
		sd_seq_end_cpu(&c->model, (unsigned)atomic_load(&rs->ending));
	if (sd_cpu_detach(c))
		run_error(rs, -EBUSY, "sd_machine_run: CPU %u could not detach: %s", c->id,
			  sd_last_error());
}

/* pthread_cleanup handler: the body left with pthread_exit() (or was
 * cancelled). Its thread must not end attached: a zombie CPU would keep
 * sd_machine_destroy() at -EBUSY and hang the flushes aimed at it. */
static void body_exited(void *p)
{
	finish_cpu(p);
}

static void run_body(struct run_thread *t, struct sd_cpu *c)
{
	t->unbalanced = c->irq_unbalanced;
	pthread_cleanup_push(body_exited, t);
	t->rs->fn(c, t->rs->arg);
	pthread_cleanup_pop(0);
}

static void *cpu_thread(void *p)
{
	struct run_thread *t = p;
	struct run_state *rs = t->rs;
	struct sd_cpu *c = NULL;
	int nr = (int)rs->m->nr_cpus;
	int err = sd_cpu_attach(rs->m, t->id, &c);

	if (err) {
		run_error(rs, err, "sd_machine_run: CPU %u could not attach: %s", t->id,
			  sd_last_error());
		atomic_store(&rs->attach_failed, 1);
	}
	/* Start together: every CPU has a thread (and a tid for IPIs) before
	 * any fn runs. */
	gate_add(&rs->attached, 1, nr);
	gate_wait(&rs->attached, nr);
	if (!atomic_load(&rs->attach_failed) && c) {
		/* Strict modelled time: in the machine together, so the
		 * clocks, not the host, say who goes first. */
		if (c->model.seq)
			sd_seq_start_cpu(&c->model);
		run_body(t, c);
	}
	finish_cpu(t);
	return NULL;
}

int sd_machine_run(struct sd_machine *m, sd_cpu_fn fn, void *arg)
{
	struct run_state rs;
	struct run_thread *threads;
	pthread_t *tids;
	pthread_attr_t attr;
	unsigned started = 0;
	int err = 0;

	if (!m || !fn)
		return sd_fail(-EINVAL, "sd_machine_run: NULL argument");
	if (sd_this_cpu)
		return sd_fail(-EBUSY, "sd_machine_run: the caller is itself a CPU");
	if (atomic_load(&m->nr_attached))
		return sd_fail(-EBUSY, "sd_machine_run: %u CPU(s) already attached",
			       atomic_load(&m->nr_attached));
	threads = calloc(m->nr_cpus, sizeof(*threads));
	tids = calloc(m->nr_cpus, sizeof(*tids));
	if (!threads || !tids) {
		free(threads);
		free(tids);
		return -ENOMEM;
	}
	rs.m = m;
	rs.fn = fn;
	rs.arg = arg;
	atomic_init(&rs.attached, 0);
	atomic_init(&rs.attach_failed, 0);
	atomic_init(&rs.error, 0);
	rs.error_msg[0] = 0;
	atomic_init(&rs.running, (int)m->nr_cpus);
	atomic_init(&rs.ending, 0);
	if (m->model.seq.on)
		sd_seq_expect(&m->model.seq, m->nr_cpus);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, SD_CPU_THREAD_STACK);
	for (; started < m->nr_cpus; started++) {
		threads[started].rs = &rs;
		threads[started].id = started;
		if (pthread_create(&tids[started], &attr, cpu_thread, &threads[started])) {
			err = sd_fail(-EAGAIN, "sd_machine_run: could not create thread %u", started);
			break;
		}
	}
	pthread_attr_destroy(&attr);
	if (err) {
		/* Release the ones that started: they see the error and leave. */
		atomic_store(&rs.attach_failed, 1);
		gate_add(&rs.running, -(int)(m->nr_cpus - started), 0);
		gate_add(&rs.attached, (int)(m->nr_cpus - started), (int)m->nr_cpus);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	if (m->model.seq.on)
		sd_seq_cancel_start(&m->model.seq);
	free(threads);
	free(tids);
	if (err)
		return err;
	/* Recorded on the CPU thread that hit it; the joins order it. */
	err = atomic_load(&rs.error);
	return err ? sd_fail(err, "%s", rs.error_msg) : 0;
}
