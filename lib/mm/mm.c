/* SPDX-License-Identifier: MIT */
/*
 * Address spaces: mapping changes, the access path and context switches.
 * A change edits PTEs under the mm's mmap_lock (for write, or for read
 * with each leaf table's split lock), drops it, asks the strategy to flush
 * (the initiator is the calling CPU), raises the oracle floors, and only then
 * frees frames and (after a grace period) page-table pages: the mmu_gather
 * order of zap, flush, free.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../core/rcu.h"
#include "../hw/event.h"

#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/machine.h"
#include "../hw/smp.h"
#include "flush_ops.h"
#include "lru.h"
#include "mm.h"

/* Pass a quiescent state every this many accesses, so a CPU that only
 * reads never holds a grace period back for long. */
#define SD_ACCESSES_PER_QS 64

int sd_mm_create(struct sd_machine *m, struct sd_mm **out)
{
	struct sd_mm *mm;
	int err;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_mm_create: NULL argument");
	mm = aligned_alloc(SD_CACHELINE, sizeof(*mm));
	if (!mm)
		return -ENOMEM;
	memset(mm, 0, sizeof(*mm));
	mm->m = m;
	mm->pgd = sd_pt_alloc();
	err = mm->pgd ? 0 : -ENOMEM;
	if (!err && m->checked)
		err = sd_oracle_floor_init(&mm->floor);
	if (!err)
		err = m->ops->mm_init(m, mm, &mm->strategy);
	if (err) {
		sd_oracle_floor_fini(&mm->floor);
		sd_pt_free(mm->pgd);
		free(mm);
		return err;
	}
	sd_rwsem_init(&mm->mmap_lock);
	mm->mmap_model = (struct sd_model_rwsem)SD_MODEL_RWSEM_INIT;
	atomic_init(&mm->batch_pending, 0);
	atomic_init(&mm->flush_pending, 0);
	mm->id = atomic_fetch_add(&m->next_mm_id, 1) + 1;
	/* Each mm's generations start in a range of their own, so a walk-cache
	 * entry left by a destroyed mm (whose tables sd_mm_destroy() frees at
	 * once) can never match a new mm that is given the same ASID, even
	 * by a strategy that reuses ASIDs without flushing walk caches. */
	atomic_init(&mm->table_gen, mm->id << 32);
	atomic_fetch_add(&m->nr_mms, 1);
	/* mm_alloc() + pgd_alloc() + init_new_context(): charged to the
	 * calling CPU if it is one of this machine's (a plain thread has no
	 * clock to charge). */
	struct sd_cpu *self = sd_this_cpu;
	if (self && self->m == m)
		sd_event(self, SD_EV_MM_CREATE, mm->id, 0);
	*out = mm;
	return 0;
}

struct teardown {
	struct sd_machine *m;
	uint64_t frames;        /* frames freed (modelled time) */
};

static void free_frame_of(uint64_t pte, void *arg)
{
	struct teardown *td = arg;

	/* The zero page is no frame of the pool's; a frame another mm still
	 * maps loses this mapping only. */
	if ((pte & SD_PTE_PRESENT) && !sd_pte_is_zero_page(pte) &&
	    sd_frame_put(&td->m->frames, NULL, sd_pte_pfn(pte)))
		td->frames++;
}

/*
 * 1 + the first CPU with @mm loaded (lazily or not), or 0. A scan rather
 * than a count: a counter would be two contended atomics on every context
 * switch, which Linux does not pay for switches between user tasks.
 * Switching to an mm while it is being destroyed is the caller's bug, as
 * for a task's mm in the kernel.
 */
static unsigned loaded_anywhere(const struct sd_mm *mm)
{
	const struct sd_machine *m = mm->m;

	for (unsigned i = 0; i < m->nr_cpus; i++)
		if (atomic_load_explicit(&m->cpus[i]->mm, memory_order_acquire) == mm)
			return i + 1;
	return 0;
}

/* 1 + the first CPU running @mm for real (not lazily), or 0. */
static unsigned running_anywhere(const struct sd_mm *mm)
{
	const struct sd_machine *m = mm->m;

	for (unsigned i = 0; i < m->nr_cpus; i++) {
		const struct sd_cpu *c = m->cpus[i];
		if (atomic_load_explicit(&c->mm, memory_order_acquire) == mm &&
		    !atomic_load_explicit(&c->lazy, memory_order_relaxed))
			return i + 1;
	}
	return 0;
}

/*
 * do_shoot_lazy_tlb(): on @c's own thread with interrupts off (the IPI
 * handler, or the destroyer on itself). If @c still holds @mm only lazily,
 * switch it to no mm (the kernel's switch to init_mm) through the strategy,
 * so its per-CPU state for @mm (loaded_mm, cpumask bits, active counts,
 * the ASID register) is released before the ack. A CPU that switched away
 * meanwhile, or back into @mm for real, is left alone: the destroyer sees
 * the latter in its rescan. The CPU stays idle (lazy) on no mm.
 */
static void drop_lazy_mm(struct sd_cpu *c, void *arg)
{
	struct sd_mm *mm = arg;

	if (atomic_load_explicit(&c->mm, memory_order_relaxed) != mm ||
	    !atomic_load_explicit(&c->lazy, memory_order_relaxed))
		return;
	c->m->ops->switch_mm(c, mm, NULL);
	/* Relaxed: the ack's release (ipi_run_queue()'s exchange to DONE)
	 * publishes it to the destroyer's rescan, which pairs with it through
	 * the acquire in sd_smp_call_wait(). */
	atomic_store_explicit(&c->mm, NULL, memory_order_relaxed);
}

/*
 * cleanup_lazy_tlbs() with CONFIG_MMU_LAZY_TLB_SHOOTDOWN: make every CPU
 * that holds @mm lazily drop it, IPIing the others and waiting for their
 * acks (interrupts on, so IPIs aimed at @self meanwhile are answered).
 * @self is the calling CPU of this machine, or NULL for a plain thread.
 */
static int shoot_lazy_cpus(struct sd_mm *mm, struct sd_cpu *self)
{
	struct sd_machine *m = mm->m;
	struct sd_smp_call_req *reqs = NULL;
	bool *posted = NULL;

	if (self && atomic_load_explicit(&self->mm, memory_order_relaxed) == mm) {
		sd_irq_off(self);
		drop_lazy_mm(self, mm);
		sd_irq_on(self);
	}
	if (!loaded_anywhere(mm))
		return 0;
	reqs = calloc(m->nr_cpus, sizeof(*reqs));
	posted = calloc(m->nr_cpus, sizeof(*posted));
	if (!reqs || !posted) {
		free(reqs);
		free(posted);
		return sd_fail(-ENOMEM, "sd_mm_destroy: no memory for the lazy-CPU IPIs");
	}
	/* Post to all first, then wait: the targets answer in parallel, as
	 * on_each_cpu_mask() does. A CPU with no thread (detaching) already
	 * switched to no mm before it went offline (sd_cpu_detach()). */
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		struct sd_cpu *t = m->cpus[i];
		if (t == self || atomic_load_explicit(&t->mm, memory_order_acquire) != mm)
			continue;
		reqs[i].fn = drop_lazy_mm;
		reqs[i].async = false;
		reqs[i].arg = mm;
		posted[i] = sd_smp_call_post(self, t, &reqs[i]);
	}
	for (unsigned i = 0; i < m->nr_cpus; i++)
		if (posted[i])
			sd_smp_call_wait(self, &reqs[i]);
	free(reqs);
	free(posted);
	return 0;
}

int sd_mm_destroy(struct sd_mm *mm)
{
	struct sd_cpu *self = sd_this_cpu;
	struct sd_machine *m;
	unsigned busy;
	int err;

	if (!mm)
		return sd_fail(-EINVAL, "sd_mm_destroy: NULL mm");
	m = mm->m;
	if (self && self->irq_depth)
		return sd_fail(-EDEADLK, "sd_mm_destroy: interrupts are off on CPU %u (it could "
			       "not wait for lazy CPUs)", self->id);
	if ((busy = running_anywhere(mm)))
		return sd_fail(-EBUSY, "mm %llu is still loaded on CPU %u (switch it out first)",
			       (unsigned long long)mm->id, busy - 1);
	if (atomic_load(&mm->batch_pending))
		return sd_fail(-EBUSY, "mm %llu is in a TLB batch that was not flushed yet",
			       (unsigned long long)mm->id);
	err = shoot_lazy_cpus(mm, self && self->m == m ? self : NULL);
	if (err)
		return err;
	/* A CPU switched back into it while we shot the lazy ones (the
	 * caller's bug, but caught when we can): nothing freed. */
	if ((busy = loaded_anywhere(mm)))
		return sd_fail(-EBUSY, "mm %llu was loaded again on CPU %u while being destroyed",
			       (unsigned long long)mm->id, busy - 1);
	/* No CPU has it loaded, so no walk of it is in flight: its tables can
	 * go now. Its ASID is never reused without a flush (arm64: a new
	 * generation flushes every CPU first). */
	struct teardown td = { m, 0 };
	uint64_t tables = sd_pt_free_tree(mm->pgd, free_frame_of, &td);
	m->ops->mm_fini(m, mm, mm->strategy);
	/* exit_mmap(): the frames still mapped, the tables below the top
	 * level, and the fixed part (pgd_free, destroy_context) on the
	 * destroying CPU if it is one of this machine's. */
	if (self && self->m == m) {
		if (td.frames)
			sd_event(self, SD_EV_PAGE_FREE, td.frames, 0);
		if (tables > 1)
			sd_event(self, SD_EV_PT_FREE, tables - 1, 0);
		sd_event(self, SD_EV_MM_DESTROY, 0, 0);
	}
	sd_vma_free_all(mm);
	sd_oracle_floor_fini(&mm->floor);
	free(mm);
	atomic_fetch_sub(&m->nr_mms, 1);
	return 0;
}

uint64_t sd_mm_id(const struct sd_mm *mm)
{
	if (!mm)
		return (uint64_t)sd_fail(0, "sd_mm_id: NULL mm");
	return mm->id;
}

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

static inline SD_ATOMIC(uint64_t) *pte_slot(struct sd_pt *leaf, uint64_t vpn)
{
	return &leaf->e[vpn & (SD_PT_ENTRIES - 1)];
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

static void flush_change(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
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
		flush_change(c, mm, vpn, nr, g->owed, freed_tables);
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
		flush_change(c, mm, vpn, nr, false, false);
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
static int mmap_check_free(struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	struct sd_vma *v = sd_vma_first_in(mm, vpn, nr);
	uint64_t start = v ? atomic_load_explicit(&v->start, memory_order_relaxed) : 0;

	if (!v)
		return 0;
	return sd_fail(-EEXIST, "sd_mmap: page 0x%llx already mapped",
		       (unsigned long long)((start > vpn ? start : vpn) << SD_PAGE_SHIFT));
}

static int do_mmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len, unsigned prot)
{
	uint64_t vpn = va >> SD_PAGE_SHIFT, nr = len >> SD_PAGE_SHIFT;
	struct sd_pt *leaf;
	SD_ATOMIC(uint64_t) *slot;
	int err = sd_mm_check_change(c, mm, va, len, "sd_mmap");

	if (err)
		return err;
	if (prot & ~(unsigned)(SD_PROT_READ | SD_PROT_WRITE))
		return sd_fail(-EINVAL, "sd_mmap: unknown prot bits 0x%x", prot);
	sd_mmap_lock(c, mm, SD_LOCK_MM);
	/* The kernel's VMA work (vma_merge or a new VMA), under the lock. */
	sd_event(c, SD_EV_VMA_CHANGE, 0, 0);
	err = mmap_check_free(mm, vpn, nr);
	if (!err && sd_vma_reserve(mm, 1))
		err = sd_fail(-ENOMEM, "sd_mmap: no memory for a VMA");
	if (!err)
		err = build_tables(c, mm, vpn, nr);
	if (err) {
		sd_mmap_unlock(c, mm, SD_LOCK_MM);
		return err;
	}
	/* The VMA first, as the kernel links it before any fault can find the
	 * range: a fault that finds the PTEs before we unlock finds the VMA
	 * write-locked and waits on the mmap_lock. */
	sd_vma_map(c, mm, vpn, nr, prot);
	uint32_t version = sd_mm_change_version(mm);
	uint64_t pte = sd_pte_make(0, SD_PTE_VMA | sd_pte_flags_from_prot(prot), version);
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
		uint64_t old = atomic_load_explicit(pte_slot(leaf, v), memory_order_relaxed);
		if (!old)
			continue;
		atomic_store_explicit(pte_slot(leaf, v), 0, memory_order_release);
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
		uint64_t old = atomic_load_explicit(pte_slot(leaf, v), memory_order_relaxed);
		if (!(old & SD_PTE_PRESENT))
			continue;
		if (z->kept_zero && sd_pte_is_zero_page(old)) {
			z->kept_zero(z->arg, v);
			continue;
		}
		atomic_store_explicit(pte_slot(leaf, v),
				      sd_pte_make(0, old & (SD_PTE_VMA | SD_PTE_PROT_MASK), z->version),
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
		uint64_t old = atomic_load_explicit(pte_slot(leaf, v), memory_order_relaxed);
		/* A write-protected page stays so (the zero page is never
		 * made writable: can_change_pte_writable()). */
		uint64_t keep = old & (SD_PTE_VMA | SD_PTE_PRESENT | SD_PTE_WRPROTECT);
		atomic_store_explicit(pte_slot(leaf, v),
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
	uint32_t version;
	bool checked;
};

static void fork_leaf(void *arg, struct sd_pt *leaf, uint64_t vpn, uint64_t end)
{
	const struct fork_copy *f = arg;
	struct sd_pt *dst = sd_pt_walk_leaf(f->child->pgd, vpn);

	for (uint64_t v = vpn; v < end; v++) {
		uint64_t old = atomic_load_explicit(pte_slot(leaf, v), memory_order_relaxed);
		uint64_t copy = old;

		if (!(old & SD_PTE_VMA))
			continue;
		if (old & SD_PTE_PRESENT) {
			copy = sd_pte_make(sd_pte_pfn(old), (old & SD_PTE_FLAGS_MASK) | SD_PTE_WRPROTECT,
					   f->version);
			atomic_store_explicit(pte_slot(leaf, v), copy, memory_order_release);
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
		atomic_store_explicit(pte_slot(dst, v), copy, memory_order_relaxed);
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
	/* The parent's PTEs write-protected and the child's written: two a page. */
	sd_event(c, SD_EV_PTE_UPDATE, 2 * g.ptes, 0);
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

	return syscall_exit(c, in, do_mmap(c, mm, va, len, prot));
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
 * changed nothing. Unlike flush_change(), no clock reads (the latency
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
 * First touch: populate the page (interrupts on, as the kernel's fault
 * handler runs), under the VMA's lock (fault_lock()) and the split lock of
 * the page's table (do_anonymous_page()), with the VMA's protection (the
 * kernel's vma->vm_page_prot): -EACCES if it forbids the access. A read maps the shared zero page,
 * write-protected: no frame, no LRU add, as do_anonymous_page() does for a
 * read of a private anonymous page. A write takes a frame, allocated before
 * the split lock as the kernel allocates the folio first; a fault that
 * loses the race for the PTE gives it back.
 */
static int populate(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, enum sd_access_kind kind)
{
	struct sd_pt *leaf;
	uint64_t pfn = 0;
	const bool zero = kind == SD_READ;
	bool used = false;

	if (c->irq_depth)
		return refuse_fault_irqs_off(c, vpn, "is not present");
	if (!zero && sd_frame_alloc(&c->m->frames, &c->frames, &pfn))
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
	if (leaf) {
		sd_ptl_lock(c, leaf);
		uint64_t pte = atomic_load_explicit(pte_slot(leaf, vpn), memory_order_relaxed);

		if ((pte & SD_PTE_VMA) && !(pte & SD_PTE_PRESENT)) {
			/* Checked mode: a page made present gets a floor slot, so
			 * the per-call floors find it (sd_oracle_floor_raise_known());
			 * out of memory, a missed check, never a false alarm. */
			if (c->checked)
				(void)sd_oracle_floor_touch(&mm->floor, vpn);
			uint64_t flags = SD_PTE_VMA | sd_pte_flags_from_prot(fault_prot(&f)) |
					 SD_PTE_PRESENT;
			atomic_store_explicit(pte_slot(leaf, vpn),
					      sd_pte_make(pfn, zero ? flags | SD_PTE_WRPROTECT : flags,
							  sd_mm_change_version(mm)),
					      memory_order_release);
			used = true;
			sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
		}
		sd_ptl_unlock(c, leaf);
	}
	fault_unlock(c, mm, &f);
	/* A population (page_faults), charged the exception's entry and exit
	 * outside the locks, where the kernel pays them; a new page its
	 * allocation, zeroing and charge, and it joins this CPU's LRU batch
	 * (folio_add_lru_vma(), which the kernel does under the split lock:
	 * here after it, which only shortens a hold that the drain, once a
	 * batch, would lengthen). */
	if (used) {
		sd_event(c, SD_EV_PAGE_FAULT, vpn, 0);
		if (zero) {
			sd_event(c, SD_EV_ZERO_PAGE_FAULT, vpn, 0);
		} else {
			sd_event(c, SD_EV_ANON_PAGE, 1, 0);
			sd_lru_add(c);
		}
	} else if (!zero) {
		sd_frame_free(&c->m->frames, &c->frames, pfn);
	}
	return err;
}

/*
 * A write to a write-protected PTE of a writable mapping: do_wp_page().
 * A frame no other mm maps is reused in place (wp_page_reuse(): the PTE
 * made writable, same translation, no flush: a CPU that cached it read-only
 * faults again and finds it writable). The zero page, or a frame fork left
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
	if (!sd_pte_is_zero_page(pte) && !sd_frame_shared(&c->m->frames, w->old_pfn)) {
		atomic_store_explicit(slot, pte & ~SD_PTE_WRPROTECT, memory_order_release);
		sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
		return WP_REUSED;
	}
	w->version = sd_mm_change_version(mm);
	if (!w->flush_after) {
		atomic_store_explicit(slot, sd_pte_make(0, keep, w->version), memory_order_release);
		sd_event(c, SD_EV_PTE_UPDATE, 1, 0);
		flush_change(c, mm, vpn, 1, false, false);
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
		SD_ATOMIC(uint64_t) *slot = pte_slot(leaf, vpn);
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
		flush_change(c, mm, vpn, 1, false, false);
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

static int walk_and_fill(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn,
			 enum sd_access_kind kind, uint64_t *pte_out)
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

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_access: " SD_NOT_ATTACHED);
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
		/* A cached entry that forbids the access may be older than the
		 * PTE: drop it and walk, as the kernel handles a spurious fault. */
		sd_tlb_drop(&c->tlb, vpn, c->asid);
	}
	sd_event(c, SD_EV_TLB_MISS, 0, 0);
	uint64_t pte;
	int err = walk_and_fill(c, mm, vpn, kind, &pte);
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

/* ---- context switch and idle ---- */

static void rcu_online(struct sd_cpu *c)
{
	if (!sd_rcu_online())
		sd_rcu_thread_online();
}

int sd_switch_mm(struct sd_cpu *c, struct sd_mm *next)
{
	struct sd_mm *prev;

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_switch_mm: " SD_NOT_ATTACHED);
	if (next && next->m != c->m)
		return sd_fail(-EINVAL, "sd_switch_mm: mm belongs to another machine");
	rcu_online(c);
	sd_order_point(SD_ORDER_SWITCH_ENTER, c->id);
	/* Modelled time: back from idle, at the running CPUs' time. */
	sd_event_run_state(c, SD_MODEL_RUNNING);
	sd_event(c, SD_EV_SWITCH_BEGIN, next ? next->id : 0, 0);
	sd_irq_off(c);
	/* Read under interrupts off: an IPI from sd_mm_destroy() may switch
	 * a lazy CPU away from its mm (drop_lazy_mm()), and a prev read
	 * before it would hand the strategy a stale, soon freed, mm. */
	prev = atomic_load_explicit(&c->mm, memory_order_relaxed);
	c->m->ops->switch_mm(c, prev, next);
	/* Release, pairing with the acquire in sd_mm_destroy()'s scans
	 * (loaded_anywhere(), running_anywhere()): a destroyer that sees
	 * this CPU gone from @prev frees it without an IPI, so everything
	 * this CPU did with @prev (switch_mm above, sd_cpu_idle()'s read of
	 * its id) must happen before. Any ordering other CPUs need for the
	 * flush (nr_active, cpumasks) is the strategy's, inside switch_mm. */
	atomic_store_explicit(&c->mm, next, memory_order_release);
	if (atomic_load_explicit(&c->lazy, memory_order_relaxed)) {
		atomic_store_explicit(&c->lazy, 0, memory_order_relaxed);
		sd_event(c, SD_EV_LAZY_LEAVE, next ? next->id : 0, 0);
	}
	sd_irq_on(c);
	sd_event(c, SD_EV_SWITCH_END, 0, 0);
	sd_cpu_qs(c);
	return 0;
}

void sd_cpu_enter_lazy(struct sd_cpu *c)
{
	struct sd_mm *mm;

	sd_irq_off(c);
	/* Under interrupts off, as in sd_switch_mm(). */
	mm = atomic_load_explicit(&c->mm, memory_order_relaxed);
	if (!atomic_load_explicit(&c->lazy, memory_order_relaxed)) {
		if (mm && c->m->ops->enter_lazy)
			c->m->ops->enter_lazy(c, mm);
		sd_event(c, SD_EV_LAZY_ENTER, mm ? mm->id : 0, 0);
	}
	atomic_store_explicit(&c->lazy, 1, memory_order_relaxed);
	sd_irq_on(c);
}

int sd_cpu_idle(struct sd_cpu *c)
{
	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_idle: " SD_NOT_ATTACHED);
	sd_cpu_enter_lazy(c);
	/* Modelled time: an idle CPU holds nobody back; in strict mode it
	 * first takes the IPIs already on their way. */
	sd_smp_seq_settle(c);
	sd_event_run_state(c, SD_MODEL_IDLE);
	/* Idle is an extended quiescent state: grace periods need nothing
	 * from this CPU until it switches to an mm again. */
	if (sd_rcu_online())
		sd_rcu_thread_offline();
	return 0;
}

struct sd_mm *sd_cpu_current_mm(const struct sd_cpu *c)
{
	if (!c) {
		sd_fail(0, "sd_cpu_current_mm: NULL CPU");
		return NULL;
	}
	return atomic_load_explicit(&c->mm, memory_order_relaxed);
}
