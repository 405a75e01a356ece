/* SPDX-License-Identifier: MIT */
#include <limits.h>

#include "futex.h"
#include "rwsem.h"

void sd_rwsem_init(struct sd_rwsem *s)
{
	atomic_init(&s->count, 0);
	atomic_init(&s->writers_waiting, 0);
	atomic_init(&s->wake_seq, 0);
	atomic_init(&s->parked, 0);
}

/*
 * A release bumps @wake_seq, then reads @parked; a waiter increments
 * @parked, then parks only while @wake_seq is what it read before its
 * last failed try. Both pairs are seq_cst, so either the release sees the
 * waiter parked and wakes it, or the waiter's futex sees the new @wake_seq
 * and returns (the store-buffering pattern, Dekker's).
 */
void sd_rwsem_wake(struct sd_rwsem *s)
{
	atomic_fetch_add(&s->wake_seq, 1);
	if (atomic_load(&s->parked))
		sd_futex_wake(&s->wake_seq, INT_MAX);
	sd_wait_released();     /* a waiter parked by sd_wait_hook looks again */
}

static bool try_as(struct sd_rwsem *s, bool write)
{
	return write ? sd_rwsem_trylock_write(s) : sd_rwsem_trylock_read(s);
}

void sd_rwsem_lock_slow(struct sd_rwsem *s, bool write)
{
	struct sd_backoff b = SD_BACKOFF_INIT;

	/* Announced before the tries: readers that come later queue behind. */
	if (write)
		atomic_fetch_add(&s->writers_waiting, 1);
	for (;;) {
		int seq = atomic_load(&s->wake_seq);

		if (try_as(s, write))
			break;
		/* Spin and yield; in strict modelled time the wait hook inside
		 * (core/backoff.h) lets the parked holder run instead and parks
		 * us until a release, without counting towards the futex park. */
		if (b.n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS) {
			sd_backoff_wait(&b);
			continue;
		}
		atomic_fetch_add(&s->parked, 1);
		sd_futex_wait(&s->wake_seq, seq);
		atomic_fetch_sub(&s->parked, 1);
	}
	if (write)
		atomic_fetch_sub(&s->writers_waiting, 1);
}
