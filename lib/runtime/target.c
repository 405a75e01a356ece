/* SPDX-License-Identifier: MIT */
/*
 * The targets' side of a handshake (handshake.h: sd_handshake_poll(),
 * sd_handshake_set_safe()) and the steps every kind shares: running the
 * request's function and acknowledging it, handling a target in a safe
 * state on its behalf, and the requester's wait with its stuck report.
 * Below the kinds' files, which handshake.c dispatches to.
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include <shootdown/handshake.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "handshake.h"

SD_ATOMIC(unsigned) sd_hs_test_break;

static const char *const kind_names[SD_HANDSHAKE_KIND_NR] = {
	[SD_HANDSHAKE_MEMBARRIER] = "membarrier", [SD_HANDSHAKE_SIGNAL] = "signal",
	[SD_HANDSHAKE_POLL] = "poll", [SD_HANDSHAKE_MPROTECT] = "mprotect",
	[SD_HANDSHAKE_MEMBARRIER_RSEQ] = "membarrier_rseq",
};

const char *sd_hs_kind_name(unsigned kind)
{
	return kind < SD_HANDSHAKE_KIND_NR ? kind_names[kind] : "unknown";
}

uint64_t sd_hs_host_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the steps the kinds share ---- */

bool sd_hs_run_fn(struct sd_handshake *h, struct sd_cpu *by, struct sd_cpu *t, bool on_behalf)
{
	struct sd_hs_cpu *hc = &h->cpus[t->id];

	sd_irq_off(by);
	/* Checked and acknowledged with interrupts off: a SIGNAL request
	 * reaches its target by its handler and by its poll, and the
	 * handler runs on the target's own thread, so it cannot fall
	 * between this check and the ack and run the function twice. */
	if (!on_behalf && atomic_load_explicit(&hc->acked, memory_order_relaxed) >= h->seq) {
		sd_irq_on(by);
		return false;
	}
	if (h->fn)
		h->fn(t, h->arg);
	/* The function's effects before the acknowledgement: pairs with the
	 * acquire in sd_hs_done(). */
	atomic_store_explicit(&hc->acked, h->seq, memory_order_release);
	sd_irq_on(by);
	if (!on_behalf)
		sd_cpu_passed_barrier(t);
	sd_event_line(by, &hc->ack, true);
	sd_event(by, on_behalf ? SD_EV_HANDSHAKE_ON_BEHALF : SD_EV_HANDSHAKE_ACK, t->id,
		 atomic_load_explicit(&hc->flow, memory_order_relaxed));
	/* A requester polling for this acknowledgement looks again now. */
	if (!on_behalf)
		sd_cpu_poll_wake(by);
	return true;
}

void sd_hs_rseq_abort(struct sd_handshake *h, struct sd_cpu *t)
{
	if (!sd_cpu_rseq_abort(t))
		return;
	sd_event(t, SD_EV_RSEQ_ABORT, atomic_load_explicit(&t->rseq_seq, memory_order_relaxed), 0);
	/* Before the acknowledgement (the function run or the IPI's ack),
	 * which releases it again to the requester's check. */
	atomic_store_explicit(&h->cpus[t->id].rseq_aborted, h->seq, memory_order_release);
}

uint64_t sd_hs_rseq_open(const struct sd_cpu *c)
{
	struct sd_cpu *cpu = (struct sd_cpu *)c;

	/* Acquire pairs with sd_rseq_begin()'s release of ACTIVE: the
	 * number read after it is that section's or a later one's. */
	if (atomic_load_explicit(&cpu->rseq_state, memory_order_acquire) != SD_RSEQ_ACTIVE)
		return 0;
	return atomic_load_explicit(&cpu->rseq_seq, memory_order_relaxed);
}

bool sd_hs_done(const struct sd_handshake *h, unsigned t)
{
	struct sd_hs_cpu *hc = &h->cpus[t];

	return hc->on_behalf || hc->left ||
	       atomic_load_explicit(&hc->acked, memory_order_acquire) >= h->seq;
}

bool sd_hs_left(struct sd_handshake *h, unsigned t)
{
	struct sd_cpu *c = h->m->cpus[t];
	struct sd_hs_cpu *hc = &h->cpus[t];

	/* It switched away from the mm (an exited runtime thread, a thread
	 * that went idle) after it was picked: it passed switch_mm's barrier
	 * and runs no thread of the mm any more, so nothing is owed, as
	 * HotSpot skips a thread that exited and membarrier a CPU that
	 * switched. Acquire pairs with the release of its mm store. */
	if (!hc->left && (atomic_load_explicit(&c->mm, memory_order_acquire) != h->mm ||
			  atomic_load_explicit(&c->lazy, memory_order_relaxed)))
		hc->left = true;
	return hc->left;
}

bool sd_hs_try_on_behalf(struct sd_handshake *h, struct sd_cpu *by, unsigned t)
{
	struct sd_hs_cpu *hc = &h->cpus[t];
	int safe = SD_HS_SAFE;

	/* Against the target leaving its safe state (sd_handshake_set_safe()):
	 * one of the two CASes wins, so the function never runs on the
	 * target and for it at once. */
	if (atomic_load_explicit(&hc->state, memory_order_relaxed) != SD_HS_SAFE ||
	    !atomic_compare_exchange_strong(&hc->state, &safe, SD_HS_CLAIMED))
		return false;
	if (atomic_load_explicit(&hc->acked, memory_order_acquire) < h->seq) {
		sd_hs_run_fn(h, by, h->m->cpus[t], true);
		hc->on_behalf = true;
	}
	atomic_store_explicit(&hc->state, SD_HS_SAFE, memory_order_release);
	/* A target leaving its safe state waits for this store in
	 * sd_cpu_poll(): in strict mode it looks again only when woken. */
	sd_cpu_poll_wake(by);
	return true;
}

/* The targets still awaited, for the stuck report. */
static void describe_awaited(struct sd_handshake *h, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	for (unsigned t = 0; t < h->m->nr_cpus && at + 16 < len; t++)
		if (h->cpus[t].target && !sd_hs_done(h, t))
			at += (size_t)snprintf(buf + at, len - at, "%s%u", at ? ", " : "", t);
}

void sd_hs_wait_turn(struct sd_handshake *h, struct sd_cpu *by, uint64_t *next_report_ns,
		     const char *what)
{
	uint64_t now;
	char awaited[256];

	sd_cpu_poll(by);
	now = sd_hs_host_ns();
	if (!*next_report_ns) {
		*next_report_ns = now + (uint64_t)h->m->cfg.ipi_timeout_ms * 1000000u;
		return;
	}
	if (now < *next_report_ns)
		return;
	*next_report_ns = now + (uint64_t)h->m->cfg.ipi_timeout_ms * 1000000u;
	describe_awaited(h, awaited, sizeof(awaited));
	fprintf(stderr, "libshootdown: %s handshake: CPU %u has waited %u ms for CPU(s) %s %s\n",
		sd_hs_kind_name(h->cfg.kind), by->id, h->m->cfg.ipi_timeout_ms, awaited, what);
}

/* ---- the targets' side ---- */

static int check_target(struct sd_handshake *h, struct sd_cpu *cpu, const char *fn)
{
	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "%s: " SD_NOT_ATTACHED, fn);
	if (!h)
		return sd_fail(-EINVAL, "%s: NULL handshake", fn);
	if (h->m != cpu->m)
		return sd_fail(-EINVAL, "%s: the handshake is of another machine", fn);
	return 0;
}

int sd_handshake_poll(struct sd_handshake *h, struct sd_cpu *cpu)
{
	struct sd_hs_cpu *hc;
	uint64_t armed;
	int err = check_target(h, cpu, "sd_handshake_poll");

	if (err)
		return err;
	hc = &h->cpus[cpu->id];
	/* Pairs with the release that armed it, after fn, arg and flow. */
	armed = atomic_load_explicit(&hc->armed, memory_order_acquire);
	if (!armed || armed <= atomic_load_explicit(&hc->acked, memory_order_relaxed))
		return 0;
	sd_event_line(cpu, &hc->word, false);
	sd_order_point(SD_ORDER_HS_POLLED, cpu->id);
	return sd_hs_run_fn(h, cpu, cpu, false);
}

int sd_handshake_set_safe(struct sd_handshake *h, struct sd_cpu *cpu, int safe)
{
	struct sd_hs_cpu *hc;
	int running = SD_HS_RUNNING, was = SD_HS_SAFE;
	int err = check_target(h, cpu, "sd_handshake_set_safe");

	if (err)
		return err;
	hc = &h->cpus[cpu->id];
	if (safe) {
		/* Everything done before is visible to a requester that
		 * claims us (its CAS acquires). */
		if (!atomic_compare_exchange_strong(&hc->state, &running, SD_HS_SAFE))
			return sd_fail(-EINVAL, "sd_handshake_set_safe: CPU %u is in a safe state "
				       "already", cpu->id);
		return 0;
	}
	if (atomic_load_explicit(&hc->state, memory_order_relaxed) == SD_HS_RUNNING)
		return sd_fail(-EINVAL, "sd_handshake_set_safe: CPU %u is not in a safe state",
			       cpu->id);
	if (cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_handshake_set_safe: interrupts are off on CPU %u "
			       "(leaving may wait for a requester)", cpu->id);
	/* A requester handling us on our behalf finishes first (HotSpot's
	 * transition from native waits for the handshake's processing). */
	while (!atomic_compare_exchange_weak(&hc->state, &was, SD_HS_RUNNING)) {
		was = SD_HS_SAFE;
		sd_cpu_poll(cpu);
	}
	/* The poll of a thread back from native code: a request armed while
	 * we were safe, and not handled for us, runs now. */
	return sd_handshake_poll(h, cpu);
}
