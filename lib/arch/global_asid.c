/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "global_asid.h"

#define BITS 64u

static bool test_bit(const uint64_t *map, unsigned bit)
{
	return map[bit / BITS] >> (bit % BITS) & 1;
}

static void set_bit(uint64_t *map, unsigned bit)
{
	map[bit / BITS] |= UINT64_C(1) << (bit % BITS);
}

int sd_global_asid_init(struct sd_global_asid *g, unsigned first, unsigned pool,
			void (*flush_all_nonglobals)(void *arg), void *arg)
{
	/* 64-bit: a huge @pool must not wrap past the 16-bit check. */
	uint64_t max64 = (uint64_t)first + pool + 1;

	if (!pool || max64 > 0xffffu)
		return -EINVAL;
	unsigned max = (unsigned)max64;
	unsigned words = (max + BITS - 1) / BITS;
	sd_spin_init(&g->lock);
	g->first = first;
	g->max = max;
	g->last = max;                 /* the first allocation wraps: a clean start */
	g->available = pool;
	g->used = calloc(words, sizeof(uint64_t));
	g->freed = calloc(words, sizeof(uint64_t));
	g->flush_all_nonglobals = flush_all_nonglobals;
	g->arg = arg;
	g->resets = 0;
	if (!g->used || !g->freed) {
		sd_global_asid_fini(g);
		return -ENOMEM;
	}
	return 0;
}

size_t sd_global_asid_bytes(const struct sd_global_asid *g)
{
	return 2 * ((g->max + BITS - 1) / BITS) * sizeof(uint64_t);
}

void sd_global_asid_fini(struct sd_global_asid *g)
{
	free(g->used);
	free(g->freed);
	g->used = g->freed = NULL;
}

/* reset_global_asid_space(): every freed ASID becomes reusable, once no TLB
 * can hold its entries any more. */
static void reset(struct sd_global_asid *g)
{
	if (g->flush_all_nonglobals)
		g->flush_all_nonglobals(g->arg);
	for (unsigned w = 0; w < (g->max + BITS - 1) / BITS; w++) {
		g->used[w] &= ~g->freed[w];
		g->freed[w] = 0;
	}
	g->last = g->first;
	g->resets++;
}

/* find_next_zero_bit() over [from, max - 1). */
static unsigned next_free(const struct sd_global_asid *g, unsigned from)
{
	for (unsigned a = from; a < g->max - 1; a++)
		if (!test_bit(g->used, a))
			return a;
	return g->max;
}

uint16_t sd_global_asid_alloc(struct sd_global_asid *g)
{
	uint16_t asid;

	sd_spin_lock(&g->lock);
	asid = sd_global_asid_alloc_locked(g);
	sd_spin_unlock(&g->lock);
	return asid;
}

uint16_t sd_global_asid_alloc_locked(struct sd_global_asid *g)
{
	unsigned asid = 0;

	if (!g->available)
		goto out;              /* "Ran out of global ASIDs" */
	if (g->last >= g->max - 1)
		reset(g);
	asid = next_free(g, g->last);
	/* Only freed ASIDs are left, behind us: wrap early to recycle them. */
	if (asid >= g->max - 1) {
		reset(g);
		asid = next_free(g, g->last);
	}
	if (asid >= g->max - 1) {
		asid = 0;
		goto out;
	}
	set_bit(g->used, asid);
	g->last = asid;
	__atomic_store_n(&g->available, g->available - 1, __ATOMIC_RELAXED);
out:
	return (uint16_t)asid;
}

void sd_global_asid_free(struct sd_global_asid *g, uint16_t asid)
{
	if (!asid)
		return;
	sd_spin_lock(&g->lock);
	set_bit(g->freed, asid);
	__atomic_store_n(&g->available, g->available + 1, __ATOMIC_RELAXED);
	sd_spin_unlock(&g->lock);
}
