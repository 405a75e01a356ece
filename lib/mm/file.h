/* SPDX-License-Identifier: MIT */
#ifndef SD_MM_FILE_H
#define SD_MM_FILE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_MM
#error "mm/file.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <shootdown/file.h>

#include <stdbool.h>
#include <stdint.h>

#include "../core/compiler.h"
#include "../core/spinlock.h"

struct sd_cpu;
struct sd_machine;

/*
 * A file and its page cache (the kernel's address_space of a tmpfs inode):
 * @pages[i] is the frame of page @i once some fault has read it in, 0
 * before. A page stays cached until the file goes: nothing here evicts one
 * (reclaim unmaps a file page and leaves it cached).
 *
 * A cached frame has one holder for the cache and one more for each PTE
 * that maps it (sd_frame_share() at the fault, sd_frame_put() at the zap):
 * the cache's hold is what makes a private mapping's write copy it
 * (sd_frame_shared()) and a zap of a mapping keep it.
 *
 * @lock is the xarray's lock (i_pages): a fault takes a mapping's hold of
 * a cached frame under it, at the lookup (the kernel's folio_try_get()),
 * and sd_file_evict() takes a frame out only under it and only when it
 * finds no hold but the cache's. So an evicted frame is one that no PTE
 * maps, no batch owes a flush for (the PTE's hold goes at the flush) and
 * no fault is about to map. Every first share of a cached frame happens
 * under it; later ones (fork's copy of a PTE) need a hold already there.
 *
 * @refs counts its creator's reference (the program's, or sd_mmap_file()'s
 * while it maps an anonymous shared mapping's file) and one per VMA that
 * maps the file; the last put gives every cached frame back.
 */
struct sd_file {
	struct sd_machine *m;
	uint64_t nr_pages;
	SD_ATOMIC(uint64_t) refs;
	SD_ATOMIC(uint64_t) cached;
	struct sd_spinlock lock;
	SD_ATOMIC(uint32_t) pages[];
};

/* A new file of @nr_pages, its creator's reference held: 0 or -ENOMEM. */
int sd_file_new(struct sd_machine *m, uint64_t nr_pages, struct sd_file **out);
void sd_file_get(struct sd_file *f);
/* The last put frees the file: no VMA maps it then, so no PTE either. */
void sd_file_put(struct sd_file *f);
/*
 * filemap_fault()'s lookup, or shmem_get_folio()'s allocation: the frame of
 * page @pgoff, read into the cache first if absent (a frame taken from the
 * pool; -ENOMEM without one). *@added says whether this call added it (the
 * caller charges the new page). With @map the caller will map it: the
 * mapping's hold is taken here, under the file's lock, and the caller
 * gives it back (sd_frame_put()) if no PTE takes it. Two faults that race
 * for an absent page agree on one frame: the loser of the insert gives its
 * own back.
 */
int sd_file_page(struct sd_cpu *c, struct sd_file *f, uint64_t pgoff, bool map, uint64_t *pfn,
		 bool *added);
/* filemap_map_pages()'s look-up of one neighbour, under @f->lock: its
 * frame with a mapping's hold taken, or 0 if the page is not cached. */
uint64_t sd_file_map_cached_locked(struct sd_cpu *c, struct sd_file *f, uint64_t pgoff);

#endif
