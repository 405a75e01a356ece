/* SPDX-License-Identifier: MIT */
/*
 * The access path: a TLB hit, or a walk and a fill, or a fault (the
 * zero page, a new page, a copy-on-write break) under the VMA's lock.
 */
#include <errno.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "file.h"
#include "flush_ops.h"
#include "lru.h"
#include "mm.h"

/* ---- the access path ---- */

/* What a cached translation (a TLB hit) permits: the mapping's protection,
 * and no write through a write-protected PTE (the hardware faults). */
static inline bool pte_allows(uint64_t pte, enum sd_access_kind kind)
{
	if (kind == SD_WRITE)
		return (pte & (SD_PTE_WRITE | SD_PTE_WRPROTECT)) == SD_PTE_WRITE;
	return pte & SD_PTE_READ;
}

/* What the mapping permits (-EACCES otherwise): its protection alone. */
static inline bool vma_allows(uint64_t pte, enum sd_access_kind kind)
{
	return pte & (kind == SD_WRITE ? SD_PTE_WRITE : SD_PTE_READ);
}

/* The kernel takes no fault with interrupts off (a uaccess there is a
 * fixup, faulthandler_disabled()); here a fault would wait for the
 * mmap_lock, whose holder may be flushing and waiting for this CPU's IPI
 * (finish_flush()). */
static int refuse_fault_irqs_off(struct sd_cpu *c, uint64_t vpn, const char *what)
{
	return sd_fail(-EDEADLK, "sd_access: page 0x%llx %s and interrupts are off: a fault is "
		       "not taken with interrupts off (touch it with them on)",
		       (unsigned long long)(vpn << SD_PAGE_SHIFT), what);
}

/* What a VMA's protection permits (access_error()). */
static inline bool prot_allows(unsigned prot, enum sd_access_kind kind)
{
	return prot & (kind == SD_WRITE ? SD_PROT_WRITE : SD_PROT_READ);
}

/*
 * The lock a fault holds (do_user_addr_fault()): its VMA's, for read, found
 * under RCU (lock_vma_under_rcu()); when that fails, because no VMA was
 * found or it is being changed (write-locked, or detached), the mmap_lock
 * for read and the VMA looked up under it (lock_mm_and_find_vma(), the
 * kernel's retry). @vma is NULL when no VMA maps the page: the caller
 * changes nothing, and the access's walk again finds no mapping (-EFAULT,
 * as before VMAs were objects).
 */
struct fault_lock {
	struct sd_vma *vma;
	bool mm_locked;
};

static void fault_lock(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, struct fault_lock *f)
{
	f->vma = sd_lock_vma_under_rcu(c, mm, vpn);
	f->mm_locked = !f->vma;
	if (f->vma)
		return;
	sd_mmap_lock(c, mm, SD_LOCK_MM_READ);
	f->vma = sd_vma_find(mm, vpn);
}

static void fault_unlock(struct sd_cpu *c, struct sd_mm *mm, struct fault_lock *f)
{
	if (f->mm_locked)
		sd_mmap_unlock(c, mm, SD_LOCK_MM_READ);
	else
		sd_vma_end_read(c, f->vma);
}

/* The VMA's protection, stable under either hold of fault_lock(). */
static unsigned fault_prot(const struct fault_lock *f)
{
	return atomic_load_explicit(&f->vma->prot, memory_order_relaxed);
}

/*
 * What a first touch maps, decided under the fault's lock: a frame (0: the
 * zero page) and the PTE's flags beyond the mapping's. @anon_pfn is the
 * frame a write allocated before the locks; @used says whether the PTE
 * took it. A file's page (file.h) is looked up, or read into its page
 * cache, here: the kernel's __do_fault() runs under the VMA's lock too.
 */
struct first_touch {
	uint64_t anon_pfn;
	uint64_t pfn;
	uint64_t flags;
	bool file_page;         /* @pfn is a cached frame: the PTE shares it */
	bool cache_added;       /* this fault read it into the cache */
	bool copied;            /* @anon_pfn is a copy of a file's page */
	bool used;
};

/*
 * The page of a file mapping: do_shared_fault() maps the cached frame
 * (writable if the mapping is: tmpfs asks for no write notification);
 * do_read_fault() of a private mapping maps it write-protected;
 * do_cow_fault() copies it into @anon_pfn. The cache holds its frame
 * either way.
 */
static int file_touch(struct sd_cpu *c, struct sd_vma *vma, uint64_t vpn,
		      enum sd_access_kind kind, struct first_touch *t)
{
	const uint64_t pgoff = vma->pgoff + (vpn - atomic_load_explicit(&vma->start,
									 memory_order_relaxed));
	uint64_t cached;

	/* shmem_fault()/filemap_fault(): the page-cache lookup, the folio's
	 * lock and reference, and finish_fault()'s file rmap, on top of the
	 * fault's entry (page_fault_entry). */
	const bool map = vma->shared || kind == SD_READ;

	sd_event(c, SD_EV_FILE_FAULT, vpn, 0);
	/* A page this fault maps is held for its PTE from the lookup on
	 * (sd_file_page(), file.h): an eviction cannot take it meanwhile. */
	if (sd_file_page(c, vma->file, pgoff, map, &cached, &t->cache_added))
		return sd_fail(-ENOMEM, "sd_access: out of frames");
	/* Test instrumentation: an eviction may look at the page now. */
	sd_order_point(SD_ORDER_FILE_LOOKED_UP, c->id);
	if (vma->shared) {
		t->pfn = cached;
		t->flags = SD_PTE_SHARED;
		t->file_page = true;
	} else if (kind == SD_READ) {
		t->pfn = cached;
		t->flags = SD_PTE_WRPROTECT;
		t->file_page = true;
	} else {
		t->pfn = t->anon_pfn;
		t->flags = 0;
		t->copied = true;
	}
	return 0;
}

/*
 * do_fault_around(): a read fault of a file mapping maps, besides its page,
 * the neighbours already in the page cache that no PTE maps yet, within
 * the 16-page aligned window around it (fault_around_bytes' 64 KiB), the
 * VMA and the page's table (filemap_map_pages()), under the split lock the
 * fault holds. Each is mapped as a read fault would map it (file_touch():
 * writable in a shared mapping, write-protected in a private one) at the
 * mm's current version. Returns the pages mapped.
 */
#define SD_FAULT_AROUND_PAGES 16

static unsigned fault_around(struct sd_cpu *c, struct sd_mm *mm, struct sd_vma *vma,
			     struct sd_pt *leaf, uint64_t vpn, unsigned prot)
{
	const uint64_t vstart = atomic_load_explicit(&vma->start, memory_order_relaxed);
	const uint64_t vend = atomic_load_explicit(&vma->end, memory_order_relaxed);
	uint64_t from = vpn & ~(uint64_t)(SD_FAULT_AROUND_PAGES - 1);
	uint64_t to = from + SD_FAULT_AROUND_PAGES;
	const uint64_t flags = SD_PTE_VMA | sd_pte_flags_from_prot(prot) | SD_PTE_PRESENT |
			       (vma->shared ? SD_PTE_SHARED : SD_PTE_WRPROTECT);
	const uint32_t version = sd_mm_change_version(mm);
	struct { uint64_t vpn, pfn; } found[SD_FAULT_AROUND_PAGES];
	unsigned nr = 0, mapped = 0;

	from = from > vstart ? from : vstart;
	to = to < vend ? to : vend;
	/* The window's look-ups under one hold of the file's lock, each
	 * cached page held for its PTE there (file.h); the PTEs are set after,
	 * under the split lock we keep throughout, so no slot changes. */
	sd_spin_lock(&vma->file->lock);
	for (uint64_t v = from; v < to; v++) {
		uint64_t pte = atomic_load_explicit(sd_pt_slot(leaf, v), memory_order_relaxed);
		uint64_t pfn;

		if (v == vpn || !(pte & SD_PTE_VMA) || (pte & SD_PTE_PRESENT))
			continue;
		pfn = sd_file_map_cached_locked(c, vma->file, vma->pgoff + (v - vstart));
		if (pfn) {
			found[nr].vpn = v;
			found[nr++].pfn = pfn;
		}
	}
	sd_spin_unlock(&vma->file->lock);
	for (; mapped < nr; mapped++) {
		if (c->checked)
			(void)sd_oracle_floor_touch(&mm->floor, found[mapped].vpn);
		atomic_store_explicit(sd_pt_slot(leaf, found[mapped].vpn),
				      sd_pte_make(found[mapped].pfn, flags, version),
				      memory_order_release);
	}
	if (mapped) {
		sd_event(c, SD_EV_PTE_UPDATE, mapped, 0);
		sd_event(c, SD_EV_FAULT_AROUND, mapped, 0);
	}
	return mapped;
}

/*
 * A population (page_faults), charged the exception's entry and exit
 * outside the locks, where the kernel pays them; a new page its
 * allocation, zeroing (or copying) and charge, and it joins this CPU's LRU
 * batch (folio_add_lru_vma(), which the kernel does under the split lock:
 * here after it, which only shortens a hold that the drain, once a batch,
 * would lengthen). A page read into a file's cache is such a page too,
 * whether or not this fault's PTE was the one that mapped it. The frame a
 * write took first goes back if no PTE took it.
 */
static void populate_charge(struct sd_cpu *c, uint64_t vpn, const struct first_touch *t)
{
	const bool anon_used = t->used && !t->file_page && t->pfn;

	/* The hold a file page's look-up took for a PTE that another fault
	 * set first (file.h). */
	if (t->file_page && !t->used)
		(void)sd_frame_put(&c->m->frames, &c->frames, t->pfn);
	if (t->cache_added) {
		sd_event(c, SD_EV_ANON_PAGE, 1, 0);
		sd_lru_add(c);
	}
	if (t->anon_pfn && !anon_used)
		sd_frame_free(&c->m->frames, &c->frames, t->anon_pfn);
	if (!t->used)
		return;
	sd_event(c, SD_EV_PAGE_FAULT, vpn, 0);
	if (t->file_page)
		return;
	if (!t->pfn) {
		sd_event(c, SD_EV_ZERO_PAGE_FAULT, vpn, 0);
		return;
	}
	sd_event(c, SD_EV_ANON_PAGE, !t->copied, 0);
	sd_lru_add(c);
}

/*
 * First touch: populate the page (interrupts on, as the kernel's fault
 * handler runs), under the VMA's lock (fault_lock()) and the split lock of
 * the page's table (do_anonymous_page()), with the VMA's protection (the
 * kernel's vma->vm_page_prot): -EACCES if it forbids the access. A read maps the shared zero page,
 * write-protected: no frame, no LRU add, as do_anonymous_page() does for a
 * read of a private anonymous page. A write takes a frame, allocated before
 * the split lock as the kernel allocates the folio first; a fault that
 * loses the race for the PTE gives it back. A file mapping's page is
 * file_touch()'s.
 */
static int populate(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, enum sd_access_kind kind)
{
	struct sd_pt *leaf;
	struct first_touch t = { 0 };

	if (c->irq_depth)
		return refuse_fault_irqs_off(c, vpn, "is not present");
	if (kind == SD_WRITE && sd_frame_alloc(&c->m->frames, &c->frames, &t.anon_pfn))
		return sd_fail(-ENOMEM, "sd_access: out of frames");
	struct fault_lock f;
	int err = 0;

	fault_lock(c, mm, vpn, &f);
	/* Tables are linked and unlinked under the mmap_lock for write only,
	 * and never a table that maps a page of a VMA that is not changed
	 * (sd_pt_unlink_empty() takes empty ones), which ours is not while
	 * we hold its lock. */
	leaf = f.vma ? sd_pt_walk_leaf(mm->pgd, vpn) : NULL;
	if (leaf && !prot_allows(fault_prot(&f), kind)) {
		err = -EACCES;
		leaf = NULL;
	}
	if (leaf && f.vma->file) {
		err = file_touch(c, f.vma, vpn, kind, &t);
		if (err)
			leaf = NULL;
	} else {
		t.pfn = t.anon_pfn;
		t.flags = kind == SD_READ ? SD_PTE_WRPROTECT : 0;
	}
	if (leaf) {
		sd_ptl_lock(c, leaf);
		uint64_t pte = atomic_load_explicit(sd_pt_slot(leaf, vpn), memory_order_relaxed);

		if ((pte & SD_PTE_VMA) && !(pte & SD_PTE_PRESENT)) {
			/* Checked mode: a page made present gets a floor slot, so
			 * the per-call floors find it (sd_oracle_floor_raise_known());
			 * out of memory, a missed check, never a false alarm. */
			if (c->checked)
				(void)sd_oracle_floor_touch(&mm->floor, vpn);
			uint64_t flags = SD_PTE_VMA | sd_pte_flags_from_prot(fault_prot(&f)) |
					 SD_PTE_PRESENT | (pte & SD_PTE_SHARED) | t.flags;
			atomic_store_explicit(sd_pt_slot(leaf, vpn),
					      sd_pte_make(t.pfn, flags, sd_mm_change_version(mm)),
					      memory_order_release);
			t.used = true;
			sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
		}
		if (kind == SD_READ && f.vma->file)
			(void)fault_around(c, mm, f.vma, leaf, vpn, fault_prot(&f));
		sd_ptl_unlock(c, leaf);
	}
	fault_unlock(c, mm, &f);
	populate_charge(c, vpn, &t);
	return err;
}

/*
 * A write to a write-protected PTE of a writable mapping: do_wp_page().
 * A frame no other mm maps is reused in place (wp_page_reuse(): the PTE
 * made writable, same translation; the strategy's wp_reuse_flush, arm64's
 * flush of the page, or none on x86: a CPU that cached it read-only takes
 * a spurious fault and finds it writable). The zero page, or a frame fork left
 * shared, is copied (wp_page_copy()), under the split lock as the kernel
 * does it: the PTE is cleared (kept a non-present mapping, so a walker that
 * comes meanwhile faults and waits for this lock), flushed from every TLB
 * that may hold it (ptep_clear_flush(): a one-page shootdown of the mm),
 * then set to the new page, writable; the old frame loses this mapping
 * after the flush. Other CPUs' faults on the table wait on the split lock
 * and answer this flush's IPIs while they wait (their interrupts are on:
 * populate() and this path refuse them off; changes refuse them too,
 * sd_mm_check_change()).
 *
 * A user strategy's flush may wait for other CPUs to reach points of the
 * program's own, which a CPU spinning on the split lock never reaches: for
 * it the PTE is set first and flushed after the unlock, as its changes
 * flush after the mmap_lock (finish_change_locked()). Either way, once the
 * flush is done no access may use the old translation: the page's floor
 * rises to the new PTE's version.
 */
/*
 * The reuse's flush of the page (wp_reuse_flush), counted and timed as a
 * flush: the perf profile of Huang Ying's measurement counts
 * __ptep_set_access_flags()'s flush_tlb_page() among its "TLB flush
 * functions". A spurious fault's repair is not timed so: it is charged as
 * the local TLBI it is, and before 6.19 there is none to time.
 */
static void fault_page_flush(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn,
			     void (*flush)(struct sd_cpu *, struct sd_mm *, uint64_t))
{
	uint64_t t0;

	sd_event(c, SD_EV_FLUSH_BEGIN, vpn, sd_flush_aux(SD_FLUSH_LOCAL_SHOOTDOWN, 1));
	t0 = sd_event_flush_start(c);
	flush(c, mm, vpn);
	sd_event(c, SD_EV_FLUSH_END, sd_event_flush_ns(c, t0), SD_FLUSH_LOCAL_SHOOTDOWN);
}

enum wp_outcome { WP_RACED, WP_REUSED, WP_COPIED };

struct wp_copy {
	uint64_t pfn, old_pfn;
	uint32_t version;
	bool flush_after;
};

static enum wp_outcome wp_handle(struct sd_cpu *c, struct sd_mm *mm, SD_ATOMIC(uint64_t) *slot,
				 uint64_t vpn, uint64_t pte, struct wp_copy *w)
{
	const uint64_t keep = pte & (SD_PTE_VMA | SD_PTE_PROT_MASK);

	w->old_pfn = sd_pte_pfn(pte);
	/* A shared mapping's page is made writable in place, whoever else
	 * maps its frame (wp_page_shared()); a private one's only if nothing
	 * else holds it (a file's cached frame is held by the cache). */
	if ((pte & SD_PTE_SHARED) ||
	    (!sd_pte_is_zero_page(pte) && !sd_frame_shared(&c->m->frames, w->old_pfn))) {
		atomic_store_explicit(slot, pte & ~SD_PTE_WRPROTECT, memory_order_release);
		sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
		/* __ptep_set_access_flags(): arm64 flushes the page, still under
		 * the split lock; x86 does not. Same frame, more permission:
		 * a stale read-only entry left anywhere is safe (its next write
		 * takes a spurious fault), so the floor does not rise. */
		if (c->m->ops->wp_reuse_flush)
			fault_page_flush(c, mm, vpn, c->m->ops->wp_reuse_flush);
		return WP_REUSED;
	}
	w->version = sd_mm_change_version(mm);
	if (!w->flush_after) {
		atomic_store_explicit(slot, sd_pte_make(0, keep, w->version), memory_order_release);
		sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
		sd_mm_flush_change(c, mm, vpn, 1, false, false);
	}
	atomic_store_explicit(slot, sd_pte_make(w->pfn, keep | SD_PTE_PRESENT, w->version),
			      memory_order_release);
	sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
	return WP_COPIED;
}

static int wp_fault(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn)
{
	struct wp_copy w = { .flush_after = c->m->ops->user };
	enum wp_outcome done = WP_RACED;
	struct sd_pt *leaf;

	if (c->irq_depth)
		return refuse_fault_irqs_off(c, vpn, "is write-protected");
	/* The copy's page, taken before the locks as wp_page_copy() takes it
	 * (given back if the page is reused or the PTE changed meanwhile). */
	if (sd_frame_alloc(&c->m->frames, &c->frames, &w.pfn))
		return sd_fail(-ENOMEM, "sd_access: out of frames");
	struct fault_lock f;
	int err = 0;

	fault_lock(c, mm, vpn, &f);
	leaf = f.vma ? sd_pt_walk_leaf(mm->pgd, vpn) : NULL;
	if (leaf && !prot_allows(fault_prot(&f), SD_WRITE)) {
		err = -EACCES;
		leaf = NULL;
	}
	if (leaf) {
		sd_ptl_lock(c, leaf);
		/* Test instrumentation: another CPU's break may be waiting. */
		sd_order_point(SD_ORDER_WP_LOCKED, c->id);
		SD_ATOMIC(uint64_t) *slot = sd_pt_slot(leaf, vpn);
		uint64_t pte = atomic_load_explicit(slot, memory_order_relaxed);
		const uint64_t wp = SD_PTE_PRESENT | SD_PTE_WRPROTECT | SD_PTE_WRITE;

		/* pte_same(): still the write-protected page we faulted on. */
		if ((pte & wp) == wp)
			done = wp_handle(c, mm, slot, vpn, pte, &w);
		sd_ptl_unlock(c, leaf);
	}
	fault_unlock(c, mm, &f);
	if (done != WP_COPIED)
		sd_frame_free(&c->m->frames, &c->frames, w.pfn);
	if (done == WP_RACED)
		return err;
	sd_event(c, SD_EV_PAGE_FAULT, vpn, 0);
	sd_event(c, SD_EV_WP_FAULT, vpn, 0);
	if (done == WP_REUSED)
		return 0;
	if (w.flush_after)
		sd_mm_flush_change(c, mm, vpn, 1, false, false);
	if (c->checked)
		sd_oracle_floor_raise_known(&mm->floor, vpn, 1, w.version);
	/* The zero page is cleared into the new page, a frame copied. */
	sd_event(c, SD_EV_ANON_PAGE, w.old_pfn == 0, 0);
	sd_lru_add(c);
	if (w.old_pfn)
		sd_mm_free_frames(c, &w.old_pfn, 1);
	return 0;
}

static void report_violation(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn,
			     const struct sd_tlb_hit *hit, uint32_t floor)
{
	struct sd_violation v = {
		.kind = (uint32_t)hit->owner != (uint32_t)mm->id ? SD_VIOLATION_FOREIGN
								   : SD_VIOLATION_STALE,
		.cpu = c->id,
		.mm_id = mm->id,
		.entry_mm_id = hit->owner,
		.va = vpn << SD_PAGE_SHIFT,
		.entry_version = sd_pte_version(hit->pte),
		.floor_version = floor,
	};

	sd_event(c, SD_EV_VIOLATION, vpn, 0);
	sd_oracle_record(&c->m->oracle, &v);
}

/* The walk and the fill; a fault when the PTE does not allow @kind, unless
 * @speculative (the walker alone, which never faults: -EAGAIN). *@faulted
 * says whether a fault ran (NULL: not asked). */
static int walk_and_fill(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn,
			 enum sd_access_kind kind, uint64_t *pte_out, bool speculative,
			 bool *faulted)
{
	for (;;) {
		sd_irq_off(c);
		uint64_t snap = sd_tlb_fill_begin(&c->tlb);
		/* Before the walk-cache lookup and the walk; pairs with the
		 * release bump in sd_munmap() (see sd_mm.table_gen). */
		uint64_t table_gen = atomic_load_explicit(&mm->table_gen, memory_order_acquire);
		struct sd_pt *leaf = sd_tlb_walk_cache_lookup_gen(&c->tlb, vpn, c->asid, table_gen);

		/* PAGE_WALK's argument: the table levels read (the walk cache
		 * holds the leaf table, so a hit reads only the PTE). */
		unsigned levels = 1;
		if (leaf) {
			sd_event(c, SD_EV_WALK_CACHE_HIT, 0, 0);
		} else {
			leaf = sd_pt_walk_leaf(mm->pgd, vpn);
			levels = SD_PT_LEVELS;
		}
		sd_event(c, SD_EV_PAGE_WALK, levels, 0);
		uint64_t pte = leaf ? atomic_load_explicit(&leaf->e[vpn & (SD_PT_ENTRIES - 1)],
							   memory_order_acquire)
				    : 0;

		if (!(pte & SD_PTE_VMA)) {
			sd_irq_on(c);
			return -EFAULT;
		}
		/* A present page: its PTE carries its VMA's protection. A page
		 * not present faults, and the fault asks the VMA. */
		if ((pte & SD_PTE_PRESENT) && !vma_allows(pte, kind)) {
			sd_irq_on(c);
			return -EACCES;
		}
		if ((pte & SD_PTE_PRESENT) && pte_allows(pte, kind)) {
			if (sd_tlb_fill_commit_gen(&c->tlb, snap, vpn, c->asid, pte, (uint32_t)mm->id,
						   leaf, table_gen))
				sd_event(c, SD_EV_TLB_FILL, vpn, 0);
			else
				sd_event(c, SD_EV_TLB_FILL_RACED, vpn, 0);
			sd_irq_on(c);
			*pte_out = pte;
			return 0;
		}
		sd_irq_on(c);
		if (speculative)
			return -EAGAIN;
		if (faulted)
			*faulted = true;
		int err = (pte & SD_PTE_PRESENT) ? wp_fault(c, mm, vpn) : populate(c, mm, vpn, kind);
		if (err)
			return err;
	}
}

/* Everything but an unchecked L1 hit: L2, the walk, the oracle, errors. */
static __attribute__((noinline)) int access_slow(struct sd_cpu *c, uint64_t va,
						 enum sd_access_kind kind, uint64_t *pfn)
{
	struct sd_tlb_hit hit;
	uint64_t vpn = va >> SD_PAGE_SHIFT;
	uint32_t floor = 0;
	bool stale = false;

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_access: " SD_NOT_ATTACHED);
	/* An instruction boundary: RAR requests that came with interrupts
	 * off are serviced here (every TLB miss, every SD_ACCESSES_PER_QS
	 * accesses), before the access. */
	sd_smp_boundary(c);
	if ((unsigned)kind > SD_WRITE)
		return sd_fail(-EINVAL, "sd_access: unknown access kind %u", (unsigned)kind);
	struct sd_mm *mm = atomic_load_explicit(&c->mm, memory_order_relaxed);
	if (!mm || atomic_load_explicit(&c->lazy, memory_order_relaxed))
		return sd_fail_lazy(-ESRCH, "sd_access(0x%llx): no address space loaded "
				    "(none switched in, or the CPU is idle)", va);
	if (va >= SD_VA_END)
		return sd_fail_lazy(-EFAULT, "sd_access: 0x%llx is outside the 48-bit VA space",
				    va);

	const bool checked = c->checked;
	/* Oracle: the floor is read before the lookup, so a raise we see
	 * belongs to a flush that returned before this access started. */
	if (checked)
		floor = sd_oracle_floor_get(&mm->floor, vpn);

	if (sd_tlb_lookup_l1(&c->tlb, vpn, c->asid, checked, &hit) ||
	    sd_tlb_lookup_l2(&c->tlb, vpn, c->asid, checked, &hit)) {
		if (pte_allows(hit.pte, kind)) {
			sd_event(c, hit.l1 ? SD_EV_TLB_L1_HIT : SD_EV_TLB_L2_HIT, 0, 0);
			if (checked && (sd_pte_version(hit.pte) < floor ||
					hit.owner != (uint32_t)mm->id))
				report_violation(c, mm, vpn, &hit, floor);
			if (pfn)
				*pfn = sd_pte_pfn(hit.pte);
			return 0;
		}
		/* The cached entry forbids the access: the hardware faults. The
		 * entry may be older and less permissive than the PTE (a page
		 * reused writable elsewhere without a broadcast flush): the
		 * fault then finds the PTE allowing it, a spurious fault, which
		 * x86 repairs by the fault itself evicting the entry and arm64
		 * by a local invalidate (spurious_fixup). */
		sd_tlb_drop(&c->tlb, vpn, c->asid);
		stale = true;
	}
	sd_event(c, SD_EV_TLB_MISS, 0, 0);
	uint64_t pte;
	bool faulted = false;
	int err = walk_and_fill(c, mm, vpn, kind, &pte, false, &faulted);
	if (stale && !err && !faulted) {
		sd_event(c, SD_EV_SPURIOUS_FAULT, vpn, 0);
		if (c->m->ops->spurious_fixup)
			c->m->ops->spurious_fixup(c, mm, vpn);
	}
	if (!err && pfn)
		*pfn = sd_pte_pfn(pte);
	if (err == -EFAULT)
		return sd_fail_lazy(err, "sd_access: 0x%llx is not mapped", va);
	if (err == -EACCES)
		return sd_fail_lazy(err, kind == SD_WRITE ? "sd_access: the protection of 0x%llx forbids writes"
							  : "sd_access: the protection of 0x%llx forbids reads", va);
	return err;
}

/* The L1 probe of sd_access()'s fast path, without the rest of it. */
int sd_mm_walk_speculative(struct sd_cpu *c, struct sd_mm *mm, uint64_t va)
{
	uint64_t pte;

	return walk_and_fill(c, mm, va >> SD_PAGE_SHIFT, SD_READ, &pte, true, NULL);
}

int sd_tlb_probe(const struct sd_cpu *c, uint64_t va, uint64_t *pfn)
{
	struct sd_tlb_hit hit;
	struct sd_cpu *self = sd_this_cpu;

	if (!c || c != self)
		return sd_fail(-EPERM, "sd_tlb_probe: " SD_NOT_ATTACHED);
	/* Owner only: @self is @c, so the L1 (written by us, invalidated by
	 * others through atomics) may be read as sd_access() reads it. */
	if (!sd_tlb_lookup_l1(&self->tlb, va >> SD_PAGE_SHIFT, self->asid, false, &hit))
		return 0;
	if (pfn)
		*pfn = sd_pte_pfn(hit.pte);
	return 1;
}

/*
 * The hit path is kept to what a hardware L1 TLB hit costs an emulator: the
 * attached-thread check (an initial-exec TLS load), the loaded mm, one L1
 * probe, one private counter. Anything else goes out of line, so the hit
 * pays no frame setup for the miss path.
 */
int sd_access(struct sd_cpu *c, uint64_t va, enum sd_access_kind kind, uint64_t *pfn)
{
	struct sd_tlb_hit hit;
	uint64_t vpn = va >> SD_PAGE_SHIFT;

	/* An unknown kind (above SD_WRITE) is folded into the VA bound, so
	 * it goes to the slow path, which refuses it, without a branch of
	 * its own on the hit path (a separate one cost about 3% of a hit). */
	uint64_t bound_check = va | (uint64_t)((unsigned)kind > SD_WRITE) << SD_VA_BITS;

	if (likely(c && c == sd_this_cpu && !c->checked && bound_check < SD_VA_END &&
		   atomic_load_explicit(&c->mm, memory_order_relaxed) &&
		   !atomic_load_explicit(&c->lazy, memory_order_relaxed) &&
		   ++c->ops_since_qs < SD_ACCESSES_PER_QS &&
		   sd_tlb_lookup_l1(&c->tlb, vpn, c->asid, false, &hit) &&
		   pte_allows(hit.pte, kind))) {
		sd_event(c, SD_EV_TLB_L1_HIT, 0, 0);
		if (pfn)
			*pfn = sd_pte_pfn(hit.pte);
		return 0;
	}
	if (c && c == sd_this_cpu && c->ops_since_qs >= SD_ACCESSES_PER_QS && !c->irq_depth)
		sd_cpu_qs(c);
	return access_slow(c, va, kind, pfn);
}
