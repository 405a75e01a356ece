/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_SPINLOCK_H
#define SD_CORE_SPINLOCK_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/spinlock.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "backoff.h"
#include "futex.h"

/*
 * The stand-in for the kernel's raw spinlocks (cpu_asid_lock, the DVM
 * interconnect): test-and-test-and-set while it spins and yields, so the
 * cache-line traffic being measured is the real thing, then parked on a
 * futex (the three-state lock of Drepper's "Futexes Are Tricky") so that a
 * preempted holder on an oversubscribed PU is not starved by its waiters
 * (invariant 6 (docs/invariants.md)). Hand-written because a pthread mutex hides the
 * spinning phase and neither hwloc nor liburcu offers a lock.
 *
 * States: 0 free, 1 held, 2 held and someone may be parked.
 */
struct sd_spinlock {
	SD_ATOMIC(int) state;
};

static inline void sd_spin_init(struct sd_spinlock *l)
{
	atomic_init(&l->state, 0);
}

static inline bool sd_spin_trylock(struct sd_spinlock *l)
{
	int free = 0;

	return !atomic_load_explicit(&l->state, memory_order_relaxed) &&
	       atomic_compare_exchange_strong_explicit(&l->state, &free, 1, memory_order_acquire,
						       memory_order_relaxed);
}

void sd_spin_lock_slow(struct sd_spinlock *l);

static inline void sd_spin_lock(struct sd_spinlock *l)
{
	if (likely(sd_spin_trylock(l)))
		return;
	sd_spin_lock_slow(l);
}

static inline void sd_spin_unlock(struct sd_spinlock *l)
{
	if (unlikely(atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2))
		sd_futex_wake(&l->state, 1);
	sd_wait_released();     /* a waiter parked by sd_wait_hook looks again */
}

#endif
