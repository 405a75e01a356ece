/* SPDX-License-Identifier: MIT */
/*
 * The `local` strategy: arm64 "skip tlbi broadcast" (Andrea Arcangeli's
 * "arm64: tlb: skip tlbi broadcast" series).
 *
 * A flush of an mm that runs on no other CPU is done with local TLBIs only;
 * every other CPU is marked stale in the mm's stale mask instead, and flushes
 * the mm's ASID locally the next time it switches the mm in. When the mm is
 * active elsewhere, the flush falls back to `broadcast` (range encoding
 * included), whose ASIDs, switch path and ops this file reuses: sd_local
 * embeds struct sd_broadcast, and local_mm embeds struct sd_broadcast_mm.
 *
 * Per mm: nr_active (CPUs that have it loaded and counted; lazy CPUs in
 * idle are not) and the stale mask. Per CPU: not_lazy.
 *
 * The decision races with a CPU switching the mm in. Both sides store, then
 * fence, then load (the store-buffering pattern):
 *
 *   switcher (local_switch_in)           flusher (local_flush_check)
 *   nr_active++                          stale mask = all
 *   smp_mb()  ---- pairs with ---->      smp_mb()
 *   if (stale bit) local ASID flush      if (nr_active <= 1) LOCAL or NO
 *
 * At least one side sees the other's store: either the flusher counts the
 * new CPU and broadcasts, or the switcher finds its stale bit and flushes
 * before it uses the ASID. The stores and fences go through core/ordering.h
 * so a test can hold them in an emulated store buffer and see a missing
 * fence fail.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/compiler.h>

#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "broadcast.h"
#include "builtin.h"

struct local_mm {
	struct sd_broadcast_mm base;   /* mm->strategy points here (mm/flush_ops.h) */
	sd_cacheline_aligned SD_ATOMIC(int) nr_active;
	struct sd_cpumask stale;
	/* nr_active's and the stale mask's lines, for modelled time: a
	 * switch writes the first and reads the second, a flush the reverse. */
	struct sd_model_line active_line;
	struct sd_model_line stale_line;
};

struct local_percpu {
	sd_cacheline_aligned bool not_lazy;    /* owner only */
};

struct sd_local {
	struct sd_broadcast b;         /* m->strategy points here (mm/flush_ops.h) */
	struct local_percpu *percpu;
};

enum flush_decision { FLUSH_NO, FLUSH_LOCAL, FLUSH_BROADCAST };

static inline struct sd_local *local_of(void *priv)
{
	return caa_container_of(priv, struct sd_local, b);
}

static inline struct local_mm *local_mm_of_priv(void *mm_priv)
{
	return caa_container_of(mm_priv, struct local_mm, base);
}

static inline struct local_mm *local_mm_of(struct sd_mm *mm)
{
	return local_mm_of_priv(mm->strategy);
}

static inline bool *not_lazy_of(struct sd_cpu *cpu)
{
	return &local_of(cpu->m->strategy)->percpu[cpu->id].not_lazy;
}

static int local_machine_init(struct sd_machine *m, const struct sd_opt *opts,
			      unsigned nr_opts, void **priv)
{
	struct sd_local *l = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*l), SD_CACHELINE));
	int err;

	if (!l)
		return -ENOMEM;
	l->percpu = aligned_alloc(SD_CACHELINE, m->nr_cpus * sizeof(*l->percpu));
	if (!l->percpu) {
		free(l);
		return -ENOMEM;
	}
	memset(l->percpu, 0, m->nr_cpus * sizeof(*l->percpu));
	err = sd_broadcast_machine_init(m, &l->b);
	/* Options are broadcast's, for the fallback: range=, lpa2=, max_tlbi_ops=. */
	for (unsigned i = 0; !err && i < nr_opts; i++)
		err = sd_broadcast_option(&l->b, "local", &opts[i]);
	if (!err)
		err = sd_broadcast_check_range(m, &l->b, "local");
	if (err) {
		sd_arm64_asid_fini(&l->b.asid);
		free(l->percpu);
		free(l);
		return err;
	}
	*priv = &l->b;
	return 0;
}

static void local_machine_fini(struct sd_machine *m, void *priv)
{
	struct sd_local *l = local_of(priv);

	(void)m;
	sd_arm64_asid_fini(&l->b.asid);
	free(l->percpu);
	free(l);
}

static size_t local_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_local *l = local_of((void *)priv);

	return sd_round_up(sizeof(*l), SD_CACHELINE) + m->nr_cpus * sizeof(*l->percpu) +
	       sd_arm64_asid_bytes(&l->b.asid);
}

static int local_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct local_mm *lm = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*lm), SD_CACHELINE));

	(void)mm;
	if (!lm)
		return -ENOMEM;
	if (sd_cpumask_init(&lm->stale, m->nr_cpus)) {
		free(lm);
		return -ENOMEM;
	}
	sd_broadcast_mm_ctx_init(&lm->base);
	atomic_init(&lm->nr_active, 0);
	sd_model_line_init(&lm->active_line);
	sd_model_line_init(&lm->stale_line);
	*mm_priv = &lm->base;
	return 0;
}

static void local_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct local_mm *lm = local_mm_of_priv(mm_priv);

	(void)m;
	(void)mm;
	sd_cpumask_destroy(&lm->stale);
	free(lm);
}

/* check_and_switch_context() plus the seed's stale check, after nr_active++. */
static void local_switch_in(struct sd_cpu *cpu, struct sd_mm *next)
{
	struct local_mm *lm = local_mm_of(next);
	struct sd_arm64_switch sw;

	sd_order_point(SD_ORDER_SWITCH_STORED, cpu->id);
	sd_broadcast_switch_context(cpu, next, &sw);
	/* new_context(): a fresh ASID has no stale entries anywhere. */
	if (sw.allocated)
		sd_cpumask_clearall(&lm->stale);
	/* Order nr_active++ before reading our stale bit. Pairs with the
	 * fence after the stale-mask store in local_flush_check(). */
	sd_sb_fence();
	sd_event_line(cpu, &lm->stale_line, false);
	bool stale = sd_cpumask_test(&lm->stale, cpu->id);
	sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);
	if (stale) {
		struct sd_tlb_inval inv = { .kind = SD_TLB_INVAL_ASID, .asid = cpu->asid };
		sd_cpumask_clear(&lm->stale, cpu->id);
		sd_event_line(cpu, &lm->stale_line, true);
		sd_tlb_invalidate(&cpu->tlb, &inv);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ASID, 0, 0);
		sd_event(cpu, SD_EV_STALE_SWITCH_FLUSH, 0, 0);
	}
}

/* nr_active += @delta, and its line written in modelled time. */
static void count_active(struct sd_cpu *cpu, struct sd_mm *mm, int delta)
{
	struct local_mm *lm = local_mm_of(mm);

	if (delta > 0)
		sd_sb_add(&lm->nr_active, delta);
	else
		atomic_fetch_sub(&lm->nr_active, -delta);
	sd_event_line(cpu, &lm->active_line, true);
}

/* switch_mm() of the seed: count next before installing it, uncount prev after. */
static void local_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	bool *not_lazy = not_lazy_of(cpu);

	if (!*not_lazy) {
		/* From idle (or nothing): prev was uncounted by enter_lazy. */
		if (next) {
			*not_lazy = true;
			count_active(cpu, next, 1);
			local_switch_in(cpu, next);
		} else {
			sd_broadcast_switch(cpu, prev, NULL);
		}
	} else if (prev != next) {
		if (next) {
			count_active(cpu, next, 1);
			local_switch_in(cpu, next);
		} else {
			sd_broadcast_switch(cpu, prev, NULL);
			*not_lazy = false;
		}
		count_active(cpu, prev, -1);
	}
	sd_sb_drain();
}

/* enter_lazy_tlb() when going idle: reserved TTBR0, then uncount. */
static void local_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm)
{
	bool *not_lazy = not_lazy_of(cpu);

	if (!*not_lazy)
		return;
	*not_lazy = false;
	cpu->asid = 0;
	count_active(cpu, mm, -1);
}

/* First CPU whose bit is clear, from @from on; nbits if none. */
static unsigned first_zero(const struct sd_cpumask *mask, unsigned from)
{
	for (unsigned cpu = from; cpu < mask->nbits; cpu++)
		if (!sd_cpumask_test(mask, cpu))
			return cpu;
	return mask->nbits;
}

/* tlb_flush_check(): NO, LOCAL or BROADCAST. */
static enum flush_decision local_flush_check(struct sd_cpu *cpu, struct sd_mm *mm)
{
	struct local_mm *lm = local_mm_of(mm);
	unsigned me = cpu->id;
	enum flush_decision d = FLUSH_BROADCAST;

	/* A cheap pre-check; the read after the fence is the one that decides. */
	sd_event_line(cpu, &lm->active_line, false);
	if (atomic_load(&lm->nr_active) > 1)
		return FLUSH_BROADCAST;

	bool is_local = atomic_load_explicit(&cpu->mm, memory_order_relaxed) == mm &&
			*not_lazy_of(cpu);
	bool local_is_clear = false;
	sd_event_line(cpu, &lm->stale_line, false);
	unsigned z = first_zero(&lm->stale, 0);

	if (z < lm->stale.nbits && is_local && z == me) {
		z = first_zero(&lm->stale, me + 1);
		local_is_clear = true;
	}
	/* Mark every CPU stale, but skip the shared write when all are. */
	if (z < lm->stale.nbits) {
		sd_sb_cpumask_setall(&lm->stale);
		sd_event_line(cpu, &lm->stale_line, true);
		local_is_clear = false;
	}
	sd_order_point(SD_ORDER_FLUSH_STORED, me);
	/* Order the stale-mask store before re-reading nr_active. Pairs with
	 * the fence after nr_active++ in local_switch_in(). */
	sd_sb_fence();
	sd_event_line(cpu, &lm->active_line, false);
	int active = atomic_load(&lm->nr_active);
	sd_order_point(SD_ORDER_FLUSH_LOADED, me);
	if (active <= 1) {
		if (is_local) {
			if (!local_is_clear) {
				sd_cpumask_clear(&lm->stale, me);
				sd_event_line(cpu, &lm->stale_line, true);
			}
			d = FLUSH_LOCAL;
		} else if (atomic_load(&lm->nr_active) == 0) {
			d = FLUSH_NO;
		}
	}
	sd_sb_drain();
	return d;
}

static void local_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool freed_tables)
{
	switch (local_flush_check(cpu, mm)) {
	case FLUSH_NO:
		sd_event(cpu, SD_EV_FLUSH_SKIPPED, 0, 0);
		break;
	case FLUSH_LOCAL:
		sd_event(cpu, SD_EV_LOCAL_ONLY_FLUSH, 0, 0);
		sd_broadcast_flush(cpu, mm, vpn, nr, freed_tables, true);
		break;
	case FLUSH_BROADCAST:
		sd_broadcast_flush(cpu, mm, vpn, nr, freed_tables, false);
		break;
	}
}

static void local_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	local_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables);
}

static void local_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	local_flush(cpu, mm, 0, 0, true);
}

/* The 2020 kernel's __ptep_set_access_flags(): flush_tlb_page() after a
 * reuse, through the series' own choice of local or broadcast. */
static void local_wp_reuse_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn)
{
	local_flush(cpu, mm, vpn, 1, false);
}

const struct sd_strategy_ops sd_local_ops = {
	.name = "local",
	.summary = "arm64 skip-broadcast: flush locally when the mm runs nowhere else",
	.mechanisms = SD_MECH_TLBI_BROADCAST,
	.primary_mechanism = SD_MECH_TLBI_BROADCAST,
	.unused_why = "every flush found its mm on its own CPU alone and stayed local",
	.machine_init = local_machine_init,
	.machine_fini = local_machine_fini,
	.mm_init = local_mm_init,
	.mm_fini = local_mm_fini,
	.flush_range = local_flush_range,
	.flush_mm = local_flush_mm,
	.switch_mm = local_switch,
	.enter_lazy = local_enter_lazy,
	.wp_reuse_flush = local_wp_reuse_flush,
	.state_bytes = local_state_bytes,
};
