/* SPDX-License-Identifier: MIT */
/*
 * Go's asynchronous preemption as a handshake (runtime/preempt.go,
 * suspendG(); runtime/signal_unix.go, preemptM() and doSigPreempt()): the
 * requester signals each target's thread; the handler runs the request
 * only if the thread is at an asynchronous safe point
 * (wantAsyncPreempt() && isAsyncSafePoint()), and acknowledges it by
 * bumping a counter (preemptGen); otherwise it refuses and the request
 * stays armed, so the target takes it at its next synchronous safe point
 * (a poll: Go's stack-bound check in a function prologue). The requester
 * signals again every resend_ns until each has acknowledged, handling for
 * them those in a safe state (a goroutine in a system call).
 *
 * The signal is the library's IPI (a real signal between host threads),
 * so it costs what an IPI costs in modelled time; the interval between
 * two signals is the requester's own time (Go spins and yields there).
 */
#include "../core/error.h"
#include "../hw/event.h"
#include "handshake.h"

/* A refusal drawn from the target's own generator (xorshift64*). */
static bool refuse_at_random(struct sd_handshake *h, struct sd_hs_cpu *hc)
{
	uint64_t x = hc->rng;

	if (!h->cfg.refuse_per_million)
		return false;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	hc->rng = x;
	return (x * 0x2545f4914f6cdd1dull) % 1000000u < h->cfg.refuse_per_million;
}

/* doSigPreempt(): in the target's IPI handler, interrupts off. */
static void preempt_signal(struct sd_cpu *t, void *arg)
{
	struct sd_handshake *h = arg;
	struct sd_hs_cpu *hc = &h->cpus[t->id];

	/* A signal delivered aborts a restartable sequence whatever the
	 * handler then does (rseq_signal_deliver()). */
	sd_hs_rseq_abort(h, t);
	if (atomic_load_explicit(&hc->acked, memory_order_relaxed) >= h->seq)
		return;                 /* it polled meanwhile */
	if ((h->cfg.safe_point && !h->cfg.safe_point(t, h->cfg.safe_point_arg)) ||
	    refuse_at_random(h, hc)) {
		/* This handler alone writes it (no RMW needed); release pairs
		 * with the requester's acquire in check_targets(). */
		atomic_store_explicit(&hc->refusals, atomic_load_explicit(&hc->refusals,
						memory_order_relaxed) + 1, memory_order_release);
		sd_event(t, SD_EV_HANDSHAKE_REFUSED, t->id, 0);
		return;
	}
	sd_hs_run_fn(h, t, t, false);
}

static int send(struct sd_handshake *h, struct sd_cpu *cpu, unsigned t)
{
	struct sd_hs_cpu *hc = &h->cpus[t];
	int err = sd_smp_call_async(cpu, t, preempt_signal, h, &hc->call);

	hc->in_flight = !err;
	/* A target with no thread (gone offline since it was picked) runs
	 * nothing: the check reports it. */
	return err == -EINVAL ? 0 : err;
}

/* One round: every signal in flight waited for; the refused ones counted
 * and, with the targets never signalled, left for the next round. */
static unsigned reap(struct sd_handshake *h, struct sd_cpu *cpu)
{
	unsigned waiting = 0;

	for (unsigned t = 0; t < h->m->nr_cpus; t++) {
		struct sd_hs_cpu *hc = &h->cpus[t];

		if (!hc->target)
			continue;
		if (hc->in_flight) {
			sd_smp_call_async_wait(cpu, &hc->call);
			hc->in_flight = false;
			if (atomic_load_explicit(&sd_hs_test_break, memory_order_relaxed) &
			    SD_HS_BREAK_REFUSAL_ACKS)
				continue;
		}
		if (!sd_hs_done(h, t) && !sd_hs_try_on_behalf(h, cpu, t) && !sd_hs_left(h, t))
			waiting++;
	}
	return waiting;
}

int sd_hs_signal(struct sd_handshake *h, struct sd_cpu *cpu, struct sd_handshake_result *res)
{
	uint64_t report = 0;
	int err = 0;

	for (unsigned t = 0; t < h->m->nr_cpus && !err; t++) {
		if (!h->cpus[t].target || sd_hs_try_on_behalf(h, cpu, t))
			continue;
		/* Armed first: a refusal leaves it to the target's next poll. */
		atomic_store_explicit(&h->cpus[t].armed, h->seq, memory_order_release);
		err = send(h, cpu, t);
	}
	if (err) {
		reap(h, cpu);      /* no signal left in flight */
		return err;
	}
	while (!err && reap(h, cpu)) {
		/* suspendG()'s wait before preemptM() again: the requester's
		 * own time, then one more signal to each target still out. */
		sd_cpu_work(cpu, h->cfg.resend_ns);
		sd_hs_wait_turn(h, cpu, &report, "to take a signal at a safe point or poll");
		for (unsigned t = 0; t < h->m->nr_cpus && !err; t++) {
			if (!h->cpus[t].target || sd_hs_done(h, t))
				continue;
			sd_event(cpu, SD_EV_HANDSHAKE_RESENT, t, 0);
			res->resends++;
			err = send(h, cpu, t);
		}
	}
	if (err)
		reap(h, cpu);
	return err;
}
