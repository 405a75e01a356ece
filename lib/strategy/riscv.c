/* SPDX-License-Identifier: MIT */
/*
 * The `riscv` strategy: the RISC-V kernel's TLB flushes (arch/riscv/mm/
 * tlbflush.c and context.c, Linux 6.12 on), over the firmware's remote
 * fences or the kernel's own IPIs.
 *
 * ASIDs. set_mm_asid() is Anup Patel's port of arm64's generational
 * allocator (arch/arm64/mm/context.c) to RISC-V, 2021: the same per-CPU
 * active and reserved contexts, the same rollover that queues a local
 * flush on every CPU (context_tlb_flush_pending), so it is that allocator
 * (arch/arm64_asid.h). asids_init() enables it only when the ASIDs are more
 * than twice the CPUs; otherwise (asid_bits too small) every switch_mm()
 * flushes the whole local TLB (set_mm_noasid()).
 *
 * mm_cpumask. With ASIDs a CPU's bit is set when it switches to the mm and
 * never cleared ("keep all CPUs footmarks in cpumask() until mm reset",
 * Guo Ren's fix of 2022 for the crashes that clearing it at switch-out
 * caused: a CPU that left still holds the mm's entries under its ASID, and
 * a flush that skipped it left them stale for its return). Without ASIDs
 * switch_mm() clears prev's bit: its full flush leaves nothing behind.
 *
 * A flush (__flush_tlb_range()) reads the mask after its PTE stores: none
 * set, nothing to do; only this CPU's, local sfence.vma; otherwise every
 * CPU of the mask, this one included, by one of the two ways Samuel
 * Holland's 2024 series chooses between (riscv_use_sbi_for_rfence()):
 *
 *   rfence=sbi  sbi_remote_sfence_vma_asid(): an ecall into the M-mode
 *               firmware, which fences the targets from their M-mode
 *               software interrupts, with S-mode interrupts off or on
 *               (arch/sbi.h; the firmware widens a range of more than its
 *               flush limit, one page by default, to the whole ASID);
 *   rfence=ipi  on_each_cpu_mask(): S-mode IPIs (an ACLINT SSWI or an AIA
 *               IMSIC) whose handlers, and this CPU meanwhile, fence locally.
 *
 * The kernel's rule: SBI exactly when the IPIs themselves go through SBI
 * (no native S-mode IPI device), since the M-mode trap is paid anyway;
 * rfence=auto follows it from the profile's mechanisms.
 *
 * A local flush (local_flush_tlb_range_asid()): one page, sfence.vma addr;
 * the whole mm, or more than `threshold` pages (tlb_flush_all_threshold,
 * 64), sfence.vma for the ASID; otherwise a sfence.vma a page, or with
 * Svinval (`svinval`, the profile's feature) sinval.vma a page between one
 * sfence.w.inval and one sfence.inval.ir. A flush that freed page tables
 * is flush_tlb_mm() (tlb_flush() in asm/tlb.h). A reclaim batch ORs each
 * mm's mask into its own (arch_tlbbatch_add_pending()) and flushes every
 * TLB of it whole, every ASID (arch_tlbbatch_flush(), FLUSH_TLB_NO_ASID);
 * batch=0 flushes each page at its zap, as before Linux 6.8.
 *
 * The switcher's mask store and the flusher's PTE stores race as a store
 * buffer: each side stores, then fences, then loads the other's word
 * (switcher: its bit, then satp and the walk; flusher: the PTEs, then the
 * mask). The kernel relies on the scheduler's and the page-table lock's
 * ordering around them; here both sides fence explicitly through
 * core/ordering.h, and test/strategy/test_riscv.cpp removes the switcher's
 * fence (SD_RISCV_BREAK_NO_FENCE) and shows the oracle catch it, as it
 * catches the pre-2022 clearing (SD_RISCV_BREAK_CLEAR_FOOTMARK).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../arch/arm64_asid.h"
#include "../arch/sbi.h"
#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "../mm/mm.h"
#include "builtin.h"
#include "riscv.h"

SD_ATOMIC(unsigned) sd_riscv_test_break;

/* IPIs an initiator has in flight at most (rfence=ipi). */
#define RV_WINDOW 64
/* tlb_flush_all_threshold's default. */
#define RV_THRESHOLD 64
/* The ASID every mm runs with when there are too few to allocate: each
 * switch flushes the whole TLB, so its entries are always the running mm's. */
#define RV_NOASID 1

enum rv_rfence { RFENCE_AUTO, RFENCE_SBI, RFENCE_IPI };

/* What a flush asks of each TLB it reaches (struct flush_tlb_range_data). */
struct rv_flush {
	uint16_t asid;
	bool all_asids;                /* FLUSH_TLB_NO_ASID with the whole range */
	uint64_t vpn, nr;              /* nr 0: the whole ASID */
};

struct rv_cpu {
	sd_cacheline_aligned struct sd_smp_call_req req[RV_WINDOW];
	struct rv_flush info;          /* read by the targets until the waits end */
	struct sd_cpumask targets;     /* the mask as read, this flush's */
};

struct rv_mm {
	sd_cacheline_aligned SD_ATOMIC(uint64_t) ctx_id;   /* context.id */
	struct sd_cpumask cpus;        /* mm_cpumask() */
	struct sd_model_line cpus_line;
};

struct sd_riscv {
	enum rv_rfence rfence;         /* SBI or IPI once created */
	unsigned threshold;
	int svinval;                   /* -1: the profile's feature */
	bool use_asid;                 /* use_asid_allocator */
	int no_asid_bits;              /* asid=0: satp.ASID keeps no bit; -1: the profile's */
	bool batch;                    /* batch=1 (6.8 on): reclaim's flushes deferred */
	struct sd_arm64_asid asid;
	struct sd_sbi sbi;
	struct rv_cpu *percpu;
};

static inline struct sd_riscv *rv_of(struct sd_machine *m)
{
	return m->strategy;
}

static inline struct rv_mm *rv_mm_of(struct sd_mm *mm)
{
	return mm->strategy;
}

/* ---- setup ---- */

static int rv_option(struct sd_riscv *rv, const struct sd_opt *o)
{
	static const struct sd_opt_choice rfence[] = {
		[RFENCE_AUTO] = { "auto", NULL }, [RFENCE_SBI] = { "sbi", NULL },
		[RFENCE_IPI] = { "ipi", NULL },
	};
	static const struct sd_opt_choice no_yes[] = { { "0", NULL }, { "1", NULL } };
	static const struct sd_opt_choice batch[] = {
		{ "0", "a flush a page" }, { "1", "Linux 6.8's batched reclaim" },
	};
	unsigned i;
	bool flag;
	uint64_t v;
	int err;

	if (!strcmp(o->key, "rfence")) {
		err = sd_opt_choose("riscv", o, rfence, 3, &i);
		if (!err)
			rv->rfence = i;
		return err;
	}
	if (!strcmp(o->key, "threshold")) {
		err = sd_opt_uint("riscv", o, 0, 1u << 20, &v);
		rv->threshold = (unsigned)v;
		return err;
	}
	/* Both override the profile's feature (-1 until set). */
	if (!strcmp(o->key, "svinval")) {
		err = sd_opt_flag("riscv", o, no_yes, 0, &flag);
		if (!err)
			rv->svinval = flag;
		return err;
	}
	if (!strcmp(o->key, "asid")) {
		err = sd_opt_flag("riscv", o, no_yes, 0, &flag);
		if (!err)
			rv->no_asid_bits = !flag;
		return err;
	}
	if (!strcmp(o->key, "batch"))
		return sd_opt_flag("riscv", o, batch, 1, &rv->batch);
	if (!strcmp(o->key, "sbi_flush_limit")) {
		err = sd_opt_uint("riscv", o, 1, 1u << 20, &v);
		rv->sbi.flush_limit_pages = v;
		return err;
	}
	return sd_opt_unknown("riscv", o);
}

/*
 * The mechanism the options chose, checked against the profile as
 * sd_machine_create() checks a strategy's fixed ones; auto takes the
 * kernel's rule (riscv_use_sbi_for_rfence(): SBI when the profile has no
 * native S-mode IPIs).
 */
static int rv_choose_rfence(struct sd_machine *m, struct sd_riscv *rv)
{
	unsigned have = m->model.on ? m->model.mechanisms : SD_MECH_ALL, need;

	if (rv->rfence == RFENCE_AUTO)
		rv->rfence = (have & SD_MECH_IPI) || !(have & SD_MECH_SBI) ? RFENCE_IPI
									: RFENCE_SBI;
	need = rv->rfence == RFENCE_SBI ? SD_MECH_SBI : SD_MECH_IPI;
	m->mechanisms_needed = need;
	m->mechanisms_primary = need;
	if (have & need)
		return 0;
	if (m->cfg.flags & SD_MACHINE_ANY_MECHANISM) {
		m->mechanisms_missing = need;
		return 0;
	}
	return sd_fail(-EOPNOTSUPP, "strategy 'riscv' with rfence=%s needs %s, which profile "
		       "'%s' does not have; SD_MACHINE_ANY_MECHANISM, or SD_MODEL_ANY_MECHANISM=1, "
		       "runs it anyway at the profile's costs, as a what-if",
		       rv->rfence == RFENCE_SBI ? "sbi" : "ipi",
		       rv->rfence == RFENCE_SBI ? "sbi" : "ipi", m->model.name);
}

static void rv_free(struct sd_machine *m, struct sd_riscv *rv)
{
	for (unsigned i = 0; rv->percpu && i < m->nr_cpus; i++)
		if (rv->percpu[i].targets.words)
			sd_cpumask_destroy(&rv->percpu[i].targets);
	free(rv->percpu);
	sd_sbi_fini(&rv->sbi);
	if (rv->use_asid)
		sd_arm64_asid_fini(&rv->asid);
	free(rv);
}

static int rv_machine_init(struct sd_machine *m, const struct sd_opt *opts, unsigned nr_opts,
			   void **priv)
{
	struct sd_riscv *rv = calloc(1, sizeof(*rv));
	int err = 0;

	if (!rv)
		return -ENOMEM;
	rv->threshold = RV_THRESHOLD;
	rv->svinval = -1;
	rv->no_asid_bits = -1;
	rv->batch = true;
	rv->sbi.flush_limit_pages = SD_SBI_FLUSH_LIMIT_PAGES;
	for (unsigned i = 0; !err && i < nr_opts; i++)
		err = rv_option(rv, &opts[i]);
	if (!err)
		err = rv_choose_rfence(m, rv);
	if (err) {
		free(rv);
		return err;
	}
	if (rv->svinval < 0)
		rv->svinval = m->model.on && (m->model.features & SD_MODEL_FEATURE_SVINVAL);
	/* asids_init(): the allocator only with more than twice the CPUs
	 * (none at all on a hart whose satp.ASID keeps no bit: the profile's
	 * no_asid, or asid=0). */
	if (rv->no_asid_bits < 0)
		rv->no_asid_bits = m->model.on && (m->model.features & SD_MODEL_FEATURE_NO_ASID);
	rv->use_asid = !rv->no_asid_bits && (1ull << m->cfg.asid_bits) > 2ull * m->nr_cpus;
	rv->percpu = aligned_alloc(SD_CACHELINE, m->nr_cpus * sizeof(*rv->percpu));
	if (rv->percpu)
		memset(rv->percpu, 0, m->nr_cpus * sizeof(*rv->percpu));
	err = !rv->percpu ? -ENOMEM : sd_sbi_init(&rv->sbi, m->nr_cpus, rv->sbi.flush_limit_pages);
	for (unsigned i = 0; !err && i < m->nr_cpus; i++)
		err = sd_cpumask_init(&rv->percpu[i].targets, m->nr_cpus) ? -ENOMEM : 0;
	if (!err && rv->use_asid)
		err = sd_arm64_asid_init(&rv->asid, m->cfg.asid_bits, m->nr_cpus);
	if (err) {
		rv_free(m, rv);        /* each part's fini takes it half-made */
		return err;
	}
	/* Before any CPU attaches: fences that reach a CPU with its
	 * interrupts off are serviced at its next instruction boundary. */
	if (rv->rfence == RFENCE_SBI)
		m->boundary_requests = true;
	*priv = rv;
	return 0;
}

static void rv_machine_fini(struct sd_machine *m, void *priv)
{
	rv_free(m, priv);
}

static size_t rv_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_riscv *rv = priv;
	size_t masks = m->nr_cpus ? m->nr_cpus * sd_cpumask_bytes(&rv->percpu[0].targets) : 0;

	return sizeof(*rv) + m->nr_cpus * sizeof(*rv->percpu) + masks + sd_sbi_bytes(&rv->sbi) +
	       (rv->use_asid ? sd_arm64_asid_bytes(&rv->asid) : 0);
}

static int rv_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct rv_mm *rm = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*rm), SD_CACHELINE));

	(void)mm;
	if (!rm)
		return -ENOMEM;
	if (sd_cpumask_init(&rm->cpus, m->nr_cpus)) {
		free(rm);
		return -ENOMEM;
	}
	atomic_init(&rm->ctx_id, 0);
	sd_model_line_init(&rm->cpus_line);
	*mm_priv = rm;
	return 0;
}

static void rv_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct rv_mm *rm = mm_priv;

	(void)m;
	(void)mm;
	sd_cpumask_destroy(&rm->cpus);
	free(rm);
}

/* ---- the local TLB ---- */

static void rv_inval(struct sd_cpu *cpu, enum sd_tlb_inval_kind kind, uint16_t asid,
		     uint64_t vpn, uint64_t nr)
{
	struct sd_tlb_inval inv = { .kind = kind, .asid = asid, .vpn = vpn, .nr = nr };

	sd_tlb_invalidate(&cpu->tlb, &inv);
}

/* local_flush_tlb_range_asid(): @f on this CPU's own TLB. */
static void rv_flush_local(struct sd_cpu *cpu, const struct rv_flush *f)
{
	const struct sd_riscv *rv = rv_of(cpu->m);

	if (f->all_asids) {
		/* local_flush_tlb_all(): sfence.vma x0, x0. */
		rv_inval(cpu, SD_TLB_INVAL_ALL, 0, 0, 0);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
	} else if (f->nr == 1) {
		/* local_flush_tlb_page_asid(): sfence.vma addr, asid. */
		rv_inval(cpu, SD_TLB_INVAL_RANGE, f->asid, f->vpn, 1);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ONE, f->vpn, 0);
	} else if (!f->nr || f->nr > rv->threshold) {
		/* local_flush_tlb_all_asid(): sfence.vma x0, asid. */
		rv_inval(cpu, SD_TLB_INVAL_ASID, f->asid, 0, 0);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ASID, 0, 0);
	} else if (rv->svinval) {
		/* sfence.w.inval; sinval.vma a page; sfence.inval.ir. */
		rv_inval(cpu, SD_TLB_INVAL_RANGE, f->asid, f->vpn, f->nr);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_RANGE, f->vpn, f->nr);
	} else {
		rv_inval(cpu, SD_TLB_INVAL_RANGE, f->asid, f->vpn, f->nr);
		for (uint64_t i = 0; i < f->nr; i++)
			sd_event(cpu, SD_EV_LOCAL_FLUSH_ONE, f->vpn + i, 0);
	}
}

/* ---- the switch ---- */

/* cpumask_set_cpu(cpu, mm_cpumask(next)), then the fence before satp. */
static void rv_mark(struct sd_cpu *cpu, struct rv_mm *rm)
{
	if (!sd_cpumask_test(&rm->cpus, cpu->id)) {
		sd_sb_cpumask_set_relaxed(&rm->cpus, cpu->id);
		sd_event_line(cpu, &rm->cpus_line, true);
	}
	sd_order_point(SD_ORDER_SWITCH_STORED, cpu->id);
	/* The bit visible before the walker may read the tables. Pairs with
	 * the flusher's fence in rv_read_mask(). */
	if (!(atomic_load_explicit(&sd_riscv_test_break, memory_order_relaxed) &
	      SD_RISCV_BREAK_NO_FENCE))
		sd_sb_fence();
}

/* set_mm_asid(): the allocator, then satp, then the queued rollover flush. */
static void rv_switch_asid(struct sd_cpu *cpu, struct sd_riscv *rv, struct rv_mm *rm)
{
	struct sd_arm64_switch sw;

	sd_arm64_asid_switch(&rv->asid, cpu->id, &rm->ctx_id, &sw, cpu);
	if (sw.allocated)
		sd_event(cpu, SD_EV_ASID_ALLOC, 0, 0);
	if (sw.rolled_over)
		sd_event(cpu, SD_EV_ASID_ROLLOVER, 0, 0);
	cpu->asid = sw.asid;
	if (sw.flush_local_all) {
		rv_inval(cpu, SD_TLB_INVAL_ALL, 0, 0, 0);
		sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
	}
}

/* set_mm_noasid(): satp, then the whole local TLB. */
static void rv_switch_noasid(struct sd_cpu *cpu)
{
	cpu->asid = RV_NOASID;
	rv_inval(cpu, SD_TLB_INVAL_ALL, 0, 0, 0);
	sd_event(cpu, SD_EV_LOCAL_FLUSH_ALL, 0, 0);
}

/* switch_mm() -> set_mm(). */
static void rv_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	struct sd_riscv *rv = rv_of(cpu->m);
	bool clear_prev = !rv->use_asid || (atomic_load_explicit(&sd_riscv_test_break,
					memory_order_relaxed) & SD_RISCV_BREAK_CLEAR_FOOTMARK);

	if (prev == next)
		return;
	if (next) {
		rv_mark(cpu, rv_mm_of(next));
		if (rv->use_asid)
			rv_switch_asid(cpu, rv, rv_mm_of(next));
		else
			rv_switch_noasid(cpu);
		sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);
	} else {
		cpu->asid = 0;         /* no user mm: no user entries reachable */
	}
	/* Without ASIDs the switch's flush left nothing of prev here. */
	if (prev && clear_prev) {
		sd_cpumask_clear(&rv_mm_of(prev)->cpus, cpu->id);
		sd_event_line(cpu, &rv_mm_of(prev)->cpus_line, true);
	}
	sd_sb_drain();
}

/* enter_lazy_tlb() does nothing on RISC-V: the mm stays in satp. */
static void rv_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm)
{
	(void)cpu;
	(void)mm;
}

/* ---- the flush ---- */

/* The mm's ASID as the flusher reads it (get_mm_asid()). */
static uint16_t rv_mm_asid(const struct sd_riscv *rv, struct rv_mm *rm)
{
	if (!rv->use_asid)
		return RV_NOASID;
	return sd_arm64_asid_of(&rv->asid, atomic_load_explicit(&rm->ctx_id,
							       memory_order_relaxed));
}

/* The fence after our PTE stores, then mm_cpumask() into @to. Pairs with
 * the switcher's fence in rv_mark(). */
static void rv_read_mask(struct sd_cpu *cpu, struct rv_mm *rm, struct sd_cpumask *to)
{
	unsigned t;

	sd_smp_mb();
	sd_order_point(SD_ORDER_FLUSH_STORED, cpu->id);
	sd_event_line(cpu, &rm->cpus_line, false);
	sd_cpumask_for_each(t, &rm->cpus)
		sd_cpumask_set(to, t);
	sd_order_point(SD_ORDER_FLUSH_LOADED, cpu->id);
}

/* __ipi_flush_tlb_range_asid(): the IPI's handler. */
static void rv_flush_ipi(struct sd_cpu *t, void *arg)
{
	rv_flush_local(t, arg);
	sd_event(t, SD_EV_REMOTE_INVAL_RECV, 0, 0);
}

/* on_each_cpu_mask(): the others by IPI, a window at a time, this CPU's
 * own flush between the posts and the waits. */
static void rv_flush_by_ipi(struct sd_cpu *cpu, struct rv_cpu *me)
{
	unsigned posted = 0, t;
	bool local_done = !sd_cpumask_test(&me->targets, cpu->id);

	sd_cpumask_for_each(t, &me->targets) {
		if (t == cpu->id)
			continue;
		struct sd_smp_call_req *req = &me->req[posted];
		req->fn = rv_flush_ipi;
		req->arg = &me->info;
		req->async = false;
		if (!sd_smp_call_post(cpu, cpu->m->cpus[t], req))
			continue;
		if (++posted < RV_WINDOW)
			continue;
		if (!local_done) {
			rv_flush_local(cpu, &me->info);
			local_done = true;
		}
		for (unsigned i = 0; i < posted; i++)
			sd_smp_call_wait(cpu, &me->req[i]);
		posted = 0;
	}
	if (!local_done)
		rv_flush_local(cpu, &me->info);
	for (unsigned i = 0; i < posted; i++)
		sd_smp_call_wait(cpu, &me->req[i]);
}

/* sbi_remote_sfence_vma_asid(): the firmware's fence of the same. */
static void rv_flush_by_sbi(struct sd_cpu *cpu, struct sd_riscv *rv, struct rv_cpu *me)
{
	const struct rv_flush *f = &me->info;
	struct sd_tlb_inval op = { .kind = SD_TLB_INVAL_RANGE, .asid = f->asid,
				   .vpn = f->vpn, .nr = f->nr };

	if (f->all_asids)
		op.kind = SD_TLB_INVAL_ALL;
	else if (!f->nr)
		op.kind = SD_TLB_INVAL_ASID;
	sd_sbi_remote_sfence_vma(cpu, &rv->sbi, &me->targets, &op);
}

/* __flush_tlb_range() over me->targets, with me->info set. */
static void rv_flush_targets(struct sd_cpu *cpu, struct sd_riscv *rv, struct rv_cpu *me)
{
	if (!sd_cpumask_weight(&me->targets)) {
		sd_event(cpu, SD_EV_FLUSH_SKIPPED, 0, 0);
	} else if (!sd_cpumask_any_but(&me->targets, cpu->id)) {
		sd_event(cpu, SD_EV_LOCAL_ONLY_FLUSH, 0, 0);
		rv_flush_local(cpu, &me->info);
	} else if (rv->rfence == RFENCE_SBI) {
		rv_flush_by_sbi(cpu, rv, me);
	} else {
		rv_flush_by_ipi(cpu, me);
		sd_event(cpu, SD_EV_REMOTE_FLUSH, 0, 0);
	}
}

static void rv_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr)
{
	struct sd_riscv *rv = rv_of(cpu->m);
	struct rv_mm *rm = rv_mm_of(mm);
	struct rv_cpu *me = &rv->percpu[cpu->id];

	sd_cpumask_clearall(&me->targets);
	rv_read_mask(cpu, rm, &me->targets);
	me->info = (struct rv_flush){ .asid = rv_mm_asid(rv, rm), .vpn = nr ? vpn : 0, .nr = nr };
	rv_flush_targets(cpu, rv, me);
	sd_sb_drain();
}

/* flush_tlb_range(), or flush_tlb_mm() when tables were freed (tlb_flush()). */
static void rv_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	rv_flush(cpu, req->mm, req->vpn, req->freed_tables ? 0 : req->nr);
}

static void rv_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	rv_flush(cpu, mm, 0, 0);
}

/* update_mmu_cache(): the faulting CPU's own sfence.vma of the page, after
 * a write fault reused it, and after a spurious fault on a stale entry. */
static void rv_flush_page_local(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn)
{
	struct rv_flush f = { .asid = rv_mm_asid(rv_of(cpu->m), rv_mm_of(mm)), .vpn = vpn,
			      .nr = 1 };

	rv_flush_local(cpu, &f);
}

/*
 * arch_tlbbatch_add_pending(): the mm's mask into the batch's (Alexandre
 * Ghiti, "riscv: Add support for BATCHED_UNMAP_TLB_FLUSH", Linux 6.8).
 * batch=0 is the kernel before it: ptep_clear_flush()'s flush_tlb_page()
 * at each zap, timed as a flush of its own.
 */
static void rv_batch_add(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm,
			 uint64_t vpn)
{
	if (!rv_of(cpu->m)->batch) {
		uint64_t at = vpn == SD_BATCH_NO_VPN ? 0 : vpn, nr = vpn == SD_BATCH_NO_VPN ? 0 : 1;
		sd_event(cpu, SD_EV_FLUSH_BEGIN, at, sd_flush_aux(SD_FLUSH_LOCAL_SHOOTDOWN, nr));
		uint64_t t0 = sd_event_flush_start(cpu);
		rv_flush(cpu, mm, at, nr);
		sd_event(cpu, SD_EV_FLUSH_END, sd_event_flush_ns(cpu, t0), SD_FLUSH_LOCAL_SHOOTDOWN);
		return;
	}
	rv_read_mask(cpu, rv_mm_of(mm), cpus);
	sd_sb_drain();
}

/* arch_tlbbatch_flush(): every TLB of the union, whole, every ASID. */
static void rv_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus)
{
	struct sd_riscv *rv = rv_of(cpu->m);
	struct rv_cpu *me = &rv->percpu[cpu->id];
	unsigned t;

	sd_cpumask_clearall(&me->targets);
	sd_cpumask_for_each(t, cpus)
		sd_cpumask_set(&me->targets, t);
	me->info = (struct rv_flush){ .all_asids = true };
	rv_flush_targets(cpu, rv, me);
}

const struct sd_strategy_ops sd_riscv_ops = {
	.name = "riscv",
	.summary = "RISC-V: mm_cpumask footmarks, SBI remote fences or S-mode IPIs, "
		   "local sfence.vma or Svinval",
	/* The mechanism depends on rfence=: set at machine_init. */
	.mechanisms = 0,
	.primary_mechanism = 0,
	.unused_why = "every flush found its mm's mask holding this CPU alone and stayed local",
	.machine_init = rv_machine_init,
	.machine_fini = rv_machine_fini,
	.mm_init = rv_mm_init,
	.mm_fini = rv_mm_fini,
	.flush_range = rv_flush_range,
	.flush_mm = rv_flush_mm,
	.switch_mm = rv_switch,
	.enter_lazy = rv_enter_lazy,
	.wp_reuse_flush = rv_flush_page_local,
	.spurious_fixup = rv_flush_page_local,
	.batch_add = rv_batch_add,
	.batch_flush = rv_batch_flush,
	.state_bytes = rv_state_bytes,
};
