/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_SPINLOCK_H
#define SD_CORE_SPINLOCK_H

#include "backoff.h"

/*
 * A test-and-test-and-set lock with sd_backoff, standing in for the kernel's
 * raw spinlocks (cpu_asid_lock, the interconnect). It is hand-written rather
 * than a pthread mutex because callers hold it with emulated interrupts off
 * and its cache-line traffic is part of what is being measured.
 */
struct sd_spinlock {
	SD_ATOMIC(int) locked;
};

static inline void sd_spin_init(struct sd_spinlock *l)
{
	atomic_init(&l->locked, 0);
}

static inline bool sd_spin_trylock(struct sd_spinlock *l)
{
	return !atomic_load_explicit(&l->locked, memory_order_relaxed) &&
	       !atomic_exchange_explicit(&l->locked, 1, memory_order_acquire);
}

static inline void sd_spin_lock(struct sd_spinlock *l)
{
	struct sd_backoff b = SD_BACKOFF_INIT;

	while (!sd_spin_trylock(l))
		sd_backoff_wait(&b);
}

static inline void sd_spin_unlock(struct sd_spinlock *l)
{
	atomic_store_explicit(&l->locked, 0, memory_order_release);
}

#endif
