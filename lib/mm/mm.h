/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_MM_H
#define SD_MM_MM_H

#include <pthread.h>

#include <shootdown/mm.h>

#include "../core/compiler.h"
#include "../oracle/oracle.h"
#include "pgtable.h"

struct sd_machine;

struct sd_mm {
	struct sd_machine *m;
	uint64_t id;
	struct sd_pt *pgd;
	/* Serialises PTE edits (mmap_lock and the page-table lock in one).
	 * Flushes run after it is dropped, so flushes of one mm overlap as
	 * they do under the kernel's read-held mmap_lock. */
	pthread_mutex_t lock;
	void *strategy;                /* the strategy's per-mm state */
	struct sd_oracle_floor floor;  /* checked mode only */
	/* TLB batches that owe this mm a flush (mm->tlb_flush_batched). */
	sd_cacheline_aligned SD_ATOMIC(unsigned) batch_pending;
};

struct sd_cpu;

/* Free reclaimed frames after their flush, through the LRU lock when the
 * machine models a global one (lru=global). */
void sd_mm_free_frames(struct sd_cpu *c, const uint64_t *pfns, size_t n);

#endif
