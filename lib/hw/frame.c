/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "frame.h"

int sd_frame_pool_init(struct sd_frame_pool *pool, uint64_t nr)
{
	pool->free = malloc(nr * sizeof(*pool->free));
	if (!pool->free)
		return -ENOMEM;
	pthread_mutex_init(&pool->lock, NULL);
	pool->nfree = 0;
	pool->next_fresh = 1;
	pool->nr = nr;
	atomic_init(&pool->sharers, NULL);
	return 0;
}

void sd_frame_pool_fini(struct sd_frame_pool *pool)
{
	free(pool->free);
	pool->free = NULL;
	free((void *)atomic_load_explicit(&pool->sharers, memory_order_relaxed));
	atomic_store_explicit(&pool->sharers, NULL, memory_order_relaxed);
	pthread_mutex_destroy(&pool->lock);
}

static int take_locked(struct sd_frame_pool *pool, uint64_t *pfn)
{
	if (pool->nfree) {
		*pfn = pool->free[--pool->nfree];
		return 0;
	}
	if (pool->next_fresh <= pool->nr) {
		*pfn = pool->next_fresh++;
		return 0;
	}
	return -ENOMEM;
}

int sd_frame_alloc(struct sd_frame_pool *pool, struct sd_frame_cache *cache, uint64_t *pfn)
{
	int err = 0;

	if (cache && cache->n) {
		*pfn = cache->pfn[--cache->n];
		return 0;
	}
	pthread_mutex_lock(&pool->lock);
	err = take_locked(pool, pfn);
	/* Refill half the cache while we hold the lock. */
	if (!err && cache) {
		uint64_t extra;
		while (cache->n < SD_FRAME_CACHE / 2 && !take_locked(pool, &extra))
			cache->pfn[cache->n++] = (uint32_t)extra;
	}
	pthread_mutex_unlock(&pool->lock);
	return err;
}

static void give_back(struct sd_frame_pool *pool, struct sd_frame_cache *cache, unsigned keep)
{
	pthread_mutex_lock(&pool->lock);
	while (cache->n > keep)
		pool->free[pool->nfree++] = cache->pfn[--cache->n];
	pthread_mutex_unlock(&pool->lock);
}

void sd_frame_free(struct sd_frame_pool *pool, struct sd_frame_cache *cache, uint64_t pfn)
{
	if (!cache) {
		pthread_mutex_lock(&pool->lock);
		pool->free[pool->nfree++] = (uint32_t)pfn;
		pthread_mutex_unlock(&pool->lock);
		return;
	}
	if (cache->n == SD_FRAME_CACHE)
		give_back(pool, cache, SD_FRAME_CACHE / 2);
	cache->pfn[cache->n++] = (uint32_t)pfn;
}

void sd_frame_cache_drain(struct sd_frame_pool *pool, struct sd_frame_cache *cache)
{
	give_back(pool, cache, 0);
}

uint64_t sd_frame_pool_in_use(struct sd_frame_pool *pool)
{
	uint64_t n;

	pthread_mutex_lock(&pool->lock);
	n = pool->next_fresh - 1 - pool->nfree;
	pthread_mutex_unlock(&pool->lock);
	return n;
}

int sd_frame_share_ready(struct sd_frame_pool *pool)
{
	int err = 0;

	/* Acquire: pairs with the release below; a reader that sees the
	 * array sees it zeroed. */
	if (atomic_load_explicit(&pool->sharers, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&pool->lock);
	if (!atomic_load_explicit(&pool->sharers, memory_order_relaxed)) {
		SD_ATOMIC(uint32_t) *v = calloc(pool->nr + 1, sizeof(*v));

		if (v)
			atomic_store_explicit(&pool->sharers, v, memory_order_release);
		else
			err = -ENOMEM;
	}
	pthread_mutex_unlock(&pool->lock);
	return err;
}

/* After sd_frame_share_ready() (the array exists). Relaxed: the count
 * orders nothing else; the PTE stores that publish a sharing are ordered
 * by the page-table locks their readers take. */
void sd_frame_share(struct sd_frame_pool *pool, uint64_t pfn)
{
	SD_ATOMIC(uint32_t) *v = atomic_load_explicit(&pool->sharers, memory_order_acquire);

	atomic_fetch_add_explicit(&v[pfn], 1, memory_order_relaxed);
}

/* One owner of each mapping drops it: the CAS makes exactly one of the
 * last two concurrent puts see 0 and free the frame. */
bool sd_frame_put(struct sd_frame_pool *pool, struct sd_frame_cache *cache, uint64_t pfn)
{
	SD_ATOMIC(uint32_t) *v = atomic_load_explicit(&pool->sharers, memory_order_acquire);

	if (v) {
		uint32_t old = atomic_load_explicit(&v[pfn], memory_order_relaxed);

		while (old && !atomic_compare_exchange_weak_explicit(&v[pfn], &old, old - 1,
								     memory_order_acq_rel,
								     memory_order_relaxed))
			;
		if (old)
			return false;
	}
	sd_frame_free(pool, cache, pfn);
	return true;
}

bool sd_frame_shared(struct sd_frame_pool *pool, uint64_t pfn)
{
	SD_ATOMIC(uint32_t) *v = atomic_load_explicit(&pool->sharers, memory_order_acquire);

	return v && atomic_load_explicit(&v[pfn], memory_order_acquire) != 0;
}
