/* SPDX-License-Identifier: MIT */
/*
 * Page reclaim's unmap with a deferred flush (mm/rmap.c's try_to_unmap()
 * under TTU_BATCH_FLUSH, as shrink_folio_list() calls it): the zap is the
 * mm's, the flush is the batch's (tlbbatch.c).
 */
#include <pthread.h>
#include <stdlib.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/machine_state.h"
#include "mm.h"
#include "flush_ops.h"
#include "tlbbatch.h"

/* What a reclaim hands to its batch. try_to_unmap() with TTU_BATCH_FLUSH:
 * the zap of sd_madvise_dontneed(), but the flush, the frees and the floors
 * all wait for sd_tlbbatch_flush(). */
struct reclaim {
	struct sd_cpu *cpu;
	struct sd_tlbbatch *batch;
	struct sd_mm *mm;
	uint32_t version;
	bool checked;
	bool zapped;
	/* Checked mode: the runs of the range whose floors the reclaim may
	 * raise, the range less the zero page's PTEs it left (their cached
	 * entries are as new as those PTEs); floors_lost on -ENOMEM. */
	struct floor_run { uint64_t vpn, nr; } *runs;
	size_t nr_runs, cap_runs;
	uint64_t run_start, end;
	bool floors_lost;
};

static void add_run(struct reclaim *r, uint64_t vpn, uint64_t nr)
{
	if (!nr || r->floors_lost)
		return;
	if (r->nr_runs == r->cap_runs) {
		size_t cap = r->cap_runs ? 2 * r->cap_runs : 4;
		struct floor_run *v = realloc(r->runs, cap * sizeof(*v));

		if (!v) {
			r->floors_lost = true;
			return;
		}
		r->runs = v;
		r->cap_runs = cap;
	}
	r->runs[r->nr_runs++] = (struct floor_run){ vpn, nr };
}

/* A zero-page PTE left in place (reclaim takes folios off the LRU; the
 * zero page is on none): the run before it ends there. */
static void reclaim_kept_zero(void *arg, uint64_t vpn)
{
	struct reclaim *r = arg;

	if (r->checked) {
		add_run(r, r->run_start, vpn - r->run_start);
		r->run_start = vpn + 1;
	}
}

/* Out of memory for a run: a missed check, never a false alarm. */
static void raise_runs(struct reclaim *r, struct sd_tlbbatch *hold)
{
	add_run(r, r->run_start, r->end - r->run_start);
	for (size_t i = 0; i < r->nr_runs && !r->floors_lost; i++) {
		if (hold)
			(void)sd_tlbbatch_hold_floor(hold, r->mm, r->runs[i].vpn, r->runs[i].nr,
						     r->version);
		else
			sd_oracle_floor_raise_known(&r->mm->floor, r->runs[i].vpn, r->runs[i].nr,
						    r->version);
	}
	free(r->runs);
}

/*
 * Under the split lock of @vpn's table, after its PTE was cleared: note the
 * mm in the batch (set_tlb_ubc_flush_pending()) for every zap, as the
 * kernel does per PTE. The first note counts the mm in batch_pending, so a
 * change that edits the table after us sees the flush owed
 * (flush_tlb_batched_pending()); every note gathers the CPUs that run the
 * mm now into the batch (arch_tlbbatch_add_pending()), so a CPU that
 * switched in after an earlier zap and cached this page is flushed too
 * (test_tlbbatch, CpuThatJoinsMidReclaimIsInTheBatchFlush).
 */
static void reclaim_zapped(void *arg, uint64_t vpn, uint64_t pfn)
{
	struct reclaim *r = arg;

	/* Room was reserved, and an mm already noted needs none. */
	(void)sd_tlbbatch_note(r->cpu, r->batch, r->mm, vpn);
	r->zapped = true;
	/* Out of memory: leak the frame (see gather_page). */
	(void)sd_tlbbatch_hold_frame(r->batch, pfn);
}

int sd_reclaim(struct sd_cpu *c, struct sd_tlbbatch *b, struct sd_mm *mm, uint64_t va,
	       uint64_t len)
{
	struct reclaim r = { .cpu = c, .batch = b, .mm = mm, .run_start = va >> SD_PAGE_SHIFT,
			     .end = (va + len) >> SD_PAGE_SHIFT };
	int err = sd_mm_check_change(c, mm, va, len, "sd_reclaim");

	if (err)
		return err;
	r.checked = c->checked;
	if (!b || b->m != c->m)
		return sd_fail(-EINVAL, "sd_reclaim: batch is NULL or belongs to another machine");
	/* Room first, so that noting the mm under a split lock cannot fail. */
	if (sd_tlbbatch_reserve(b))
		return sd_fail(-ENOMEM, "sd_reclaim: out of memory");
	/* The kernel's rmap walk takes no mmap_lock; ours takes it for read
	 * (charged as a fault's per-VMA lock) so that no unmap frees the
	 * tables under it. */
	sd_mmap_lock(c, mm, SD_LOCK_MM_VMA);
	r.version = sd_mm_change_version(mm);
	sd_mm_zap_present(c, mm, va >> SD_PAGE_SHIFT, len >> SD_PAGE_SHIFT, r.version, NULL,
			  reclaim_kept_zero, reclaim_zapped, &r);
	/* Test instrumentation: a change of the zapped table from here on
	 * must find the flush owed (test_nested_flush). */
	sd_order_point(SD_ORDER_RECLAIM_ZAPPED, c->id);
	/* Nested (mm_tlb_flush_nested(), and another batch's pending flush):
	 * pages we found already zapped may still be cached, so our batch
	 * must flush this mm too even if we zapped nothing. */
	bool nested = atomic_load_explicit(&mm->flush_pending, memory_order_acquire) ||
		      atomic_load_explicit(&mm->batch_pending, memory_order_acquire);
	bool noted = r.zapped || nested;
	if (noted) {
		if (!r.zapped)
			(void)sd_tlbbatch_note(c, b, mm, SD_BATCH_NO_VPN);
		/* Out of memory: a missed check, never a false alarm. */
		if (r.checked)
			raise_runs(&r, b);
	}
	sd_mmap_unlock(c, mm, SD_LOCK_MM_VMA);
	/* Nothing zapped, no flush in flight: our part is done already. */
	if (!noted && r.checked)
		raise_runs(&r, NULL);
	sd_cpu_qs(c);
	return 0;
}
