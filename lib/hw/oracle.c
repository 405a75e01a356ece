/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "../core/error.h"
#include "machine_state.h"
#include "oracle.h"

void sd_oracle_init(struct sd_oracle *o)
{
	atomic_init(&o->clock, 0);
	atomic_init(&o->nr_details, 0);
	pthread_mutex_init(&o->lock, NULL);
}

void sd_oracle_fini(struct sd_oracle *o)
{
	pthread_mutex_destroy(&o->lock);
}

int sd_oracle_floor_init(struct sd_oracle_floor *f)
{
	f->top = calloc(SD_FLOOR_FANOUT, sizeof(*f->top));
	return f->top ? 0 : -ENOMEM;
}

void sd_oracle_floor_fini(struct sd_oracle_floor *f)
{
	if (!f->top)
		return;
	for (unsigned i = 0; i < SD_FLOOR_FANOUT; i++) {
		struct sd_oracle_floor_mid *mid = atomic_load(&f->top[i]);
		if (!mid)
			continue;
		for (unsigned j = 0; j < SD_FLOOR_FANOUT; j++)
			free(atomic_load(&mid->leaf[j]));
		free(mid);
	}
	free(f->top);
	f->top = NULL;
}

/* Get or install a node; losers of the install race free theirs. */
static void *get_or_install(SD_ATOMIC(void *) *slot, size_t size)
{
	void *cur = atomic_load_explicit(slot, memory_order_acquire);

	if (cur)
		return cur;
	void *fresh = calloc(1, size);
	if (!fresh)
		return NULL;
	if (atomic_compare_exchange_strong_explicit(slot, &cur, fresh, memory_order_acq_rel,
						    memory_order_acquire))
		return fresh;
	free(fresh);
	return cur;
}

static SD_ATOMIC(uint32_t) *floor_slot(struct sd_oracle_floor *f, uint64_t vpn)
{
	struct sd_oracle_floor_mid *mid = get_or_install(
		(SD_ATOMIC(void *) *)&f->top[(vpn >> (2 * SD_FLOOR_BITS)) & (SD_FLOOR_FANOUT - 1)],
		sizeof(*mid));
	if (!mid)
		return NULL;
	struct sd_oracle_floor_leaf *leaf = get_or_install(
		(SD_ATOMIC(void *) *)&mid->leaf[(vpn >> SD_FLOOR_BITS) & (SD_FLOOR_FANOUT - 1)],
		sizeof(*leaf));
	return leaf ? &leaf->floor[vpn & (SD_FLOOR_FANOUT - 1)] : NULL;
}

/* Raise one existing floor slot to at least @version (release). */
static void raise_slot(SD_ATOMIC(uint32_t) *slot, uint32_t version)
{
	uint32_t cur = atomic_load_explicit(slot, memory_order_relaxed);

	while (cur < version &&
	       !atomic_compare_exchange_weak_explicit(slot, &cur, version, memory_order_release,
						      memory_order_relaxed))
		;
}

int sd_oracle_floor_raise(struct sd_oracle_floor *f, uint64_t vpn, uint64_t nr, uint32_t version)
{
	for (uint64_t i = 0; i < nr; i++) {
		SD_ATOMIC(uint32_t) *slot = floor_slot(f, vpn + i);
		if (!slot)
			return -ENOMEM;
		/* Flushes of one page may return out of order: keep the max. */
		raise_slot(slot, version);
	}
	return 0;
}

int sd_oracle_floor_touch(struct sd_oracle_floor *f, uint64_t vpn)
{
	return floor_slot(f, vpn) ? 0 : -ENOMEM;
}

void sd_oracle_floor_raise_known(struct sd_oracle_floor *f, uint64_t vpn, uint64_t nr,
				 uint32_t version)
{
	const uint64_t span = SD_FLOOR_FANOUT;
	uint64_t end = vpn + nr;

	/* The radix covers the 36-bit vpn space of a 48-bit VA. */
	if (end > span * span * span)
		end = span * span * span;
	while (vpn < end) {
		struct sd_oracle_floor_mid *mid = atomic_load_explicit(
			&f->top[vpn >> (2 * SD_FLOOR_BITS)], memory_order_acquire);
		if (!mid) {
			vpn = (vpn | (span * span - 1)) + 1;
			continue;
		}
		struct sd_oracle_floor_leaf *leaf = atomic_load_explicit(
			&mid->leaf[(vpn >> SD_FLOOR_BITS) & (span - 1)], memory_order_acquire);
		uint64_t leaf_end = (vpn | (span - 1)) + 1;
		if (leaf)
			for (uint64_t v = vpn; v < end && v < leaf_end; v++)
				raise_slot(&leaf->floor[v & (span - 1)], version);
		vpn = leaf_end;
	}
}

void sd_oracle_record(struct sd_oracle *o, const struct sd_violation *v)
{
	pthread_mutex_lock(&o->lock);
	unsigned n = atomic_load_explicit(&o->nr_details, memory_order_relaxed);
	if (n < SD_ORACLE_MAX_DETAILS) {
		o->details[n] = *v;
		atomic_store_explicit(&o->nr_details, n + 1, memory_order_release);
	}
	pthread_mutex_unlock(&o->lock);
}

int sd_oracle_checked(const struct sd_machine *m)
{
	if (!m)
		return sd_fail(0, "sd_oracle_checked: NULL machine");
	return m->checked;
}

uint64_t sd_oracle_violations(const struct sd_machine *m)
{
	uint64_t n = 0;

	if (!m)
		return (uint64_t)sd_fail(0, "sd_oracle_violations: NULL machine");
	for (unsigned i = 0; i < m->nr_cpus; i++)
		n += atomic_load_explicit(&m->cpus[i]->stats.counter[SD_STAT_VIOLATION],
					  memory_order_relaxed);
	return n;
}

int sd_oracle_violation(const struct sd_machine *m, unsigned idx, struct sd_violation *out)
{
	if (!m || !out)
		return sd_fail(-EINVAL, "sd_oracle_violation: NULL argument");
	struct sd_oracle *o = (struct sd_oracle *)&m->oracle;
	int err = 0;

	pthread_mutex_lock(&o->lock);
	if (idx < atomic_load_explicit(&o->nr_details, memory_order_relaxed))
		*out = o->details[idx];
	else
		err = sd_fail(-ENOENT, "violation %u not recorded", idx);
	pthread_mutex_unlock(&o->lock);
	return err;
}
