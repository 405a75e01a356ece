/* SPDX-License-Identifier: MIT */
/*
 * The IPI endpoint: requests on a per-target lock-free stack (liburcu
 * lfstack: push is lock-free for any number of senders, pop_all is one
 * exchange by the single consumer, the target), and a real signal sent with
 * tgkill to interrupt the target's thread. The handler finds its CPU through
 * the thread-local pointer. With emulated interrupts off it only records the
 * IPI as pending (DESIGN invariant 5); sd_irq_on() runs it later.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../core/backoff.h"
#include "../core/error.h"
#include "../core/futex.h"
#include "../core/tsan.h"
#include "../machine/machine.h"
#include "cpu.h"

/*
 * Run every queued request, with interrupts off as a hard-IRQ handler would
 * be, so a signal arriving meanwhile only marks itself pending.
 */
static void ipi_run_queue(struct sd_cpu *c)
{
	c->irq_depth++;
	atomic_signal_fence(memory_order_seq_cst);
	do {
		c->ipi_pending = 0;
		/* Clear kick before taking the queue: a sender that pushes
		 * after our pop sees 0 and signals again (its push and its
		 * exchange are ordered before our store, or it sends). */
		atomic_store(&c->ipi_kick, 0);
		struct cds_lfs_head *head = __cds_lfs_pop_all(&c->ipi_queue);
		struct cds_lfs_node *node = head ? &head->node : NULL;

		while (node) {
			struct sd_ipi_req *req = caa_container_of(node, struct sd_ipi_req, node);

			/* Pairs with the release before cds_lfs_push(). */
			sd_tsan_acquire(req);
			/* Read next before the ack: the sender may reuse the
			 * request (or leave the stack frame it lives in) as soon
			 * as it sees DONE. */
			struct cds_lfs_node *next = node->next;

			req->fn(c, req->arg);
			sd_stat_inc(c, SD_STAT_IPI_RECV);
			/* Only a parked sender needs the wake-up system call. A
			 * wake that lands after the sender left is harmless: the
			 * word is still mapped, and every futex wait loops. */
			if (atomic_exchange_explicit(&req->state, SD_IPI_DONE,
						     memory_order_acq_rel) == SD_IPI_PARKED)
				sd_futex_wake(&req->state, 1);
			node = next;
		}
		atomic_signal_fence(memory_order_seq_cst);
	} while (c->ipi_pending);
	c->irq_depth--;
	atomic_signal_fence(memory_order_seq_cst);
}

static void ipi_handler(int sig, siginfo_t *si, void *uctx)
{
	struct sd_cpu *c = sd_this_cpu;
	int saved_errno = errno;

	(void)sig;
	(void)si;
	(void)uctx;
	if (!c)
		goto out;
	if (c->irq_depth) {
		c->ipi_pending = 1;
		sd_stat_inc(c, SD_STAT_IPI_DEFERRED);
		goto out;
	}
	ipi_run_queue(c);
out:
	errno = saved_errno;
}

void sd_irq_run_pending(struct sd_cpu *c)
{
	ipi_run_queue(c);
}

void sd_ipi_drain(struct sd_cpu *c)
{
	if (!c->irq_depth)
		ipi_run_queue(c);
}

/* One handler per signal for the whole process; machines share it. */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int sig;
	unsigned users;
	struct sigaction old;
} installed[8];

int sd_ipi_install(int sig)
{
	int err = 0;
	unsigned i, slot = SD_ARRAY_SIZE(installed);

	pthread_mutex_lock(&install_lock);
	for (i = 0; i < SD_ARRAY_SIZE(installed); i++) {
		if (installed[i].users && installed[i].sig == sig) {
			installed[i].users++;
			goto out;
		}
		if (!installed[i].users && slot == SD_ARRAY_SIZE(installed))
			slot = i;
	}
	if (slot == SD_ARRAY_SIZE(installed)) {
		err = sd_fail(-EBUSY, "too many distinct IPI signals in use");
		goto out;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = ipi_handler;
	/* SA_RESTART: a CPU blocked in a lock or a sleep resumes after
	 * answering the IPI instead of failing with EINTR. */
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, &installed[slot].old) < 0) {
		err = sd_fail(-EINVAL, "sigaction(%d) failed: %s", sig, strerror(errno));
		goto out;
	}
	installed[slot].sig = sig;
	installed[slot].users = 1;
out:
	pthread_mutex_unlock(&install_lock);
	return err;
}

void sd_ipi_uninstall(int sig)
{
	pthread_mutex_lock(&install_lock);
	for (unsigned i = 0; i < SD_ARRAY_SIZE(installed); i++) {
		if (installed[i].users && installed[i].sig == sig) {
			if (--installed[i].users == 0)
				sigaction(sig, &installed[i].old, NULL);
			break;
		}
	}
	pthread_mutex_unlock(&install_lock);
}

bool sd_ipi_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_ipi_req *req)
{
	int tid;

	atomic_init(&req->state, SD_IPI_PENDING);
	cds_lfs_node_init(&req->node);
	/*
	 * Against sd_ipi_offline(): we count ourselves, then read tid; it
	 * clears tid, then waits for the count to drop, then drains. Both
	 * sides store then load with a full barrier between (seq_cst RMW and
	 * loads), so either we see tid == 0 and queue nothing, or it sees us
	 * and drains after our push.
	 */
	atomic_fetch_add(&t->ipi_senders, 1);
	tid = atomic_load(&t->tid);
	if (!tid) {
		atomic_fetch_sub(&t->ipi_senders, 1);
		return false;
	}
	/* The push's barrier is inside liburcu, where TSan cannot see it. */
	sd_tsan_release(req);
	cds_lfs_push(&t->ipi_queue, &req->node);
	/* One signal in flight is enough: the handler drains the whole queue
	 * (a non-empty call_single_queue already has its IPI). */
	if (!atomic_exchange(&t->ipi_kick, 1))
		syscall(SYS_tgkill, getpid(), tid, t->m->cfg.ipi_signal);
	atomic_fetch_sub_explicit(&t->ipi_senders, 1, memory_order_release);
	/* @from is NULL for a plain thread (sd_mm_destroy() shooting lazy
	 * CPUs): there is no sending CPU to count it on. */
	if (from)
		sd_stat_inc(from, SD_STAT_IPI_SENT);
	return true;
}

void sd_ipi_wait(struct sd_cpu *from, struct sd_ipi_req *req)
{
	unsigned n;
	int expected = SD_IPI_PENDING;

	(void)from;
	for (n = 0; n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS; n++) {
		if (atomic_load_explicit(&req->state, memory_order_acquire) == SD_IPI_DONE)
			return;
		if (n < SD_BACKOFF_SPINS)
			sd_cpu_relax();
		else
			sched_yield();
	}
	/* Park: the handler's exchange sees PARKED and wakes us. A signal
	 * (an IPI to us) interrupts the wait; its handler runs first. */
	if (atomic_compare_exchange_strong(&req->state, &expected, SD_IPI_PARKED))
		while (atomic_load_explicit(&req->state, memory_order_acquire) != SD_IPI_DONE)
			sd_futex_wait(&req->state, SD_IPI_PARKED);
}

void sd_ipi_offline(struct sd_cpu *c)
{
	struct sd_backoff b = SD_BACKOFF_INIT;

	atomic_store(&c->tid, 0);
	while (atomic_load(&c->ipi_senders))
		sd_backoff_wait(&b);
	sd_ipi_drain(c);
}

int sd_ipi_call(struct sd_cpu *from, unsigned target, sd_ipi_fn fn, void *arg)
{
	struct sd_ipi_req req;

	if (sd_cpu_check_self(from))
		return sd_fail(-EPERM, "sd_ipi_call: caller is not attached as this CPU");
	if (!fn || target >= from->m->nr_cpus || target == from->id)
		return sd_fail(-EINVAL, "sd_ipi_call: bad target %u or NULL function", target);
	if (from->irq_depth)
		return sd_fail(-EDEADLK, "sd_ipi_call: interrupts are off on CPU %u", from->id);
	req.fn = fn;
	req.arg = arg;
	if (!sd_ipi_post(from, from->m->cpus[target], &req))
		return sd_fail(-EINVAL, "sd_ipi_call: CPU %u has no thread", target);
	sd_ipi_wait(from, &req);
	return 0;
}
