/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_GBCAST_H
#define SD_STRATEGY_GBCAST_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/gbcast.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../arch/global_asid.h"
#include "../arch/invlpgb.h"
#include "ipi.h"

/* Global ASIDs: 4094 - 6 - 1 without PTI. */
#define SD_GBCAST_POOL 4087
/* mm_active_cpus_exceeds(mm, 3): a global ASID from 4 active CPUs on. */
#define SD_GBCAST_THRESHOLD 3
/* consider_global_asid() samples 1 flush in 32. */
#define SD_GBCAST_SAMPLE 32
/* invlpgb_count_max: pages per INVLPGB (CPUID 0x80000008 EDX[15:0] + 1). */
#define SD_GBCAST_COUNT_MAX 8

/*
 * Machine-wide state of `gbcast`: the `ipi` strategy it is built on
 * (m->strategy points to @ipi, so ipi's functions serve unchanged), plus
 * INVLPGB, the global ASID space and its policy.
 */
struct sd_gbcast {
	struct sd_ipi ipi;
	unsigned pool, threshold, sample, count_max;
	bool threshold_growth;                 /* an assumption: see gbcast.c */
	struct sd_global_asid gasid;
	struct sd_invlpgb ib;
};

/* @m's gbcast state; @m must run `gbcast`. */
static inline struct sd_gbcast *sd_gbcast_of(struct sd_machine *m)
{
	return caa_container_of(sd_ipi_of(m), struct sd_gbcast, ipi);
}

#endif
