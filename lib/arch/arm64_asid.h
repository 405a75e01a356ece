/* SPDX-License-Identifier: MIT */
#ifndef SD_ARCH_ARM64_ASID_H
#define SD_ARCH_ARM64_ASID_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_ARCH
#error "arch/arm64_asid.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"
#include "../core/cpumask.h"
#include "../core/spinlock.h"
#include "../hw/event.h"

/*
 * The arm64 generational ASID allocator (arch/arm64/mm/context.c):
 * check_and_switch_context(), new_context(), flush_context(),
 * check_update_reserved_asid(). A context id is generation | asid; the
 * generation unit is 1 << bits. Rollover flushes nothing remotely: it marks
 * every CPU in flush_pending, and each CPU flushes its own TLB the next time
 * it installs an ASID through the slow path, which it must take because
 * its active id was zeroed.
 */
struct sd_arm64_asid_percpu {
	sd_cacheline_aligned SD_ATOMIC(uint64_t) active;  /* 0: rolled over since last switch */
	uint64_t reserved;                             /* under lock */
};

struct sd_arm64_asid {
	unsigned bits;
	uint64_t nr;                   /* 1 << bits; index 0 is never handed out */
	sd_cacheline_aligned SD_ATOMIC(uint64_t) generation;
	sd_cacheline_aligned struct sd_spinlock lock;
	uint64_t *map;                 /* under lock */
	uint64_t cur_idx;
	struct sd_cpumask flush_pending;
	unsigned nr_cpus;
	struct sd_arm64_asid_percpu *percpu;
};

/* Return: 0; -EINVAL if 2^bits - 1 ASIDs cannot cover @nr_cpus + 2; -ENOMEM. */
int sd_arm64_asid_init(struct sd_arm64_asid *a, unsigned bits, unsigned nr_cpus);
void sd_arm64_asid_fini(struct sd_arm64_asid *a);
/* Bytes sd_arm64_asid_init() allocated: the ASID map, the per-CPU lines
 * and flush_pending. */
size_t sd_arm64_asid_bytes(const struct sd_arm64_asid *a);

/* What a switch did, for the caller's counters and local flush. */
struct sd_arm64_switch {
	uint16_t asid;                 /* the number to load */
	bool flush_local_all;          /* flush the whole local TLB before use */
	bool allocated;                /* new_context() ran */
	bool fresh;                    /* ...and gave a number no CPU runs the mm
					* with (not a reserved one) */
	bool rolled_over;              /* ...and started a new generation */
};

/*
 * check_and_switch_context(): make @ctx_id (the mm's context.id) current on
 * @cpu. Interrupts off. Lock-free when the mm's generation is current.
 * @self is the emulated CPU running it, whose lock wait and modelled
 * lock handoff on cpu_asid_lock are events; NULL (a unit test of the
 * allocator alone) counts nothing.
 */
void sd_arm64_asid_switch(struct sd_arm64_asid *a, unsigned cpu, SD_ATOMIC(uint64_t) *ctx_id,
			  struct sd_arm64_switch *out, struct sd_cpu *self);

/*
 * The same, calling @on_new(@arg, fresh) when new_context() ran, under
 * cpu_asid_lock and before the mm's new id is published (a release that
 * the fast path of every other CPU switching in acquires): the place where
 * per-mm state tied to the ASID is reset (new_context()), so that no CPU
 * running the mm under its new id can have updated it before the reset.
 * @fresh: the number is one no CPU runs the mm with (not a reserved one).
 */
void sd_arm64_asid_switch_hook(struct sd_arm64_asid *a, unsigned cpu, SD_ATOMIC(uint64_t) *ctx_id,
			       struct sd_arm64_switch *out, struct sd_cpu *self,
			       void (*on_new)(void *arg, bool fresh), void *arg);

static inline uint16_t sd_arm64_asid_of(const struct sd_arm64_asid *a, uint64_t ctx_id)
{
	return (uint16_t)(ctx_id & (a->nr - 1));
}

#endif
