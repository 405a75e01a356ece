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
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../core/backoff.h"
#include "../core/error.h"
#include "../core/tsan.h"
#include "../machine/machine.h"
#include "cpu.h"

struct ipi_request {
	struct cds_lfs_node node;
	sd_ipi_fn fn;
	void *arg;
	SD_ATOMIC(int) done;
};

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
			struct ipi_request *req = caa_container_of(node, struct ipi_request, node);

			/* Pairs with the release before cds_lfs_push(). */
			sd_tsan_acquire(req);
			/* Read next before the ack: the request lives on the
			 * sender's stack and dies once done is seen. */
			struct cds_lfs_node *next = node->next;

			req->fn(c, req->arg);
			sd_stat_inc(c, SD_STAT_IPI_RECV);
			atomic_store_explicit(&req->done, 1, memory_order_release);
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

int sd_ipi_call(struct sd_cpu *from, unsigned target, sd_ipi_fn fn, void *arg)
{
	struct ipi_request req;
	struct sd_cpu *t;
	struct sd_backoff b = SD_BACKOFF_INIT;

	if (sd_cpu_check_self(from))
		return sd_fail(-EPERM, "sd_ipi_call: caller is not attached as this CPU");
	if (!fn || target >= from->m->nr_cpus || target == from->id)
		return sd_fail(-EINVAL, "sd_ipi_call: bad target %u or NULL function", target);
	if (from->irq_depth)
		return sd_fail(-EDEADLK, "sd_ipi_call: interrupts are off on CPU %u", from->id);
	t = from->m->cpus[target];
	int tid = atomic_load(&t->tid);
	if (!tid)
		return sd_fail(-EINVAL, "sd_ipi_call: CPU %u has no thread", target);

	req.fn = fn;
	req.arg = arg;
	atomic_init(&req.done, 0);
	cds_lfs_node_init(&req.node);
	/* The push's barrier is inside liburcu, where TSan cannot see it. */
	sd_tsan_release(&req);
	cds_lfs_push(&t->ipi_queue, &req.node);
	/* One signal in flight is enough: the handler drains the whole queue. */
	if (!atomic_exchange(&t->ipi_kick, 1))
		syscall(SYS_tgkill, getpid(), tid, from->m->cfg.ipi_signal);
	sd_stat_inc(from, SD_STAT_IPI_SENT);
	while (!atomic_load_explicit(&req.done, memory_order_acquire))
		sd_backoff_wait(&b);
	return 0;
}
