/* SPDX-License-Identifier: MIT */
/*
 * HotSpot's thread-local handshakes (JEP 312; handshake.cpp,
 * Handshake::execute() and HandshakeState): the requester arms each
 * target's poll word (SafepointMechanism::arm_local_poll()), and the target
 * runs the operation at its next safepoint poll and says so. A target in a
 * safe state (in native code, blocked) is processed by the requester on its
 * behalf, under a claim the target must wait out to leave that state
 * (HandshakeState's lock, reduced here to a CAS on the state word).
 *
 * In modelled time the poll word and the acknowledgement are each a line:
 * the requester's arming write and the target's poll read move the first,
 * the target's acknowledgement write and the requester's read the second.
 */
#include "../hw/event.h"
#include "handshake.h"

/* Arm @t's poll word; the request's function, argument and arrow are
 * stored before (handshake.c), and this release publishes them. */
static void arm(struct sd_handshake *h, struct sd_cpu *cpu, unsigned t)
{
	struct sd_hs_cpu *hc = &h->cpus[t];

	atomic_store_explicit(&hc->armed, h->seq, memory_order_release);
	sd_event_line(cpu, &hc->word, true);
}

int sd_hs_poll_word(struct sd_handshake *h, struct sd_cpu *cpu)
{
	uint64_t report = 0;
	unsigned waiting = 0;

	for (unsigned t = 0; t < h->m->nr_cpus; t++) {
		if (!h->cpus[t].target || sd_hs_try_on_behalf(h, cpu, t))
			continue;
		arm(h, cpu, t);
		waiting++;
	}
	if (atomic_load_explicit(&sd_hs_test_break, memory_order_relaxed) & SD_HS_BREAK_NO_WAIT)
		return 0;
	/* A target that entered a safe state after it was armed is handled
	 * for it here; one that polls acknowledges itself. */
	while (waiting) {
		waiting = 0;
		for (unsigned t = 0; t < h->m->nr_cpus; t++) {
			struct sd_hs_cpu *hc = &h->cpus[t];

			if (!hc->target || hc->seen_done)
				continue;
			if (sd_hs_done(h, t) || sd_hs_try_on_behalf(h, cpu, t) || sd_hs_left(h, t)) {
				hc->seen_done = true;
				if (!hc->on_behalf)
					sd_event_line(cpu, &hc->ack, false);
				continue;
			}
			waiting++;
		}
		if (waiting)
			sd_hs_wait_turn(h, cpu, &report, "to poll (sd_handshake_poll()) or enter a "
					"safe state");
	}
	return 0;
}
