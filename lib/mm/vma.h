/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_VMA_H
#define SD_MM_VMA_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/vma.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdint.h>

#include "../core/rcu.h"
#include "../core/rwsem.h"
#include "../time/resource.h"

struct sd_cpu;
struct sd_file;
struct sd_mm;

/*
 * A VMA: the object layer over the PTEs' mapping bits (SD_PTE_VMA and the
 * protection, which the walks keep relying on). It holds what PTEs cannot:
 * the count and boundaries of an mm's mappings (what merges and splits
 * change) and the per-VMA lock a fault takes instead of the mm-wide one
 * (the kernel's vm_lock, lock_vma_under_rcu()).
 *
 * Bounds are page numbers, [@start, @end). The list (sd_mm.vmas) is sorted
 * and singly linked through @next; it is changed only under the mm's
 * mmap_lock for write, and every VMA whose bounds, protection or link
 * change is write-locked first (vma_start_write()), so a fault that holds
 * a VMA's lock for read sees it stable. Readers walk the list locklessly
 * inside their QSBR read-side section (the fault path) and re-check what
 * they found under the VMA's lock. Unlinked VMAs are @detached and freed
 * after a grace period, as page tables are (pgtable.c).
 *
 * Not liburcu's rculist: its 0.13 pointer accesses are volatile ones TSan
 * cannot see (test/tsan.supp), and the library's own RCU-protected data
 * uses C11 atomics so that TSan keeps checking it. Hence the atomics here:
 * @start, @end and @prot are read before the lock by the lookup.
 */
struct sd_vma {
	SD_ATOMIC(struct sd_vma *) next;
	SD_ATOMIC(uint64_t) start;
	SD_ATOMIC(uint64_t) end;
	SD_ATOMIC(unsigned) prot;       /* enum sd_prot */
	SD_ATOMIC(bool) detached;       /* unlinked: a reader that finds it retries */
	/* What backs the pages (file.h), fixed while the VMA is linked but
	 * for @pgoff, which a split gives the new VMA only: NULL for private
	 * anonymous memory. Read by faults under the VMA's lock. */
	struct sd_file *file;           /* a reference held (file.c) */
	uint64_t pgoff;                 /* file page of @start */
	bool shared;                    /* MAP_SHARED */
	struct sd_rwsem lock;           /* vm_lock: read by faults, written by changes */
	struct sd_model_rwsem model;    /* @lock in modelled time */
	struct sd_vma *locked_next;     /* the writer's chain (sd_mm.vma_locked) */
	bool write_locked;              /* on that chain; under the mmap_lock */
	struct rcu_head rcu;
};

/* Spares a change takes for its splits, under the mmap_lock for write:
 * mprotect of the middle of a VMA splits twice. */
#define SD_VMA_SPARES 2

/* The VMA list of an mm, in the mm (mm.h includes this header). */
struct sd_vma_list {
	SD_ATOMIC(struct sd_vma *) head;
	struct sd_vma *locked;          /* write-locked by the current writer */
	struct sd_vma *spare[SD_VMA_SPARES];
	uint64_t nr;                    /* linked VMAs, under the mmap_lock */
};

/* The VMA that contains @vpn, under the mmap_lock (either hold), or NULL. */
struct sd_vma *sd_vma_find(struct sd_mm *mm, uint64_t vpn);

/* lock_vma_under_rcu(): the VMA that contains @vpn, its lock taken for read
 * (charged as SD_LOCK_MM_VMA against its own model lock), or NULL when
 * there is none or it is being changed: the fault then takes the mmap_lock
 * for read instead (the kernel's retry). Never waits. */
struct sd_vma *sd_lock_vma_under_rcu(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn);
/* vma_end_read(). */
void sd_vma_end_read(struct sd_cpu *c, struct sd_vma *vma);

/* Under the mmap_lock for write: at least @n spares, or -ENOMEM. */
int sd_vma_reserve(struct sd_mm *mm, unsigned n);
/* What sd_vma_map() maps: a file from page @pgoff, shared or not, or
 * (NULL @file) private anonymous memory. */
struct sd_vma_backing {
	struct sd_file *file;
	uint64_t pgoff;
	bool shared;
};

/* mmap: [@vpn, @vpn + @nr) joins the list, merged with a neighbour of the
 * same protection and backing (vma_merge()), or as a VMA of its own (a
 * spare), which takes a reference to the file. The range is free (checked
 * by the caller). @b NULL: private anonymous memory. */
void sd_vma_map(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr, unsigned prot,
		const struct sd_vma_backing *b);
/* munmap: the range leaves the list, its ends split first (__split_vma()). */
void sd_vma_unmap(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr);
/* mprotect: the range's VMAs split at its ends, given @prot, merged with
 * their neighbours again (vma_modify_flags()). The range is mapped. */
void sd_vma_protect(struct sd_cpu *c, struct sd_mm *mm, uint64_t vpn, uint64_t nr, unsigned prot);
/* Pages of [@vpn, @vpn + @nr) some VMA covers. */
uint64_t sd_vma_mapped(struct sd_mm *mm, uint64_t vpn, uint64_t nr);
/* The first VMA that overlaps the range, or NULL. */
struct sd_vma *sd_vma_first_in(struct sd_mm *mm, uint64_t vpn, uint64_t nr);
/* dup_mmap(): write-lock every VMA of @parent (faults wait for the copy) and
 * copy the list into @child (not yet visible): 0 or -ENOMEM. */
int sd_vma_dup(struct sd_cpu *c, struct sd_mm *parent, struct sd_mm *child);
/* vma_end_write_all() at the mmap_lock's unlock or downgrade: every VMA the
 * writer locked is unlocked, and those it unlinked go after a grace period. */
void sd_vma_end_write_all(struct sd_cpu *c, struct sd_mm *mm);
/* sd_mm_destroy(): no CPU has the mm loaded, so no reader: freed at once. */
void sd_vma_free_all(struct sd_mm *mm);

/* Tests: the number of VMAs, and the @i-th one's bounds (bytes) and prot. */
uint64_t sd_mm_nr_vmas(struct sd_mm *mm);
int sd_mm_vma_at(struct sd_mm *mm, uint64_t i, uint64_t *va, uint64_t *len, unsigned *prot);

#endif
