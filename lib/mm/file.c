/* SPDX-License-Identifier: MIT */
/*
 * Files and their page caches (file.h), for shared and file-backed
 * mappings: the kernel's address_space, with a page's frame found by index
 * (filemap_get_entry()) and added by compare-and-swap where the kernel
 * takes the xarray's lock (filemap_add_folio()).
 */
#include <errno.h>
#include <stdlib.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/frame.h"
#include "../hw/machine_state.h"
#include "file.h"
#include "mm.h"

int sd_file_new(struct sd_machine *m, uint64_t nr_pages, struct sd_file **out)
{
	struct sd_file *f;

	/* The frames' share counts: a cached page is held by the cache and
	 * by each mapping (file.h). */
	if (sd_frame_share_ready(&m->frames))
		return -ENOMEM;
	f = calloc(1, sizeof(*f) + nr_pages * sizeof(f->pages[0]));
	if (!f)
		return -ENOMEM;
	f->m = m;
	f->nr_pages = nr_pages;
	atomic_init(&f->refs, 1);
	atomic_fetch_add_explicit(&m->nr_files, 1, memory_order_relaxed);
	atomic_init(&f->cached, 0);
	sd_spin_init(&f->lock);
	for (uint64_t i = 0; i < nr_pages; i++)
		atomic_init(&f->pages[i], 0);
	*out = f;
	return 0;
}

void sd_file_get(struct sd_file *f)
{
	atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

void sd_file_put(struct sd_file *f)
{
	/* Acq_rel: the last put sees every insert of the page cache (each
	 * faulting CPU's put, or the VMA free after its grace period,
	 * follows its inserts). */
	if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (uint64_t i = 0; i < f->nr_pages; i++) {
		uint64_t pfn = atomic_load_explicit(&f->pages[i], memory_order_relaxed);

		if (pfn)
			(void)sd_frame_put(&f->m->frames, NULL, pfn);
	}
	/* Release: sd_machine_destroy() reads 0 and tears the pool down. */
	atomic_fetch_sub_explicit(&f->m->nr_files, 1, memory_order_release);
	free(f);
}

/* The cached frame of @pgoff, a mapping's hold taken if @map, or 0; under
 * the file's lock (file.h). */
static uint64_t lookup_locked(struct sd_machine *m, struct sd_file *f, uint64_t pgoff, bool map)
{
	uint64_t pfn = atomic_load_explicit(&f->pages[pgoff], memory_order_relaxed);

	if (pfn && map)
		sd_frame_share(&m->frames, pfn);
	return pfn;
}

int sd_file_page(struct sd_cpu *c, struct sd_file *f, uint64_t pgoff, bool map, uint64_t *pfn,
		 bool *added)
{
	uint64_t have, mine;

	*added = false;
	sd_spin_lock(&f->lock);
	have = lookup_locked(c->m, f, pgoff, map);
	sd_spin_unlock(&f->lock);
	if (have) {
		*pfn = have;
		return 0;
	}
	/* Allocated outside the lock, as shmem allocates its folio before
	 * it takes the xarray's lock. */
	if (sd_frame_alloc(&c->m->frames, &c->frames, &mine))
		return -ENOMEM;
	/* Test instrumentation: another fault may insert the page now. */
	sd_order_point(SD_ORDER_FILE_ALLOCATED, c->id);
	sd_spin_lock(&f->lock);
	have = lookup_locked(c->m, f, pgoff, map);
	if (!have) {
		/* The frame is the cache's before anyone maps it; readers
		 * outside the lock (sd_file_put()) come after every fault's
		 * put of the file. */
		atomic_store_explicit(&f->pages[pgoff], (uint32_t)mine, memory_order_relaxed);
		atomic_fetch_add_explicit(&f->cached, 1, memory_order_relaxed);
		if (map)
			sd_frame_share(&c->m->frames, mine);
	}
	sd_spin_unlock(&f->lock);
	if (have) {
		sd_frame_free(&c->m->frames, &c->frames, mine);
		*pfn = have;
		return 0;
	}
	*added = true;
	*pfn = mine;
	return 0;
}

uint64_t sd_file_map_cached_locked(struct sd_cpu *c, struct sd_file *f, uint64_t pgoff)
{
	return lookup_locked(c->m, f, pgoff, true);
}

/* __remove_mapping() of one page: out of the cache if the cache's is its
 * only hold (file.h), its frame back to the pool. */
static bool evict_page(struct sd_cpu *c, struct sd_file *f, uint64_t pgoff)
{
	uint64_t pfn;

	sd_spin_lock(&f->lock);
	pfn = atomic_load_explicit(&f->pages[pgoff], memory_order_relaxed);
	if (!pfn || sd_frame_shared(&c->m->frames, pfn)) {
		sd_spin_unlock(&f->lock);
		return false;
	}
	atomic_store_explicit(&f->pages[pgoff], 0, memory_order_relaxed);
	atomic_fetch_sub_explicit(&f->cached, 1, memory_order_relaxed);
	sd_spin_unlock(&f->lock);
	(void)sd_frame_put(&c->m->frames, &c->frames, pfn);
	return true;
}

/* ---- the public calls ---- */

int sd_file_create(struct sd_machine *m, uint64_t len, struct sd_file **out)
{
	if (!m || !out)
		return sd_fail(-EINVAL, "sd_file_create: machine or out is NULL");
	if (!len || (len & (SD_PAGE_SIZE - 1)))
		return sd_fail(-EINVAL, "sd_file_create: length %llu is 0 or not page aligned",
			       (unsigned long long)len);
	if ((len >> SD_PAGE_SHIFT) > SD_FILE_MAX_PAGES)
		return sd_fail(-EINVAL, "sd_file_create: %llu bytes, too large (at most 2^44)",
			       (unsigned long long)len);
	/* Larger than the machine's memory is allowed, as a file larger than
	 * RAM is: only touched pages take frames (and a fault with none left
	 * fails with -ENOMEM, as an anonymous one does). */
	if (sd_file_new(m, len >> SD_PAGE_SHIFT, out))
		return sd_fail(-ENOMEM, "sd_file_create: no memory for a file of %llu pages",
			       (unsigned long long)(len >> SD_PAGE_SHIFT));
	return 0;
}

int sd_file_evict(struct sd_cpu *c, struct sd_file *f, uint64_t offset, uint64_t len)
{
	uint64_t evicted = 0;
	int err = sd_cpu_check_self(c);

	if (err)
		return sd_fail(err, "sd_file_evict: the caller is not attached as this CPU");
	if (!f)
		return sd_fail(-EINVAL, "sd_file_evict: file is NULL");
	if (f->m != c->m)
		return sd_fail(-EINVAL, "sd_file_evict: a file of another machine");
	if ((offset | len) & (SD_PAGE_SIZE - 1))
		return sd_fail(-EINVAL, "sd_file_evict: offset or length not page aligned");
	if ((offset >> SD_PAGE_SHIFT) > f->nr_pages ||
	    (len >> SD_PAGE_SHIFT) > f->nr_pages - (offset >> SD_PAGE_SHIFT))
		return sd_fail(-EINVAL, "sd_file_evict: the range passes the end of the file");
	for (uint64_t pg = offset >> SD_PAGE_SHIFT, n = 0; n < len >> SD_PAGE_SHIFT; n++)
		evicted += evict_page(c, f, pg + n);
	/* The frames' frees, charged as a zap's are (free_unref_folios()). */
	if (evicted)
		sd_event(c, SD_EV_PAGE_FREE, evicted, 0);
	return evicted > INT32_MAX ? INT32_MAX : (int)evicted;
}

int sd_file_close(struct sd_file *f)
{
	if (!f)
		return sd_fail(-EINVAL, "sd_file_close: file is NULL");
	sd_file_put(f);
	return 0;
}

uint64_t sd_file_cached_pages(const struct sd_file *f)
{
	return f ? atomic_load_explicit(&f->cached, memory_order_relaxed) : 0;
}
