/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_RWSEM_H
#define SD_CORE_RWSEM_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/rwsem.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "backoff.h"

/*
 * The stand-in for the kernel's rw_semaphore (an mm's mmap_lock): readers
 * share it, a writer excludes everyone, a reader that comes while a writer
 * waits queues behind it (so a stream of faults cannot starve mprotect),
 * and a writer can downgrade to a read hold without a gap another writer
 * could take (mmap_write_downgrade(): munmap flushes under the read hold
 * that follows). Hand-written because a pthread rwlock cannot downgrade and
 * neither liburcu nor hwloc offers a reader-writer lock.
 *
 * @count: readers in the low bits, SD_RWSEM_WRITER when a writer holds it.
 * @writers_waiting: writers in the slow path; readers stay out while any.
 * @wake_seq: bumped at every release; the parked waiters' futex word.
 * @parked: waiters on that futex (a release skips the wake without any).
 *
 * A waiter polls the strict-mode wait hook first (core/backoff.h), then
 * spins, yields and parks; a signal (an IPI) interrupts the park, its
 * handler runs, and the wait goes on, as a task in down_read() takes
 * interrupts.
 */
#define SD_RWSEM_WRITER (1 << 30)

struct sd_rwsem {
	SD_ATOMIC(int) count;
	SD_ATOMIC(int) writers_waiting;
	SD_ATOMIC(int) wake_seq;
	SD_ATOMIC(int) parked;
};

void sd_rwsem_init(struct sd_rwsem *s);

static inline bool sd_rwsem_trylock_read(struct sd_rwsem *s)
{
	int c = atomic_load_explicit(&s->count, memory_order_relaxed);

	/* The writers_waiting read may be stale: a reader that slips in
	 * just before a writer announces itself is one the writer waits for,
	 * as a reader that got in first. */
	if ((c & SD_RWSEM_WRITER) || atomic_load_explicit(&s->writers_waiting, memory_order_relaxed))
		return false;
	/* Acquire: pairs with the release of the last writer's unlock. */
	return atomic_compare_exchange_strong_explicit(&s->count, &c, c + 1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline bool sd_rwsem_trylock_write(struct sd_rwsem *s)
{
	int free = 0;

	/* Acquire: pairs with the release of every reader's and writer's
	 * unlock before it. */
	return !atomic_load_explicit(&s->count, memory_order_relaxed) &&
	       atomic_compare_exchange_strong_explicit(&s->count, &free, SD_RWSEM_WRITER,
						       memory_order_acquire, memory_order_relaxed);
}

void sd_rwsem_lock_slow(struct sd_rwsem *s, bool write);
/* Let the waiters look again (every release and the downgrade). */
void sd_rwsem_wake(struct sd_rwsem *s);

static inline void sd_rwsem_down_read(struct sd_rwsem *s)
{
	if (!sd_rwsem_trylock_read(s))
		sd_rwsem_lock_slow(s, false);
}

static inline void sd_rwsem_down_write(struct sd_rwsem *s)
{
	if (!sd_rwsem_trylock_write(s))
		sd_rwsem_lock_slow(s, true);
}

static inline void sd_rwsem_up_read(struct sd_rwsem *s)
{
	atomic_fetch_sub_explicit(&s->count, 1, memory_order_release);
	sd_rwsem_wake(s);
}

static inline void sd_rwsem_up_write(struct sd_rwsem *s)
{
	atomic_fetch_sub_explicit(&s->count, SD_RWSEM_WRITER, memory_order_release);
	sd_rwsem_wake(s);
}

/* A write hold becomes one read hold in one step: no writer can come
 * between. Release: the writer's stores are seen by the readers it lets
 * in (their trylock's acquire). */
static inline void sd_rwsem_downgrade(struct sd_rwsem *s)
{
	atomic_fetch_add_explicit(&s->count, 1 - SD_RWSEM_WRITER, memory_order_release);
	sd_rwsem_wake(s);
}

#endif
