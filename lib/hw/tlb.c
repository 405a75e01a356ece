/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "tlb.h"

/*
 * A range is cleared page by page (one L1 slot and one L2 set each, ~10 ns)
 * up to this many pages, and by one scan of the whole TLB (2112 entries by
 * default, a few microseconds) beyond: a range op costs each target at most
 * one scan, never one per page, whichever is cheaper for the software TLB.
 */
#define SD_TLB_RANGE_PER_PAGE_MAX 128

size_t sd_tlb_storage_size(unsigned l1_entries, unsigned sets, unsigned ways)
{
	size_t entries = (size_t)l1_entries + (size_t)sets * ways;

	return entries * sizeof(struct sd_tlb_entry) + entries * sizeof(uint32_t) + sets;
}

void sd_tlb_init(struct sd_tlb *tlb, void *storage, unsigned l1_entries,
		 unsigned sets, unsigned ways)
{
	char *p = storage;
	size_t l2_entries = (size_t)sets * ways;

	memset(storage, 0, sd_tlb_storage_size(l1_entries, sets, ways));
	atomic_init(&tlb->seq, 0);
	tlb->l1 = (struct sd_tlb_entry *)p;
	p += l1_entries * sizeof(struct sd_tlb_entry);
	tlb->l2 = (struct sd_tlb_entry *)p;
	p += l2_entries * sizeof(struct sd_tlb_entry);
	tlb->l1_owner = (uint32_t *)p;
	p += l1_entries * sizeof(uint32_t);
	tlb->l2_owner = (uint32_t *)p;
	p += l2_entries * sizeof(uint32_t);
	tlb->rr = (uint8_t *)p;
	tlb->l1_mask = l1_entries - 1;
	tlb->set_mask = sets - 1;
	tlb->ways = ways;
	tlb->ways_shift = sd_ilog2(ways);
	for (unsigned i = 0; i < SD_TLB_WC_ENTRIES; i++) {
		atomic_init(&tlb->wc[i].tag, 0);
		atomic_init(&tlb->wc[i].leaf, NULL);
		tlb->wc[i].table_gen = 0;
	}
}

static inline struct sd_tlb_entry *set_of(struct sd_tlb *tlb, uint64_t vpn)
{
	return &tlb->l2[(vpn & tlb->set_mask) << tlb->ways_shift];
}

static inline void entry_write(struct sd_tlb_entry *e, uint64_t tag, uint64_t pte)
{
	/* Tag last: an invalidator that sees the tag compares it only, and the
	 * owner is the only reader of pte. */
	atomic_store_explicit(&e->tag, 0, memory_order_relaxed);
	atomic_store_explicit(&e->pte, pte, memory_order_relaxed);
	atomic_store_explicit(&e->tag, tag, memory_order_relaxed);
}

/* Pairs with the fence after the sequence bump in sd_tlb_invalidate(). */
static inline bool seq_unchanged_after_insert(struct sd_tlb *tlb, uint64_t snap)
{
	sd_smp_mb();
	return atomic_load_explicit(&tlb->seq, memory_order_relaxed) == snap;
}

bool sd_tlb_lookup_l2(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid, bool checked,
		      struct sd_tlb_hit *hit)
{
	uint64_t tag = sd_tlb_tag(vpn, asid);
	struct sd_tlb_entry *set = set_of(tlb, vpn);
	uint64_t snap = sd_tlb_fill_begin(tlb);

	for (unsigned w = 0; w < tlb->ways; w++) {
		if (atomic_load_explicit(&set[w].tag, memory_order_relaxed) != tag)
			continue;
		uint64_t pte = atomic_load_explicit(&set[w].pte, memory_order_relaxed);
		size_t l2i = (size_t)(set - tlb->l2) + w;
		uint64_t idx = vpn & tlb->l1_mask;

		hit->pte = pte;
		hit->owner = checked ? tlb->l2_owner[l2i] : 0;
		hit->l1 = false;
		/* Promotion is a fill of L1: the same sequence guard applies,
		 * or an invalidation that already passed L1 would miss the copy. */
		entry_write(&tlb->l1[idx], tag, pte);
		if (checked)
			tlb->l1_owner[idx] = hit->owner;
		/*
		 * The source is L2, which an invalidation that began before our
		 * snapshot may still be clearing, so the sequence alone cannot
		 * tell. The invalidator clears L2, fences, then clears L1; we
		 * write L1, fence, then re-read the L2 tag: either we see it
		 * gone and withdraw the copy, or its L1 pass sees our copy.
		 */
		if (!seq_unchanged_after_insert(tlb, snap) ||
		    atomic_load_explicit(&set[w].tag, memory_order_relaxed) != tag)
			atomic_store_explicit(&tlb->l1[idx].tag, 0, memory_order_relaxed);
		return true;
	}
	return false;
}

bool sd_tlb_fill_commit_gen(struct sd_tlb *tlb, uint64_t snap, uint64_t vpn, uint16_t asid,
			    uint64_t pte, uint32_t owner, void *leaf, uint64_t table_gen)
{
	uint64_t tag = sd_tlb_tag(vpn, asid);
	uint64_t set_idx = vpn & tlb->set_mask;
	struct sd_tlb_entry *set = set_of(tlb, vpn);
	unsigned way = tlb->rr[set_idx]++ & (tlb->ways - 1);
	uint64_t l1i = vpn & tlb->l1_mask;
	struct sd_walk_cache_entry *w = &tlb->wc[(vpn >> 9) % SD_TLB_WC_ENTRIES];

	entry_write(&set[way], tag, pte);
	entry_write(&tlb->l1[l1i], tag, pte);
	tlb->l2_owner[(set_idx << tlb->ways_shift) + way] = owner;
	tlb->l1_owner[l1i] = owner;
	if (leaf) {
		atomic_store_explicit(&w->tag, 0, memory_order_relaxed);
		atomic_store_explicit(&w->leaf, leaf, memory_order_relaxed);
		w->table_gen = table_gen;
		atomic_store_explicit(&w->tag, sd_tlb_tag(vpn >> 9, asid), memory_order_relaxed);
	}
	if (likely(seq_unchanged_after_insert(tlb, snap)))
		return true;
	atomic_store_explicit(&set[way].tag, 0, memory_order_relaxed);
	atomic_store_explicit(&tlb->l1[l1i].tag, 0, memory_order_relaxed);
	if (leaf)
		atomic_store_explicit(&w->tag, 0, memory_order_relaxed);
	return false;
}

static inline bool clear_if(SD_ATOMIC(uint64_t) *tagp, uint64_t want)
{
	if (atomic_load_explicit(tagp, memory_order_relaxed) != want)
		return false;
	/* A plain store: if the owner refilled the slot since our load we drop
	 * a valid entry, which a TLB may always do. */
	atomic_store_explicit(tagp, 0, memory_order_relaxed);
	return true;
}

static bool tag_matches(const struct sd_tlb_inval *req, uint64_t tag, unsigned vpn_shift)
{
	if (!tag)
		return false;
	if (req->kind == SD_TLB_INVAL_ALL)
		return true;
	if (sd_tlb_tag_asid(tag) != req->asid)
		return false;
	if (req->kind == SD_TLB_INVAL_ASID)
		return true;
	uint64_t first = req->vpn >> vpn_shift;
	uint64_t last = (req->vpn + req->nr - 1) >> vpn_shift;
	uint64_t v = sd_tlb_tag_vpn(tag);
	return v >= first && v <= last;
}

static unsigned scan_entries(struct sd_tlb_entry *e, size_t n, const struct sd_tlb_inval *req)
{
	unsigned removed = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t tag = atomic_load_explicit(&e[i].tag, memory_order_relaxed);
		if (tag_matches(req, tag, 0))
			removed += clear_if(&e[i].tag, tag);
	}
	return removed;
}

static void scan_walk_cache(struct sd_tlb *tlb, const struct sd_tlb_inval *req)
{
	for (unsigned i = 0; i < SD_TLB_WC_ENTRIES; i++) {
		uint64_t tag = atomic_load_explicit(&tlb->wc[i].tag, memory_order_relaxed);
		if (tag_matches(req, tag, 9))
			clear_if(&tlb->wc[i].tag, tag);
	}
}

static unsigned clear_page_l2(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid)
{
	uint64_t tag = sd_tlb_tag(vpn, asid);
	struct sd_tlb_entry *set = set_of(tlb, vpn);
	unsigned removed = 0;

	for (unsigned w = 0; w < tlb->ways; w++)
		removed += clear_if(&set[w].tag, tag);
	return removed;
}

static unsigned clear_page_l1(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid)
{
	return clear_if(&tlb->l1[vpn & tlb->l1_mask].tag, sd_tlb_tag(vpn, asid));
}

unsigned sd_tlb_invalidate(struct sd_tlb *tlb, const struct sd_tlb_inval *req)
{
	bool per_page = req->kind == SD_TLB_INVAL_RANGE && req->nr <= SD_TLB_RANGE_PER_PAGE_MAX;
	unsigned removed = 0;

	/* Bump first, then clear: see the diagram in tlb.h. The fence pairs
	 * with the one in seq_unchanged_after_insert(). */
	atomic_fetch_add_explicit(&tlb->seq, 1, memory_order_seq_cst);
	sd_smp_mb();

	/* L2 before L1, with a fence between: pairs with the fence in an
	 * L2-to-L1 promotion (sd_tlb_lookup_l2), which re-reads the L2 tag. */
	if (per_page) {
		for (uint64_t i = 0; i < req->nr; i++)
			removed += clear_page_l2(tlb, req->vpn + i, req->asid);
	} else {
		removed += scan_entries(tlb->l2, (tlb->set_mask + 1) << tlb->ways_shift, req);
	}
	sd_smp_mb();
	if (per_page) {
		for (uint64_t i = 0; i < req->nr; i++)
			removed += clear_page_l1(tlb, req->vpn + i, req->asid);
	} else {
		removed += scan_entries(tlb->l1, tlb->l1_mask + 1, req);
	}
	if (!(req->kind == SD_TLB_INVAL_RANGE && req->leaf_only))
		scan_walk_cache(tlb, req);
	return removed;
}

void sd_tlb_drop(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid)
{
	clear_page_l2(tlb, vpn, asid);
	clear_page_l1(tlb, vpn, asid);
}
