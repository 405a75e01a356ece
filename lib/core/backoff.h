/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_BACKOFF_H
#define SD_CORE_BACKOFF_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/backoff.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "compiler.h"

/*
 * Every wait in the library goes through sd_backoff (invariant 6 (docs/invariants.md)):
 * spin briefly, then yield, then sleep. On this class of machine two threads
 * spinning on one core cost a whole scheduler tick (~4 ms) per hand-off, so
 * with more emulated CPUs than PUs the waiter must get off the core for the
 * thread it waits on to run at all.
 *
 * SD_BACKOFF_SPINS pauses cover a signal round trip between two idle cores
 * (~3-6 us measured), so an unloaded IPI ack is caught while spinning.
 */
#define SD_BACKOFF_SPINS 512
#define SD_BACKOFF_YIELDS 64
#define SD_BACKOFF_SLEEP_NS 50000

struct sd_backoff {
	unsigned n;
};

#define SD_BACKOFF_INIT { 0 }

/*
 * The calling thread's wait hook, NULL for none. Strict modelled time
 * (time/sequencer.h) runs one emulated CPU at a time, so a CPU that waits
 * for a lock another CPU holds must let that CPU run instead of spinning:
 * its thread sets this hook, which hands the machine on and returns true
 * (or false when it cannot: the wait then spins as usual).
 */
extern SD_THREAD_LOCAL bool (*sd_wait_hook)(void) __attribute__((tls_model("initial-exec")));

/*
 * Its partner: the calling thread's release hook, NULL for none. A CPU that
 * polled through sd_wait_hook is parked until something it may be waiting
 * for changes; every lock release and every store that ends a polled wait
 * says so here (sd_wait_released()), so that the parked waiters look again
 * at the modelled time of the release, not after every step of the others.
 */
extern SD_THREAD_LOCAL void (*sd_release_hook)(void) __attribute__((tls_model("initial-exec")));

static inline void sd_wait_released(void)
{
	if (unlikely(sd_release_hook != NULL))
		sd_release_hook();
}

void sd_backoff_slow(struct sd_backoff *b);

static inline void sd_backoff_wait(struct sd_backoff *b)
{
	if (unlikely(sd_wait_hook != NULL) && sd_wait_hook())
		return;
	if (likely(b->n < SD_BACKOFF_SPINS)) {
		b->n++;
		sd_cpu_relax();
		return;
	}
	sd_backoff_slow(b);
}

#endif
