/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_TLB_H
#define SD_HW_TLB_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/tlb.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "pte.h"

/*
 * The per-CPU software TLB.
 *
 * Geometry: a direct-mapped L1 (64 entries by default) in front of a
 * set-associative L2 (256 sets x 8 ways = 2048 entries by default, about a
 * modern L2 TLB), plus a 16-entry walk cache of leaf page-table pointers
 * (the paging-structure cache). A hit in L1 costs one probe; on an L2 hit the
 * entry is promoted into L1. Replacement: L2 is round-robin per set (a
 * private cursor, like QEMU's victim rotation); L1 and the walk cache are
 * overwritten in place. Every invalidation reaches all three structures.
 *
 * Tags are vpn << 17 | asid << 1 | 1, so 0 is never a valid tag and a
 * remote invalidator clears an entry by storing 0 in its tag.
 *
 * Concurrency: only the owning CPU fills and looks up; any CPU may
 * invalidate (a broadcast writes straight into remote TLBs). The walk-then-
 * fill race (invariant 2 (docs/invariants.md)) is closed with the per-TLB invalidation
 * sequence @seq, on its own cache line:
 *
 *   invalidator                        owner (fill)
 *   PTE store (before the flush)       s = load_acquire(seq)
 *   RMW seq++        ----- A           walk: load PTE
 *   fence(seq_cst)                     store entry (tag last)
 *   load/clear tags  ----- B           fence(seq_cst)           ----- C
 *                                      if (load(seq) != s) clear entry
 *
 * A and C are the two halves of a store-buffering pair: either the owner's
 * re-check sees the bump, and drops what it inserted, or the invalidator's
 * tag loads (B) see the new entry and clear it. Bumping after the clearing
 * instead would let a fill that read the old PTE land between the two.
 *
 * An L2 hit promoted into L1 is a fill whose source (L2) the invalidation
 * may still be clearing after the bump, so the sequence cannot see it. The
 * invalidator clears L2, fences, then clears L1; the promotion writes L1,
 * fences, then re-reads the L2 tag and withdraws the copy if it is gone.
 * No lock is taken on the lookup or fill path.
 */
#define SD_TLB_WC_ENTRIES 16

struct sd_tlb_entry {
	SD_ATOMIC(uint64_t) tag;
	SD_ATOMIC(uint64_t) pte;
};

struct sd_walk_cache_entry {
	SD_ATOMIC(uint64_t) tag;          /* (vpn >> 9) << 17 | asid << 1 | 1 */
	SD_ATOMIC(void *) leaf;          /* leaf table for that 2 MiB region */
	/* The mm's table-free generation the filling walk read first (owner
	 * only): a lookup under a newer one misses, so a table unlinked since
	 * is never walked again, whatever the flushes did (see mm.h). */
	uint64_t table_gen;
};

struct sd_tlb {
	/* Written by every invalidator, read by the owner at each fill. */
	sd_cacheline_aligned SD_ATOMIC(uint64_t) seq;

	/* Owner-private from here on (invalidators only read/clear tags). */
	sd_cacheline_aligned struct sd_tlb_entry *l1;
	struct sd_tlb_entry *l2;
	uint32_t *l1_owner;            /* checked mode: mm id per entry */
	uint32_t *l2_owner;
	uint8_t *rr;                   /* per-set round-robin cursor */
	uint64_t l1_mask;
	uint64_t set_mask;
	unsigned ways;
	unsigned ways_shift;
	struct sd_walk_cache_entry wc[SD_TLB_WC_ENTRIES];
};

/* What an invalidation covers. */
enum sd_tlb_inval_kind {
	SD_TLB_INVAL_ALL,      /* every entry (vmalle1) */
	SD_TLB_INVAL_ASID,     /* every entry of one ASID (aside1) */
	SD_TLB_INVAL_RANGE,    /* [vpn, vpn + nr) of one ASID (vae1 / vale1 / range op) */
};

struct sd_tlb_inval {
	enum sd_tlb_inval_kind kind;
	uint16_t asid;
	bool leaf_only;        /* keep walk-cache entries (no table was freed) */
	uint64_t vpn;
	uint64_t nr;
};

/* Bytes of entry storage a TLB of this geometry needs after its struct. */
size_t sd_tlb_storage_size(unsigned l1_entries, unsigned sets, unsigned ways);

/* Carve the arrays out of @storage (sd_tlb_storage_size bytes, line aligned). */
void sd_tlb_init(struct sd_tlb *tlb, void *storage, unsigned l1_entries,
		 unsigned sets, unsigned ways);

static inline uint64_t sd_tlb_tag(uint64_t vpn, uint16_t asid)
{
	return vpn << 17 | (uint64_t)asid << 1 | 1;
}

static inline uint16_t sd_tlb_tag_asid(uint64_t tag)
{
	return (uint16_t)(tag >> 1);
}

static inline uint64_t sd_tlb_tag_vpn(uint64_t tag)
{
	return tag >> 17;
}

/* Result of a lookup: the payload and where it was found. */
struct sd_tlb_hit {
	uint64_t pte;          /* 0 on miss */
	uint32_t owner;        /* checked mode */
	bool l1;
};

/*
 * Owner only. Look (@vpn, @asid) up; on an L2 hit promote into L1 (guarded by
 * the sequence like a fill). @checked copies the owner arrays too.
 */
static inline bool sd_tlb_lookup_l1(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid,
				    bool checked, struct sd_tlb_hit *hit)
{
	uint64_t idx = vpn & tlb->l1_mask;
	struct sd_tlb_entry *e = &tlb->l1[idx];

	if (atomic_load_explicit(&e->tag, memory_order_relaxed) != sd_tlb_tag(vpn, asid))
		return false;
	hit->pte = atomic_load_explicit(&e->pte, memory_order_relaxed);
	hit->owner = checked ? tlb->l1_owner[idx] : 0;
	hit->l1 = true;
	return true;
}

bool sd_tlb_lookup_l2(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid, bool checked,
		      struct sd_tlb_hit *hit);

/* Owner only: start a fill; pass the result to sd_tlb_fill_commit(). */
static inline uint64_t sd_tlb_fill_begin(struct sd_tlb *tlb)
{
	return atomic_load_explicit(&tlb->seq, memory_order_acquire);
}

/*
 * Owner only, interrupts off. Insert the translation read by a walk that
 * started at @snap, and the leaf table the walk went through (NULL for none)
 * under table-free generation @table_gen (read before the walk began).
 * Return: false if an invalidation ran meanwhile; nothing stays inserted then.
 */
bool sd_tlb_fill_commit_gen(struct sd_tlb *tlb, uint64_t snap, uint64_t vpn, uint16_t asid,
			    uint64_t pte, uint32_t owner, void *leaf, uint64_t table_gen);

/* sd_tlb_fill_commit_gen() for a table that is never freed (generation 0). */
static inline bool sd_tlb_fill_commit(struct sd_tlb *tlb, uint64_t snap, uint64_t vpn,
				      uint16_t asid, uint64_t pte, uint32_t owner, void *leaf)
{
	return sd_tlb_fill_commit_gen(tlb, snap, vpn, asid, pte, owner, leaf, 0);
}

/*
 * Owner only: the cached leaf table for (@vpn, @asid), or NULL; also NULL
 * when the entry was filled under an older table-free generation than
 * @table_gen, as its table may have been unlinked (and freed) since.
 */
static inline void *sd_tlb_walk_cache_lookup_gen(struct sd_tlb *tlb, uint64_t vpn,
						 uint16_t asid, uint64_t table_gen)
{
	struct sd_walk_cache_entry *w = &tlb->wc[(vpn >> 9) % SD_TLB_WC_ENTRIES];

	if (atomic_load_explicit(&w->tag, memory_order_relaxed) != sd_tlb_tag(vpn >> 9, asid) ||
	    w->table_gen != table_gen)
		return NULL;
	return atomic_load_explicit(&w->leaf, memory_order_relaxed);
}

static inline void *sd_tlb_walk_cache_lookup(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid)
{
	return sd_tlb_walk_cache_lookup_gen(tlb, vpn, asid, 0);
}

/*
 * Any CPU. Invalidate what @req covers in @tlb, bumping the sequence first.
 * Return: entries removed (for counters and tests).
 */
unsigned sd_tlb_invalidate(struct sd_tlb *tlb, const struct sd_tlb_inval *req);

/* Owner only: drop one entry in place (a spurious protection fault). */
void sd_tlb_drop(struct sd_tlb *tlb, uint64_t vpn, uint16_t asid);

/* Any thread: invalidations received so far (the sequence). */
static inline uint64_t sd_tlb_invalidations(const struct sd_tlb *tlb)
{
	return atomic_load_explicit(&tlb->seq, memory_order_relaxed);
}

#endif
