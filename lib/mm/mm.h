/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_MM_H
#define SD_MM_MM_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/mm.h is in a higher layer than the file including it (core/layer.h)"
#endif


#include <shootdown/mm.h>

#include <stdint.h>

#include "../core/backoff.h"
#include "../core/compiler.h"
#include "../core/rwsem.h"
#include "../hw/event.h"
#include "../hw/oracle.h"
#include "pgtable.h"
#include "vma.h"

struct sd_machine;

struct sd_mm {
	struct sd_machine *m;
	uint64_t id;
	struct sd_pt *pgd;
	/*
	 * Table-free generation: bumped (release, under @lock) when an unmap
	 * unlinks page-table pages, before they are queued for the RCU-
	 * deferred free. The walk path reads it (acquire) before it looks in
	 * the walk cache or walks, and a walk-cache entry filled under an
	 * older generation misses. A walker that still read the old value is
	 * inside its QSBR read-side section, so the grace period keeps the
	 * table alive for it; one that starts after the free sees the new
	 * value. The library thus owns walk-cache safety, whatever a user
	 * strategy's flush() invalidates.
	 */
	SD_ATOMIC(uint64_t) table_gen;
	/*
	 * mmap_lock: held for write by the changes that edit the mapping
	 * itself (sd_mmap(), sd_munmap(), sd_mprotect()), which alone link
	 * and unlink page tables; for read by faults, madvise(DONTNEED) and
	 * reclaim, which edit PTEs under the leaf tables' split locks
	 * (sd_pt.ptl). Writers are preferred, as the kernel's rwsem queues
	 * readers behind a waiting writer. The built-in strategies flush
	 * under it as the kernel does: madvise(DONTNEED) under its read hold,
	 * mprotect under the write hold, munmap under the read hold it
	 * downgrades to (change.c, finish_change_locked()).
	 */
	struct sd_rwsem mmap_lock;
	struct sd_model_rwsem mmap_model;  /* @mmap_lock in modelled time */
	/*
	 * The VMAs (vma.h): changed under @mmap_lock for write, each VMA
	 * write-locked first; read by faults under RCU. The PTEs' mapping
	 * bits stay what the walks read; the list is the object layer over
	 * them (the count, the boundaries, the per-VMA lock).
	 */
	struct sd_vma_list vmas;
	void *strategy;                /* the strategy's per-mm state */
	struct sd_oracle_floor floor;  /* checked mode only */
	/* TLB batches that owe this mm a flush (mm->tlb_flush_batched). */
	sd_cacheline_aligned SD_ATOMIC(unsigned) batch_pending;
	/*
	 * mm->tlb_flush_pending: changes between their PTE edits and the end
	 * of their flush. Incremented under @lock before the edits, read under
	 * @lock after them, decremented (release) once the flush and the
	 * oracle floors are done. A change that finds another one counted
	 * flushes its range even if it changed nothing (mm_tlb_flush_nested()
	 * in tlb_finish_mmu()); an sd_mmap() that finds one flushes its range
	 * before returning (what the kernel gets from munmap holding mmap_lock
	 * for write until its flush is done).
	 */
	SD_ATOMIC(int) flush_pending;
};

struct sd_cpu;

/* The checks every mapping change makes first (caller, mm, range,
 * interrupts): 0 or -EPERM / -EINVAL naming @what. */
int sd_mm_check_change(struct sd_cpu *c, struct sd_mm *mm, uint64_t va, uint64_t len,
		       const char *what);
/* A change's flush of @nr pages from @vpn (or, @whole_mm, of the mm), by
 * the machine's strategy with the calling CPU as initiator: the flush
 * half of flush_tlb_mm_range(). Also the copy-on-write break's one-page
 * shootdown (access.c, ptep_clear_flush()). */
void sd_mm_flush_change(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool whole_mm, bool freed_tables);
/* Pass a quiescent state every this many accesses (and changes), so a CPU
 * that only reads never holds a grace period back for long. */
#define SD_ACCESSES_PER_QS 64
/* The oracle version of a change (0 unchecked). */
uint32_t sd_mm_change_version(struct sd_mm *mm);
/* zap_pte_range(): drop the frame of every present page of the range, keep
 * the mapping; @zapped(@arg, vpn, pfn) hears of each under the split lock of
 * its table (pfn 0 for the zero page), and *@owed (if not NULL) whether a
 * TLB batch owes the mm a flush (flush_tlb_batched_pending()). With
 * @kept_zero the zero page's PTEs stay as they are and it hears of each
 * instead, in ascending order. @c holds the mmap_lock, for read at least. */
void sd_mm_zap_present(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
		       uint32_t version, bool *owed, void (*kept_zero)(void *arg, uint64_t vpn),
		       void (*zapped)(void *arg, uint64_t vpn, uint64_t pfn), void *arg);

/* enter_lazy_tlb(): the CPU keeps its mm loaded, lazily (the first half
 * of sd_cpu_idle(), which then leaves modelled time's running set). The
 * scheduler's idle thread (lib/sched) in strict modelled time calls it
 * alone, as it waits in the machine. Owner, interrupts on. */
void sd_cpu_enter_lazy(struct sd_cpu *c);

/* What the hardware walker may do at any time once TTBR0 (CR3) names @mm's
 * tables: walk @va in @mm and fill @c's TLB under its current ASID, never
 * faulting (-EAGAIN where a fault would be needed, -EFAULT unmapped). On
 * @c's thread; for tests that force a speculative walk inside a race
 * window (test_active_cpu.cpp), where @c->mm may not name @mm yet. */
int sd_mm_walk_speculative(struct sd_cpu *c, struct sd_mm *mm, uint64_t va);

/* Free a change's frames after its flush: off the LRU (mm/lru.c, per the
 * machine's lru setting), then back to the allocator. */
void sd_mm_free_frames(struct sd_cpu *c, const uint64_t *pfns, size_t n);

/*
 * The locks of an mm, as events: a wait is a lock-wait slice (and, in
 * modelled time, the waiter holds nobody back), an acquisition and a
 * release are charged in modelled time (hw/model.c: the rwsem's count
 * transfers and holds; a split lock's handoff and hold). @c is the caller,
 * attached as that CPU. A CPU holds one mm's mmap_lock at a time.
 */
/*
 * @kind says how: SD_LOCK_MM for write (mmap, munmap, mprotect);
 * SD_LOCK_MM_READ for read (madvise, munmap after its downgrade);
 * SD_LOCK_MM_VMA for read, charged as the rmap walk of a reclaim, which
 * the kernel does without the mmap_lock's count. A fault takes its VMA's
 * own lock (vma.c, sd_lock_vma_under_rcu()) and this one for read only
 * when that fails (access.c, fault_lock()).
 */
static inline void sd_mmap_lock(struct sd_cpu *c, struct sd_mm *mm, enum sd_lock_kind kind)
{
	const bool write = kind == SD_LOCK_MM;

	if (!(write ? sd_rwsem_trylock_write(&mm->mmap_lock) : sd_rwsem_trylock_read(&mm->mmap_lock))) {
		sd_event(c, SD_EV_LOCK_WAIT_BEGIN, kind, 0);
		/* Strict modelled time runs one CPU at a time: the lock's
		 * owner is parked at a sync point, so the wait polls through
		 * the wait hook (core/backoff.h), which parks it until the next
		 * release (at the releaser's modelled time) and lets the owner
		 * run. A signal interrupts the host-side park, so the IPIs of a
		 * holder that flushes under the lock are answered meanwhile. */
		sd_rwsem_lock_slow(&mm->mmap_lock, write);
		sd_event(c, SD_EV_LOCK_WAIT_END, kind, 0);
	}
	sd_event(c, SD_EV_LOCK_ACQUIRE, kind, (uint64_t)(uintptr_t)&mm->mmap_model);
}

/* Its partner, with the @kind it was taken with. A writer's VMA locks go
 * first (mmap_write_unlock()'s vma_end_write_all()). */
static inline void sd_mmap_unlock(struct sd_cpu *c, struct sd_mm *mm, enum sd_lock_kind kind)
{
	if (kind == SD_LOCK_MM)
		sd_vma_end_write_all(c, mm);
	sd_event(c, SD_EV_LOCK_RELEASE, kind, (uint64_t)(uintptr_t)&mm->mmap_model);
	if (kind == SD_LOCK_MM)
		sd_rwsem_up_write(&mm->mmap_lock);
	else
		sd_rwsem_up_read(&mm->mmap_lock);
	sd_event_unlocked(c);
}

/* mmap_write_downgrade(): the write hold becomes a read hold (release it
 * as SD_LOCK_MM_READ), with no gap a writer could take; the writer's VMA
 * locks go first, as the kernel's downgrade ends them (vma_end_write_all()). */
static inline void sd_mmap_downgrade(struct sd_cpu *c, struct sd_mm *mm)
{
	sd_vma_end_write_all(c, mm);
	sd_event(c, SD_EV_LOCK_DOWNGRADE, SD_LOCK_MM, (uint64_t)(uintptr_t)&mm->mmap_model);
	sd_rwsem_downgrade(&mm->mmap_lock);
}

/* pte_offset_map_lock() / pte_unmap_unlock() on a leaf table. */
static inline void sd_ptl_lock(struct sd_cpu *c, struct sd_pt *leaf)
{
	if (unlikely(!sd_spin_trylock(&leaf->ptl))) {
		sd_event(c, SD_EV_LOCK_WAIT_BEGIN, SD_LOCK_PTL, 0);
		sd_spin_lock_slow(&leaf->ptl);
		sd_event(c, SD_EV_LOCK_WAIT_END, SD_LOCK_PTL, 0);
	}
	sd_event(c, SD_EV_LOCK_ACQUIRE, SD_LOCK_PTL, (uint64_t)(uintptr_t)&leaf->ptl_model);
}

static inline void sd_ptl_unlock(struct sd_cpu *c, struct sd_pt *leaf)
{
	sd_event(c, SD_EV_LOCK_RELEASE, SD_LOCK_PTL, (uint64_t)(uintptr_t)&leaf->ptl_model);
	sd_spin_unlock(&leaf->ptl);
	sd_event_unlocked(c);
}

#endif
