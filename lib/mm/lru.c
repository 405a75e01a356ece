/* SPDX-License-Identifier: MIT */
/*
 * The LRU lists and their lock (mm/swap.c), as far as the frees of a
 * mapping change need them: a populated page joins its CPU's lru_add batch
 * (folio_add_lru()), which is moved onto the LRU under the lruvec lock when
 * it fills or is drained (folio_batch_move_lru()); a freed page leaves the
 * LRU under that lock (release_pages(), folios_put_refs()), or, if it is
 * still in its CPU's batch, when the batch is drained (the batch holds a
 * reference, so its final put comes then). The machine's lru setting says
 * which kernel this is:
 *
 *   SD_LRU_GLOBAL  before the INVLPGB series' companion patch ("mm: remove
 *                  unnecessary calls to lru_add_drain", van Riel, 2024):
 *                  free_pages_and_swap_cache() drains the CPU's batch
 *                  before every free, so each change that frees pages takes
 *                  the lock twice (the drain, then the release);
 *   SD_LRU_PERCPU  after it: the batch drains when full, and the pages
 *                  freed while in it leave the LRU in the same drain.
 *
 * The lists themselves are not kept: only the lock, the folios handled
 * under it (lru_lock_pages) and, in modelled time, the cost of each hold.
 * The frames go back to the allocator at once either way.
 */
#include "../core/spinlock.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "lru.h"

/*
 * PAGEVEC_SIZE, the folio_batch's capacity: 31 since Matthew Wilcox's
 * "increase PAGEVEC_SIZE from 15 to 31" (2024, after the will-it-scale
 * regression of "mm: make folios_put() the basis of release_pages()").
 */
#define SD_LRU_ADD_BATCH 31u

/* One hold of the lruvec lock for @n folios added to or removed from the
 * LRU (each an LRU_LOCKED_OPS unit: lruvec_add_folio()/lruvec_del_folio()). */
static void lru_hold(struct sd_cpu *c, unsigned n)
{
	struct sd_machine *m = c->m;

	sd_event_spin_lock(c, &m->lru_lock, SD_LOCK_LRU);
	/* Written under the lock, so a lost count would be a missing lock. */
	m->lru_pages += n;
	sd_event(c, SD_EV_LRU_LOCKED_OPS, n, 0);
	sd_event_spin_unlock(c, &m->lru_lock, SD_LOCK_LRU);
}

/* lru_add_drain() of @c's own batch: the adds, then the final puts of the
 * folios freed while they waited in it. */
static void lru_drain(struct sd_cpu *c)
{
	if (c->lru_add_pending)
		lru_hold(c, c->lru_add_pending);
	if (c->lru_free_pending)
		lru_hold(c, c->lru_free_pending);
	c->lru_add_pending = 0;
	c->lru_free_pending = 0;
}

void sd_lru_add(struct sd_cpu *c)
{
	if (++c->lru_add_pending == SD_LRU_ADD_BATCH)
		lru_drain(c);
}

void sd_lru_free(struct sd_cpu *c, size_t n)
{
	size_t in_batch = 0;

	if (!n)
		return;
	if (c->m->cfg.lru == SD_LRU_GLOBAL) {
		/* free_pages_and_swap_cache()'s lru_add_drain(). */
		lru_drain(c);
	} else {
		/* The most recent populations are the ones still in the
		 * batch; a freed page among them leaves the LRU at the drain. */
		size_t waiting = c->lru_add_pending - c->lru_free_pending;
		in_batch = n < waiting ? n : waiting;
		c->lru_free_pending += (unsigned)in_batch;
	}
	if (n > in_batch)
		lru_hold(c, (unsigned)(n - in_batch));
}
