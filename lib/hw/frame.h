/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_FRAME_H
#define SD_HW_FRAME_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/frame.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/compiler.h"

/*
 * Fake physical memory: frame numbers 1..nr (0 means "none"), with no bytes
 * behind them. A machine-wide free stack under a mutex, fronted by a small
 * per-CPU cache so that a fault or a zap rarely touches the shared pool.
 * Callers free a frame only after the flush that removed its last
 * translation has returned (the mmu_gather order).
 */
#define SD_FRAME_CACHE 32

struct sd_frame_cache {
	unsigned n;
	uint32_t pfn[SD_FRAME_CACHE];
};

struct sd_frame_pool {
	pthread_mutex_t lock;
	uint32_t *free;        /* stack of returned frames */
	uint64_t nfree;
	uint64_t next_fresh;   /* never-used frames start here */
	uint64_t nr;
	/* Mappings of each frame beyond its first (fork shares frames
	 * copy-on-write): allocated at the first share, NULL before. */
	SD_ATOMIC(SD_ATOMIC(uint32_t) *) sharers;
};

int sd_frame_pool_init(struct sd_frame_pool *pool, uint64_t nr);
void sd_frame_pool_fini(struct sd_frame_pool *pool);

/* Return: 0 and *pfn, or -ENOMEM. @cache may be NULL (non-CPU threads). */
int sd_frame_alloc(struct sd_frame_pool *pool, struct sd_frame_cache *cache, uint64_t *pfn);
void sd_frame_free(struct sd_frame_pool *pool, struct sd_frame_cache *cache, uint64_t pfn);
/*
 * Frames mapped more than once (fork's copy-on-write): a frame taken from
 * the pool has one mapping; sd_frame_share() adds one, sd_frame_put() drops
 * one and frees the frame (sd_frame_free()) at the last. Lock-free but for
 * the first share, which allocates the counts (-ENOMEM; the callers take it
 * before they change anything: sd_frame_share_ready()).
 */
int sd_frame_share_ready(struct sd_frame_pool *pool);
void sd_frame_share(struct sd_frame_pool *pool, uint64_t pfn);
/* True if this was the last mapping and the frame went back to the pool. */
bool sd_frame_put(struct sd_frame_pool *pool, struct sd_frame_cache *cache, uint64_t pfn);
/* Whether @pfn has another mapping now (do_wp_page()'s reuse test). */
bool sd_frame_shared(struct sd_frame_pool *pool, uint64_t pfn);
/* Give a CPU's cached frames back to the pool (detach). */
void sd_frame_cache_drain(struct sd_frame_pool *pool, struct sd_frame_cache *cache);
/* Frames currently handed out (for leak tests). */
uint64_t sd_frame_pool_in_use(struct sd_frame_pool *pool);

#endif
