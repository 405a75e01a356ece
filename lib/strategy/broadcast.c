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
#include "../core/ordering.h"
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
	b->repeat_tlbi = m->arch_repeat_tlbi;
	b->split.lpa2 = false;
	b->split.max_tlbi_ops = SD_MAX_TLBI_OPS;
	b->select = SD_SELECT_ALWAYS;
	b->active_cpu_reset = -1;
	b->tm_ipi_max = b->tm_local = b->tm_none = -1;
	b->tm = NULL;
	b->wp_reuse_tlbi = false;
	b->batch = true;
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

/* The options only 'broadcast' itself takes (not the strategies built on it). */
static bool broadcast_only_option(const char *key)
{
	return !strcmp(key, "wp_reuse") || !strcmp(key, "select") || !strcmp(key, "reset") || !strcmp(key, "ipi_max") ||
	       !strcmp(key, "tlb_local") || !strcmp(key, "tlb_none") || !strcmp(key, "batch");
}

static int parse_select(struct sd_broadcast *b, const char *name, const struct sd_opt *o)
{
	static const struct sd_opt_choice select[] = {
		[SD_SELECT_ALWAYS] = { "always", NULL },
		[SD_SELECT_ACTIVE_CPU] = { "active_cpu", NULL },
		[SD_SELECT_TLB_MODE] = { "tlb_mode", NULL }, [SD_SELECT_IPI] = { "ipi", NULL },
	};

	return sd_opt_choose(name, o, select, sizeof(select) / sizeof(select[0]), &b->select);
}

static int opt_int(const char *name, const struct sd_opt *o, uint64_t max, int *out)
{
	uint64_t v;
	int err = sd_opt_uint(name, o, 0, max, &v);

	if (!err)
		*out = (int)v;
	return err;
}

/* After the options: each of select='s options belongs to one select. */
static int check_select(const struct sd_broadcast *b)
{
	bool tm = b->select == SD_SELECT_TLB_MODE || b->select == SD_SELECT_IPI;

	if (b->active_cpu_reset >= 0 && b->select != SD_SELECT_ACTIVE_CPU)
		return sd_fail(-EINVAL, "option reset= for 'broadcast' needs select=active_cpu");
	if ((b->tm_ipi_max >= 0 || b->tm_local >= 0 || b->tm_none >= 0) && !tm)
		return sd_fail(-EINVAL, "options ipi_max=, tlb_local=, tlb_none= for 'broadcast' "
			       "need select=tlb_mode or select=ipi");
	return 0;
}

int sd_broadcast_option(struct sd_broadcast *b, const char *name, const struct sd_opt *o)
{
	static const struct sd_opt_choice batch[] = {
		{ "0", "a flush a page" }, { "1", "Linux 6.5's batched reclaim" },
	};
	static const struct sd_opt_choice wp_reuse[] = { { "local", "Linux 6.19" },
							 { "tlbi", "before" } };
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
	if (broadcast_only_option(o->key) && strcmp(name, "broadcast"))
		return sd_fail(-EINVAL, "option %s= for '%s': an option of 'broadcast' alone",
			       o->key, name);
	if (!strcmp(o->key, "select"))
		return parse_select(b, name, o);
	if (!strcmp(o->key, "reset"))
		return opt_int(name, o, 1, &b->active_cpu_reset);
	if (!strcmp(o->key, "ipi_max"))
		return opt_int(name, o, 1023, &b->tm_ipi_max);
	if (!strcmp(o->key, "tlb_local"))
		return opt_int(name, o, 1, &b->tm_local);
	if (!strcmp(o->key, "tlb_none"))
		return opt_int(name, o, 1, &b->tm_none);
	if (!strcmp(o->key, "batch"))
		return sd_opt_flag(name, o, batch, 1, &b->batch);
	if (!strcmp(o->key, "wp_reuse"))
		return sd_opt_flag(name, o, wp_reuse, 0, &b->wp_reuse_tlbi);
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
	if (!err)
		err = check_select(b);
	if (!err && (b->select == SD_SELECT_TLB_MODE || b->select == SD_SELECT_IPI))
		err = sd_tlb_mode_create(m, b);
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
	sd_tlb_mode_destroy(b);
	sd_arm64_asid_fini(&b->asid);
	free(b);
}

size_t sd_broadcast_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_broadcast *b = priv;

	(void)m;
	return sizeof(*b) + sd_arm64_asid_bytes(&b->asid) + sd_tlb_mode_bytes(m, b);
}

void sd_broadcast_mm_ctx_init(struct sd_broadcast_mm *bm)
{
	atomic_init(&bm->ctx_id, 0);
	bm->cpus.nbits = 0;
	bm->cpus.words = NULL;
	sd_active_cpu_init(bm);
}

int sd_broadcast_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct sd_broadcast_mm *bm = aligned_alloc(SD_CACHELINE, sizeof(*bm));

	(void)mm;
	if (!bm)
		return -ENOMEM;
	sd_broadcast_mm_ctx_init(bm);
	if (bcast_of(m)->tm && sd_cpumask_init(&bm->cpus, m->nr_cpus)) {
		free(bm);
		return -ENOMEM;
	}
	*mm_priv = bm;
	return 0;
}

void sd_broadcast_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct sd_broadcast_mm *bm = mm_priv;

	(void)m;
	(void)mm;
	if (bm->cpus.nbits)
		sd_cpumask_destroy(&bm->cpus);
	free(bm);
}

struct new_ctx {
	struct sd_broadcast *b;
	struct sd_broadcast_mm *bm;
};

/* new_context() ran for the mm (under cpu_asid_lock, before its new id is
 * published): the select's per-mm state tied to the ASID starts again. */
static void on_new_context(void *arg, bool fresh)
{
	struct new_ctx *n = arg;

	if (n->b->select == SD_SELECT_ACTIVE_CPU && n->b->active_cpu_reset != 0)
		sd_active_cpu_reset(n->bm, fresh);
	else if (n->b->tm)
		sd_tlb_mode_reset(n->bm, fresh);
}

void sd_broadcast_switch_context(struct sd_cpu *cpu, struct sd_mm *next,
				 struct sd_arm64_switch *sw)
{
	struct sd_broadcast *b = bcast_of(cpu->m);
	struct new_ctx n = { b, bcast_mm_of(next) };

	sd_arm64_asid_switch_hook(&b->asid, cpu->id, &n.bm->ctx_id, sw, cpu,
				  b->select == SD_SELECT_ALWAYS ? NULL : on_new_context, &n);
	if (sw->allocated)
		sd_order_point(SD_ORDER_ASID_PUBLISHED, cpu->id);
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
		sd_active_cpu_switch(cpu, n.bm, sw);
	else if (b->tm)
		sd_tlb_mode_switch(cpu, n.bm, sw);
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

/* Whether this flush may use non-shareable TLBIs (select=active_cpu). */
static bool flush_local(struct sd_cpu *cpu, struct sd_mm *mm)
{
	if (bcast_of(cpu->m)->select != SD_SELECT_ACTIVE_CPU ||
	    !sd_active_cpu_local(cpu, bcast_mm_of(mm)))
		return false;
	sd_event(cpu, SD_EV_LOCAL_ONLY_FLUSH, 0, 0);
	return true;
}

static void bcast_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
			bool freed_tables)
{
	struct sd_broadcast *b = bcast_of(cpu->m);

	if (b->tm)
		sd_tlb_mode_flush(cpu, b, mm, bcast_mm_of(mm), vpn, nr, freed_tables);
	else
		sd_broadcast_flush(cpu, mm, vpn, nr, freed_tables, flush_local(cpu, mm));
}

static void bcast_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	bcast_flush(cpu, mm, 0, 0, true);
}

static void bcast_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	bcast_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables);
}

/*
 * __ptep_set_access_flags() after wp_page_reuse(): flush_tlb_page(), a
 * broadcast (through the select, as any user flush), before Linux 6.19;
 * local_flush_tlb_page() since (Huang Ying's "arm64, tlbflush: don't TLBI
 * broadcast if page reused in write fault"), leaving stale read-only
 * entries elsewhere to fault spuriously.
 */
static void bcast_wp_reuse_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn)
{
	if (bcast_of(cpu->m)->wp_reuse_tlbi)
		bcast_flush(cpu, mm, vpn, 1, false);
	else
		sd_broadcast_flush(cpu, mm, vpn, 1, false, true);
}

/* flush_tlb_fix_spurious_fault(): since 6.19 local_flush_tlb_page_nonotify();
 * before, nothing (a spurious fault could only race a broadcast flush). */
static void bcast_spurious_fixup(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn)
{
	if (!bcast_of(cpu->m)->wp_reuse_tlbi)
		sd_broadcast_flush(cpu, mm, vpn, 1, false, true);
}

static void bcast_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm)
{
	/* arm64 leaves the ASID loaded in TTBR0 of a lazy CPU; broadcasts
	 * reach it anyway, so there is nothing to do. */
	(void)cpu;
	(void)mm;
}

/*
 * arch_tlbbatch_add_pending() on arm64 (Barry Song and Yicong Yang, "arm64:
 * support batched/deferred tlb shootdown during page reclamation/
 * migration", Linux 6.5): the zapped page's TLBI goes out at once, without
 * its DSB (__flush_tlb_page_nosync()), and arch_tlbbatch_flush() is one
 * dsb(ish) for them all, so their DVM completions overlap. An add that
 * names no page (sd_tlbbatch_add()) is the ASID's TLBI. A bit of @cpus
 * says a DSB is owed. batch=0 is the kernel before the series:
 * ptep_clear_flush(), each page's TLBI and DSB at once. The series defers
 * nothing on CPUs with the repeat-TLBI erratum, and a flush selection other
 * than always chooses per flush: both flush each page at once too.
 */
static void bcast_batch_add(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm,
			    uint64_t vpn)
{
	struct sd_broadcast *b = bcast_of(cpu->m);
	uint64_t at = vpn == SD_BATCH_NO_VPN ? 0 : vpn, nr = vpn == SD_BATCH_NO_VPN ? 0 : 1;

	if (!b->batch || b->select != SD_SELECT_ALWAYS || b->repeat_tlbi) {
		/* ptep_clear_flush()'s flush, timed as a flush of its own. */
		sd_event(cpu, SD_EV_FLUSH_BEGIN, at, sd_flush_aux(SD_FLUSH_LOCAL_SHOOTDOWN, nr));
		uint64_t t0 = sd_event_flush_start(cpu);
		bcast_flush(cpu, mm, at, nr, false);
		sd_event(cpu, SD_EV_FLUSH_END, sd_event_flush_ns(cpu, t0), SD_FLUSH_LOCAL_SHOOTDOWN);
		return;
	}
	if (sd_broadcast_flush_nosync(cpu, mm, at, nr))
		sd_cpumask_set(cpus, cpu->id);
}

/* arch_tlbbatch_flush(): the DSB owed, on the flushing CPU. In the kernel
 * the task that added is the one that flushes (kswapd, or the caller of
 * madvise()), its migrations each adding a DSB in __switch_to(). */
static void bcast_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus)
{
	if (sd_cpumask_weight(cpus))
		sd_event(cpu, SD_EV_DSB, 0, 0);
	sd_cpumask_clearall(cpus);
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
	.wp_reuse_flush = bcast_wp_reuse_flush,
	.spurious_fixup = bcast_spurious_fixup,
	.state_bytes = sd_broadcast_state_bytes,
	.batch_add = bcast_batch_add,
	.batch_flush = bcast_batch_flush,
};
