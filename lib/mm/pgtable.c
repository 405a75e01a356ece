/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../core/rcu.h"

#include "pgtable.h"

/* Test hook: see pgtable.h. Relaxed: tests set it while no change runs. */
SD_ATOMIC(long) sd_pt_alloc_fail_after = -1;

/* A failure injected by the test hook, counted down per allocation. */
static bool injected_failure(void)
{
	long left = atomic_load_explicit(&sd_pt_alloc_fail_after, memory_order_relaxed);

	if (likely(left < 0))
		return false;
	if (left == 0)
		return true;
	atomic_store_explicit(&sd_pt_alloc_fail_after, left - 1, memory_order_relaxed);
	return false;
}

struct sd_pt *sd_pt_alloc(void)
{
	/* Cache-line aligned, not page aligned: the entries are 4 KiB and the
	 * lock follows them on a line of its own. */
	struct sd_pt *pt = injected_failure() ? NULL : aligned_alloc(SD_CACHELINE, sizeof(struct sd_pt));

	if (pt) {
		memset(pt, 0, sizeof(*pt));
		sd_spin_init(&pt->ptl);
		pt->ptl_model = (struct sd_model_lock)SD_MODEL_LOCK_INIT;
	}
	return pt;
}

void sd_pt_free(struct sd_pt *pt)
{
	free(pt);
}

struct sd_pt *sd_pt_next_leaf(struct sd_pt *pgd, uint64_t *vpn, uint64_t end)
{
	while (*vpn < end) {
		struct sd_pt *pt = pgd;
		unsigned level = SD_PT_LEVELS - 1;

		for (; level > 0; level--) {
			uint64_t next = atomic_load_explicit(&pt->e[sd_pt_index(*vpn, level)],
							     memory_order_relaxed);
			if (!next)
				break;
			pt = (struct sd_pt *)(uintptr_t)next;
		}
		if (level == 0)
			return pt;
		/* Nothing below this entry: skip all it would cover. */
		uint64_t span = UINT64_C(1) << (SD_PT_SHIFT * level);
		*vpn = (*vpn & ~(span - 1)) + span;
	}
	return NULL;
}

struct sd_pt *sd_pt_leaf_alloc(struct sd_pt *pgd, uint64_t vpn)
{
	struct sd_pt *pt = pgd;

	for (unsigned level = SD_PT_LEVELS - 1; level > 0; level--) {
		SD_ATOMIC(uint64_t) *slot = &pt->e[sd_pt_index(vpn, level)];
		uint64_t next = atomic_load_explicit(slot, memory_order_relaxed);

		if (!next) {
			struct sd_pt *child = sd_pt_alloc();
			if (!child)
				return NULL;
			next = (uint64_t)(uintptr_t)child;
			/* Release: a walker that sees the pointer sees zeroes. */
			atomic_store_explicit(slot, next, memory_order_release);
		}
		pt = (struct sd_pt *)(uintptr_t)next;
	}
	return pt;
}

/* Tables that tables at @level and below need to cover [first, last] (pages). */
static uint64_t tables_for_span(unsigned level, uint64_t first, uint64_t last)
{
	uint64_t n = 0;

	for (unsigned k = 0; k <= level; k++) {
		unsigned shift = SD_PT_SHIFT * (k + 1);
		n += (last >> shift) - (first >> shift) + 1;
	}
	return n;
}

/* Missing tables below @pt (at @level) for [first, last]: arithmetic for a
 * missing subtree, so the cost is what exists, not the range's size. */
static uint64_t missing_level(const struct sd_pt *pt, unsigned level, uint64_t first,
			      uint64_t last)
{
	unsigned shift = SD_PT_SHIFT * level;
	unsigned lo = sd_pt_index(first, level), hi = sd_pt_index(last, level);
	uint64_t base = first >> (shift + SD_PT_SHIFT) << (shift + SD_PT_SHIFT), n = 0;

	for (unsigned i = lo; i <= hi; i++) {
		uint64_t cfirst = i == lo ? first : base | ((uint64_t)i << shift);
		uint64_t clast = i == hi ? last : (base | ((uint64_t)i << shift)) +
							  (UINT64_C(1) << shift) - 1;
		uint64_t v = atomic_load_explicit(&pt->e[i], memory_order_relaxed);

		if (!v)
			n += tables_for_span(level - 1, cfirst, clast);
		else if (level > 1)
			n += missing_level((const struct sd_pt *)(uintptr_t)v, level - 1, cfirst,
					   clast);
	}
	return n;
}

uint64_t sd_pt_count_missing(const struct sd_pt *pgd, uint64_t vpn, uint64_t nr)
{
	return missing_level(pgd, SD_PT_LEVELS - 1, vpn, vpn + nr - 1);
}

int sd_pt_reserve(struct sd_pt_reserve *r, uint64_t n)
{
	r->n = r->used = 0;
	r->tables = NULL;
	if (!n)
		return 0;
	if (n > SIZE_MAX / sizeof(*r->tables) || !(r->tables = malloc(n * sizeof(*r->tables))))
		return -ENOMEM;
	for (; r->n < n; r->n++) {
		if (!(r->tables[r->n] = sd_pt_alloc())) {
			sd_pt_reserve_release(r);
			return -ENOMEM;
		}
	}
	return 0;
}

void sd_pt_reserve_release(struct sd_pt_reserve *r)
{
	/* Never linked, so no walker can hold one: free them now. */
	for (size_t i = r->used; i < r->n; i++)
		sd_pt_free(r->tables[i]);
	free(r->tables);
	r->tables = NULL;
	r->n = r->used = 0;
}

struct sd_pt *sd_pt_leaf_link(struct sd_pt *pgd, uint64_t vpn, struct sd_pt_reserve *r)
{
	struct sd_pt *pt = pgd;

	for (unsigned level = SD_PT_LEVELS - 1; level > 0; level--) {
		SD_ATOMIC(uint64_t) *slot = &pt->e[sd_pt_index(vpn, level)];
		uint64_t next = atomic_load_explicit(slot, memory_order_relaxed);

		if (!next) {
			if (r->used == r->n)
				return NULL;    /* the count was wrong: a library bug */
			next = (uint64_t)(uintptr_t)r->tables[r->used++];
			/* Release: a walker that sees the pointer sees zeroes;
			 * pairs with the acquire in sd_pt_walk_leaf(). */
			atomic_store_explicit(slot, next, memory_order_release);
		}
		pt = (struct sd_pt *)(uintptr_t)next;
	}
	return pt;
}

static bool pt_empty(const struct sd_pt *pt)
{
	for (unsigned i = 0; i < SD_PT_ENTRIES; i++)
		if (atomic_load_explicit(&pt->e[i], memory_order_relaxed))
			return false;
	return true;
}

static int freelist_add(struct sd_pt_freelist *fl, struct sd_pt *pt)
{
	if (fl->n == fl->cap) {
		size_t cap = fl->cap ? 2 * fl->cap : 16;
		struct sd_pt **t = realloc(fl->tables, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		fl->tables = t;
		fl->cap = cap;
	}
	fl->tables[fl->n++] = pt;
	return 0;
}

/* Unlink empty children of @pt (at @level) whose span meets [first, last]. */
static int unlink_level(struct sd_pt *pt, unsigned level, uint64_t first, uint64_t last,
			struct sd_pt_freelist *fl)
{
	unsigned shift = SD_PT_SHIFT * level;
	unsigned lo = sd_pt_index(first, level), hi = sd_pt_index(last, level);
	int err = 0;

	for (unsigned i = lo; i <= hi && !err; i++) {
		uint64_t v = atomic_load_explicit(&pt->e[i], memory_order_relaxed);
		struct sd_pt *child = (struct sd_pt *)(uintptr_t)v;
		if (!child)
			continue;
		if (level > 1) {
			uint64_t span_first = (first >> (shift + SD_PT_SHIFT) << (shift + SD_PT_SHIFT)) |
					      ((uint64_t)i << shift);
			uint64_t cfirst = i == lo ? first : span_first;
			uint64_t clast = i == hi ? last : span_first + (UINT64_C(1) << shift) - 1;
			err = unlink_level(child, level - 1, cfirst, clast, fl);
		}
		if (!err && pt_empty(child)) {
			err = freelist_add(fl, child);
			if (!err)
				atomic_store_explicit(&pt->e[i], 0, memory_order_release);
		}
	}
	return err;
}

int sd_pt_unlink_empty(struct sd_pt *pgd, uint64_t vpn, uint64_t nr, struct sd_pt_freelist *fl)
{
	return unlink_level(pgd, SD_PT_LEVELS - 1, vpn, vpn + nr - 1, fl);
}

struct pt_free_batch {
	struct rcu_head head;
	size_t n;
	struct sd_pt **tables;
};

static void free_batch_cb(struct rcu_head *head)
{
	struct pt_free_batch *b = caa_container_of(head, struct pt_free_batch, head);

	sd_rcu_tsan_acquire();

	for (size_t i = 0; i < b->n; i++)
		sd_pt_free(b->tables[i]);
	free(b->tables);
	free(b);
}

void sd_pt_free_deferred(struct sd_pt_freelist *fl)
{
	struct pt_free_batch *b;

	if (!fl->n) {
		free(fl->tables);
		return;
	}
	b = malloc(sizeof(*b));
	if (!b) {
		/* No memory for the callback: wait for the grace period here. */
		sd_rcu_synchronize();
		for (size_t i = 0; i < fl->n; i++)
			sd_pt_free(fl->tables[i]);
		free(fl->tables);
		return;
	}
	b->n = fl->n;
	b->tables = fl->tables;
	sd_rcu_call(&b->head, free_batch_cb);
}

static uint64_t free_level(struct sd_pt *pt, unsigned level,
			   void (*leaf_fn)(uint64_t pte, void *arg), void *arg)
{
	uint64_t n = 1;

	for (unsigned i = 0; i < SD_PT_ENTRIES; i++) {
		uint64_t v = atomic_load_explicit(&pt->e[i], memory_order_relaxed);
		if (!v)
			continue;
		if (level == 0)
			leaf_fn(v, arg);
		else
			n += free_level((struct sd_pt *)(uintptr_t)v, level - 1, leaf_fn, arg);
	}
	sd_pt_free(pt);
	return n;
}

uint64_t sd_pt_free_tree(struct sd_pt *pgd, void (*leaf_fn)(uint64_t pte, void *arg), void *arg)
{
	return free_level(pgd, SD_PT_LEVELS - 1, leaf_fn, arg);
}
