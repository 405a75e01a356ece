/* SPDX-License-Identifier: MIT */
#include <sched.h>
#include <time.h>

#include "backoff.h"

void sd_backoff_slow(struct sd_backoff *b)
{
	if (b->n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS) {
		b->n++;
		sched_yield();
		return;
	}
	/* A yield does not help a preempted lock holder under CFS when many
	 * waiters share the core; a short sleep does. */
	struct timespec ts = { 0, SD_BACKOFF_SLEEP_NS };
	nanosleep(&ts, NULL);
}
