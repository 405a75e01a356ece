/* SPDX-License-Identifier: MIT */
/*
 * VMAs as objects (vma.h): the sorted list, merging and splitting, the
 * per-VMA lock. The list changes only under the mm's mmap_lock for write;
 * faults read it under RCU. The mirrored kernel functions are named at each
 * step: vma_merge() / is_mergeable_vma() (mm/vma.c), __split_vma(),
 * vma_modify_flags(), vma_start_write(), vma_end_write_all(),
 * lock_vma_under_rcu(), dup_mmap().
 */
#include <errno.h>
#include <stdlib.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "file.h"
#include "mm.h"
#include "vma.h"

static inline struct sd_vma *vma_next(struct sd_vma *v)
{
	/* Acquire: pairs with the release of the link store that made the
	 * VMA reachable (vma_link(), vma_unlink()), so its fields are seen
	 * as initialised. */
	return atomic_load_explicit(&v->next, memory_order_acquire);
}

static inline struct sd_vma *vma_head(struct sd_mm *mm)
{
	return atomic_load_explicit(&mm->vmas.head, memory_order_acquire);
}

/* Relaxed: a reader re-checks them under the VMA's lock, whose acquire
 * pairs with the writer's unlock; the writer holds the mmap_lock. */
static inline uint64_t vma_start(struct sd_vma *v)
{
	return atomic_load_explicit(&v->start, memory_order_relaxed);
}

static inline uint64_t vma_end(struct sd_vma *v)
{
	return atomic_load_explicit(&v->end, memory_order_relaxed);
}

static inline unsigned vma_prot(struct sd_vma *v)
{
	return atomic_load_explicit(&v->prot, memory_order_relaxed);
}

static const struct sd_vma_backing anon_private = { NULL, 0, false };

/* The backing of @v (its file referenced again by the caller's new VMA). */
static struct sd_vma_backing vma_backing(const struct sd_vma *v)
{
	return (struct sd_vma_backing){ v->file, v->pgoff, v->shared };
}

static void vma_init(struct sd_vma *v, uint64_t start, uint64_t end, unsigned prot,
		     const struct sd_vma_backing *b)
{
	v->file = b->file;
	v->pgoff = b->pgoff;
	v->shared = b->shared;
	if (v->file)
		sd_file_get(v->file);
	atomic_init(&v->next, NULL);
	atomic_init(&v->start, start);
	atomic_init(&v->end, end);
	atomic_init(&v->prot, prot);
	atomic_init(&v->detached, false);
	sd_rwsem_init(&v->lock);
	v->model = (struct sd_model_rwsem)SD_MODEL_RWSEM_INIT;
	v->locked_next = NULL;
	v->write_locked = false;
}

/* The walk of both sides: the first VMA that ends after @vpn, or NULL. */
static struct sd_vma *vma_walk(struct sd_mm *mm, uint64_t vpn)
{
	for (struct sd_vma *v = vma_head(mm); v; v = vma_next(v))
		if (vpn < vma_end(v))
			return v;
	return NULL;
}

struct sd_vma *sd_vma_find(struct sd_mm *mm, uint64_t vpn)
{
	struct sd_vma *v = vma_walk(mm, vpn);

	return v && vma_start(v) <= vpn ? v : NULL;
}

struct sd_vma *sd_vma_first_in(struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	struct sd_vma *v = vma_walk(mm, vpn);

	return v && vma_start(v) < vpn + nr ? v : NULL;
}

uint64_t sd_vma_mapped(struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	const uint64_t end = vpn + nr;
	uint64_t n = 0;

	for (struct sd_vma *v = vma_walk(mm, vpn); v && vma_start(v) < end; v = vma_next(v)) {
		uint64_t s = vma_start(v) > vpn ? vma_start(v) : vpn;
		uint64_t e = vma_end(v) < end ? vma_end(v) : end;
		n += e - s;
	}
	return n;
}

/*
 * lock_vma_under_rcu(): the lookup is lockless (the caller is an online
 * QSBR reader with no quiescent state until it lets go, so a VMA unlinked
 * meanwhile stays allocated), then vma_start_read()'s trylock, then the
 * re-check under the lock: a writer changes bounds and links only with the
 * VMA write-locked, so what the lock shows is stable until the unlock. A
 * trylock that fails (a writer holds it or waits for it) or a VMA that no
 * longer covers @vpn sends the fault to the mmap_lock: never a wait here,
 * so the only lock waits of a fault are the mmap_lock's and the split
 * lock's, through the slow paths strict modelled time parks in.
 */
struct sd_vma *sd_lock_vma_under_rcu(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn)
{
	struct sd_vma *v = sd_vma_find(mm, vpn);

	if (!v || !sd_rwsem_trylock_read(&v->lock))
		return NULL;
	if (atomic_load_explicit(&v->detached, memory_order_relaxed) || vpn < vma_start(v) ||
	    vpn >= vma_end(v)) {
		sd_rwsem_up_read(&v->lock);
		return NULL;
	}
	sd_event(c, SD_EV_LOCK_ACQUIRE, SD_LOCK_MM_VMA, (uint64_t)(uintptr_t)&v->model);
	return v;
}

void sd_vma_end_read(struct sd_cpu *c, struct sd_vma *v)
{
	sd_event(c, SD_EV_LOCK_RELEASE, SD_LOCK_MM_VMA, (uint64_t)(uintptr_t)&v->model);
	sd_rwsem_up_read(&v->lock);
	sd_event_unlocked(c);
}

/*
 * vma_start_write(), under the mmap_lock for write: waits for the faults
 * that hold @v for read (through the slow path, as sd_mmap_lock() waits),
 * and keeps it write-locked until the mmap_lock's unlock or downgrade
 * (vma_end_write_all()), as the kernel's vm_lock_seq does. Modelled time
 * charges the wait for the VMA's read holds only: the store itself is part
 * of vma_change.
 */
static void vma_start_write(struct sd_cpu *c, struct sd_mm *mm, struct sd_vma *v)
{
	if (v->write_locked)
		return;
	if (!sd_rwsem_trylock_write(&v->lock)) {
		sd_event(c, SD_EV_LOCK_WAIT_BEGIN, SD_LOCK_VMA_WRITE, 0);
		sd_rwsem_lock_slow(&v->lock, true);
		sd_event(c, SD_EV_LOCK_WAIT_END, SD_LOCK_VMA_WRITE, 0);
	}
	sd_event(c, SD_EV_LOCK_ACQUIRE, SD_LOCK_VMA_WRITE, (uint64_t)(uintptr_t)&v->model);
	v->write_locked = true;
	v->locked_next = mm->vmas.locked;
	mm->vmas.locked = v;
}

/* The VMA's reference to its file goes with it: after its grace period
 * (no fault still reads it) or at sd_mm_destroy(). */
static void vma_free(struct sd_vma *v)
{
	if (v->file)
		sd_file_put(v->file);
	free(v);
}

static void vma_free_cb(struct rcu_head *head)
{
	sd_rcu_tsan_acquire();
	vma_free(caa_container_of(head, struct sd_vma, rcu));
}

/* After a grace period: a fault may still be looking at it (pgtable.c's
 * sd_pt_free_deferred() does the same for tables). */
static void vma_free_deferred(struct sd_vma *v)
{
	sd_rcu_call(&v->rcu, vma_free_cb);
}

void sd_vma_end_write_all(struct sd_cpu *c, struct sd_mm *mm)
{
	struct sd_vma *v = mm->vmas.locked, *n;

	mm->vmas.locked = NULL;
	for (; v; v = n) {
		n = v->locked_next;
		v->write_locked = false;
		sd_event(c, SD_EV_LOCK_RELEASE, SD_LOCK_VMA_WRITE, (uint64_t)(uintptr_t)&v->model);
		/* Release: pairs with a fault's trylock, which then sees the
		 * bounds, protection and detached flag we stored. */
		sd_rwsem_up_write(&v->lock);
		if (atomic_load_explicit(&v->detached, memory_order_relaxed))
			vma_free_deferred(v);
	}
}

int sd_vma_reserve(struct sd_mm *mm, unsigned n)
{
	for (unsigned i = 0; i < SD_VMA_SPARES && n; i++) {
		if (!mm->vmas.spare[i])
			mm->vmas.spare[i] = malloc(sizeof(struct sd_vma));
		if (!mm->vmas.spare[i])
			return -ENOMEM;
		n--;
	}
	return 0;
}

/* A VMA from the spares (sd_vma_reserve() made sure there is one). */
static struct sd_vma *vma_new(struct sd_cpu *c, struct sd_mm *mm, uint64_t start, uint64_t end,
			      unsigned prot, const struct sd_vma_backing *b)
{
	struct sd_vma *v = NULL;

	for (unsigned i = 0; i < SD_VMA_SPARES && !v; i++) {
		v = mm->vmas.spare[i];
		mm->vmas.spare[i] = NULL;
	}
	if (!v)
		abort();        /* a change that did not reserve: the library's bug */
	vma_init(v, start, end, prot, b);
	/* Write-locked before it is linked, as __split_vma() locks the new
	 * VMA: a fault that finds it before the change ends retries. */
	vma_start_write(c, mm, v);
	return v;
}

/* @v after the VMA whose link is @link. Release: a reader that reaches @v
 * sees it initialised (pairs with vma_next()'s acquire). */
static void vma_link(struct sd_mm *mm, SD_ATOMIC(struct sd_vma *) *link, struct sd_vma *v)
{
	atomic_store_explicit(&v->next, atomic_load_explicit(link, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(link, v, memory_order_release);
	mm->vmas.nr++;
}

/* @v (write-locked) leaves the list; a reader standing on it goes on to
 * its successor, and one that locks it later sees @detached. */
static void vma_unlink(struct sd_mm *mm, SD_ATOMIC(struct sd_vma *) *link, struct sd_vma *v)
{
	atomic_store_explicit(link, vma_next(v), memory_order_release);
	atomic_store_explicit(&v->detached, true, memory_order_relaxed);
	mm->vmas.nr--;
}

static void vma_set_end(struct sd_vma *v, uint64_t end)
{
	atomic_store_explicit(&v->end, end, memory_order_relaxed);
}

/* __split_vma(): @v becomes [start, @at), a new VMA [@at, end) follows it;
 * both write-locked. */
static void vma_split(struct sd_cpu *c, struct sd_mm *mm, struct sd_vma *v, uint64_t at)
{
	vma_start_write(c, mm, v);
	struct sd_vma_backing b = vma_backing(v);

	/* The tail's file offset moves with its start. */
	if (b.file)
		b.pgoff += at - vma_start(v);
	struct sd_vma *n = vma_new(c, mm, at, vma_end(v), vma_prot(v), &b);

	vma_set_end(v, at);
	vma_link(mm, &v->next, n);
	sd_event(c, SD_EV_VMA_SPLIT, at, 0);
}

/* A boundary at @at, splitting the VMA that straddles it, unless (@prot
 * not ~0u) it already has @prot: mprotect_fixup() leaves a VMA whose flags
 * do not change alone. */
static void vma_split_at(struct sd_cpu *c, struct sd_mm *mm, uint64_t at, unsigned prot)
{
	struct sd_vma *v = sd_vma_find(mm, at);

	if (v && vma_start(v) < at && (prot == ~0u || vma_prot(v) != prot))
		vma_split(c, mm, v, at);
}

/* is_mergeable_vma(): adjacent, the same protection, the same file mapped
 * the same way, and for a file, @b's offset where @a's ends
 * (can_vma_merge_after()); no anon_vma or policy to compare here. */
static bool vma_mergeable(struct sd_vma *a, struct sd_vma *b)
{
	if (vma_end(a) != vma_start(b) || vma_prot(a) != vma_prot(b) || a->file != b->file ||
	    a->shared != b->shared)
		return false;
	return !a->file || a->pgoff + (vma_end(a) - vma_start(a)) == b->pgoff;
}

/* vma_merge() of @v's successor into @v: both write-locked, one VMA less. */
static void vma_merge_next(struct sd_cpu *c, struct sd_mm *mm, struct sd_vma *v)
{
	struct sd_vma *n = vma_next(v);

	vma_start_write(c, mm, v);
	vma_start_write(c, mm, n);
	vma_set_end(v, vma_end(n));
	vma_unlink(mm, &v->next, n);
	sd_event(c, SD_EV_VMA_MERGE, vma_start(n), 0);
}

void sd_vma_map(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr, unsigned prot,
		const struct sd_vma_backing *b)
{
	SD_ATOMIC(struct sd_vma *) *link = &mm->vmas.head;
	struct sd_vma *prev = NULL, *next;
	const uint64_t end = vpn + nr;

	while ((next = atomic_load_explicit(link, memory_order_relaxed)) && vma_start(next) < vpn) {
		prev = next;
		link = &next->next;
	}
	/* The new range as a VMA of its own, then vma_merge()'s cases: it
	 * extends @prev, @next, or both (one VMA for three: two merges). */
	struct sd_vma *v = vma_new(c, mm, vpn, end, prot, b ? b : &anon_private);

	vma_link(mm, link, v);
	if (next && vma_mergeable(v, next))
		vma_merge_next(c, mm, v);
	if (prev && vma_mergeable(prev, v))
		vma_merge_next(c, mm, prev);
}

void sd_vma_unmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	SD_ATOMIC(struct sd_vma *) *link = &mm->vmas.head;
	const uint64_t end = vpn + nr;
	struct sd_vma *v;

	/* do_vmi_align_munmap(): split at both ends, then every VMA inside
	 * goes (vms_gather_munmap_vmas(), vma_mark_detached()). */
	vma_split_at(c, mm, vpn, ~0u);
	vma_split_at(c, mm, end, ~0u);
	while ((v = atomic_load_explicit(link, memory_order_relaxed)) && vma_start(v) < end) {
		if (vma_start(v) < vpn) {
			link = &v->next;
			continue;
		}
		vma_start_write(c, mm, v);
		vma_unlink(mm, link, v);
	}
}

/* vma_merge() again after an mprotect: every boundary in [@vpn, @end)
 * between two VMAs that are mergeable now. */
static void vma_merge_range(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t end)
{
	struct sd_vma *v = vpn ? vma_walk(mm, vpn - 1) : vma_walk(mm, 0), *n;

	while (v && (n = vma_next(v)) && vma_start(n) <= end) {
		if (vma_mergeable(v, n))
			vma_merge_next(c, mm, v);
		else
			v = n;
	}
}

void sd_vma_protect(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr, unsigned prot)
{
	const uint64_t end = vpn + nr;

	/* vma_modify_flags(): split where a VMA changes in part... */
	vma_split_at(c, mm, vpn, prot);
	vma_split_at(c, mm, end, prot);
	/* ...every VMA of the range write-locked (its PTEs change under it),
	 * given the new protection... */
	for (struct sd_vma *v = vma_walk(mm, vpn); v && vma_start(v) < end; v = vma_next(v)) {
		vma_start_write(c, mm, v);
		atomic_store_explicit(&v->prot, prot, memory_order_relaxed);
	}
	/* ...and merged with neighbours that now match. */
	vma_merge_range(c, mm, vpn, end);
}

int sd_vma_dup(struct sd_cpu *c, struct sd_mm *parent, struct sd_mm *child)
{
	SD_ATOMIC(struct sd_vma *) *tail = &child->vmas.head;

	for (struct sd_vma *v = vma_head(parent); v; v = vma_next(v)) {
		struct sd_vma *n = malloc(sizeof(*n));

		/* dup_mmap() write-locks each VMA of the parent: its faults
		 * wait while the PTEs are write-protected and copied. */
		vma_start_write(c, parent, v);
		if (!n)
			return -ENOMEM;
		struct sd_vma_backing b = vma_backing(v);

		/* The child maps the same file (dup_mmap()'s get_file()). */
		vma_init(n, vma_start(v), vma_end(v), vma_prot(v), &b);
		/* Relaxed: nobody reaches the child before sd_mm_fork()
		 * returns (fork_leaf() says how it is handed over). */
		atomic_store_explicit(tail, n, memory_order_relaxed);
		tail = &n->next;
		child->vmas.nr++;
	}
	return 0;
}

void sd_vma_free_all(struct sd_mm *mm)
{
	struct sd_vma *v = atomic_load_explicit(&mm->vmas.head, memory_order_relaxed), *n;

	for (; v; v = n) {
		n = atomic_load_explicit(&v->next, memory_order_relaxed);
		vma_free(v);
	}
	for (unsigned i = 0; i < SD_VMA_SPARES; i++)
		free(mm->vmas.spare[i]);
	atomic_store_explicit(&mm->vmas.head, NULL, memory_order_relaxed);
	mm->vmas.nr = 0;
}

uint64_t sd_mm_nr_vmas(struct sd_mm *mm)
{
	return mm->vmas.nr;
}

int sd_mm_vma_at(struct sd_mm *mm, uint64_t i, uint64_t *va, uint64_t *len, unsigned *prot)
{
	struct sd_vma *v = vma_head(mm);

	while (v && i--)
		v = vma_next(v);
	if (!v)
		return -EINVAL;
	*va = vma_start(v) << SD_PAGE_SHIFT;
	*len = (vma_end(v) - vma_start(v)) << SD_PAGE_SHIFT;
	*prot = vma_prot(v);
	return 0;
}
