/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_PGTABLE_H
#define SD_MM_PGTABLE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/pgtable.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "../core/spinlock.h"
#include "../hw/model.h"
#include "../hw/pte.h"

/*
 * A 4-level radix page table over a 48-bit VA with 4 KiB pages: 512 entries
 * of 8 bytes per level, one 4 KiB table each. Upper levels hold pointers to
 * the next table; the leaf level holds PTEs (tlb/pte.h).
 *
 * The mm's mmap_lock (mm.h) decides who may link and unlink tables: the
 * holders for write only, so a reader's walk of the upper levels finds the
 * tables it found before. PTE edits take the leaf table's split lock
 * (@ptl, the kernel's pte_offset_map_lock()), which orders the readers
 * that edit one table (faults, madvise, reclaim); writers take it too, as
 * the kernel does. Everyone publishes with release stores. Walkers take
 * no lock: they run inside an RCU read-side section (a QSBR reader between
 * quiescent states), and unlinked tables are freed only after the flush and
 * a grace period (invariant 4 (docs/invariants.md)).
 */
#define SD_PT_ENTRIES 512
#define SD_PT_SHIFT 9
#define SD_PT_LEVELS 4

struct sd_pt {
	SD_ATOMIC(uint64_t) e[SD_PT_ENTRIES];
	/* The split page-table lock (ptdesc->ptl), used in leaf tables;
	 * @ptl_model is it in modelled time, under it. */
	sd_cacheline_aligned struct sd_spinlock ptl;
	struct sd_model_lock ptl_model;
};

static inline unsigned sd_pt_index(uint64_t vpn, unsigned level)
{
	return (unsigned)(vpn >> (SD_PT_SHIFT * level)) & (SD_PT_ENTRIES - 1);
}

struct sd_pt *sd_pt_alloc(void);
void sd_pt_free(struct sd_pt *pt);

/* The slot of @vpn's PTE in its leaf table @leaf. */
static inline SD_ATOMIC(uint64_t) *sd_pt_slot(struct sd_pt *leaf, uint64_t vpn)
{
	return &leaf->e[vpn & (SD_PT_ENTRIES - 1)];
}

/* Lockless: the leaf table covering @vpn, or NULL. */
static inline struct sd_pt *sd_pt_walk_leaf(struct sd_pt *pgd, uint64_t vpn)
{
	struct sd_pt *pt = pgd;

	for (unsigned level = SD_PT_LEVELS - 1; level > 0; level--) {
		/* Acquire pairs with the release that published the child. */
		uint64_t next = atomic_load_explicit(&pt->e[sd_pt_index(vpn, level)],
						     memory_order_acquire);
		if (!next)
			return NULL;
		pt = (struct sd_pt *)(uintptr_t)next;
	}
	return pt;
}

/*
 * Under the mmap_lock (read or write): the first leaf table covering a page at or after *@vpn
 * and below @end, skipping empty upper-level entries whole; *@vpn moves to
 * the first page it covers at or after the old *@vpn. NULL when none.
 */
struct sd_pt *sd_pt_next_leaf(struct sd_pt *pgd, uint64_t *vpn, uint64_t end);

/* Under the mmap_lock for write: the leaf for @vpn, creating missing tables.
 * NULL: -ENOMEM. */
struct sd_pt *sd_pt_leaf_alloc(struct sd_pt *pgd, uint64_t vpn);

/*
 * sd_mmap() links every table it needs or none ("nothing half changed"):
 * under the mmap_lock for write it counts the missing tables, allocates them all, and
 * only then links them, each from the reserve.
 */
struct sd_pt_reserve {
	size_t n, used;
	struct sd_pt **tables;
};

/* Under the mmap_lock: tables missing for [vpn, vpn + nr), nr > 0. */
uint64_t sd_pt_count_missing(const struct sd_pt *pgd, uint64_t vpn, uint64_t nr);
/* Allocate @n zeroed tables into @r: 0, or -ENOMEM with nothing allocated. */
int sd_pt_reserve(struct sd_pt_reserve *r, uint64_t n);
/* Under the mmap_lock for write: the leaf for @vpn, missing tables taken from @r.
 * NULL only if @r ran short (it was sized by sd_pt_count_missing()). */
struct sd_pt *sd_pt_leaf_link(struct sd_pt *pgd, uint64_t vpn, struct sd_pt_reserve *r);
/* Free the tables of @r that were not linked, and @r's array. */
void sd_pt_reserve_release(struct sd_pt_reserve *r);

/*
 * Test hook (not exported): if >= 0, that many more table allocations
 * succeed and then every one fails until it is set back to -1. Tests use it
 * to reach sd_mmap()'s out-of-memory path without exhausting the host.
 */
extern SD_ATOMIC(long) sd_pt_alloc_fail_after;

/* Tables unlinked by an unmap, freed after the flush and a grace period. */
struct sd_pt_freelist {
	size_t n, cap;
	struct sd_pt **tables;
};

/*
 * Under the mmap_lock for write, after [vpn, vpn + nr) was cleared: unlink every table
 * in the range that is now empty, bottom up (free_pgtables()).
 * Return: 0; -ENOMEM if the list could not grow (tables then stay linked).
 */
int sd_pt_unlink_empty(struct sd_pt *pgd, uint64_t vpn, uint64_t nr, struct sd_pt_freelist *fl);

/* Hand the list to call_rcu (caller is a registered RCU reader). */
void sd_pt_free_deferred(struct sd_pt_freelist *fl);

/* Free a whole tree at once (mm teardown; nobody can walk it). @leaf_fn is
 * called on each leaf PTE that is not 0. Returns the tables freed, the
 * top level included. */
uint64_t sd_pt_free_tree(struct sd_pt *pgd, void (*leaf_fn)(uint64_t pte, void *arg), void *arg);

#endif
