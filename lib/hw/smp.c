/* SPDX-License-Identifier: MIT */
/*
 * The IPI endpoint: requests on a per-target lock-free stack (liburcu
 * lfstack: push is lock-free for any number of senders, pop_all is one
 * exchange by the single consumer, the target), and a real signal sent with
 * rt_tgsigqueueinfo to interrupt the target's thread. The handler finds its
 * CPU through the thread-local pointer. With emulated interrupts off it only
 * records the IPI as pending (invariant 5 (docs/invariants.md)); sd_irq_on() runs it later.
 *
 * The signal is shared with the host program: ours carry a cookie, the
 * host's go on to the action it had. A waiter that parks is watched, as
 * kernel/smp.c's csd_lock_wait_toolong() watches a CSD lock: it re-sends the
 * signal, reports a stuck target, and reaps a target whose thread is gone.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../core/backoff.h"
#include "event.h"
#include "../core/error.h"
#include "../core/futex.h"
#include "../core/ordering.h"
#include "../core/tsan.h"
#include "../core/ipi_signal.h"
#include "machine_state.h"
#include "../time/sequencer.h"
#include "smp.h"

/* Run what is queued now; interrupts are off (irq_depth raised). */
/* The CPU the calling thread is attached as (smp_processor_id()): defined
 * with the endpoint, whose signal handler is its first reader, so the CPU
 * area (cpu.c) depends on the endpoint and never the other way round. */
_Thread_local struct sd_cpu *sd_this_cpu __attribute__((tls_model("initial-exec")));

/* What a request's ack needs, read before its function runs: an async
 * request's sender may have gone offline and reused it since. */
struct ipi_running {
	uint64_t flow;
	struct sd_cpu *from;
	uint8_t kind;
};

/* The end of a request's run on @c, by who serviced it. */
static uint64_t run_end(struct sd_cpu *c, uint8_t kind, uint64_t flow)
{
	switch (kind) {
	case SD_SMP_REQ_RAR:
		return sd_event_rar_run_end(c, flow);
	case SD_SMP_REQ_SBI:
		return sd_event_sbi_run_end(c, flow);
	default:
		return sd_event_ipi_run_end(c, flow);
	}
}

/* Ack @req (the sender may reuse it from then on: nothing of it is read
 * after the exchange). */
static void ipi_ack(struct sd_cpu *c, struct sd_smp_call_req *req, const struct ipi_running *r)
{
	const uint64_t flow = r->flow;
	struct sd_cpu *from = r->from;
	/* Written before the ack publishes the request's end. */
	uint64_t acked = req->model_acked_ps = run_end(c, r->kind, flow);
	/* Strict modelled time: the sender waits in the sequencer for the
	 * ack's time; told before the ack, while the request is still ours. */
	if (from && from->model.seq)
		sd_seq_wake(c ? &c->model : NULL, &from->model, acked);
	/* Only a parked sender needs the wake-up system call. A wake
	 * that lands after the sender left is harmless: the word is
	 * still mapped, and every futex wait loops. */
	if (atomic_exchange_explicit(&req->state, SD_SMP_CALL_DONE,
				     memory_order_acq_rel) == SD_SMP_CALL_PARKED)
		sd_futex_wake(&req->state, 1);
}

/* Run one request and ack it, unless its function acked it early. A RAR
 * boundary inside a function may run another: the outer one is kept. */
static void ipi_run_one(struct sd_cpu *c, struct sd_smp_call_req *req)
{
	struct sd_smp_call_req *outer = c->running_req;
	const struct ipi_running r = {
		.flow = req->flow, .from = req->async ? NULL : req->from, .kind = req->kind,
	};

	if (r.kind == SD_SMP_REQ_RAR)
		sd_event_rar_run_begin(c, r.flow, req->model_sent_ps);
	else if (r.kind == SD_SMP_REQ_SBI)
		sd_event_sbi_run_begin(c, r.flow, req->model_sent_ps);
	else
		sd_event_ipi_run_begin(c, r.flow, req->model_sent_ps);
	c->running_req = req;
	req->fn(c, req->arg);
	if (c->running_req == req)
		ipi_ack(c, req, &r);
	c->running_req = outer;
}

void sd_smp_call_ack_early(struct sd_cpu *c)
{
	struct sd_smp_call_req *req = c->running_req;

	if (!req)
		return;
	/* Not an async request: its sender waits for this ack. */
	const struct ipi_running r = { .flow = req->flow, .from = req->from, .kind = req->kind };

	c->running_req = NULL;
	ipi_ack(c, req, &r);
}

/* Take the CPU's whole queue. Kick is cleared first: a sender that pushes
 * after our pop sees 0 and signals again (its push and its exchange are
 * ordered before our store, or it sends). */
static struct cds_lfs_node *ipi_take_queue(struct sd_cpu *c)
{
	atomic_store(&c->ipi_kick, 0);
	struct cds_lfs_head *head = __cds_lfs_pop_all(&c->ipi_queue);

	return head ? &head->node : NULL;
}

static struct sd_smp_call_req *ipi_req_of(struct cds_lfs_node *node)
{
	struct sd_smp_call_req *req = caa_container_of(node, struct sd_smp_call_req, node);

	/* Pairs with the release before cds_lfs_push(). */
	sd_tsan_acquire(req);
	return req;
}

/*
 * Strict modelled time: run the requests that have arrived by the CPU's
 * clock (each at the later of its arrival and the clock, as it reaches
 * it), and put back the ones still on their way; the sequencer learns
 * when the first of those arrives, which is the CPU's next sync point.
 */
/* When @req reaches its target in modelled time (0: at once). */
static uint64_t req_arrival(const struct sd_cpu *t, const struct sd_smp_call_req *req)
{
	const uint64_t *p = t->m->model.param_ps;

	if (!req->model_sent_ps)
		return 0;
	return req->model_sent_ps + p[req->kind == SD_SMP_REQ_RAR ? SD_MP_RAR_DELIVERY
				      : req->kind == SD_SMP_REQ_SBI ? SD_MP_SBI_DELIVERY
				      : SD_MP_IPI_DELIVERY];
}

static void ipi_run_arrived(struct sd_cpu *c)
{
	uint64_t posts, next = SD_SEQ_NEVER;

	sd_seq_arrival(&c->model, &posts);
	struct cds_lfs_node *node = ipi_take_queue(c);

	while (node) {
		struct sd_smp_call_req *req = ipi_req_of(node);
		struct cds_lfs_node *next_node = node->next;
		uint64_t arrival = req_arrival(c, req);

		if (arrival <= c->model.clock_ps) {
			ipi_run_one(c, req);
		} else {
			next = arrival < next ? arrival : next;
			cds_lfs_node_init(&req->node);
			sd_tsan_release(req);
			cds_lfs_push(&c->ipi_queue, &req->node);
		}
		node = next_node;
	}
	sd_seq_ipis_ran(&c->model, next, posts);
}

static void ipi_run_batch(struct sd_cpu *c)
{
	if (c->model.seq) {
		ipi_run_arrived(c);
		return;
	}
	struct cds_lfs_node *node = ipi_take_queue(c);

	while (node) {
		struct sd_smp_call_req *req = ipi_req_of(node);
		/* Read next before the ack: the sender may reuse the request
		 * (or leave the stack frame it lives in) as soon as it sees
		 * DONE. */
		struct cds_lfs_node *next = node->next;

		ipi_run_one(c, req);
		node = next;
	}
}

/*
 * Run every queued request, with interrupts off as a hard-IRQ handler would
 * be, so a signal arriving meanwhile only marks itself pending. Returns with
 * irq_depth back where it was and no pending IPI left behind: a signal that
 * lands after the last check but before the decrement sees interrupts off,
 * only sets ipi_pending and returns, and its kick stays set so no sender
 * signals again. The kernel never meets this (the hardware re-raises a
 * pending vector once IF is set); we must look again after the decrement.
 */
SD_ATOMIC(bool) sd_smp_call_test_no_recheck;

static bool ipi_recheck(struct sd_cpu *c)
{
	if (unlikely(atomic_load_explicit(&sd_smp_call_test_no_recheck, memory_order_relaxed)))
		return false;
	return c->ipi_pending && !c->irq_depth;
}

static void ipi_run_queue(struct sd_cpu *c)
{
	do {
		c->irq_depth++;
		/* Pairs with the handler's irq_depth read: from here on, a
		 * signal defers itself to ipi_pending. */
		atomic_signal_fence(memory_order_seq_cst);
		do {
			c->ipi_pending = 0;
			ipi_run_batch(c);
			/* Pairs with the handler's ipi_pending store. */
			atomic_signal_fence(memory_order_seq_cst);
		} while (c->ipi_pending);
		sd_order_point(SD_ORDER_IPI_DRAINED, c->id);
		sd_cpu_passed_barrier(c);
		sd_event_irq_exit(c);
		c->irq_depth--;
		/* Pairs with the handler's irq_depth read and ipi_pending
		 * store: a signal after the decrement runs the queue itself;
		 * one before it left ipi_pending, which we read only now. */
		atomic_signal_fence(memory_order_seq_cst);
	} while (ipi_recheck(c));
}

/* One handler per signal for the whole process; machines share it. The
 * handler reads the table without the lock (a lock-free atomic is
 * async-signal-safe): an entry's old action is written before its sig is
 * published, and not rewritten until sig is cleared again. */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	SD_ATOMIC(int) sig;
	unsigned users;         /* under install_lock */
	struct sigaction old;   /* the host's action, which we chain to */
} installed[8];

static const struct sigaction *host_action(int sig)
{
	/* Pairs with the release in install_new(). */
	for (unsigned i = 0; i < SD_ARRAY_SIZE(installed); i++)
		if (atomic_load_explicit(&installed[i].sig, memory_order_acquire) == sig)
			return &installed[i].old;
	return NULL;
}

/*
 * Hand a signal that is not an IPI to what the host had installed, as if we
 * were not there: its handler (with its own mask and SA_SIGINFO calling
 * convention), nothing for SIG_IGN, and for SIG_DFL the default action,
 * which for SIGUSR1/2 and the real-time signals ends the process.
 */
static void chain_to_host(int sig, siginfo_t *si, void *uctx)
{
	const struct sigaction *old = host_action(sig);
	sigset_t prev;

	if (!old)
		return;
	if (old->sa_flags & SA_SIGINFO) {
		if (!old->sa_sigaction)
			return;
		pthread_sigmask(SIG_BLOCK, &old->sa_mask, &prev);
		old->sa_sigaction(sig, si, uctx);
		pthread_sigmask(SIG_SETMASK, &prev, NULL);
	} else if (old->sa_handler == SIG_IGN) {
		return;
	} else if (old->sa_handler == SIG_DFL) {
		struct sigaction dfl;
		sigset_t set;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(sig, &dfl, NULL);
		sigemptyset(&set);
		sigaddset(&set, sig);
		syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	} else {
		pthread_sigmask(SIG_BLOCK, &old->sa_mask, &prev);
		old->sa_handler(sig);
		pthread_sigmask(SIG_SETMASK, &prev, NULL);
	}
}

/*
 * Strict modelled time: a signal reaches only a CPU away from the machine
 * (sd_seq_posted()). Summoned, it takes the token at the IPI's arrival
 * and runs the queue in modelled order, then leaves again. The holder (a
 * late signal) runs its queue as usual; a CPU parked in the machine
 * leaves it to its next sync point.
 */
void sd_smp_seq_settle(struct sd_cpu *c)
{
	uint64_t arrival;

	if (!c->model.seq || c->irq_depth || !sd_seq_running(&c->model))
		return;
	while ((arrival = sd_seq_arrival(&c->model, NULL)) != SD_SEQ_NEVER) {
		if (arrival > c->model.clock_ps)
			sd_seq_wait(&c->model, arrival);
		ipi_run_queue(c);
	}
}

static void ipi_seq_handler(struct sd_cpu *c)
{
	/* Summoned first: it may hold the token already (given while the
	 * signal was on its way), and still has to take its clock to it. */
	if (sd_seq_summoned_enter(&c->model)) {
		ipi_run_queue(c);
		sd_smp_seq_settle(c);
		sd_seq_unsummon(&c->model);
	} else if (sd_seq_running(&c->model)) {
		ipi_run_queue(c);
	} else {
		/* Parked, or granted the token and not yet running with it
		 * (its clock not yet taken to the grant's time): its next
		 * sync point runs what has arrived by then. */
		c->ipi_pending = 1;
	}
}

/* The handler's work for CPU @c, on its own thread. */
static void ipi_deliver(struct sd_cpu *c)
{
	if (sd_seq_lock_depth) {
		/* Inside the sequencer's lock, which ipi_seq_handler()
		 * takes: a non-recursive mutex, so taking it here would
		 * deadlock the thread with itself. ThreadSanitizer delivers
		 * a signal that came during pthread_mutex_lock() just after
		 * the lock is taken, which made this a hang in one soak in
		 * a few dozen; a plain build has the same window, narrower. */
		sd_seq_irq_missed = 1;
	} else if (c->irq_depth) {
		c->ipi_pending = 1;
		/* RAR and the M-mode trap ignore the S-level interrupt
		 * flag: the next instruction boundary takes them. */
		if (c->m->boundary_requests)
			c->boundary_pending = 1;
		sd_event(c, SD_EV_IPI_DEFERRED, 0, 0);
	} else if (c->model.seq) {
		ipi_seq_handler(c);
	} else {
		ipi_run_queue(c);
	}
}

void sd_irq_replay(void)
{
	struct sd_cpu *c = sd_this_cpu;

	sd_seq_irq_missed = 0;
	/* Pairs with the handler's flag write: seen by its own thread. */
	atomic_signal_fence(memory_order_seq_cst);
	if (c)
		ipi_deliver(c);
}

static void ipi_handler(int sig, siginfo_t *si, void *uctx)
{
	struct sd_cpu *c = sd_this_cpu;
	int saved_errno = errno;

	/* Any signal of this number may be an IPI whose own delivery was
	 * merged with the host's: a CPU always looks at its queue (running
	 * an empty queue is harmless). A late IPI to a thread that has just
	 * detached finds no CPU and is dropped. */
	if (c)
		ipi_deliver(c);
	if (!sd_ipi_signal_is_ours(si))
		chain_to_host(sig, si, uctx);
	errno = saved_errno;
}

void sd_irq_run_pending(struct sd_cpu *c)
{
	/* Strict modelled time: what the handler would have done, had
	 * interrupts been on (a summoned CPU takes the token first). */
	if (c->model.seq)
		ipi_seq_handler(c);
	else
		ipi_run_queue(c);
}

/*
 * RAR requests that reached @c with interrupts off (smp.h). Take the queue,
 * run the RAR requests in it, put the interrupts back for when IF is set
 * again (ipi_pending stays as the handler left it). Strict modelled time
 * leaves them to the interrupts: a CPU with interrupts off there keeps the
 * machine to itself (sync.c), so no request reaches it meanwhile but one
 * posted before it turned them off, which runs when it turns them on.
 */
void sd_smp_boundary_run(struct sd_cpu *c)
{
	struct cds_lfs_node *node;

	c->boundary_pending = 0;
	/* Pairs with the handler's boundary_pending store: one after this point
	 * finds its request in the queue taken below, or sets the flag again. */
	atomic_signal_fence(memory_order_seq_cst);
	if (!c->irq_depth || c->model.seq)
		return;
	node = ipi_take_queue(c);
	while (node) {
		struct sd_smp_call_req *req = ipi_req_of(node);
		struct cds_lfs_node *next = node->next;

		if (req->kind != SD_SMP_REQ_IPI) {
			sd_event(c, req->kind == SD_SMP_REQ_RAR ? SD_EV_RAR_IRQS_OFF
								: SD_EV_SBI_IRQS_OFF, 0, 0);
			ipi_run_one(c, req);
		} else {
			cds_lfs_node_init(&req->node);
			sd_tsan_release(req);
			cds_lfs_push(&c->ipi_queue, &req->node);
		}
		node = next;
	}
}

void sd_smp_call_drain(struct sd_cpu *c)
{
	if (!c->irq_depth)
		ipi_run_queue(c);
}

static bool is_our_handler(const struct sigaction *sa)
{
	return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == ipi_handler;
}

static bool is_host_handler(const struct sigaction *sa)
{
	if (sa->sa_flags & SA_SIGINFO)
		return sa->sa_sigaction != NULL;
	return sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN;
}

/* Whether @sig still runs our handler (the watchdog asks before blaming
 * the target). */
static bool ipi_handler_installed(int sig)
{
	struct sigaction cur;

	return sigaction(sig, NULL, &cur) == 0 && is_our_handler(&cur);
}

static int install_new(unsigned slot, int sig, bool take_over)
{
	struct sigaction sa, cur;

	if (sigaction(sig, NULL, &cur) < 0)
		return sd_fail(-EINVAL, "sigaction(%d) failed: %s", sig, strerror(errno));
	if (is_host_handler(&cur) && !is_our_handler(&cur) && !take_over)
		return sd_fail(-EBUSY, "signal %d already has a handler installed by the program: "
			       "choose another ipi_signal, or set SD_MACHINE_TAKE_SIGNAL to "
			       "share it (the handler keeps the signals that are not IPIs)", sig);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = ipi_handler;
	/* SA_RESTART: a CPU blocked in a lock or a read resumes after
	 * answering the IPI instead of failing with EINTR. */
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	/* Ours with no user: a restore that failed. Chaining to ourselves
	 * would recurse; the host's action before us is lost, take SIG_DFL. */
	if (is_our_handler(&cur)) {
		memset(&cur, 0, sizeof(cur));
		cur.sa_handler = SIG_DFL;
	}
	installed[slot].old = cur;
	/* Publish old before the handler can look for it. */
	atomic_store_explicit(&installed[slot].sig, sig, memory_order_release);
	if (sigaction(sig, &sa, NULL) < 0) {
		atomic_store(&installed[slot].sig, 0);
		return sd_fail(-EINVAL, "sigaction(%d) failed: %s", sig, strerror(errno));
	}
	installed[slot].users = 1;
	return 0;
}

int sd_smp_call_install(int sig, bool take_over)
{
	int err = 0;
	unsigned i, slot = SD_ARRAY_SIZE(installed);

	pthread_mutex_lock(&install_lock);
	for (i = 0; i < SD_ARRAY_SIZE(installed); i++) {
		if (installed[i].users && atomic_load(&installed[i].sig) == sig) {
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
	err = install_new(slot, sig, take_over);
out:
	pthread_mutex_unlock(&install_lock);
	return err;
}

void sd_smp_call_uninstall(int sig)
{
	struct sigaction cur;

	pthread_mutex_lock(&install_lock);
	for (unsigned i = 0; i < SD_ARRAY_SIZE(installed); i++) {
		if (!installed[i].users || atomic_load(&installed[i].sig) != sig)
			continue;
		/* Restore the host's action only over our own: a handler the
		 * host installed meanwhile is its, and stays. */
		if (--installed[i].users == 0) {
			if (sigaction(sig, NULL, &cur) == 0 && is_our_handler(&cur))
				sigaction(sig, &installed[i].old, NULL);
			atomic_store(&installed[i].sig, 0);
		}
		break;
	}
	pthread_mutex_unlock(&install_lock);
}

static bool post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req);

bool sd_smp_call_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req)
{
	req->kind = SD_SMP_REQ_IPI;
	return post(from, t, req);
}

bool sd_smp_rar_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req)
{
	req->kind = SD_SMP_REQ_RAR;
	return post(from, t, req);
}

bool sd_smp_sbi_post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req)
{
	req->kind = SD_SMP_REQ_SBI;
	return post(from, t, req);
}

static bool post(struct sd_cpu *from, struct sd_cpu *t, struct sd_smp_call_req *req)
{
	int tid, err;

	/* Strict modelled time: a CPU posts in modelled order, holding the
	 * token. One away from the machine (taken from by the watchdog, or
	 * back from idle before its first sync point) joins first, or it
	 * would post to a holder that may never reach its sync point. */
	if (from && from->model.seq && !from->irq_depth)
		sd_seq_join(&from->model);     /* at once if it holds the token and runs */
	atomic_init(&req->state, SD_SMP_CALL_PENDING);
	req->target = t;
	cds_lfs_node_init(&req->node);
	/*
	 * Against sd_smp_call_offline(): we count ourselves, then read tid; it
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
	/* Counted (and traced) before the push: the flow id travels in the
	 * request. @from is NULL for a plain thread (sd_mm_destroy() shooting
	 * lazy CPUs): there is no sending CPU to count it on. */
	req->model_sent_ps = 0;
	req->model_acked_ps = 0;
	req->flow = !from ? 0
		    : req->kind == SD_SMP_REQ_RAR ? sd_event_rar_sent(from, t, &req->model_sent_ps)
		    : req->kind == SD_SMP_REQ_SBI ? sd_event_sbi_sent(from, t, &req->model_sent_ps)
		    : sd_event_ipi_sent(from, t, &req->model_sent_ps);
	req->from = from;
	/* The push's barrier is inside liburcu, where TSan cannot see it. */
	sd_tsan_release(req);
	cds_lfs_push(&t->ipi_queue, &req->node);
	/* Strict modelled time: a CPU in the machine runs it at its sync
	 * point, at the IPI's arrival; only one away needs the signal. */
	if (t->model.seq) {
		/* A summoned CPU always gets its own signal: a kick left by
		 * an earlier one (whose handler found it in the machine and
		 * left the queue to its sync point) must not swallow it. */
		if (sd_seq_posted(from ? &from->model : NULL, &t->model, req_arrival(t, req))) {
			atomic_store(&t->ipi_kick, 1);
			err = sd_ipi_signal_send(t->m->cfg.ipi_signal, tid);
			if (err)
				atomic_store_explicit(&t->ipi_send_err, err, memory_order_relaxed);
		}
		atomic_fetch_sub_explicit(&t->ipi_senders, 1, memory_order_release);
		return true;
	}
	/* One signal in flight is enough: the handler drains the whole queue
	 * (a non-empty call_single_queue already has its IPI). A failed send
	 * leaves the kick set; the waiter's watchdog sends again, and finds
	 * out whether the thread is gone. */
	if (!atomic_exchange(&t->ipi_kick, 1)) {
		err = sd_ipi_signal_send(t->m->cfg.ipi_signal, tid);
		if (err)
			atomic_store_explicit(&t->ipi_send_err, err, memory_order_relaxed);
	}
	atomic_fetch_sub_explicit(&t->ipi_senders, 1, memory_order_release);
	return true;
}

/* ---- the watchdog (kernel/smp.c: csd_lock_wait_toolong()) ---- */

/* The waiter is a CPU, or NULL for a plain thread (sd_mm_destroy() shooting
 * lazy CPUs): count on it if there is one, and name it in reports. */
static void count_on(struct sd_cpu *from, enum sd_event ev, unsigned target)
{
	if (from)
		sd_event(from, ev, target, 0);
}

static void name_waiter(const struct sd_cpu *from, char *buf, size_t len)
{
	if (from)
		snprintf(buf, len, "CPU %u", from->id);
	else
		snprintf(buf, len, "a thread that is no CPU");
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * The target's thread is gone while attached (-ESRCH). Take its place as the
 * queue's consumer, once: clear its tid so no new request is queued, wait
 * out posts in progress (as sd_smp_call_offline() does), then release every
 * queued request as GONE without running it. Its TLB went with it; attach
 * flushes the TLB before the CPU can be used again.
 */
static void ipi_reap_dead(struct sd_cpu *from, struct sd_cpu *t, int tid)
{
	struct sd_backoff b = SD_BACKOFF_INIT;
	struct cds_lfs_head *head;
	struct cds_lfs_node *node;
	char who[32];

	if (!atomic_compare_exchange_strong(&t->tid, &tid, 0))
		return;         /* detached meanwhile, or another waiter reaps */
	count_on(from, SD_EV_IPI_TARGET_GONE, t->id);
	name_waiter(from, who, sizeof(who));
	fprintf(stderr, "libshootdown: %s: the thread of CPU %u (tid %d) exited while "
		"attached; its IPIs are not waited for, it counts as offline\n",
		who, t->id, tid);
	while (atomic_load(&t->ipi_senders))
		sd_backoff_wait(&b);
	head = __cds_lfs_pop_all(&t->ipi_queue);
	for (node = head ? &head->node : NULL; node;) {
		struct sd_smp_call_req *req = caa_container_of(node, struct sd_smp_call_req, node);
		struct cds_lfs_node *next = node->next;

		sd_tsan_acquire(req);
		if (atomic_exchange_explicit(&req->state, SD_SMP_CALL_GONE,
					     memory_order_acq_rel) == SD_SMP_CALL_PARKED)
			sd_futex_wake(&req->state, 1);
		node = next;
	}
	atomic_store(&t->ipi_kick, 0);
}

/* Read a small /proc file of @tid into @buf (for the report only). */
static void read_task_file(int tid, const char *name, char *buf, size_t len)
{
	char path[64];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", tid, name);
	buf[0] = 0;
	f = fopen(path, "r");
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = i + 1 < n ? ' ' : 0;
}

/* Whether @sig is pending for, or blocked by, thread @tid (from its
 * /proc status: SigPnd and SigBlk, as hex masks of signal numbers). */
static void task_sig_state(int tid, int sig, bool *pending, bool *blocked)
{
	char buf[2048], *p;
	unsigned long long mask;

	*pending = *blocked = false;
	read_task_file(tid, "status", buf, sizeof(buf));
	if ((p = strstr(buf, "SigPnd:")) && sscanf(p + 7, "%llx", &mask) == 1)
		*pending = mask >> (sig - 1) & 1;
	if ((p = strstr(buf, "SigBlk:")) && sscanf(p + 7, "%llx", &mask) == 1)
		*blocked = mask >> (sig - 1) & 1;
}

#ifdef SD_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#endif

/* The owner-private words, read racily for the report only. */
static void peek_target(const struct sd_cpu *t, int *depth, int *pending)
{
#ifdef SD_TSAN
	AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
	*depth = t->irq_depth;
	*pending = t->ipi_pending;
#ifdef SD_TSAN
	AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

void sd_smp_call_describe(struct sd_cpu *t, char *buf, size_t len)
{
	int sig = t->m->cfg.ipi_signal, tid = atomic_load(&t->tid), depth, pending;
	bool sig_pending = false, sig_blocked = false;
	char wchan[64] = "", syscall_line[128] = "";

	peek_target(t, &depth, &pending);
	if (tid) {
		task_sig_state(tid, sig, &sig_pending, &sig_blocked);
		read_task_file(tid, "wchan", wchan, sizeof(wchan));
		read_task_file(tid, "syscall", syscall_line, sizeof(syscall_line));
	}
	snprintf(buf, len,
		 "CPU %u (tid %d): irq_depth %d, ipi_pending %d, kick %d, queue %s, "
		 "last send error %d, signal %d %s%s, handler %s, blocked in wchan '%s' "
		 "(syscall %s)",
		 t->id, tid, depth, pending, atomic_load(&t->ipi_kick),
		 cds_lfs_empty(&t->ipi_queue) ? "empty" : "non-empty",
		 atomic_load_explicit(&t->ipi_send_err, memory_order_relaxed), sig,
		 sig_pending ? "pending" : "not pending",
		 sig_blocked ? ", masked by the thread (flushes wait until it unmasks)" : "",
		 ipi_handler_installed(sig) ? "ours" :
		 "REPLACED by the program (IPIs cannot be answered until ours is back)",
		 wchan[0] ? wchan : "?", syscall_line[0] ? syscall_line : "?");
}

/* The stuck report: everything needed to tell who is at fault. */
static void ipi_report_stuck(struct sd_cpu *from, struct sd_cpu *t, uint64_t waited_ns)
{
	char state[512], who[32];

	sd_smp_call_describe(t, state, sizeof(state));
	count_on(from, SD_EV_IPI_STUCK, t->id);
	name_waiter(from, who, sizeof(who));
	fprintf(stderr, "libshootdown: %s has waited %llu ms for an IPI to %s\n", who,
		(unsigned long long)(waited_ns / 1000000), state);
}

/*
 * Send the signal again, unless one is already pending at the target (a
 * masked signal would pile up in the real-time queue). A target whose
 * thread is gone is reaped, which releases our request.
 */
static void ipi_resend(struct sd_cpu *from, struct sd_cpu *t, int tid)
{
	int sig = t->m->cfg.ipi_signal, err;
	bool pending, blocked;

	task_sig_state(tid, sig, &pending, &blocked);
	if (pending)
		return;
	err = sd_ipi_signal_send(sig, tid);
	if (err == -ESRCH) {
		ipi_reap_dead(from, t, tid);
		return;
	}
	if (err)
		atomic_store_explicit(&t->ipi_send_err, err, memory_order_relaxed);
	count_on(from, SD_EV_IPI_RESENT, t->id);
}

static bool req_finished(struct sd_smp_call_req *req)
{
	return atomic_load_explicit(&req->state, memory_order_acquire) >= SD_SMP_CALL_DONE;
}

/*
 * The park path: futex waits bounded by the next watchdog deadline. Every
 * SD_SMP_CALL_RESEND_MS the signal goes again (a lost one, or one dropped by a
 * sanitizer, costs a delay, not the machine); every ipi_timeout_ms the
 * target is reported. A tid of 0 means the target is going offline: its
 * detach answers the queue, so there is nothing to send.
 */
static void ipi_wait_parked(struct sd_cpu *from, struct sd_smp_call_req *req)
{
	struct sd_cpu *t = req->target;
	uint64_t start = now_ns(), resend_ns = (uint64_t)SD_SMP_CALL_RESEND_MS * 1000000u;
	uint64_t report_ns = (uint64_t)t->m->cfg.ipi_timeout_ms * 1000000u;
	uint64_t next_resend = start + resend_ns, next_report = start + report_ns;

	/* The post's own send already found no such thread: reap at once. */
	if (atomic_load_explicit(&t->ipi_send_err, memory_order_relaxed) == -ESRCH)
		next_resend = start;

	while (!req_finished(req)) {
		uint64_t now = now_ns(), until;
		int tid = atomic_load(&t->tid);

		if (now >= next_resend) {
			next_resend = now + resend_ns;
			if (tid)
				ipi_resend(from, t, tid);
		}
		if (now >= next_report) {
			if (tid)
				ipi_report_stuck(from, t, now - start);
			next_report = now + report_ns;
		}
		until = next_resend < next_report ? next_resend : next_report;
		sd_futex_wait_ns(&req->state, SD_SMP_CALL_PARKED, until > now ? until - now : 1);
	}
}

/*
 * Strict modelled time: the sender leaves the running CPUs until the ack's
 * time (sd_seq_wake() from the handler), running the IPIs that reach it
 * meanwhile, as a CPU waiting in csd_lock_wait() does with interrupts on.
 */
static void ipi_wait_seq(struct sd_cpu *from, struct sd_smp_call_req *req)
{
	while (!req_finished(req)) {
		sd_seq_wait(&from->model, SD_SEQ_NEVER);
		if (from->ipi_pending || sd_seq_arrival(&from->model, NULL) <= from->model.clock_ps)
			ipi_run_queue(from);
	}
}

int sd_smp_call_wait(struct sd_cpu *from, struct sd_smp_call_req *req)
{
	unsigned n;
	int expected = SD_SMP_CALL_PENDING;

	if (from && from->model.seq && sd_seq_running(&from->model)) {
		ipi_wait_seq(from, req);
		goto done;
	}

	for (n = 0; n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS; n++) {
		if (req_finished(req))
			goto done;
		if (n < SD_BACKOFF_SPINS)
			sd_cpu_relax();
		else
			sched_yield();
	}
	/* Park: the handler's exchange sees PARKED and wakes us. A signal
	 * (an IPI to us) interrupts the wait; its handler runs first. */
	if (atomic_compare_exchange_strong(&req->state, &expected, SD_SMP_CALL_PARKED))
		ipi_wait_parked(from, req);
done:
	if (from)
		sd_event_ipi_acked(from, req->target, req->flow, req->model_acked_ps);
	if (atomic_load_explicit(&req->state, memory_order_acquire) == SD_SMP_CALL_GONE)
		return sd_fail(-ESRCH, "CPU %u's thread exited while attached: its IPI was not run",
			       req->target->id);
	return 0;
}

void sd_smp_call_offline(struct sd_cpu *c)
{
	struct sd_backoff b = SD_BACKOFF_INIT;

	atomic_store(&c->tid, 0);
	while (atomic_load(&c->ipi_senders))
		sd_backoff_wait(&b);
	/* Strict modelled time would keep the IPIs still on their way for
	 * later: going offline, every one runs now. */
	c->model.seq = false;
	sd_smp_call_drain(c);
}

int sd_smp_call_single(struct sd_cpu *from, unsigned target, sd_smp_call_fn fn, void *arg)
{
	struct sd_smp_call_req req;

	if (sd_cpu_check_self(from))
		return sd_fail(-EPERM, "sd_smp_call_single: " SD_NOT_ATTACHED);
	if (!fn || target >= from->m->nr_cpus || target == from->id)
		return sd_fail(-EINVAL, "sd_smp_call_single: bad target %u or NULL function", target);
	if (from->irq_depth)
		return sd_fail(-EDEADLK, "sd_smp_call_single: interrupts are off on CPU %u", from->id);
	req.fn = fn;
	req.arg = arg;
	req.async = false;
	if (!sd_smp_call_post(from, from->m->cpus[target], &req))
		return sd_fail(-EINVAL, "sd_smp_call_single: CPU %u has no thread", target);
	return sd_smp_call_wait(from, &req);
}
