/* SPDX-License-Identifier: MIT */
#include <sched.h>

#include "spinlock.h"

void sd_spin_lock_slow(struct sd_spinlock *l)
{
	/* Strict modelled time: the holder may be a CPU waiting for its
	 * turn; let it have it (backoff.h, sd_wait_hook). */
	while (sd_wait_hook && sd_wait_hook())
		if (sd_spin_trylock(l))
			return;
	for (unsigned n = 0; n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS; n++) {
		if (sd_spin_trylock(l))
			return;
		if (n < SD_BACKOFF_SPINS)
			sd_cpu_relax();
		else
			sched_yield();
	}
	/* Park: mark the lock contended; whoever unlocks it wakes one of us,
	 * and the woken thread takes it in state 2, since others may wait. */
	while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
		sd_futex_wait(&l->state, 2);
}
