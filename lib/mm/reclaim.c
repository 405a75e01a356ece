/* SPDX-License-Identifier: MIT */
/*
 * Page reclaim's unmap with a deferred flush (mm/rmap.c's try_to_unmap()
 * under TTU_BATCH_FLUSH, as shrink_folio_list() calls it): the zap is the
 * mm's, the flush is the batch's (tlbbatch.c).
 */
#include <pthread.h>

#include "../core/error.h"
#include "../hw/machine.h"
#include "mm.h"
#include "tlbbatch.h"

/* What a reclaim hands to its batch. try_to_unmap() with TTU_BATCH_FLUSH:
 * the zap of sd_madvise_dontneed(), but the flush, the frees and the floors
 * all wait for sd_tlbbatch_flush(). */
struct reclaim {
	struct sd_tlbbatch *batch;
	struct sd_mm *mm;
	uint32_t version;
	bool checked;
	bool zapped;
};

static void reclaim_zapped(void *arg, uint64_t vpn, uint64_t pfn)
{
	struct reclaim *r = arg;

	(void)vpn;
	r->zapped = true;
	/* Out of memory: leak the frame (see gather_page). */
	(void)sd_tlbbatch_hold_frame(r->batch, pfn);
}

int sd_reclaim(struct sd_cpu *c, struct sd_tlbbatch *b, struct sd_mm *mm, uint64_t va,
	       uint64_t len)
{
	struct reclaim r = { .batch = b, .mm = mm };
	int err = sd_mm_check_change(c, mm, va, len, "sd_reclaim");

	if (err)
		return err;
	r.checked = c->checked;
	if (!b || b->m != c->m)
		return sd_fail(-EINVAL, "sd_reclaim: batch is NULL or belongs to another machine");
	/* Room first, so that noting the mm after the zap cannot fail. */
	if (sd_tlbbatch_reserve(b))
		return sd_fail(-ENOMEM, "sd_reclaim: out of memory");
	sd_mm_lock(c, mm);
	r.version = sd_mm_change_version(mm);
	sd_mm_zap_present(mm, va >> SD_PAGE_SHIFT, len >> SD_PAGE_SHIFT, r.version, reclaim_zapped, &r);
	/* Nested (mm_tlb_flush_nested(), and another batch's pending flush):
	 * pages we found already zapped may still be cached, so our batch
	 * must flush this mm too even if we zapped nothing. */
	bool nested = atomic_load_explicit(&mm->flush_pending, memory_order_acquire) ||
		      atomic_load_explicit(&mm->batch_pending, memory_order_acquire);
	/* Noted before unlocking: the next change of this mm sees it owed. */
	bool noted = r.zapped || nested;
	if (noted) {
		(void)sd_tlbbatch_note(c, b, mm);
		/* Out of memory: a missed check, never a false alarm. */
		if (r.checked)
			(void)sd_tlbbatch_hold_floor(b, mm, va >> SD_PAGE_SHIFT,
						     len >> SD_PAGE_SHIFT, r.version);
	}
	sd_mm_unlock(c, mm);
	/* Nothing zapped, no flush in flight: our part is done already. */
	if (!noted && r.checked)
		sd_oracle_floor_raise_known(&mm->floor, va >> SD_PAGE_SHIFT, len >> SD_PAGE_SHIFT,
					    r.version);
	sd_cpu_qs(c);
	return 0;
}
