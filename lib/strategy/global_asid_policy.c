/* SPDX-License-Identifier: MIT */
/*
 * The global ASID policy of arch/x86/mm/tlb.c, shared by `gbcast` (AMD
 * INVLPGB) and `rar` (Intel RAR): mm_active_cpus_exceeds(),
 * use_global_asid() and finish_asid_transition(). The header says what
 * each does and how it is ordered.
 */
#include "../core/backoff.h"
#include "../hw/event.h"
#include "global_asid_policy.h"

bool sd_gasid_active_cpus_exceed(struct sd_ipi *ipi, struct sd_mm *mm, unsigned threshold)
{
	const struct sd_cpumask *mask = &sd_ipi_mm_of(mm)->cpumask;
	unsigned t, count = 0;

	if (sd_cpumask_weight(mask) <= threshold)
		return false;
	sd_cpumask_for_each(t, mask) {
		struct sd_ipi_cpu *pc = &ipi->percpu[t];
		if (atomic_load_explicit(&pc->loaded_mm, memory_order_relaxed) != (uintptr_t)mm ||
		    atomic_load_explicit(&pc->is_lazy, memory_order_relaxed))
			continue;
		if (++count > threshold)
			return true;
	}
	return false;
}

void sd_gasid_mm_fini(struct sd_machine *m, struct sd_global_asid *g, struct sd_mm *mm,
		      void *mm_priv)
{
	struct sd_ipi_mm *im = mm_priv;
	uint16_t gasid = atomic_load_explicit(&im->global_asid, memory_order_relaxed);

	if (gasid) {
		sd_global_asid_free(g, gasid);
		if (sd_this_cpu && sd_this_cpu->m == m)
			sd_event(sd_this_cpu, SD_EV_GLOBAL_ASID_FREE, 0, 0);
	}
	sd_ipi_mm_fini(m, mm, mm_priv);
}

void sd_gasid_use(struct sd_cpu *cpu, struct sd_global_asid *g, struct sd_mm *mm)
{
	struct sd_ipi_mm *im = sd_ipi_mm_of(mm);
	uint16_t asid = 0;

	sd_global_asid_lock_cpu(g, cpu);
	if (!sd_ipi_mm_global_asid(mm))
		asid = sd_global_asid_alloc_locked(g);   /* 0: ran out */
	if (asid) {
		atomic_store_explicit(&im->asid_transition, true, memory_order_relaxed);
		atomic_store_explicit(&im->global_asid, asid, memory_order_release);
		sd_event(cpu, SD_EV_GLOBAL_ASID_ALLOC, 0, 0);
	}
	sd_global_asid_unlock_cpu(g, cpu);
}

void sd_gasid_finish_transition(struct sd_cpu *cpu, struct sd_ipi *ipi,
				struct sd_ipi_flush_info *f)
{
	struct sd_ipi_mm *im = sd_ipi_mm_of(f->mm);
	uint16_t gasid = sd_ipi_mm_global_asid(f->mm);
	unsigned t;

	if (!atomic_load_explicit(&im->asid_transition, memory_order_acquire))
		return;
	sd_cpumask_for_each(t, &im->cpumask) {
		struct sd_ipi_cpu *pc = &ipi->percpu[t];
		struct sd_backoff b = SD_BACKOFF_INIT;
		uintptr_t loaded;

		/* Acquire: pairs with the release store of loaded_mm in ipi's
		 * load_asid(), so loaded_asid below belongs to this mm. */
		while ((loaded = atomic_load_explicit(&pc->loaded_mm, memory_order_acquire)) ==
		       SD_IPI_LOADED_SWITCHING)
			sd_backoff_wait(&b);
		if (loaded != (uintptr_t)f->mm)
			continue;
		if (atomic_load_explicit(&pc->loaded_asid, memory_order_relaxed) != gasid) {
			if (ipi->broken & SD_IPI_BREAK_NO_TRANSITION)
				return;
			sd_event(cpu, SD_EV_TRANSITION_IPI, 0, 0);
			sd_ipi_flush_tlb_multi(cpu, &im->cpumask, f);
			return;
		}
	}
	atomic_store_explicit(&im->asid_transition, false, memory_order_relaxed);
}
