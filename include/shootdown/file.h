/* SPDX-License-Identifier: MIT */
/**
 * @file file.h
 * @brief Files and shared mappings: page caches whose frames many mappings
 * share, and mappings that share frames across sd_mm_fork().
 * @ingroup file
 *
 * A file here is a tmpfs file: a length, and a page cache whose frames are
 * allocated at the first fault of each page (shmem_get_folio()) and kept
 * until the file goes or the program evicts them (sd_file_evict(): the
 * page cache's reclaim of clean pages of a disk file). Nothing writes a
 * page back: a reclaim of a mapped file page (sd_reclaim()) unmaps it and
 * leaves it cached until it is evicted.
 *
 * A mapping of a file (sd_mmap_file()) is shared or private, as mmap(2)'s
 * MAP_SHARED and MAP_PRIVATE:
 * - shared: every access maps the cached frame, with the mapping's
 *   protection (tmpfs asks for no write notification: a read fault of a
 *   writable mapping maps it writable). Every mm that maps the page, and a
 *   child of sd_mm_fork(), uses the same frame; sd_madvise_dontneed() and
 *   sd_munmap() drop the translation and flush it, and the page stays
 *   cached, so the next access maps the same frame again.
 * - private: a read maps the cached frame write-protected; a write copies
 *   it into a frame of the mapping's own (do_cow_fault(), or do_wp_page()
 *   after a read), which sd_madvise_dontneed() frees, so that the next read
 *   maps the cached frame again (will-it-scale's tlb_flush1 checks that it
 *   reads the file's bytes there).
 * A read fault of either kind also maps the cached neighbours of its
 * 16-page window that no PTE maps yet (do_fault_around(); counter
 * fault_around_pages), as the fault itself would map them.
 * An anonymous shared mapping (MAP_SHARED|MAP_ANONYMOUS) is a shared
 * mapping of a file of its own that nothing else names: sd_mmap_file()
 * with a NULL file. It lives while a mapping of it does.
 *
 * Mappings of files merge as the kernel merges them: the same file, the
 * same kind, and offsets that continue each other.
 */
#ifndef SHOOTDOWN_FILE_H
#define SHOOTDOWN_FILE_H

#include <stdint.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup file Files and shared mappings
 * Page caches, MAP_SHARED and MAP_PRIVATE mappings of files, and anonymous
 * shared memory.
 * @{
 */

struct sd_cpu;
struct sd_mm;
struct sd_file;

/** The largest file sd_file_create() makes, in pages (2^44 bytes): its
 *  page index is a dense array of 4 bytes a page. */
#define SD_FILE_MAX_PAGES (UINT64_C(1) << 32)

/** sd_mmap_file()'s flags: a private mapping (copy-on-write), mmap(2)'s MAP_PRIVATE. */
#define SD_MAP_PRIVATE 0u
/** sd_mmap_file()'s flags: a shared mapping, mmap(2)'s MAP_SHARED. */
#define SD_MAP_SHARED 1u

/**
 * sd_file_create() - a file of @len bytes on machine @m, no page cached.
 * The caller holds one reference, which sd_file_close() drops.
 * Return: 0 with *@out set; -EINVAL if @m or @out is NULL, or @len is 0 or
 * not page aligned, or more than SD_FILE_MAX_PAGES pages; -ENOMEM if no
 * memory is left for the file's page index (4 bytes a page). A file may be larger than the machine's
 * memory: only the pages touched take frames, and an access that finds
 * none left fails with -ENOMEM (sd_access()).
 * Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_file_create(struct sd_machine *m, uint64_t len, struct sd_file **out);

/**
 * sd_file_close() - drop the caller's reference to @p f: exactly once per
 * sd_file_create(). The file, its cached frames with it, goes when neither
 * the caller nor a mapping holds it (a mapping holds it until it is
 * unmapped and a grace period has passed, or until its mm is destroyed).
 * Return: 0; -EINVAL if @p f is NULL.
 * Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_file_close(struct sd_file *f);

/**
 * sd_file_cached_pages() - how many pages of @p f are in its page cache (0
 * for NULL). Any thread, while the caller holds its reference.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT uint64_t sd_file_cached_pages(const struct sd_file *f);

/**
 * sd_file_evict() - drop from @p f's page cache the pages of [@p offset,
 * @p offset + @p len) that nothing maps, their frames back to the machine's
 * pool: shrink_folio_list()'s __remove_mapping() of clean file pages, after
 * try_to_unmap() (sd_reclaim() or a munmap) and its flush. A page still
 * mapped by a PTE, one whose unmap's flush a batch still owes
 * (sd_tlbbatch_flush() not yet called), and one a fault is mapping now are
 * kept. The next access to an evicted page reads it in again, a new frame
 * (the page a disk file's read would bring back; the emulator keeps no
 * bytes). Charged page_free a page evicted.
 * Return: the number of pages evicted (at most INT32_MAX counted); -EPERM
 * if the caller is not attached as @p cpu; -EINVAL if @p f is NULL or of
 * another machine, @p offset or @p len is not page aligned, or the range
 * passes the end of @p f.
 * Attached thread; interrupts on or off.
 */
SD_EXPORT int sd_file_evict(struct sd_cpu *cpu, struct sd_file *f, uint64_t offset,
			    uint64_t len);

/**
 * sd_mmap_file() - map [@va, @va + @len) of @mm onto @p f from byte @p offset,
 * shared or private (@p flags, SD_MAP_SHARED or SD_MAP_PRIVATE), with @prot;
 * or, with @p f NULL and SD_MAP_SHARED, anonymous shared memory of its own
 * (@p offset must be 0). As sd_mmap() otherwise (MAP_FIXED_NOREPLACE, pages
 * populated at first access, merging with a neighbour that maps the same
 * file the same way at the continuing offset). The mapping holds @p f until it
 * is unmapped.
 * Return: 0; errors as sd_mmap(); -EINVAL also for unknown @p flags bits, @p f
 * NULL without SD_MAP_SHARED, @p offset not page aligned or not 0 for an
 * anonymous mapping, a range past the end of @p f (files do not grow here),
 * or @p f of another machine; -ENOMEM also without memory for an anonymous
 * mapping's file. On every error nothing is mapped and no reference taken.
 * Attached thread, interrupts on.
 */
SD_EXPORT int sd_mmap_file(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
			   unsigned prot, unsigned flags, struct sd_file *f, uint64_t offset);

/** @} */

SD_END_DECLS

#endif
