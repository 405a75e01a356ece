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
 * @refs counts its creator's reference (the program's, or sd_mmap_file()'s
 * while it maps an anonymous shared mapping's file) and one per VMA that
 * maps the file; the last put gives every cached frame back.
 */
struct sd_file {
	struct sd_machine *m;
	uint64_t nr_pages;
	SD_ATOMIC(uint64_t) refs;
	SD_ATOMIC(uint64_t) cached;
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
 * caller charges the new page). Two faults that race for an absent page
 * agree on one frame: the loser of the insert gives its own back.
 */
int sd_file_page(struct sd_cpu *c, struct sd_file *f, uint64_t pgoff, uint64_t *pfn, bool *added);

#endif
