/* SPDX-License-Identifier: MIT */
/*
 * The `gbcast` strategy: AMD INVLPGB broadcast TLB invalidation (the
 * "x86/mm: AMD broadcast TLB invalidation" series, merged in 6.15), built
 * on the `ipi` strategy.
 *
 * An mm active on more than `threshold` CPUs (sampled 1 flush in `sample`,
 * consider_global_asid()) gets a global ASID, the same PCID on every CPU.
 * Its flushes are then INVLPGBs on that ASID, reaching every TLB with no
 * IPI, lazy CPUs included, and one TLBSYNC on the issuing CPU
 * (broadcast_tlb_flush()). CPUs still running the mm on a dynamic ASID
 * when it got the global one are moved over by a transition IPI
 * (finish_asid_transition()). Every other flush is ipi's, unchanged. A
 * reclaim batch is one INVLPGB of every non-global entry on every CPU
 * (arch_tlbbatch_flush()). The pool wraps around with
 * invlpgb_flush_all_nonglobals().
 *
 * struct sd_gbcast embeds struct sd_ipi and points m->strategy at it, so
 * the switch path, the per-mm state and the IPI flush are ipi's own
 * functions; this file adds only what INVLPGB changes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/backoff.h"
#include "../hw/event.h"
#include "../core/error.h"
#include "../core/ordering.h"
#include "builtin.h"
#include "gbcast.h"
#include "global_asid_policy.h"

static struct sd_gbcast *gbcast_of_priv(void *priv)
{
	return caa_container_of(priv, struct sd_gbcast, ipi);
}

/* ---- setup ---- */

/* Options only `gbcast` has: the global ASID pool and its policy. */
static int gbcast_option(void *arg, const struct sd_opt *o)
{
	struct sd_gbcast *g = arg;
	uint64_t v;
	int err;

	if (!strcmp(o->key, "pool")) {
		err = sd_opt_uint("gbcast", o, 1, 0xffffu - SD_IPI_NR_DYN_ASIDS - 2, &v);
		g->pool = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "threshold")) {
		err = sd_opt_uint("gbcast", o, 0, 1u << 20, &v);
		g->threshold = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "sample")) {
		err = sd_opt_uint("gbcast", o, 1, 1u << 20, &v);
		g->sample = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "count_max")) {
		err = sd_opt_uint("gbcast", o, 1, 1u << 16, &v);
		g->count_max = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "threshold_growth")) {
		err = sd_opt_uint("gbcast", o, 0, 1, &v);
		g->threshold_growth = v;
		return err;
	}
	return sd_opt_unknown("gbcast", o);
}

/* invlpgb_flush_all_nonglobals(): every user entry of every PCID on every
 * CPU, then TLBSYNC. The wrap-around of the global ASID space runs it,
 * under the global ASID lock, on the allocating CPU. */
static void flush_all_nonglobals(struct sd_cpu *cpu)
{
	struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ALL };
	struct sd_gbcast *g = sd_gbcast_of(cpu->m);

	sd_invlpgb(cpu, &g->ib, &all);
	(void)sd_tlbsync(cpu, &g->ib);
}

static void flush_all_nonglobals_cb(void *arg)
{
	(void)arg;
	flush_all_nonglobals(sd_this_cpu);     /* the allocating CPU */
	sd_event(sd_this_cpu, SD_EV_GLOBAL_ASID_RESET, 0, 0);
}

/* INVLPGB queues and the global ASID pool, once the options are known. */
static int gbcast_hw_init(struct sd_machine *m, struct sd_gbcast *g)
{
	int err = sd_invlpgb_init(&g->ib, m->nr_cpus);

	if (err)
		return err;
	err = sd_global_asid_init(&g->gasid, SD_IPI_NR_DYN_ASIDS, g->pool,
				  flush_all_nonglobals_cb, m);
	if (err) {
		sd_invlpgb_fini(&g->ib);
		return err == -EINVAL ? sd_fail(err, "gbcast: pool=%u is too large", g->pool)
				      : err;
	}
	return 0;
}

static int gbcast_machine_init(struct sd_machine *m, const struct sd_opt *opts,
			       unsigned nr_opts, void **priv)
{
	struct sd_gbcast *g = calloc(1, sizeof(*g));
	int err;

	if (!g)
		return -ENOMEM;
	g->pool = SD_GBCAST_POOL;
	g->threshold = SD_GBCAST_THRESHOLD;
	g->sample = SD_GBCAST_SAMPLE;
	g->count_max = SD_GBCAST_COUNT_MAX;
	err = sd_ipi_machine_create(m, &g->ipi, "gbcast", opts, nr_opts, gbcast_option, g);
	if (!err) {
		err = gbcast_hw_init(m, g);
		if (err)
			sd_ipi_machine_destroy(&g->ipi);
	}
	if (err) {
		free(g);
		return err;
	}
	*priv = &g->ipi;
	return 0;
}

static void gbcast_machine_fini(struct sd_machine *m, void *priv)
{
	struct sd_gbcast *g = gbcast_of_priv(priv);

	(void)m;
	sd_global_asid_fini(&g->gasid);
	sd_invlpgb_fini(&g->ib);
	sd_ipi_machine_destroy(&g->ipi);
	free(g);
}

static size_t gbcast_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_gbcast *g = gbcast_of_priv((void *)priv);

	return sizeof(*g) + sd_ipi_bytes(m, &g->ipi) + sd_invlpgb_bytes(&g->ib) +
	       sd_global_asid_bytes(&g->gasid);
}

static void gbcast_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	sd_gasid_mm_fini(m, &sd_gbcast_of(m)->gasid, mm, mm_priv);
}

/* ---- the global ASID policy ---- */

/*
 * The threshold of mm_active_cpus_exceeds(): the merged kernel's fixed 3,
 * or, with threshold_growth=1, one that doubles (2T + 1) each time the
 * free global ASIDs fall below another half of the pool. The cover letter
 * of the early series says the threshold grows as the space is used up;
 * its formula is not public, so this step function is an assumption.
 */
static unsigned global_asid_threshold(struct sd_gbcast *g)
{
	unsigned t = g->threshold;

	if (!g->threshold_growth)
		return t;
	unsigned avail = sd_global_asid_available(&g->gasid);
	for (unsigned frac = g->pool / 2; frac && avail < frac; frac /= 2)
		t = 2 * t + 1;
	return t;
}

/* consider_global_asid(): after IPI flushes, sampled, by the threshold. */
static void consider_global_asid(struct sd_cpu *cpu, struct sd_gbcast *g, struct sd_mm *mm)
{
	struct sd_ipi_cpu *me = &g->ipi.percpu[cpu->id];

	if (++me->flushes_sampled % g->sample)
		return;
	if (sd_gasid_active_cpus_exceed(&g->ipi, mm, global_asid_threshold(g)))
		sd_gasid_use(cpu, &g->gasid, mm);
}

/* ---- flushes ---- */

/* broadcast_tlb_flush(): INVLPGBs on the global ASID (no IPI, lazy CPUs
 * included), the stragglers, then TLBSYNC on this same CPU. */
static void broadcast_tlb_flush(struct sd_cpu *cpu, struct sd_gbcast *g,
				struct sd_ipi_flush_info *f)
{
	uint16_t tag = sd_ipi_slot_tag(sd_ipi_mm_global_asid(f->mm));

	if (!f->nr) {
		struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ASID, .asid = tag };
		sd_invlpgb(cpu, &g->ib, &all);
	} else {
		for (uint64_t v = f->vpn, end = f->vpn + f->nr; v < end;) {
			uint64_t n = end - v < g->count_max ? end - v : g->count_max;
			struct sd_tlb_inval op = {
				.kind = SD_TLB_INVAL_RANGE, .asid = tag,
				.leaf_only = !f->freed_tables, .vpn = v, .nr = n,
			};
			sd_invlpgb(cpu, &g->ib, &op);
			v += n;
		}
	}
	sd_gasid_finish_transition(cpu, &g->ipi, f);
	(void)sd_tlbsync(cpu, &g->ib);
}

/* flush_tlb_mm_range() with INVLPGB: the broadcast for an mm with a
 * global ASID, ipi's IPIs (and the sampling that may assign one) else. */
static void gbcast_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			 bool freed_tables)
{
	struct sd_gbcast *g = sd_gbcast_of(cpu->m);
	struct sd_ipi_flush_info *f = sd_ipi_flush_prepare(cpu, mm, vpn, nr, freed_tables);

	if (sd_ipi_mm_global_asid(mm)) {
		broadcast_tlb_flush(cpu, g, f);
		return;
	}
	if (sd_ipi_flush_send(cpu, f)) {
		sd_event(cpu, SD_EV_FALLBACK_IPI_FLUSH, 0, 0);
		consider_global_asid(cpu, g, mm);
	}
}

static void gbcast_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	gbcast_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables);
}

static void gbcast_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	gbcast_flush(cpu, mm, 0, 0, true);
}

static void gbcast_batch_add(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm,
			     uint64_t vpn)
{
	struct sd_gbcast *g = sd_gbcast_of(cpu->m);

	/* The v4 series, planted back for the race test: an mm with a global
	 * ASID got an INVLPGB on that ASID alone, and its CPUs were not added,
	 * so stragglers on dynamic ASIDs kept their entries (Jann Horn). */
	if ((g->ipi.broken & SD_IPI_BREAK_BATCH_GLOBAL_ONLY) && sd_ipi_mm_global_asid(mm)) {
		struct sd_tlb_inval op = {
			.kind = SD_TLB_INVAL_ASID,
			.asid = sd_ipi_slot_tag(sd_ipi_mm_global_asid(mm)),
		};
		sd_invlpgb(cpu, &g->ib, &op);
		return;
	}
	sd_ipi_batch_add(cpu, cpus, mm, vpn);
}

/* arch_tlbbatch_flush() in 6.15: one INVLPGB of every non-global entry,
 * dynamic and global ASIDs alike, on every CPU, and its TLBSYNC: no IPI. */
static void gbcast_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus)
{
	struct sd_gbcast *g = sd_gbcast_of(cpu->m);

	if (!(g->ipi.broken & SD_IPI_BREAK_BATCH_GLOBAL_ONLY)) {
		flush_all_nonglobals(cpu);
		sd_cpumask_clearall(cpus);
		return;
	}
	(void)sd_tlbsync(cpu, &g->ib);         /* the v4 global-ASID INVLPGBs */
	sd_ipi_batch_flush(cpu, cpus);
}

/* A thread leaving its CPU syncs the INVLPGBs it issued there first, as the
 * kernel does before migrate_enable(): no other CPU's TLBSYNC covers them. */
static void gbcast_cpu_detach(struct sd_cpu *cpu)
{
	sd_invlpgb_sync_self(cpu);
}

const struct sd_strategy_ops sd_gbcast_ops = {
	.name = "gbcast",
	.summary = "AMD INVLPGB: global ASIDs, broadcast + TLBSYNC, IPI fallback",
	.mechanisms = SD_MECH_INVLPGB | SD_MECH_IPI,
	.primary_mechanism = SD_MECH_INVLPGB,
	.unused_why = "no mm got a global ASID (consider_global_asid() looks at one IPI flush in sample=N, and only for an mm active on more CPUs than threshold=N), so every flush took ipi's path",
	.machine_init = gbcast_machine_init,
	.machine_fini = gbcast_machine_fini,
	.mm_init = sd_ipi_mm_init,
	.mm_fini = gbcast_mm_fini,
	.flush_range = gbcast_flush_range,
	.flush_mm = gbcast_flush_mm,
	.switch_mm = sd_ipi_switch,
	.enter_lazy = sd_ipi_enter_lazy,
	.state_bytes = gbcast_state_bytes,
	.batch_add = gbcast_batch_add,
	.batch_flush = gbcast_batch_flush,
	.cpu_detach = gbcast_cpu_detach,
};
