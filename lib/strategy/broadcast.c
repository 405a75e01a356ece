/* SPDX-License-Identifier: MIT */
/*
 * The `broadcast` strategy: arm64 TLBI ...IS. Every flush invalidates the
 * mm's ASID in every CPU's TLB, whether or not the mm runs there, and the
 * initiator waits for all of it (the DSB ISH) before returning. Ranges are
 * per-page operations (VALE1IS, or VAE1IS when tables were freed), with one
 * ASIDE1IS from MAX_TLBI_OPS pages on (__flush_tlb_range()).
 *
 * select=active_cpu keeps a flush local when the mm only ever ran on the
 * flushing CPU (active_cpu.c): Roberts' and Cherian's series, an option
 * of this strategy as it is in the kernel.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "broadcast.h"
#include "builtin.h"

/* m->strategy is a struct sd_broadcast, ours or the one embedded in a
 * strategy built on us (mm/flush_ops.h); mm->strategy likewise. */
static inline struct sd_broadcast *bcast_of(struct sd_machine *m)
{
	return m->strategy;
}

static inline struct sd_broadcast_mm *bcast_mm_of(struct sd_mm *mm)
{
	return mm->strategy;
}

int sd_broadcast_machine_init(struct sd_machine *m, struct sd_broadcast *b)
{
	sd_spin_init(&b->dvm);
	/* Without FEAT_TLBIRANGE, __flush_tlb_range() loops a page at a time
	 * up to MAX_TLBI_OPS, then flushes the ASID: the "none" split. */
	b->split.order = m->arch_range_tlbi ? SD_TLBI_RANGE_DESCENDING : SD_TLBI_RANGE_NONE;
	b->kpti = m->arch_kpti;
	b->split.lpa2 = false;
	b->split.max_tlbi_ops = SD_MAX_TLBI_OPS;
	b->select = SD_SELECT_ALWAYS;
	b->active_cpu_reset = true;
	return sd_arm64_asid_init(&b->asid, m->cfg.asid_bits, m->nr_cpus);
}

int sd_broadcast_check_range(struct sd_machine *m, const struct sd_broadcast *b,
			     const char *name)
{
	if (m->arch_range_tlbi || b->split.order == SD_TLBI_RANGE_NONE ||
	    (m->cfg.flags & SD_MACHINE_ANY_MECHANISM))
		return 0;
	return sd_fail(-EOPNOTSUPP, "'%s' with range TLBIs, which profile '%s' does not have "
		       "(features: range_tlbi absent); range=none is what its kernel does, "
		       "SD_MACHINE_ANY_MECHANISM runs it anyway, as a what-if", name,
		       m->model.name);
}

int sd_broadcast_option(struct sd_broadcast *b, const char *name, const struct sd_opt *o)
{
	uint64_t v;
	int err;

	if (!strcmp(o->key, "max_tlbi_ops"))
		return sd_opt_uint(name, o, 1, SD_MAX_TLBI_RANGE_PAGES,
					    &b->split.max_tlbi_ops);
	if (!strcmp(o->key, "lpa2")) {
		err = sd_opt_uint(name, o, 0, 1, &v);
		b->split.lpa2 = v;
		return err;
	}
	if ((!strcmp(o->key, "select") || !strcmp(o->key, "reset")) && strcmp(name, "broadcast"))
		return sd_fail(-EINVAL, "option %s= for '%s': select= and reset= are options of "
			       "'broadcast' alone", o->key, name);
	if (!strcmp(o->key, "select")) {
		if (!strcmp(o->value, "always"))
			b->select = SD_SELECT_ALWAYS;
		else if (!strcmp(o->value, "active_cpu"))
			b->select = SD_SELECT_ACTIVE_CPU;
		else
			return sd_fail(-EINVAL, "option select=%s for '%s': want always or "
				       "active_cpu", o->value, name);
		return 0;
	}
	if (!strcmp(o->key, "reset")) {
		err = sd_opt_uint(name, o, 0, 1, &v);
		b->active_cpu_reset = v;
		return err;
	}
	if (!strcmp(o->key, "range")) {
		if (sd_tlbi_range_order_parse(o->value, &b->split.order))
			return sd_fail(-EINVAL, "option range=%s for '%s': want none, ascending "
				       "or descending", o->value, name);
		return 0;
	}
	return sd_opt_unknown(name, o);
}

int sd_broadcast_machine_create(struct sd_machine *m, const char *name,
				const struct sd_opt *opts, unsigned nr_opts, void **priv)
{
	struct sd_broadcast *b = aligned_alloc(SD_CACHELINE, sizeof(*b));
	int err;

	if (!b)
		return -ENOMEM;
	err = sd_broadcast_machine_init(m, b);
	for (unsigned i = 0; !err && i < nr_opts; i++)
		err = sd_broadcast_option(b, name, &opts[i]);
	if (!err)
		err = sd_broadcast_check_range(m, b, name);
	if (err) {
		sd_arm64_asid_fini(&b->asid);
		free(b);
		return err;
	}
	*priv = b;
	return 0;
}

static int bcast_machine_init(struct sd_machine *m, const struct sd_opt *opts,
			      unsigned nr_opts, void **priv)
{
	return sd_broadcast_machine_create(m, "broadcast", opts, nr_opts, priv);
}

void sd_broadcast_machine_fini(struct sd_machine *m, void *priv)
{
	struct sd_broadcast *b = priv;

	(void)m;
	sd_arm64_asid_fini(&b->asid);
	free(b);
}

size_t sd_broadcast_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_broadcast *b = priv;

	(void)m;
	return sizeof(*b) + sd_arm64_asid_bytes(&b->asid);
}

void sd_broadcast_mm_ctx_init(struct sd_broadcast_mm *bm)
{
	atomic_init(&bm->ctx_id, 0);
	sd_active_cpu_init(bm);
}

int sd_broadcast_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct sd_broadcast_mm *bm = aligned_alloc(SD_CACHELINE, sizeof(*bm));

	(void)m;
	(void)mm;
	if (!bm)
		return -ENOMEM;
	sd_broadcast_mm_ctx_init(bm);
	*mm_priv = bm;
	return 0;
}

void sd_broadcast_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	(void)m;
	(void)mm;
	free(mm_priv);
}

void sd_broadcast_switch_context(struct sd_cpu *cpu, struct sd_mm *next,
				 struct sd_arm64_switch *sw)
{
	struct sd_broadcast *b = bcast_of(cpu->m);

	sd_arm64_asid_switch(&b->asid, cpu->id, &bcast_mm_of(next)->ctx_id,
			     sw, cpu);
	if (sw->allocated)
		sd_event(cpu, SD_EV_ASID_ALLOC, 0, 0);
	if (sw->rolled_over)
		sd_event(cpu, SD_EV_ASID_ROLLOVER, 0, 0);
	if (sw->flush_local_all) {
		/* local_flush_tlb_all(): vmalle1, non-shareable. */
		struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ALL };
		sd_tlb_invalidate(&cpu->tlb, &all);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
	}
	if (b->select == SD_SELECT_ACTIVE_CPU)
		sd_active_cpu_switch(cpu, bcast_mm_of(next), sw, b->active_cpu_reset);
	else
		cpu->asid = sw->asid;
}

void sd_broadcast_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	struct sd_arm64_switch sw;

	(void)prev;
	if (!next) {
		cpu->asid = 0;         /* the reserved TTBR0: no user entries */
		return;
	}
	sd_broadcast_switch_context(cpu, next, &sw);
}

void sd_broadcast_tlbi(struct sd_cpu *cpu, const struct sd_tlb_inval *op)
{
	struct sd_machine *m = cpu->m;
	struct sd_broadcast *b = bcast_of(m);

	sd_event_spin_lock(cpu, &b->dvm, SD_LOCK_DVM);
	for (unsigned i = 0; i < m->nr_cpus; i++)
		sd_tlb_invalidate(&m->cpus[i]->tlb, op);
	sd_spin_unlock(&b->dvm);
	sd_event(cpu, SD_EV_TLBI_OP, m->nr_cpus - 1,
		 op->kind == SD_TLB_INVAL_RANGE ? op->nr : 0);
	if (op->kind != SD_TLB_INVAL_RANGE)
		sd_event(cpu, SD_EV_TLBI_ASID_OP, 0, 0);
	sd_event(cpu, SD_EV_REMOTE_INVAL, m->nr_cpus - 1, 0);
}

bool sd_broadcast_mm_asid(struct sd_cpu *cpu, struct sd_mm *mm, uint16_t *asid)
{
	struct sd_broadcast *b = bcast_of(cpu->m);
	uint64_t id = atomic_load_explicit(&bcast_mm_of(mm)->ctx_id,
					   memory_order_relaxed);

	/* An mm that never ran has no entries anywhere. One that ran in an
	 * older generation may still be live under its reserved number, so
	 * its number is flushed as it stands. */
	if (!id)
		return false;
	*asid = sd_arm64_asid_of(&b->asid, id);
	return true;
}

struct tlbi_issue {
	struct sd_cpu *cpu;
	uint16_t asid;
	bool leaf_only;
	bool local_only;
	bool kpti;
};

/* One TLBI op: a single broadcast message (or a local op), whatever the
 * number of pages it covers; each TLB it reaches pays one scan at most. */
static void issue_tlbi(const struct sd_tlbi_op *op, void *arg)
{
	const struct tlbi_issue *t = arg;
	struct sd_tlb_inval inv = {
		.kind = op->kind == SD_TLBI_OP_ASID ? SD_TLB_INVAL_ASID : SD_TLB_INVAL_RANGE,
		.asid = t->asid,
		.leaf_only = t->leaf_only,
		.vpn = op->vpn,
		.nr = op->pages,
	};
	struct sd_cpu *cpu = t->cpu;

	if (op->kind == SD_TLBI_OP_RANGE)
		sd_event(cpu, (enum sd_event)(SD_EV_TLBI_RANGE_S0 + op->scale), 0, 0);
	else if (op->kind == SD_TLBI_OP_PAGE)
		sd_event(cpu, SD_EV_TLBI_PAGE_OP, 0, 0);
	/* Under KPTI every user TLBI goes out twice, the second for the
	 * user ASID (__tlbi_user()). Our TLB tags one ASID per mm, so the
	 * second finds nothing more; it is the same op again, paid again. */
	for (int i = 0; i < 1 + t->kpti; i++) {
		if (!t->local_only) {
			sd_broadcast_tlbi(cpu, &inv);
			continue;
		}
		sd_tlb_invalidate(&cpu->tlb, &inv);
		sd_event(cpu, inv.kind == SD_TLB_INVAL_ASID ? SD_EV_LOCAL_FLUSH_ASID
			 : op->kind == SD_TLBI_OP_PAGE ? SD_EV_LOCAL_FLUSH_ONE
						       : SD_EV_LOCAL_FLUSH_RANGE, op->vpn, op->pages);
	}
}

void sd_broadcast_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool freed_tables, bool local_only)
{
	struct sd_broadcast *b = bcast_of(cpu->m);
	struct tlbi_issue t = {
		.cpu = cpu, .leaf_only = !freed_tables, .local_only = local_only, .kpti = b->kpti,
	};

	if (!sd_broadcast_mm_asid(cpu, mm, &t.asid))
		return;
	if (nr == 0) {
		struct sd_tlbi_op all = { .kind = SD_TLBI_OP_ASID, .vpn = vpn };
		issue_tlbi(&all, &t);
	} else {
		sd_tlbi_split(&b->split, vpn, nr, issue_tlbi, &t);
	}
	/* __flush_tlb_range()'s closing dsb(ish): the flush is over only
	 * when every target has done every op (dsb(nsh) for a local one). */
	sd_event(cpu, SD_EV_DSB, 0, 0);
	if (!local_only)
		sd_event(cpu, SD_EV_REMOTE_FLUSH, 0, 0);
}

/* Whether this flush may use non-shareable TLBIs (select=active_cpu). */
static bool flush_local(struct sd_cpu *cpu, struct sd_mm *mm)
{
	if (bcast_of(cpu->m)->select != SD_SELECT_ACTIVE_CPU ||
	    !sd_active_cpu_local(cpu, bcast_mm_of(mm)))
		return false;
	sd_event(cpu, SD_EV_LOCAL_ONLY_FLUSH, 0, 0);
	return true;
}

static void bcast_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	sd_broadcast_flush(cpu, mm, 0, 0, true, flush_local(cpu, mm));
}

static void bcast_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	sd_broadcast_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables,
			   flush_local(cpu, req->mm));
}

static void bcast_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm)
{
	/* arm64 leaves the ASID loaded in TTBR0 of a lazy CPU; broadcasts
	 * reach it anyway, so there is nothing to do. */
	(void)cpu;
	(void)mm;
}

const struct sd_strategy_ops sd_broadcast_ops = {
	.name = "broadcast",
	.summary = "arm64 TLBI ...IS: every flush reaches every CPU's TLB",
	.mechanisms = SD_MECH_TLBI_BROADCAST,
	.primary_mechanism = SD_MECH_TLBI_BROADCAST,
	.unused_why = "no flush was made",
	.machine_init = bcast_machine_init,
	.machine_fini = sd_broadcast_machine_fini,
	.mm_init = sd_broadcast_mm_init,
	.mm_fini = sd_broadcast_mm_fini,
	.flush_range = bcast_flush_range,
	.flush_mm = bcast_flush_mm,
	.switch_mm = sd_broadcast_switch,
	.enter_lazy = bcast_enter_lazy,
	.state_bytes = sd_broadcast_state_bytes,
};
