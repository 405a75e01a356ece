/* SPDX-License-Identifier: MIT */
#include <sched.h>
#include <time.h>

#include "backoff.h"

SD_THREAD_LOCAL bool (*sd_wait_hook)(void) __attribute__((tls_model("initial-exec")));
SD_THREAD_LOCAL void (*sd_release_hook)(void) __attribute__((tls_model("initial-exec")));

void sd_backoff_slow(struct sd_backoff *b)
{
	if (b->n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS) {
		b->n++;
		sched_yield();
		return;
	}
	/* A yield does not help a preempted thread under CFS when many
	 * waiters share the core; a sleep does, growing so that hundreds of
	 * sleepers do not keep the scheduler busy with their wake-ups. Waits
	 * that can last long park on a futex instead (core/futex.h). */
	unsigned shift = b->n - SD_BACKOFF_SPINS - SD_BACKOFF_YIELDS;
	long ns = SD_BACKOFF_SLEEP_NS << (shift < 5 ? shift : 5);
	struct timespec ts = { 0, ns };
	if (shift < 5)
		b->n++;
	nanosleep(&ts, NULL);
}
