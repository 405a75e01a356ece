/* SPDX-License-Identifier: MIT */
/*
 * The `rar` strategy: Intel RAR TLB invalidation, Rik van Riel's RFC series
 * (v1-v4, 2025) on Yu-cheng Yu's 2019 one, built on the `ipi` strategy
 * with the global ASID policy `gbcast` uses (global_asid_policy.h).
 *
 * An mm active on more than `threshold` CPUs (sampled 1 flush in `sample`)
 * gets a global ASID. Its flushes are then RAR requests to the CPUs of its
 * mm_cpumask (rar_tlb_flush(), smp_call_rar_many(), arch/rar.h): one
 * payload a flush, two under PTI (the kernel and the user PCID), serviced
 * by each target's microcode even with interrupts off, the initiator
 * waiting on each target's action byte. This CPU's own TLB is flushed
 * by flush_tlb_func() (`self=local`, v4 8/8), by a RAR it sends itself
 * (`self=rar`, before it), which only flushes if the hardware does
 * (`self_flush`), or, the default, by a direct flush of the global PCID
 * (`self=pcid`), the one that is correct on a lazy initiator too
 * (flush_self()).
 *
 * Unlike INVLPGB, RAR keeps a global ASID current only on the CPUs of the
 * mask, which follows threads lazily and is trimmed by IPI flushes once a
 * trim period (ipi's trim_ms): a trimming flush goes by IPI, and a CPU that
 * joins the mask flushes the ASID at its switch (choose_new_asid()'s
 * new_cpu, in ipi.c). The pool's wrap-around flushes every TLB by RAR
 * (flush_tlb_all()); a reclaim batch is a full RAR flush of its CPUs
 * (rar_full_flush()). Every other flush, and every mm without a global
 * ASID, is ipi's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../arch/rar.h"
#include "../core/error.h"
#include "../hw/event.h"
#include "builtin.h"
#include "gbcast.h"
#include "global_asid_policy.h"

struct sd_rar_strategy {
	struct sd_ipi ipi;
	unsigned pool, threshold, sample, payloads;
	bool pti;                      /* two payloads a flush */
	enum { SELF_PCID, SELF_LOCAL, SELF_RAR } self;   /* this CPU's own TLB */
	bool self_flush;               /* the hardware: a self-RAR flushes */
	bool trim_v2;                  /* trim=v2: a due trim sends the flush by IPI */
	struct sd_global_asid gasid;
	struct sd_rar hw;
	struct sd_cpumask all;         /* cpu_online_mask, for flush_tlb_all() */
};

static struct sd_rar_strategy *rar_of(struct sd_machine *m)
{
	return caa_container_of(sd_ipi_of(m), struct sd_rar_strategy, ipi);
}

/* ---- setup ---- */

/* Options only `rar` has; the rest are ipi's (cpumask, trim_ms, ...). */
static int rar_option(void *arg, const struct sd_opt *o)
{
	static const struct sd_opt_choice no_yes[] = { { "0", NULL }, { "1", NULL } };
	static const struct sd_opt_choice trim[] = { { "v4", NULL }, { "v2", NULL } };
	static const struct sd_opt_choice self[] = {
		[SELF_PCID] = { "pcid", NULL }, [SELF_LOCAL] = { "local", NULL },
		[SELF_RAR] = { "rar", NULL },
	};
	struct sd_rar_strategy *r = arg;
	unsigned i;
	uint64_t v;
	int err;

	if (!strcmp(o->key, "pool")) {
		err = sd_opt_uint("rar", o, 1, 0xffffu - SD_IPI_NR_DYN_ASIDS - 2, &v);
		r->pool = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "threshold")) {
		err = sd_opt_uint("rar", o, 0, 1u << 20, &v);
		r->threshold = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "sample")) {
		err = sd_opt_uint("rar", o, 1, 1u << 20, &v);
		r->sample = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "payloads")) {
		err = sd_opt_uint("rar", o, 1, SD_RAR_MAX_PAYLOADS, &v);
		r->payloads = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "pti"))
		return sd_opt_flag("rar", o, no_yes, 0, &r->pti);
	if (!strcmp(o->key, "self")) {
		err = sd_opt_choose("rar", o, self, 3, &i);
		if (!err)
			r->self = i;
		return err;
	}
	if (!strcmp(o->key, "self_flush"))
		return sd_opt_flag("rar", o, no_yes, 0, &r->self_flush);
	if (!strcmp(o->key, "trim"))
		return sd_opt_flag("rar", o, trim, 0, &r->trim_v2);
	return sd_opt_unknown("rar", o);
}

/* flush_tlb_all(): every CPU's whole TLB by RAR, this one's locally. The
 * pool's wrap-around runs it, under the global ASID lock, on the
 * allocating CPU (reset_global_asid_space()). */
static void flush_tlb_all_cb(void *arg)
{
	struct sd_rar_strategy *r = rar_of(arg);
	struct sd_cpu *cpu = sd_this_cpu;
	struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ALL };

	sd_rar_call_many(cpu, &r->hw, &r->all, false, &all);
	sd_tlb_invalidate(&cpu->tlb, &all);
	sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
	sd_event(cpu, SD_EV_GLOBAL_ASID_RESET, 0, 0);
}

static int rar_hw_init(struct sd_machine *m, struct sd_rar_strategy *r)
{
	int err = sd_rar_init(&r->hw, m->nr_cpus, r->payloads, r->self_flush);

	if (err)
		return err;
	err = sd_cpumask_init(&r->all, m->nr_cpus);
	if (!err) {
		sd_cpumask_setall(&r->all);
		err = sd_global_asid_init(&r->gasid, SD_IPI_NR_DYN_ASIDS, r->pool, flush_tlb_all_cb, m);
		if (err)
			sd_cpumask_destroy(&r->all);
	}
	if (err) {
		sd_rar_fini(&r->hw);
		return err == -EINVAL ? sd_fail(err, "rar: pool=%u is too large", r->pool) : err;
	}
	return 0;
}

static int rar_machine_init(struct sd_machine *m, const struct sd_opt *opts, unsigned nr_opts,
			    void **priv)
{
	struct sd_rar_strategy *r = calloc(1, sizeof(*r));
	int err;

	if (!r)
		return -ENOMEM;
	r->pool = SD_GBCAST_POOL;
	r->threshold = SD_GBCAST_THRESHOLD;
	r->sample = SD_GBCAST_SAMPLE;
	r->payloads = SD_RAR_MAX_PAYLOADS;
	r->self_flush = true;          /* what the RAR white paper says */
	err = sd_ipi_machine_create(m, &r->ipi, "rar", opts, nr_opts, rar_option, r);
	if (!err) {
		r->ipi.rar = true;
		err = rar_hw_init(m, r);
		if (err)
			sd_ipi_machine_destroy(&r->ipi);
	}
	if (err) {
		free(r);
		return err;
	}
	/* Before any CPU attaches: deferred RAR requests need the flag. */
	m->boundary_requests = true;
	*priv = &r->ipi;
	return 0;
}

static void rar_machine_fini(struct sd_machine *m, void *priv)
{
	struct sd_rar_strategy *r = caa_container_of(priv, struct sd_rar_strategy, ipi);

	(void)m;
	sd_global_asid_fini(&r->gasid);
	sd_cpumask_destroy(&r->all);
	sd_rar_fini(&r->hw);
	sd_ipi_machine_destroy(&r->ipi);
	free(r);
}

static size_t rar_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_rar_strategy *r =
		caa_container_of((void *)priv, struct sd_rar_strategy, ipi);

	return sizeof(*r) + sd_ipi_bytes(m, &r->ipi) + sd_rar_bytes(&r->hw) +
	       sd_cpumask_bytes(&r->all) + sd_global_asid_bytes(&r->gasid);
}

static void rar_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	sd_gasid_mm_fini(m, &rar_of(m)->gasid, mm, mm_priv);
}

/* ---- flushes ---- */

/* consider_global_asid(): after IPI flushes, sampled, by the threshold. */
static void consider_global_asid(struct sd_cpu *cpu, struct sd_rar_strategy *r,
				 struct sd_mm *mm)
{
	struct sd_ipi_cpu *me = &r->ipi.percpu[cpu->id];

	if (++me->flushes_sampled % r->sample)
		return;
	if (sd_gasid_active_cpus_exceed(&r->ipi, mm, r->threshold))
		sd_gasid_use(cpu, &r->gasid, mm);
}

/*
 * This CPU's own TLB, when it is in the mask. self=local is v4 8/8:
 * flush_tlb_func(), which flushes only if the CPU runs the mm, not lazily:
 * a lazy CPU leaves for init_mm instead, and one running another mm leaves
 * the mask, neither flushing. On a dynamic ASID both catch up by tlb_gen at
 * their return, but on a global one a lazy CPU keeps its bit and comes
 * back with no flush (test_rar.cpp shows the stale entry). self=pcid, the
 * default, flushes the mm's global PCID here whatever the CPU runs, as
 * the microcode does on a lazy target; self=rar sends the CPU a RAR of its
 * own (before v4 8/8), which flushes only on hardware that does.
 */
static void flush_self(struct sd_cpu *cpu, struct sd_rar_strategy *r,
		       struct sd_ipi_flush_info *f, const struct sd_tlb_inval *op)
{
	const struct sd_ipi_cpu *me = &r->ipi.percpu[cpu->id];
	uintptr_t loaded = atomic_load_explicit(&me->loaded_mm, memory_order_relaxed);

	if (r->self == SELF_LOCAL ||
	    (loaded == (uintptr_t)f->mm && !atomic_load_explicit(&me->is_lazy, memory_order_relaxed))) {
		sd_ipi_flush_local(cpu, f);
		return;
	}
	sd_irq_off(cpu);
	sd_rar_invalidate_local(cpu, op);
	sd_irq_on(cpu);
}

/*
 * rar_tlb_flush() as v4 has it: this CPU's TLB first if it is in the mask
 * (flush_self(), unless self=rar), then one RAR to the rest of the mask, a
 * second one under PTI for the user PCID, then the stragglers of an ASID
 * transition, whom a flush of the global PCID does not reach.
 */
static void rar_tlb_flush(struct sd_cpu *cpu, struct sd_rar_strategy *r,
			  struct sd_ipi_flush_info *f)
{
	const struct sd_cpumask *mask = &sd_ipi_mm_of(f->mm)->cpumask;
	bool here = sd_cpumask_test(mask, cpu->id);
	bool self_rar = r->self == SELF_RAR;
	struct sd_tlb_inval op = sd_rar_op(sd_ipi_slot_tag(sd_ipi_mm_global_asid(f->mm)),
					   f->vpn, f->nr, !f->freed_tables);

	if (here && !self_rar)
		flush_self(cpu, r, f, &op);
	if (sd_cpumask_any_but(mask, cpu->id) || (here && self_rar)) {
		sd_rar_call_many(cpu, &r->hw, mask, self_rar, &op);
		/* The user PCID: the emulated TLB tags one PCID an mm, so the
		 * second payload invalidates the same entries again, for its
		 * cost. */
		if (r->pti)
			sd_rar_call_many(cpu, &r->hw, mask, self_rar, &op);
	}
	sd_gasid_finish_transition(cpu, &r->ipi, f);
}

/*
 * flush_tlb_mm_range() with RAR: an mm without a global ASID takes ipi's
 * way, and its IPI flushes are sampled for one. A global-ASID mm's flush is
 * RAR's; when its trim is due, v4 first trims the mask by IPI
 * (trim_cpumask()) and flushes the rest by RAR. v2 sent the whole flush by
 * IPI instead (flush_tlb_multi() with trim_cpumask set), which skips lazy
 * CPUs, as should_flush_tlb() does: on a dynamic ASID they catch up by
 * tlb_gen at their switch, but a global ASID has no generation, and a lazy
 * CPU that comes back to it (switch_mm_irqs_off()'s prev == next) does not
 * flush: it keeps the entries that flush changed. trim=v2 keeps that rule,
 * for the oracle to show (test_rar.cpp).
 */
static void rar_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
		      bool freed_tables)
{
	struct sd_rar_strategy *r = rar_of(cpu->m);
	struct sd_ipi_flush_info *f = sd_ipi_flush_prepare(cpu, mm, vpn, nr, freed_tables);
	const struct sd_cpumask *mask = &sd_ipi_mm_of(mm)->cpumask;

	if (!sd_ipi_mm_global_asid(mm)) {
		if (sd_ipi_flush_send(cpu, f)) {
			sd_event(cpu, SD_EV_FALLBACK_IPI_FLUSH, 0, 0);
			consider_global_asid(cpu, r, mm);
		}
		return;
	}
	f->trim_cpumask = sd_ipi_should_trim(cpu, mm);
	if (f->trim_cpumask && r->trim_v2) {
		if (sd_cpumask_any_but(mask, cpu->id))
			sd_ipi_flush_tlb_multi(cpu, mask, f);
		else if (sd_cpumask_test(mask, cpu->id))
			sd_ipi_flush_local(cpu, f);
		return;
	}
	if (f->trim_cpumask)
		sd_ipi_trim_cpumask(cpu, f);
	rar_tlb_flush(cpu, r, f);
}

static void rar_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	rar_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables);
}

static void rar_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	rar_flush(cpu, mm, 0, 0, true);
}

/* arch_tlbbatch_flush() with RAR: rar_full_flush() of the gathered CPUs,
 * every non-global entry, and this CPU's own by INVPCID. */
static void rar_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus)
{
	struct sd_rar_strategy *r = rar_of(cpu->m);
	struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ALL };

	if (sd_cpumask_any_but(cpus, cpu->id))
		sd_rar_call_many(cpu, &r->hw, cpus, false, &all);
	if (sd_cpumask_test(cpus, cpu->id)) {
		sd_irq_off(cpu);
		sd_tlb_invalidate(&cpu->tlb, &all);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
		sd_irq_on(cpu);
	}
	sd_cpumask_clearall(cpus);
}

const struct sd_strategy_ops sd_rar_ops = {
	.name = "rar",
	.summary = "Intel RAR: global ASIDs, microcode-serviced requests to the cpumask, IPI trims",
	.mechanisms = SD_MECH_RAR | SD_MECH_IPI,
	.primary_mechanism = SD_MECH_RAR,
	.unused_why = "no mm got a global ASID (consider_global_asid() looks at one IPI flush in sample=N, and only for an mm active on more CPUs than threshold=N), so every flush took ipi's path",
	.machine_init = rar_machine_init,
	.machine_fini = rar_machine_fini,
	.mm_init = sd_ipi_mm_init,
	.mm_fini = rar_mm_fini,
	.flush_range = rar_flush_range,
	.flush_mm = rar_flush_mm,
	.switch_mm = sd_ipi_switch,
	.enter_lazy = sd_ipi_enter_lazy,
	.state_bytes = rar_state_bytes,
	.batch_add = sd_ipi_batch_add,
	.batch_flush = rar_batch_flush,
};
