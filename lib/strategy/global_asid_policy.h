/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_GLOBAL_ASID_POLICY_H
#define SD_STRATEGY_GLOBAL_ASID_POLICY_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/global_asid_policy.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../arch/global_asid.h"
#include "ipi.h"

/*
 * Who gets a global ASID and how an mm moves onto it (arch/x86/mm/tlb.c):
 * the policy AMD's INVLPGB series merged in 6.15 and Intel's RAR series
 * took over unchanged, shared here by `gbcast` and `rar`, each on the
 * `ipi` strategy it embeds.
 */

/* mm_active_cpus_exceeds(): more than @threshold CPUs run @mm, not lazily. */
bool sd_gasid_active_cpus_exceed(struct sd_ipi *ipi, struct sd_mm *mm, unsigned threshold);

/*
 * use_global_asid() and mm_assign_global_asid(): under the lock, recheck,
 * allocate (may run the pool's wrap-around flush), then set the transition
 * flag before publishing the ASID with release ordering (the partner of the
 * acquire in sd_ipi_mm_global_asid()), so whoever sees the ASID sees the
 * transition too.
 */
void sd_gasid_use(struct sd_cpu *cpu, struct sd_global_asid *g, struct sd_mm *mm);

/*
 * finish_asid_transition(): CPUs that still run the mm on a dynamic ASID
 * are not reached by a flush of the global one. Wait out CPUs in the middle
 * of a switch (they may have chosen a dynamic ASID just before the global
 * one was published); if any runs the mm on another ASID, IPI the whole
 * mask, whose handler also moves it over. Once none does, the transition
 * is over.
 */
void sd_gasid_finish_transition(struct sd_cpu *cpu, struct sd_ipi *ipi,
				struct sd_ipi_flush_info *f);

/*
 * destroy_context_free_global_asid(), then ipi's mm_fini: @mm's global ASID
 * back to @g, reused only after the next wrap-around (its entries may still
 * be cached). Counted on the destroying CPU, if it is one of @m's.
 */
void sd_gasid_mm_fini(struct sd_machine *m, struct sd_global_asid *g, struct sd_mm *mm,
		      void *mm_priv);

#endif
