/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_ORACLE_H
#define SD_HW_ORACLE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/oracle.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <pthread.h>

#include <shootdown/oracle.h>

#include "../core/compiler.h"

/*
 * The stale-translation oracle (invariants (docs/invariants.md) 1 and 3), checked mode only.
 *
 * Versions come from one machine-wide clock, taken once per mapping change
 * under the mm's mmap_lock before its edits (a fault's under its split lock),
 * so a present PTE's version is newer than that of every change before it. The floor
 * of a page (the oldest version still allowed to serve an access) lives in
 * a sparse per-mm radix that is never shrunk while the mm lives, so it
 * survives the page-table pages it describes being freed.
 *
 * Ordering: sd_oracle_raise() runs after the strategy's flush returned and
 * publishes with release; an access loads the floor with acquire before its
 * TLB lookup. An access that sees the raised floor therefore started after
 * the flush completed, and any entry below the floor that serves it is a
 * real violation, never a false alarm.
 */
struct sd_oracle {
	SD_ATOMIC(uint32_t) clock;
	pthread_mutex_t lock;          /* guards details[] */
	SD_ATOMIC(unsigned) nr_details;
	struct sd_violation details[SD_ORACLE_MAX_DETAILS];
};

#define SD_FLOOR_BITS 12
#define SD_FLOOR_FANOUT (1u << SD_FLOOR_BITS)

struct sd_oracle_floor_leaf {
	SD_ATOMIC(uint32_t) floor[SD_FLOOR_FANOUT];
};

struct sd_oracle_floor_mid {
	SD_ATOMIC(struct sd_oracle_floor_leaf *) leaf[SD_FLOOR_FANOUT];
};

/* Per mm: vpn bits 35..24 pick a mid, 23..12 a leaf, 11..0 the slot. */
struct sd_oracle_floor {
	SD_ATOMIC(struct sd_oracle_floor_mid *) *top;
};

void sd_oracle_init(struct sd_oracle *o);
void sd_oracle_fini(struct sd_oracle *o);

static inline uint32_t sd_oracle_next_version(struct sd_oracle *o)
{
	return atomic_fetch_add_explicit(&o->clock, 1, memory_order_relaxed) + 1;
}

int sd_oracle_floor_init(struct sd_oracle_floor *f);
void sd_oracle_floor_fini(struct sd_oracle_floor *f);

/* Acquire-load the floor of @vpn (0 if none was ever raised). */
static inline uint32_t sd_oracle_floor_get(const struct sd_oracle_floor *f, uint64_t vpn)
{
	struct sd_oracle_floor_mid *mid = atomic_load_explicit(
		&f->top[(vpn >> (2 * SD_FLOOR_BITS)) & (SD_FLOOR_FANOUT - 1)],
		memory_order_acquire);
	if (!mid)
		return 0;
	struct sd_oracle_floor_leaf *leaf = atomic_load_explicit(
		&mid->leaf[(vpn >> SD_FLOOR_BITS) & (SD_FLOOR_FANOUT - 1)], memory_order_acquire);
	if (!leaf)
		return 0;
	return atomic_load_explicit(&leaf->floor[vpn & (SD_FLOOR_FANOUT - 1)],
				    memory_order_acquire);
}

/* Raise the floor of [vpn, vpn + nr) to at least @version (release). */
int sd_oracle_floor_raise(struct sd_oracle_floor *f, uint64_t vpn, uint64_t nr, uint32_t version);

/*
 * Make @vpn's floor slot exist (its floor stays as it was). The mm layer
 * touches every page it makes present, so a page without a slot was never
 * present and no TLB can hold a translation of it.
 * Return: 0; -ENOMEM (the page then escapes later checks, never a false alarm).
 */
int sd_oracle_floor_touch(struct sd_oracle_floor *f, uint64_t vpn);

/*
 * The per-call invariant (invariant 1): raise to at least @version the
 * floor of every page of [vpn, vpn + nr) that has a slot, skipping absent
 * nodes whole, so a huge sparse range costs what was ever present in it.
 * Called once the change's flush is done, with the version the change took
 * before its edits: every PTE of the range was then, under its table's
 * split lock, either rewritten at @version or not present (or filled since,
 * at a newer version), so any cached translation older
 * than @version is stale, whichever call (this one or a concurrent one
 * whose flush is still in flight) made it so.
 */
void sd_oracle_floor_raise_known(struct sd_oracle_floor *f, uint64_t vpn, uint64_t nr,
				 uint32_t version);

/* Record a violation's details (the count lives in the CPU's counters). */
void sd_oracle_record(struct sd_oracle *o, const struct sd_violation *v);

#endif
