/* SPDX-License-Identifier: MIT */
/*
 * Mapping changes: mmap, munmap, madvise(DONTNEED), mprotect and fork.
 * A change edits PTEs under the mm's mmap_lock (for write, or for read
 * with each leaf table's split lock), asks the strategy to flush (the
 * initiator is the calling CPU), raises the oracle floors, and only then
 * frees frames and (after a grace period) page-table pages: the
 * mmu_gather order of zap, flush, free.
 */
#include <errno.h>
#include <stdlib.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "file.h"
#include "flush_ops.h"
#include "lru.h"
#include "mm.h"

/* ---- argument checks shared by every mapping change ---- */

int sd_mm_check_change(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len,
		       const char *what)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "%s: " SD_NOT_ATTACHED, what);
	if (!mm || mm->m != c->m)
		return sd_fail(-EINVAL, "%s: mm is NULL or belongs to another machine", what);
	if (!len)
		return sd_fail(-EINVAL, "%s: length is 0", what);
	if ((va | len) & (SD_PAGE_SIZE - 1))
		return sd_fail(-EINVAL, "%s: va 0x%llx or length 0x%llx not page aligned", what,
			       (unsigned long long)va, (unsigned long long)len);
	if (va + len < va || va + len > SD_VA_END)
		return sd_fail(-EINVAL, "%s: [0x%llx, +0x%llx) leaves the 48-bit VA space", what,
			       (unsigned long long)va, (unsigned long long)len);
	if (c->irq_depth)
		return sd_fail(-EINVAL, "%s: called with interrupts off", what);
	return 0;
}

uint32_t sd_mm_change_version(struct sd_mm *mm)
{
	return mm->m->checked ? sd_oracle_next_version(&mm->m->oracle) : 0;
}

/*
 * Visit every existing leaf slot of [vpn, vpn + nr), with __i its page;
 * empty upper-level tables are skipped whole, so a huge sparse range costs
 * what is mapped in it, not its size.
 */
#define for_each_pte(mm, vpn, nr, leaf, slot)                                           \
	for (uint64_t __v = (vpn), __end = (vpn) + (nr);                                 \
	     ((leaf) = sd_pt_next_leaf((mm)->pgd, &__v, __end)) != NULL;                 \
	     __v = (__v | (SD_PT_ENTRIES - 1)) + 1)                                     \
		for (uint64_t __i = __v; __i < __end &&                                 \
		     ((slot) = &(leaf)->e[__i & (SD_PT_ENTRIES - 1)], 1);               \
		     __i = ((__i + 1) & (SD_PT_ENTRIES - 1)) ? __i + 1 : __end)

/* ---- what a change gathers: frames to free, and whether to flush ---- */

struct u64_vec {
	size_t n, cap;
	uint64_t *v;
};

static int vec_push(struct u64_vec *vec, uint64_t x)
{
	if (vec->n == vec->cap) {
		size_t cap = vec->cap ? 2 * vec->cap : 64;
		uint64_t *p = realloc(vec->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		vec->v = p;
		vec->cap = cap;
	}
	vec->v[vec->n++] = x;
	return 0;
}

struct gather {
	struct u64_vec frames;  /* freed only after the flush (mmu_gather) */
	bool flush;             /* a present PTE changed: some TLB may cache it */
	bool checked;
	bool owed;              /* a TLB batch still owes this mm a flush */
	bool nested;            /* another change's flush is still in flight */
	uint64_t ptes;          /* present PTEs changed (modelled time) */
};

/*
 * inc_tlb_flush_pending(): under the mmap_lock, before the PTE edits. A
 * change that edits a PTE after ours and finds our count learns that PTEs
 * it sees may still be cached under their old values. Relaxed: the lock
 * that orders the two edits (the split lock of the PTE's table, or the
 * mmap_lock between a writer and anyone else: our unlock's release, the
 * next locker's acquire) orders it before any read of the count that can
 * matter, all of which follow such an acquire.
 */
static void flush_pending_inc(struct sd_mm *mm)
{
	atomic_fetch_add_explicit(&mm->flush_pending, 1, memory_order_relaxed);
}

/*
 * mm_tlb_flush_nested(): after our own edits, still under the mmap_lock.
 * Another change counted (it edited before us and has not finished its flush): the
 * PTEs we found already changed may still be cached, so we must flush our
 * range even if we changed nothing. Acquire pairs with the release in
 * flush_pending_dec(): a change whose decrement we saw had finished its
 * flush, and its floors are raised.
 */
static bool flush_nested(struct sd_mm *mm)
{
	return atomic_load_explicit(&mm->flush_pending, memory_order_acquire) > 1;
}

/* dec_tlb_flush_pending(): after the flush and the floors (release). */
static void flush_pending_dec(struct sd_mm *mm)
{
	atomic_fetch_sub_explicit(&mm->flush_pending, 1, memory_order_release);
}

/*
 * flush_tlb_batched_pending(): read under a leaf table's split lock, before
 * its PTEs are edited. A reclaim that zapped PTEs of this table and deferred
 * its flush into a batch counted itself under the same lock, so a change
 * that edits the table after it sees that and flushes the whole mm rather
 * than return while old translations may still be cached.
 */
static bool batched_pending(struct sd_mm *mm)
{
	return atomic_load_explicit(&mm->batch_pending, memory_order_acquire) != 0;
}

/* Under the mmap_lock, before a change's PTE edits (@c checked already):
 * its oracle version and the change counted in flush_pending
 * (inc_tlb_flush_pending()). Taken before any split lock, the version of a
 * change made under a read hold may be older than that of a fault which
 * fills a PTE of its range before the change edits that PTE's table: the
 * floor it raises is then lower than it could be (a stale entry of that
 * fault goes unseen), never higher than a live entry's version. */
static uint32_t change_begin(struct sd_cpu *c, struct sd_mm *mm, struct gather *g)
{
	uint32_t version = sd_mm_change_version(mm);

	g->checked = c->checked;
	flush_pending_inc(mm);
	return version;
}

/*
 * The PTE edits of a change, a leaf table at a time under its split lock
 * (zap_pte_range(), change_pte_range() under pte_offset_map_lock()):
 * @edit(@arg, @leaf, vpn, end) edits the slots of [vpn, end), all in
 * @leaf. Every existing leaf of the range is visited; empty upper-level
 * tables are skipped whole. *@owed (if not NULL) learns whether a TLB
 * batch owes the mm a flush, read under each lock.
 */
static void edit_leaves(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool *owed,
			void (*edit)(void *arg, struct sd_pt *leaf, uint64_t vpn, uint64_t end),
			void *arg)
{
	const uint64_t end = vpn + nr;
	struct sd_pt *leaf;

	for (uint64_t v = vpn; (leaf = sd_pt_next_leaf(mm->pgd, &v, end)) != NULL;) {
		uint64_t leaf_end = (v | (SD_PT_ENTRIES - 1)) + 1;

		if (leaf_end > end)
			leaf_end = end;
		sd_ptl_lock(c, leaf);
		if (owed && batched_pending(mm))
			*owed = true;
		edit(arg, leaf, v, leaf_end);
		sd_ptl_unlock(c, leaf);
		/* Test instrumentation: between two tables of one change. */
		sd_order_point(SD_ORDER_LEAF_EDITED, c->id);
		v = leaf_end;
	}
}

/* A present PTE changed; @pfn != 0 if its frame goes too. */
static void gather_page(struct gather *g, uint64_t pfn)
{
	g->flush = true;
	g->ptes++;
	/* Out of memory: leak the frame rather than free it early. */
	if (pfn)
		(void)vec_push(&g->frames, pfn);
}

void sd_mm_free_frames(struct sd_cpu *c, const uint64_t *pfns, size_t n)
{
	size_t freed = 0;

	/* A frame another mm still maps (fork's copy-on-write) loses a
	 * mapping only; the last mapping's put frees it. Those leave the LRU
	 * (its lock, per the machine's lru setting) and are charged a free
	 * (free_unref_folios()). */
	for (size_t i = 0; i < n; i++)
		freed += sd_frame_put(&c->m->frames, &c->frames, pfns[i]);
	if (!freed)
		return;
	sd_lru_free(c, freed);
	sd_event(c, SD_EV_PAGE_FREE, freed, 0);
}

void sd_mm_flush_change(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool whole_mm, bool freed_tables)
{
	struct sd_machine *m = c->m;
	struct sd_flush_req req = {
		.mm = mm, .vpn = vpn, .nr = nr, .freed_tables = freed_tables,
	};
	/* flush_tlb_mm_range()'s local half names its reason: a whole mm or
	 * a range (the tlb_flush tracepoint's TLB_LOCAL_*SHOOTDOWN). */
	enum sd_flush_reason reason = whole_mm ? SD_FLUSH_LOCAL_MM_SHOOTDOWN
					       : SD_FLUSH_LOCAL_SHOOTDOWN;
	uint64_t t0;

	/* Test instrumentation: a change about to flush (see ordering.h). */
	sd_order_point(SD_ORDER_CHANGE_FLUSH, c->id);
	sd_event(c, SD_EV_FLUSH_BEGIN, vpn, sd_flush_aux(reason, whole_mm ? 0 : nr));
	t0 = sd_event_flush_start(c);
	if (whole_mm)
		m->ops->flush_mm(c, mm);
	else
		m->ops->flush_range(c, &req);
	sd_event(c, SD_EV_FLUSH_END, sd_event_flush_ns(c, t0), reason);
}

/*
 * tlb_finish_mmu()'s flush, under the mmap_lock as the kernel holds it
 * (mprotect and munmap for write, madvise(DONTNEED) for read): a writer
 * that comes meanwhile waits for the flush, as it waits in the kernel.
 * Flush if we changed a present PTE, freed tables, owe a batched flush, or
 * raced a change whose flush is in flight (nested: we may have found its
 * work done and changed nothing, yet the translations it made stale can
 * still be cached). Then the per-call floors.
 *
 * Safe because no CPU waits for the mmap_lock with interrupts off (a
 * first touch with them off is refused, populate()): every CPU this flush
 * waits for answers its IPI, blocked on the lock or not (the signal runs
 * in the wait; strict mode's wait hook runs it, seq_wait_hook()).
 */
static void finish_flush(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			 uint32_t version, struct gather *g, struct sd_pt_freelist *fl)
{
	bool freed_tables = fl && fl->n;

	if (g->flush || freed_tables || g->owed || g->nested)
		sd_mm_flush_change(c, mm, vpn, nr, g->owed, freed_tables);
	/* Every PTE of the range is, since our lock section, either at
	 * @version or not present: no translation older may serve anyone. */
	if (g->checked)
		sd_oracle_floor_raise_known(&mm->floor, vpn, nr, version);
	flush_pending_dec(mm);
}

/*
 * The rest of tlb_finish_mmu(), after the lock: the frames and the tables.
 * The kernel frees them before it drops the lock; here they go after, so
 * that the table free's fallback (a grace period waited for in place, when
 * no callback can be allocated) never waits with the lock held.
 */
static void finish_free(struct sd_cpu *c, struct gather *g, struct sd_pt_freelist *fl)
{
	sd_mm_free_frames(c, g->frames.v, g->frames.n);
	free(g->frames.v);
	if (fl) {
		/* free_pgtables(): a charge per table unlinked. */
		if (fl->n)
			sd_event(c, SD_EV_PT_FREE, fl->n, 0);
		sd_pt_free_deferred(fl);
	}
	sd_cpu_qs(c);
}

/*
 * The end of a change, entered with the mmap_lock held as @kind: the flush
 * under it for the built-in strategies, whose waits for other CPUs are IPIs
 * a CPU blocked on the lock still answers. A user strategy's flush runs
 * after the unlock, as before: it may wait for other CPUs to reach points
 * of the program's own (a runtime's safepoint handshake), which a CPU
 * blocked on the lock would never reach.
 */
static void finish_change_locked(struct sd_cpu *c, struct sd_mm *mm, enum sd_lock_kind kind,
				 uint64_t vpn, uint64_t nr, uint32_t version, struct gather *g,
				 struct sd_pt_freelist *fl)
{
	const bool under_lock = !c->m->ops->user;

	if (under_lock)
		finish_flush(c, mm, vpn, nr, version, g, fl);
	sd_mmap_unlock(c, mm, kind);
	if (!under_lock)
		finish_flush(c, mm, vpn, nr, version, g, fl);
	finish_free(c, g, fl);
}

/*
 * In the kernel, munmap holds the mmap_lock until its flush is done, so an
 * mmap of the same range cannot return while the old translations live.
 * The built-in strategies flush under the lock too (finish_change_locked());
 * a user strategy's flush runs after it, so an mmap that finds a change
 * still flushing (@unmap_in_flight, read under the lock after its PTE
 * stores) flushes its own range instead of waiting: waiting for the other
 * flush could deadlock against a CPU that has interrupts off and waits for
 * us, while our own flush answers IPIs like any other.
 */
static void finish_mmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			uint32_t version, bool unmap_in_flight)
{
	if (unmap_in_flight)
		sd_mm_flush_change(c, mm, vpn, nr, false, false);
	/* The range was empty under the lock: nothing older than @version
	 * may serve an access that starts after we return. */
	if (c->checked)
		sd_oracle_floor_raise_known(&mm->floor, vpn, nr, version);
	sd_cpu_qs(c);
}

/* The fewest page tables an sd_mmap() may build, whatever nr_frames says. */
#define SD_PT_MIN_LIMIT (UINT64_C(1) << 16)

/*
 * Under mm->lock: link every table [vpn, vpn + nr) needs, or none. All are
 * allocated before the first is linked, so running out of memory leaves the
 * tree as it was (no empty tables behind, no PTE), and the ones not linked
 * were never visible to a walker, so they are freed at once.
 */
static int build_tables(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	uint64_t missing = sd_pt_count_missing(mm->pgd, vpn, nr);
	struct sd_pt_reserve r;

	/* A range whose tables alone would exceed the machine's memory fails
	 * before any is allocated, rather than drive the host into its OOM
	 * killer. Small pools still get the tables of ordinary ranges. */
	uint64_t limit = mm->m->cfg.nr_frames > SD_PT_MIN_LIMIT ? mm->m->cfg.nr_frames
								 : SD_PT_MIN_LIMIT;
	if (missing > limit)
		return sd_fail(-ENOMEM, "sd_mmap: the range needs %llu page tables, more than the "
			       "machine's memory allows (%llu)", (unsigned long long)missing,
			       (unsigned long long)limit);
	if (sd_pt_reserve(&r, missing))
		return sd_fail(-ENOMEM, "sd_mmap: no memory for the %llu page tables of the range",
			       (unsigned long long)missing);
	for (uint64_t v = vpn; v < vpn + nr; v = (v | (SD_PT_ENTRIES - 1)) + 1)
		(void)sd_pt_leaf_link(mm->pgd, v, &r);
	/* __pte_alloc() and its upper levels: a charge per table linked. */
	if (r.used)
		sd_event(c, SD_EV_PT_ALLOC, r.used, 0);
	sd_pt_reserve_release(&r);
	return 0;
}

/* MAP_FIXED_NOREPLACE: the first page of the range a VMA already maps. */
static int mmap_check_free(struct sd_mm *mm, uint64_t vpn, uint64_t nr, const char *who)
{
	struct sd_vma *v = sd_vma_first_in(mm, vpn, nr);
	uint64_t start = v ? atomic_load_explicit(&v->start, memory_order_relaxed) : 0;

	if (!v)
		return 0;
	return sd_fail(-EEXIST, "%s: page 0x%llx already mapped", who,
		       (unsigned long long)((start > vpn ? start : vpn) << SD_PAGE_SHIFT));
}

/* The arguments sd_mmap() and sd_mmap_file() share, checked (@who names the
 * call in errors). */
static int mmap_check(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len,
		      unsigned prot, const char *who)
{
	int err = sd_mm_check_change(c, mm, va, len, who);

	if (err)
		return err;
	if (prot & ~(unsigned)(SD_PROT_READ | SD_PROT_WRITE))
		return sd_fail(-EINVAL, "%s: unknown prot bits 0x%x", who, prot);
	return 0;
}

/* After mmap_check(); @b NULL maps private anonymous memory. */
static int do_mmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len, unsigned prot,
		   const struct sd_vma_backing *b, const char *who)
{
	uint64_t vpn = va >> SD_PAGE_SHIFT, nr = len >> SD_PAGE_SHIFT;
	struct sd_pt *leaf;
	SD_ATOMIC(uint64_t) *slot;
	int err;

	sd_mmap_lock(c, mm, SD_LOCK_MM);
	/* The kernel's VMA work (vma_merge or a new VMA), under the lock. */
	sd_event(c, SD_EV_VMA_CHANGE, 0, 0);
	err = mmap_check_free(mm, vpn, nr, who);
	if (!err && sd_vma_reserve(mm, 1))
		err = sd_fail(-ENOMEM, "%s: no memory for a VMA", who);
	if (!err)
		err = build_tables(c, mm, vpn, nr);
	if (err) {
		sd_mmap_unlock(c, mm, SD_LOCK_MM);
		return err;
	}
	/* The VMA first, as the kernel links it before any fault can find the
	 * range: a fault that finds the PTEs before we unlock finds the VMA
	 * write-locked and waits on the mmap_lock. */
	sd_vma_map(c, mm, vpn, nr, prot, b);
	uint32_t version = sd_mm_change_version(mm);
	uint64_t pte = sd_pte_make(0, SD_PTE_VMA | sd_pte_flags_from_prot(prot) |
					      (b && b->shared ? SD_PTE_SHARED : 0), version);
	/* Uncharged: the marks are this emulator's way of knowing the
	 * mapping at a walk; the kernel's mmap writes no PTE (a fault does,
	 * and is charged then). Charged, they were one pte_update a loop of
	 * tlb_flush2 that the kernel never pays (model-check's guard). */
	for_each_pte(mm, vpn, nr, leaf, slot)
		atomic_store_explicit(slot, pte, memory_order_release);
	bool unmap_in_flight = atomic_load_explicit(&mm->flush_pending, memory_order_acquire) != 0;
	sd_mmap_unlock(c, mm, SD_LOCK_MM);
	finish_mmap(c, mm, vpn, nr, version, unmap_in_flight);
	return 0;
}

/* zap_pte_range() for an unmap: the slot goes, mapping and all. */
static void unmap_leaf(void *arg, struct sd_pt *leaf, uint64_t vpn, uint64_t end)
{
	for (uint64_t v = vpn; v < end; v++) {
		uint64_t old = atomic_load_explicit(sd_pt_slot(leaf, v), memory_order_relaxed);
		if (!old)
			continue;
		atomic_store_explicit(sd_pt_slot(leaf, v), 0, memory_order_release);
		if (old & SD_PTE_PRESENT)
			gather_page(arg, sd_pte_pfn(old));
	}
}

static int do_munmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	uint64_t vpn = va >> SD_PAGE_SHIFT, nr = len >> SD_PAGE_SHIFT;
	struct gather g = { 0 };
	struct sd_pt_freelist fl = { 0 };
	uint32_t version;
	int err = sd_mm_check_change(c, mm, va, len, "sd_munmap");

	if (err)
		return err;
	sd_mmap_lock(c, mm, SD_LOCK_MM);
	/* The kernel's VMA work (do_vmi_munmap: split, detach), under the lock. */
	sd_event(c, SD_EV_VMA_CHANGE, 0, 0);
	/* Both ends may split a VMA (__split_vma() allocates, and the
	 * kernel's munmap fails with -ENOMEM when it cannot). */
	if (sd_vma_reserve(mm, 2)) {
		sd_mmap_unlock(c, mm, SD_LOCK_MM);
		return sd_fail(-ENOMEM, "sd_munmap: no memory for a VMA split");
	}
	sd_vma_unmap(c, mm, vpn, nr);
	version = change_begin(c, mm, &g);
	edit_leaves(c, mm, vpn, nr, &g.owed, unmap_leaf, &g);
	/* On -ENOMEM the empty tables just stay linked: still correct. */
	(void)sd_pt_unlink_empty(mm->pgd, vpn, nr, &fl);
	/* After the unlinks, before the deferred free: pairs with the acquire
	 * in walk_and_fill() (see sd_mm.table_gen). */
	if (fl.n)
		atomic_fetch_add_explicit(&mm->table_gen, 1, memory_order_release);
	g.nested = flush_nested(mm);
	sd_event(c, SD_EV_PTE_UPDATE, g.ptes, 0);
	/* The kernel downgrades to a read hold once the VMAs are detached
	 * and zaps, frees tables and flushes under it (do_vmi_align_munmap()'s
	 * mmap_write_downgrade(); "mm: mmap: zap pages with read mmap_sem in
	 * munmap", 4.20). We downgrade after the zap and the table unlinks,
	 * which rely on the write hold here (pgtable.h), so faults and
	 * madvise of other ranges wait for the zap but not for the flush; a
	 * writer (an mmap of this range) still waits for the flush. */
	sd_mmap_downgrade(c, mm);
	finish_change_locked(c, mm, SD_LOCK_MM_READ, vpn, nr, version, &g, &fl);
	return 0;
}

/*
 * zap_pte_range(): drop the frame of every present page of the range, keep
 * the mapping; @zapped(@arg, vpn, pfn) hears of each, under the split lock
 * of its table. Under the mmap_lock (for read at least).
 */
struct zap {
	uint32_t version;
	/* NULL: zap the zero page's PTEs too; else leave them, and say so. */
	void (*kept_zero)(void *arg, uint64_t vpn);
	void (*zapped)(void *arg, uint64_t vpn, uint64_t pfn);
	void *arg;
};

static void zap_leaf(void *arg, struct sd_pt *leaf, uint64_t vpn, uint64_t end)
{
	const struct zap *z = arg;

	for (uint64_t v = vpn; v < end; v++) {
		uint64_t old = atomic_load_explicit(sd_pt_slot(leaf, v), memory_order_relaxed);
		if (!(old & SD_PTE_PRESENT))
			continue;
		if (z->kept_zero && sd_pte_is_zero_page(old)) {
			z->kept_zero(z->arg, v);
			continue;
		}
		atomic_store_explicit(sd_pt_slot(leaf, v),
				      sd_pte_make(0, old & (SD_PTE_VMA | SD_PTE_PROT_MASK | SD_PTE_SHARED),
						  z->version),
				      memory_order_release);
		z->zapped(z->arg, v, sd_pte_pfn(old));
	}
}

void sd_mm_zap_present(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
		       uint32_t version, bool *owed, void (*kept_zero)(void *arg, uint64_t vpn),
		       void (*zapped)(void *arg, uint64_t vpn, uint64_t pfn), void *arg)
{
	struct zap z = { .version = version, .kept_zero = kept_zero, .zapped = zapped, .arg = arg };

	edit_leaves(c, mm, vpn, nr, owed, zap_leaf, &z);
}

static void gather_zapped(void *g, uint64_t vpn, uint64_t pfn)
{
	(void)vpn;
	gather_page(g, pfn);
}

static int do_madvise_dontneed(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	uint64_t vpn = va >> SD_PAGE_SHIFT, nr = len >> SD_PAGE_SHIFT;
	struct gather g = { 0 };
	uint32_t version;
	int err = sd_mm_check_change(c, mm, va, len, "sd_madvise_dontneed");

	if (err)
		return err;
	/* madvise_lock(): MADV_DONTNEED takes the mmap_lock for read. */
	sd_mmap_lock(c, mm, SD_LOCK_MM_READ);
	/* The call's own work (madvise_walk_vmas(), the mmu_gather's setup
	 * and teardown, the notifiers), under the read hold. */
	sd_event(c, SD_EV_MADVISE_ZAP, 0, 0);
	version = change_begin(c, mm, &g);
	/* zap_pte_range() clears the zero page's PTEs too (no frame to free). */
	sd_mm_zap_present(c, mm, vpn, nr, version, &g.owed, NULL, gather_zapped, &g);
	g.nested = flush_nested(mm);
	sd_event(c, SD_EV_PTE_UPDATE, g.ptes, 0);
	/* zap_page_range_single()'s tlb_finish_mmu(): under the read hold. */
	finish_change_locked(c, mm, SD_LOCK_MM_READ, vpn, nr, version, &g, NULL);
	return 0;
}

/* change_pte_range(): every slot of the range takes the new protection. */
struct protect {
	struct gather *g;
	uint64_t flags;
	uint32_t version;
};

static void protect_leaf(void *arg, struct sd_pt *leaf, uint64_t vpn, uint64_t end)
{
	const struct protect *pr = arg;

	for (uint64_t v = vpn; v < end; v++) {
		uint64_t old = atomic_load_explicit(sd_pt_slot(leaf, v), memory_order_relaxed);
		/* A write-protected page stays so (the zero page is never
		 * made writable: can_change_pte_writable()). */
		uint64_t keep = old & (SD_PTE_VMA | SD_PTE_PRESENT | SD_PTE_WRPROTECT | SD_PTE_SHARED);
		atomic_store_explicit(sd_pt_slot(leaf, v),
				      sd_pte_make(sd_pte_pfn(old), keep | pr->flags, pr->version),
				      memory_order_release);
		if (old & SD_PTE_PRESENT)
			gather_page(pr->g, 0);
	}
}

static int do_mprotect(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len, unsigned prot)
{
	uint64_t vpn = va >> SD_PAGE_SHIFT, nr = len >> SD_PAGE_SHIFT;
	struct gather g = { 0 };
	uint64_t mapped;
	uint32_t version;
	int err = sd_mm_check_change(c, mm, va, len, "sd_mprotect");

	if (err)
		return err;
	if (prot & ~(unsigned)(SD_PROT_READ | SD_PROT_WRITE))
		return sd_fail(-EINVAL, "sd_mprotect: unknown prot bits 0x%x", prot);
	sd_mmap_lock(c, mm, SD_LOCK_MM);
	/* The kernel's VMA work (mprotect_fixup: split, merge), under the lock. */
	sd_event(c, SD_EV_VMA_CHANGE, 0, 0);
	mapped = sd_vma_mapped(mm, vpn, nr);
	if (mapped != nr) {
		sd_mmap_unlock(c, mm, SD_LOCK_MM);
		return sd_fail(-ENOMEM, "sd_mprotect: %llu of %llu pages are not mapped",
			       (unsigned long long)(nr - mapped), (unsigned long long)nr);
	}
	/* mprotect of the middle of a VMA splits it twice. */
	if (sd_vma_reserve(mm, 2)) {
		sd_mmap_unlock(c, mm, SD_LOCK_MM);
		return sd_fail(-ENOMEM, "sd_mprotect: no memory for a VMA split");
	}
	sd_vma_protect(c, mm, vpn, nr, prot);
	/* Test instrumentation: the VMAs split, merged and write-locked, no
	 * PTE edited yet (a fault of the range now falls back to the
	 * mmap_lock and waits for us). */
	sd_order_point(SD_ORDER_VMA_CHANGED, c->id);
	version = change_begin(c, mm, &g);
	struct protect pr = { .g = &g, .flags = sd_pte_flags_from_prot(prot), .version = version };
	edit_leaves(c, mm, vpn, nr, &g.owed, protect_leaf, &pr);
	g.nested = flush_nested(mm);
	sd_event(c, SD_EV_PTE_UPDATE, g.ptes, 0);
	/* change_protection()'s flush: under the write hold. */
	finish_change_locked(c, mm, SD_LOCK_MM, vpn, nr, version, &g, NULL);
	return 0;
}

/*
 * The system calls: in modelled time a call pays the kernel's entry and
 * exit, whatever it finds (a refused call entered the kernel too). A caller
 * that is not the CPU pays nothing: there is no clock to charge.
 */
static inline bool syscall_enter(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		return false;
	sd_event(c, SD_EV_SYSCALL_ENTER, 0, 0);
	return true;
}

static inline int syscall_exit(struct sd_cpu *c, bool entered, int ret)
{
	if (entered)
		sd_event(c, SD_EV_SYSCALL_EXIT, 0, 0);
	return ret;
}

/* ---- fork: dup_mmap() ---- */

/* copy_pte_range() for one leaf table of the parent, under its split lock:
 * every mapping slot copied to the child; a present page write-protected in
 * both (the zero page already is), its frame shared, the parent's PTE at
 * the fork's version (its writable entries are flushed at the end). */
struct fork_copy {
	struct sd_cpu *cpu;
	struct sd_mm *child;
	struct gather *g;
	uint64_t shared_ptes;   /* shared pages: the child's PTE alone written */
	uint32_t version;
	bool checked;
};

static void fork_leaf(void *arg, struct sd_pt *leaf, uint64_t vpn, uint64_t end)
{
	struct fork_copy *f = arg;
	struct sd_pt *dst = sd_pt_walk_leaf(f->child->pgd, vpn);

	for (uint64_t v = vpn; v < end; v++) {
		uint64_t old = atomic_load_explicit(sd_pt_slot(leaf, v), memory_order_relaxed);
		uint64_t copy = old;

		if (!(old & SD_PTE_VMA))
			continue;
		if ((old & (SD_PTE_PRESENT | SD_PTE_SHARED)) == (SD_PTE_PRESENT | SD_PTE_SHARED)) {
			/* A shared mapping's page: the same frame, writable
			 * in both. The parent's translation does not change,
			 * but the fork raises the floor of the parent's whole
			 * range once its flush_tlb_mm() is done: the PTE takes
			 * the fork's version too, or an entry filled from it
			 * after that flush would be older than the floor (the
			 * fuzzer's 64-CPU soak caught exactly that). Charged
			 * as the kernel pays: the child's PTE only. */
			copy = sd_pte_make(sd_pte_pfn(old), old & SD_PTE_FLAGS_MASK, f->version);
			atomic_store_explicit(sd_pt_slot(leaf, v), copy, memory_order_release);
			f->g->flush = true;
			f->shared_ptes++;
			sd_frame_share(&f->cpu->m->frames, sd_pte_pfn(old));
			if (f->checked)
				(void)sd_oracle_floor_touch(&f->child->floor, v);
		} else if (old & SD_PTE_PRESENT) {
			copy = sd_pte_make(sd_pte_pfn(old), (old & SD_PTE_FLAGS_MASK) | SD_PTE_WRPROTECT,
					   f->version);
			atomic_store_explicit(sd_pt_slot(leaf, v), copy, memory_order_release);
			gather_page(f->g, 0);
			if (!sd_pte_is_zero_page(old))
				sd_frame_share(&f->cpu->m->frames, sd_pte_pfn(old));
			if (f->checked)
				(void)sd_oracle_floor_touch(&f->child->floor, v);
		}
		/* Relaxed: no walker reaches the child before sd_mm_fork()
		 * returns; a CPU then switches to it through the program's own
		 * hand-over (this thread, or another after a release of the
		 * program's that orders these stores before the child's
		 * pointer). */
		atomic_store_explicit(sd_pt_slot(dst, v), copy, memory_order_relaxed);
	}
}

/* Every table the parent's mapping slots need, built in the child first, so
 * the copy under the parent's split locks cannot fail. */
static int fork_tables(struct sd_cpu *c, struct sd_mm *parent, struct sd_mm *child)
{
	struct sd_pt *leaf;
	int err = 0;

	for (uint64_t v = 0; !err && (leaf = sd_pt_next_leaf(parent->pgd, &v, SD_VA_END >> SD_PAGE_SHIFT));
	     v = (v | (SD_PT_ENTRIES - 1)) + 1)
		err = build_tables(c, child, v & ~(uint64_t)(SD_PT_ENTRIES - 1), SD_PT_ENTRIES);
	return err;
}

static int do_fork(struct sd_cpu *c, struct sd_mm *parent, struct sd_mm **out)
{
	const uint64_t all = SD_VA_END >> SD_PAGE_SHIFT;
	struct sd_mm *child = NULL;
	struct gather g = { 0 };
	int err;

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_mm_fork: " SD_NOT_ATTACHED);
	if (!parent || !out || parent->m != c->m)
		return sd_fail(-EINVAL, "sd_mm_fork: parent or out is NULL, or the parent belongs "
			       "to another machine");
	if (c->irq_depth)
		return sd_fail(-EINVAL, "sd_mm_fork: called with interrupts off");
	if (sd_frame_share_ready(&c->m->frames))
		return sd_fail(-ENOMEM, "sd_mm_fork: no memory for the frames' share counts");
	err = sd_mm_create(c->m, &child);
	if (err)
		return err;
	/* dup_mmap(): the parent's mmap_lock for write, its VMAs copied. */
	sd_mmap_lock(c, parent, SD_LOCK_MM);
	sd_event(c, SD_EV_VMA_CHANGE, 0, 0);
	err = sd_vma_dup(c, parent, child);
	if (err)
		err = sd_fail(-ENOMEM, "sd_mm_fork: no memory for the child's VMAs");
	else
		err = fork_tables(c, parent, child);
	if (err) {
		sd_mmap_unlock(c, parent, SD_LOCK_MM);
		(void)sd_mm_destroy(child);
		return err;
	}
	struct fork_copy f = { .cpu = c, .child = child, .g = &g, .checked = c->checked };

	f.version = change_begin(c, parent, &g);
	edit_leaves(c, parent, 0, all, &g.owed, fork_leaf, &f);
	g.nested = flush_nested(parent);
	/* The parent's PTEs write-protected and the child's written: two a
	 * page; one for a shared page (the child's). */
	sd_event(c, SD_EV_PTE_UPDATE, 2 * g.ptes + f.shared_ptes, 0);
	/* flush_tlb_mm(oldmm) before the unlock: no CPU writes a page of the
	 * parent through an entry from before the fork once it returns. */
	finish_change_locked(c, parent, SD_LOCK_MM, 0, all, f.version, &g, NULL);
	*out = child;
	return 0;
}

int sd_mm_fork(struct sd_cpu *c, struct sd_mm *parent, struct sd_mm **child)
{
	bool in = syscall_enter(c);

	return syscall_exit(c, in, do_fork(c, parent, child));
}

int sd_mmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len, unsigned prot)
{
	bool in = syscall_enter(c);
	int err = mmap_check(c, mm, va, len, prot, "sd_mmap");

	return syscall_exit(c, in, err ? err : do_mmap(c, mm, va, len, prot, NULL, "sd_mmap"));
}

/* mmap() of a file, or (NULL @f, shared) of anonymous shared memory, whose
 * shmem file is made here and held by the mapping alone (shmem_zero_setup()). */
static int do_mmap_file(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len,
			unsigned prot, unsigned flags, struct sd_file *f, uint64_t offset)
{
	static const char who[] = "sd_mmap_file";
	int err = mmap_check(c, mm, va, len, prot, who);

	if (err)
		return err;
	if (flags & ~SD_MAP_SHARED)
		return sd_fail(-EINVAL, "%s: unknown flags 0x%x", who, flags);
	if (!f && !(flags & SD_MAP_SHARED))
		return sd_fail(-EINVAL, "%s: a private mapping needs a file (sd_mmap() maps private "
			       "anonymous memory)", who);
	if (offset & (SD_PAGE_SIZE - 1) || (!f && offset))
		return sd_fail(-EINVAL, "%s: offset 0x%llx is not page aligned, or not 0 for "
			       "anonymous shared memory", who, (unsigned long long)offset);
	if (f && f->m != c->m)
		return sd_fail(-EINVAL, "%s: the file belongs to another machine", who);
	if (f && (offset >> SD_PAGE_SHIFT > f->nr_pages ||
		  f->nr_pages - (offset >> SD_PAGE_SHIFT) < len >> SD_PAGE_SHIFT))
		return sd_fail(-EINVAL, "%s: [0x%llx, +0x%llx) is past the end of the file (%llu "
			       "pages; files do not grow here)", who, (unsigned long long)offset,
			       (unsigned long long)len, (unsigned long long)f->nr_pages);
	struct sd_file *anon = NULL;

	if (!f && sd_file_new(c->m, len >> SD_PAGE_SHIFT, &anon))
		return sd_fail(-ENOMEM, "%s: no memory for the shared memory's file", who);
	const struct sd_vma_backing b = {
		.file = f ? f : anon, .pgoff = offset >> SD_PAGE_SHIFT,
		.shared = flags & SD_MAP_SHARED,
	};

	err = do_mmap(c, mm, va, len, prot, &b, who);
	/* The mapping holds the anonymous file now, or nothing does. */
	if (anon)
		sd_file_put(anon);
	return err;
}

int sd_mmap_file(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len, unsigned prot,
		 unsigned flags, struct sd_file *f, uint64_t offset)
{
	bool in = syscall_enter(c);

	return syscall_exit(c, in, do_mmap_file(c, mm, va, len, prot, flags, f, offset));
}

int sd_munmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	bool in = syscall_enter(c);

	return syscall_exit(c, in, do_munmap(c, mm, va, len));
}

int sd_madvise_dontneed(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	bool in = syscall_enter(c);

	return syscall_exit(c, in, do_madvise_dontneed(c, mm, va, len));
}

int sd_mprotect(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len, unsigned prot)
{
	bool in = syscall_enter(c);

	return syscall_exit(c, in, do_mprotect(c, mm, va, len, prot));
}

/*
 * flush_tlb_range() on its own: the strategy's flush of a change that
 * changed nothing. Unlike sd_mm_flush_change(), no clock reads (the latency
 * histogram times mapping changes) and no quiescent state on every call
 * (its full fence would be most of a cheap flush): one every
 * SD_ACCESSES_PER_QS calls, as sd_access() does, so a loop of flushes
 * still lets grace periods end.
 */
int sd_flush_tlb_range(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len)
{
	struct sd_flush_req req = {
		.mm = mm, .vpn = va >> SD_PAGE_SHIFT, .nr = len >> SD_PAGE_SHIFT,
	};
	int err = sd_mm_check_change(c, mm, va, len, "sd_flush_tlb_range");

	if (err)
		return err;
	c->m->ops->flush_range(c, &req);
	sd_event(c, SD_EV_FLUSH_UNTIMED, req.vpn, req.nr);
	if (++c->ops_since_qs >= SD_ACCESSES_PER_QS)
		sd_cpu_qs(c);
	return 0;
}
