/* SPDX-License-Identifier: MIT */
#ifndef SD_ARCH_GLOBAL_ASID_H
#define SD_ARCH_GLOBAL_ASID_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_ARCH
#error "arch/global_asid.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "../core/spinlock.h"
#include "../hw/event.h"

/*
 * The x86 global ASID space of INVLPGB (arch/x86/mm/tlb.c:
 * allocate_global_asid(), reset_global_asid_space(), mm_free_global_asid()).
 * Global ASIDs are the PCIDs above the per-CPU dynamic slots, the same on
 * every CPU and held for an mm's lifetime. Allocation is next-fit; a freed
 * ASID may still tag TLB entries anywhere, so it goes to the freed bitmap
 * and is reused only after the wrap-around, which flushes every non-global
 * entry on every CPU first. Everything is under one lock, as in the kernel
 * (Dave Hansen noted the fabric-wide flush done while holding it).
 */
struct sd_global_asid {
	sd_cacheline_aligned struct sd_spinlock lock;
	unsigned first;                /* TLB_NR_DYN_ASIDS: lowest global ASID */
	unsigned max;                  /* MAX_ASID_AVAILABLE: one past the highest + 1 */
	unsigned last;                 /* last_global_asid */
	unsigned available;            /* global_asid_available */
	uint64_t *used, *freed;        /* bitmaps over [0, max) */
	/* reset_global_asid_space(): invlpgb_flush_all_nonglobals(). */
	void (*flush_all_nonglobals)(void *arg);
	void *arg;
	unsigned resets;               /* under lock: wrap-around flushes done */
};

/*
 * @pool global ASIDs above @first (the kernel's 4087 = 4094 - 6 - 1).
 * Return: 0; -EINVAL if @pool is 0 or the space would pass 16 bits; -ENOMEM.
 */
int sd_global_asid_init(struct sd_global_asid *g, unsigned first, unsigned pool,
			void (*flush_all_nonglobals)(void *arg), void *arg);
void sd_global_asid_fini(struct sd_global_asid *g);
/* Bytes sd_global_asid_init() allocated: two bitmaps over the ASID space,
 * whatever the CPU count. */
size_t sd_global_asid_bytes(const struct sd_global_asid *g);

/* global_asid_lock: use_global_asid() rechecks the mm under it. */
static inline void sd_global_asid_lock(struct sd_global_asid *g)
{
	sd_spin_lock(&g->lock);
}

/* The same from CPU @cpu, whose wait for it (if any) is an event. */
static inline void sd_global_asid_lock_cpu(struct sd_global_asid *g, struct sd_cpu *cpu)
{
	sd_event_spin_lock(cpu, &g->lock, SD_LOCK_GLOBAL_ASID);
}

static inline void sd_global_asid_unlock(struct sd_global_asid *g)
{
	sd_spin_unlock(&g->lock);
}

/* Partner of sd_global_asid_lock_cpu(): the release is an event too. */
static inline void sd_global_asid_unlock_cpu(struct sd_global_asid *g, struct sd_cpu *cpu)
{
	sd_event_spin_unlock(cpu, &g->lock, SD_LOCK_GLOBAL_ASID);
}

/* Under the lock: a global ASID, or 0 if none is available. May run the
 * wrap-around flush. */
uint16_t sd_global_asid_alloc_locked(struct sd_global_asid *g);

/* Any thread, not under the lock: the same, taking it. */
uint16_t sd_global_asid_alloc(struct sd_global_asid *g);

/* Any thread: @asid's entries may still be cached; reusable after a wrap. */
void sd_global_asid_free(struct sd_global_asid *g, uint16_t asid);

/* Racy peek for the threshold rule (the kernel reads it unlocked too). */
static inline unsigned sd_global_asid_available(const struct sd_global_asid *g)
{
	return __atomic_load_n(&g->available, __ATOMIC_RELAXED);
}

#endif
