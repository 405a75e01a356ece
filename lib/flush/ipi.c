/* SPDX-License-Identifier: MIT */
/*
 * The `ipi` strategy: x86 TLB shootdown (arch/x86/mm/tlb.c), with the lazy
 * mm_cpumask of seed 002 and its two later fixes.
 *
 * Each CPU has 6 dynamic PCID slots {ctx_id, tlb_gen}. A flush bumps the
 * mm's tlb_gen, picks targets from mm_cpumask (should_flush_tlb()), sends
 * each a real signal carrying a pointer to the initiator's flush_tlb_info,
 * flushes locally meanwhile and waits for every ack. A target catches its
 * slot up to the mm's generation (flush_tlb_func()): per page only when it
 * is exactly one generation behind, fully otherwise. A CPU that misses a
 * flush (lazy, switched away) compares generations when it switches back.
 *
 * The switch/flush race is store buffering on two words:
 *
 *   switcher (switch_mm_irqs_off)          flusher (flush_tlb_mm_range)
 *   loaded_mm = SWITCHING                  PTE stores
 *   cpumask bit set (RMW) or smp_mb()      tlb_gen++ (RMW, full barrier)
 *   read tlb_gen                           read cpumask, loaded_mm
 *
 * Either the switcher reads the new generation and flushes the slot, or the
 * flusher sees it SWITCHING (or already switched) and sends the IPI, which
 * waits for the switch to end because interrupts are off during it.
 * SWITCHING must count as "send" (CVE-2025-37964), and with the lazy mask
 * the RMW may be skipped, so the fence must then be explicit
 * (CVE-2025-40174). Both stores go through core/ordering.h so the tests can
 * delay them and see each fix matter.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "../core/ordering.h"
#include "../machine/machine.h"
#include "../mm/mm.h"
#include "ipi.h"
#include "strategy.h"

static inline struct sd_ipi *ipi_of(struct sd_machine *m)
{
	return m->strategy;
}

static inline struct sd_ipi_cpu *ipi_cpu(struct sd_cpu *cpu)
{
	return &ipi_of(cpu->m)->percpu[cpu->id];
}

static inline struct sd_ipi_mm *ipi_mm(struct sd_mm *mm)
{
	return mm->strategy;
}

static inline uint16_t slot_tag(unsigned slot)
{
	return (uint16_t)(slot + 1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- setup ---- */

static int ipi_option(struct sd_ipi *ipi, const struct sd_strategy_opt *o)
{
	uint64_t v;
	int err;

	if (!strcmp(o->key, "cpumask")) {
		if (!strcmp(o->value, "eager"))
			ipi->mode = SD_IPI_CPUMASK_EAGER;
		else if (!strcmp(o->value, "lazy"))
			ipi->mode = SD_IPI_CPUMASK_LAZY;
		else
			return sd_fail(-EINVAL, "option cpumask=%s for 'ipi': want eager or lazy",
				       o->value);
		return 0;
	}
	if (!strcmp(o->key, "ceiling")) {
		err = sd_strategy_opt_uint("ipi", o, 0, 1u << 20, &v);
		ipi->ceiling = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "trim_ms")) {
		err = sd_strategy_opt_uint("ipi", o, 1, 3600u * 1000u, &v);
		ipi->trim_ns = v * 1000000u;
		return err;
	}
	return sd_strategy_unknown_opt("ipi", o);
}

static void ipi_free(struct sd_ipi *ipi)
{
	free(ipi->percpu);
	free(ipi->csd_all);
	free(ipi->targets_all);
	free(ipi);
}

static int ipi_machine_init(struct sd_machine *m, const struct sd_strategy_opt *opts,
			    unsigned nr_opts, void **priv)
{
	unsigned n = m->nr_cpus;
	struct sd_ipi *ipi = calloc(1, sizeof(*ipi));
	int err = 0;

	if (!ipi)
		return -ENOMEM;
	ipi->mode = SD_IPI_CPUMASK_LAZY;      /* what Linux does since 6.13 */
	ipi->ceiling = SD_IPI_FLUSH_CEILING;
	ipi->trim_ns = 1000000000u;            /* HZ: once per second */
	atomic_init(&ipi->last_ctx_id, 0);
	for (unsigned i = 0; !err && i < nr_opts; i++)
		err = ipi_option(ipi, &opts[i]);
	if (err) {
		ipi_free(ipi);
		return err;
	}
	ipi->percpu = aligned_alloc(SD_CACHELINE, sd_round_up(n * sizeof(*ipi->percpu),
							      SD_CACHELINE));
	/* n * n requests: calloc leaves untouched pages unbacked, so a large
	 * machine pays only for the pairs that ever talk. */
	ipi->csd_all = calloc((size_t)n * n, sizeof(*ipi->csd_all));
	ipi->targets_all = calloc((size_t)n * n, sizeof(*ipi->targets_all));
	if (!ipi->percpu || !ipi->csd_all || !ipi->targets_all) {
		ipi_free(ipi);
		return -ENOMEM;
	}
	memset(ipi->percpu, 0, n * sizeof(*ipi->percpu));
	for (unsigned i = 0; i < n; i++) {
		struct sd_ipi_cpu *pc = &ipi->percpu[i];
		atomic_init(&pc->loaded_mm, 0);
		atomic_init(&pc->is_lazy, false);
		pc->csd = &ipi->csd_all[(size_t)i * n];
		pc->targets = &ipi->targets_all[(size_t)i * n];
	}
	*priv = ipi;
	return 0;
}

static void ipi_machine_fini(struct sd_machine *m, void *priv)
{
	(void)m;
	ipi_free(priv);
}

static int ipi_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct sd_ipi *ipi = ipi_of(m);
	struct sd_ipi_mm *im = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*im), SD_CACHELINE));

	(void)mm;
	if (!im)
		return -ENOMEM;
	if (sd_cpumask_init(&im->cpumask, m->nr_cpus)) {
		free(im);
		return -ENOMEM;
	}
	im->ctx_id = atomic_fetch_add(&ipi->last_ctx_id, 1) + 1;
	/* init_new_context(): generation 1 is "no flush yet". */
	atomic_init(&im->tlb_gen, 1);
	atomic_init(&im->next_trim_ns, now_ns() + ipi->trim_ns);
	*mm_priv = im;
	return 0;
}

static void ipi_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct sd_ipi_mm *im = mm_priv;

	(void)m;
	(void)mm;
	sd_cpumask_destroy(&im->cpumask);
	free(im);
}

int sd_ipi_test_break(struct sd_machine *m, unsigned mask)
{
	if (!m || m->ops != &sd_ipi_ops)
		return sd_fail(-EINVAL, "sd_ipi_test_break: machine does not run 'ipi'");
	ipi_of(m)->broken = mask;
	return 0;
}

/* ---- local TLB operations ---- */

static void flush_slot_full(struct sd_cpu *cpu, unsigned slot)
{
	struct sd_tlb_inval inv = { .kind = SD_TLB_INVAL_ASID, .asid = slot_tag(slot) };

	sd_tlb_invalidate(&cpu->tlb, &inv);
	sd_stat_inc(cpu, SD_STAT_FLUSH_FULL);
}

static void cpumask_write(struct sd_cpu *cpu, struct sd_mm *mm, bool set)
{
	if (set)
		sd_sb_cpumask_set(&ipi_mm(mm)->cpumask, cpu->id);
	else
		sd_sb_cpumask_clear(&ipi_mm(mm)->cpumask, cpu->id);
	sd_stat_inc(cpu, SD_STAT_CPUMASK_WRITE);
}

/* ---- context switch ---- */

/* choose_new_asid(): the slot already holding @next, or the round-robin
 * victim. */
static unsigned choose_new_asid(struct sd_cpu *cpu, struct sd_ipi_cpu *me,
				const struct sd_ipi_mm *next, uint64_t next_gen, bool *need_flush)
{
	for (unsigned s = 0; s < SD_IPI_NR_DYN_ASIDS; s++) {
		if (me->ctxs[s].ctx_id == next->ctx_id) {
			*need_flush = me->ctxs[s].tlb_gen < next_gen;
			return s;
		}
	}
	unsigned s = me->next_asid;
	me->next_asid = (uint16_t)((s + 1) % SD_IPI_NR_DYN_ASIDS);
	sd_stat_inc(cpu, SD_STAT_ASID_ALLOC);
	*need_flush = true;
	return s;
}

/*
 * Make sure this CPU is in next's mm_cpumask, and order the SWITCHING
 * store before the tlb_gen read that follows. Eager mode and an unset bit
 * use the RMW, a full barrier; an already-set bit needs an explicit one.
 */
static void join_cpumask(struct sd_cpu *cpu, struct sd_ipi *ipi, struct sd_mm *next)
{
	struct sd_ipi_mm *im = ipi_mm(next);

	if (ipi->mode == SD_IPI_CPUMASK_EAGER || !sd_cpumask_test(&im->cpumask, cpu->id)) {
		cpumask_write(cpu, next, true);
		return;
	}
	if (!(ipi->broken & SD_IPI_BREAK_SWITCH_FENCE))
		sd_sb_fence();         /* CVE-2025-40174 */
}

/* prev == next: leaving lazy mode on the mm we kept loaded. */
static void switch_same(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *mm, bool was_lazy)
{
	if (!mm || !was_lazy)
		return;
	/* Order is_lazy = false before the tlb_gen read. Pairs with the
	 * flusher's tlb_gen RMW before its is_lazy read: either it saw us
	 * not lazy and IPIs us, or we see its generation here. */
	sd_sb_fence();
	uint64_t gen = atomic_load_explicit(&ipi_mm(mm)->tlb_gen, memory_order_acquire);
	struct sd_ipi_ctx *ctx = &me->ctxs[me->loaded_asid];

	if (ctx->tlb_gen == gen)
		return;
	flush_slot_full(cpu, me->loaded_asid);
	sd_stat_inc(cpu, SD_STAT_SWITCH_FLUSH);
	ctx->tlb_gen = gen;
}

/* switch_mm_irqs_off(): interrupts are off. @next NULL is init_mm. */
static void ipi_switch_to(struct sd_cpu *cpu, struct sd_mm *next)
{
	struct sd_ipi *ipi = ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	struct sd_mm *prev = (struct sd_mm *)atomic_load_explicit(&me->loaded_mm,
								  memory_order_relaxed);
	bool was_lazy = atomic_load_explicit(&me->is_lazy, memory_order_relaxed);

	/* Cleared before loaded_mm is written: a flusher that reads our new
	 * loaded_mm then (after its read barrier) is_lazy sees false. */
	if (was_lazy)
		atomic_store_explicit(&me->is_lazy, false, memory_order_relaxed);
	if (prev == next) {
		switch_same(cpu, me, next, was_lazy);
		return;
	}

	sd_sb_store(&me->loaded_mm, SD_IPI_LOADED_SWITCHING);
	if (prev && ipi->mode == SD_IPI_CPUMASK_EAGER)
		cpumask_write(cpu, prev, false);   /* stop remote flushes for prev */
	if (!next) {
		cpu->asid = 0;
		sd_sb_store(&me->loaded_mm, 0);
		sd_sb_drain();
		return;
	}
	join_cpumask(cpu, ipi, next);
	sd_order_point(SD_ORDER_SWITCH_STORED, cpu->id);

	struct sd_ipi_mm *im = ipi_mm(next);
	uint64_t next_gen = atomic_load_explicit(&im->tlb_gen, memory_order_acquire);
	sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);

	bool need_flush;
	unsigned slot = choose_new_asid(cpu, me, im, next_gen, &need_flush);

	if (need_flush) {
		me->ctxs[slot].ctx_id = im->ctx_id;
		me->ctxs[slot].tlb_gen = next_gen;
	}
	me->loaded_asid = (uint16_t)slot;
	cpu->asid = slot_tag(slot);
	sd_sb_store(&me->loaded_mm, (uintptr_t)next);
	sd_sb_drain();
	/*
	 * The CR3 write with a flush. Hardware drops a PCID's entries in a
	 * few cycles; our scan of the TLB takes far longer, and inside the
	 * SWITCHING window it would make flushers IPI switching CPUs much
	 * more often than on a real machine. It comes after loaded_mm is
	 * published, interrupts still off, which no one can tell apart: no
	 * access runs before they are on again, and an IPI arriving meanwhile
	 * waits for the scan to finish.
	 */
	if (need_flush) {
		flush_slot_full(cpu, slot);
		sd_stat_inc(cpu, SD_STAT_SWITCH_FLUSH);
	}
}

static void ipi_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	(void)prev;    /* the strategy's own loaded_mm is prev, as in the kernel */
	ipi_switch_to(cpu, next);
}

/* enter_lazy_tlb(): keep CR3 and the cpumask, just say so. */
static void ipi_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm)
{
	struct sd_ipi_cpu *me = ipi_cpu(cpu);

	(void)mm;
	if (atomic_load_explicit(&me->loaded_mm, memory_order_relaxed))
		atomic_store_explicit(&me->is_lazy, true, memory_order_relaxed);
}

/* ---- the target side ---- */

/* flush_tlb_func(): runs on @cpu with interrupts off, remote or local. */
static void flush_tlb_func(struct sd_cpu *cpu, const struct sd_ipi_flush_info *f, bool local)
{
	struct sd_ipi_cpu *me = ipi_cpu(cpu);
	struct sd_mm *loaded = (struct sd_mm *)atomic_load_explicit(&me->loaded_mm,
								    memory_order_relaxed);

	if (!local)
		sd_stat_inc(cpu, SD_STAT_REMOTE_INVAL_RECV);
	/* The CPU was left in the mm's mask (lazy mode): leave it now. */
	if (f->mm && f->mm != loaded) {
		cpumask_write(cpu, f->mm, false);
		if (!local)
			sd_stat_inc(cpu, SD_STAT_IPI_UNNEEDED);
		return;
	}
	if (!loaded)
		return;                            /* init_mm: no user entries */
	if (atomic_load_explicit(&me->is_lazy, memory_order_relaxed)) {
		/* Only a forced IPI (freed page tables) gets here: stop using
		 * tables that are about to be freed, by leaving for init_mm. */
		ipi_switch_to(cpu, NULL);
		return;
	}

	struct sd_ipi_ctx *ctx = &me->ctxs[me->loaded_asid];
	uint64_t local_gen = ctx->tlb_gen;

	/* Already caught up: no touch of the contended mm line at all. */
	if (f->new_tlb_gen != SD_IPI_GEN_INVALID && f->new_tlb_gen <= local_gen) {
		sd_stat_inc(cpu, SD_STAT_FLUSH_GEN_SKIP);
		return;
	}
	/* Acquire: the walks after this flush see the PTE stores that came
	 * before the bump to mm_gen. */
	uint64_t mm_gen = atomic_load_explicit(&ipi_mm(loaded)->tlb_gen, memory_order_acquire);

	if (local_gen == mm_gen) {
		sd_stat_inc(cpu, SD_STAT_FLUSH_GEN_SKIP);
		return;
	}
	/*
	 * Per page only when this flush is exactly the next generation and
	 * the last one: applying a partial flush for gen+2 over a missed full
	 * flush for gen+1 and recording gen+2 would lose the full flush.
	 */
	if (f->nr && f->new_tlb_gen == local_gen + 1 && f->new_tlb_gen == mm_gen) {
		struct sd_tlb_inval inv = {
			.kind = SD_TLB_INVAL_RANGE, .asid = slot_tag(me->loaded_asid),
			.leaf_only = !f->freed_tables, .vpn = f->vpn, .nr = f->nr,
		};
		sd_tlb_invalidate(&cpu->tlb, &inv);
		sd_stat_inc(cpu, SD_STAT_FLUSH_PARTIAL);
	} else {
		flush_slot_full(cpu, me->loaded_asid);
	}
	/* The generation read before flushing: later bumps still need us. */
	ctx->tlb_gen = mm_gen;
}

static void flush_ipi(struct sd_cpu *cpu, void *arg)
{
	flush_tlb_func(cpu, arg, false);
}

/* ---- the initiator side ---- */

/*
 * should_flush_tlb(): whether CPU @t needs this flush's IPI. loaded_mm is
 * read first, then (after a read barrier) is_lazy, so is_lazy is at least
 * as new as loaded_mm: the switcher clears is_lazy before storing loaded_mm.
 */
static bool should_flush_tlb(struct sd_cpu *from, struct sd_ipi *ipi, unsigned t,
			     const struct sd_ipi_flush_info *f)
{
	struct sd_ipi_cpu *pc = &ipi->percpu[t];
	uintptr_t loaded = atomic_load_explicit(&pc->loaded_mm, memory_order_relaxed);

	atomic_thread_fence(memory_order_acquire);   /* smp_rmb() */
	if (atomic_load_explicit(&pc->is_lazy, memory_order_relaxed)) {
		sd_stat_inc(from, SD_STAT_LAZY_SKIP);
		return false;
	}
	if (!f->mm)
		return true;
	/* In the middle of a switch, it may have read tlb_gen already. */
	if (loaded == SD_IPI_LOADED_SWITCHING)
		return !(ipi->broken & SD_IPI_BREAK_SWITCHING_RULE);   /* CVE-2025-37964 */
	if (loaded == (uintptr_t)f->mm)
		return true;
	return f->trim_cpumask;
}

/* should_trim_cpumask(): at most once per trim period per mm. */
static bool should_trim_cpumask(struct sd_ipi *ipi, struct sd_mm *mm)
{
	struct sd_ipi_mm *im = ipi_mm(mm);
	uint64_t now;

	if (ipi->mode == SD_IPI_CPUMASK_EAGER)
		return false;
	now = now_ns();
	if (now < atomic_load_explicit(&im->next_trim_ns, memory_order_relaxed))
		return false;
	/* Racing initiators may both trim once: harmless, as in the kernel. */
	atomic_store_explicit(&im->next_trim_ns, now + ipi->trim_ns, memory_order_relaxed);
	return true;
}

static bool cpumask_any_but(const struct sd_cpumask *mask, unsigned me)
{
	unsigned t;

	sd_cpumask_for_each(t, mask)
		if (t != me)
			return true;
	return false;
}

/*
 * native_flush_tlb_multi() through smp_call_function_many_cond(): pick the
 * targets, post a request to each (a signal only if its queue was idle),
 * run the flush here meanwhile, then wait for every ack.
 */
static void flush_tlb_multi(struct sd_cpu *cpu, const struct sd_cpumask *mask,
			    struct sd_ipi_flush_info *f)
{
	struct sd_ipi *ipi = ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	/* Freed tables reach lazy CPUs too: they must stop walking them. */
	bool all = f->freed_tables;
	bool run_local = false;
	unsigned t, nr_sent = 0;

	/* cond(me) before any IPI goes out (smp_call_function_many_cond). */
	if (sd_cpumask_test(mask, cpu->id))
		run_local = all || should_flush_tlb(cpu, ipi, cpu->id, f);
	sd_cpumask_for_each(t, mask) {
		if (t == cpu->id || (!all && !should_flush_tlb(cpu, ipi, t, f)))
			continue;
		struct sd_ipi_req *req = &me->csd[t];
		req->fn = flush_ipi;
		req->arg = f;
		if (sd_ipi_post(cpu, cpu->m->cpus[t], req))
			me->targets[nr_sent++] = t;
	}
	sd_order_point(SD_ORDER_FLUSH_LOADED, cpu->id);
	if (nr_sent)
		sd_stat_inc(cpu, SD_STAT_REMOTE_FLUSH);
	if (run_local) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
	for (unsigned i = 0; i < nr_sent; i++)
		sd_ipi_wait(cpu, &me->csd[me->targets[i]]);
}

/* flush_tlb_mm_range(): @nr == 0 flushes the whole mm. */
static void ipi_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
		      bool freed_tables)
{
	struct sd_ipi *ipi = ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	struct sd_ipi_mm *im = ipi_mm(mm);
	struct sd_ipi_flush_info *f = &me->info;

	/* A full barrier: the PTE stores before it are ordered before the
	 * cpumask, loaded_mm and is_lazy reads after it. */
	uint64_t new_gen = atomic_fetch_add(&im->tlb_gen, 1) + 1;
	sd_smp_mb__after_atomic();
	sd_order_point(SD_ORDER_FLUSH_STORED, cpu->id);

	f->mm = mm;
	f->vpn = vpn;
	f->nr = nr > ipi->ceiling ? 0 : nr;
	f->new_tlb_gen = new_gen;
	f->initiating_cpu = cpu->id;
	f->freed_tables = freed_tables;
	f->trim_cpumask = false;

	if (cpumask_any_but(&im->cpumask, cpu->id)) {
		f->trim_cpumask = should_trim_cpumask(ipi, mm);
		if (f->trim_cpumask)
			sd_stat_inc(cpu, SD_STAT_CPUMASK_TRIM);
		flush_tlb_multi(cpu, &im->cpumask, f);
	} else if (atomic_load_explicit(&me->loaded_mm, memory_order_relaxed) == (uintptr_t)mm) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
	/* Otherwise the bump alone is enough: the slot is behind now, and
	 * the next switch-in flushes it. */
}

static void ipi_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	ipi_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables);
}

static void ipi_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	ipi_flush(cpu, mm, 0, 0, true);
}

/*
 * arch_tlbbatch_add_pending(): bump the generation (the zaps before it are
 * what it covers) and gather the CPUs that may cache the mm.
 */
static void ipi_batch_add(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm)
{
	struct sd_ipi_mm *im = ipi_mm(mm);

	(void)cpu;
	atomic_fetch_add(&im->tlb_gen, 1);
	sd_smp_mb__after_atomic();
	for (unsigned w = 0; w < sd_cpumask_nwords(cpus); w++) {
		uint64_t bits = atomic_load_explicit(&im->cpumask.words[w], memory_order_relaxed);
		/* The batch is its owner's alone: no RMW needed. */
		atomic_store_explicit(&cpus->words[w],
				      atomic_load_explicit(&cpus->words[w], memory_order_relaxed) | bits,
				      memory_order_relaxed);
	}
}

/*
 * arch_tlbbatch_flush(): one full flush naming no mm and no generation;
 * each target catches up whatever mm it has loaded, lazy CPUs at switch-in.
 */
static void ipi_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus)
{
	struct sd_ipi_flush_info *f = &ipi_cpu(cpu)->info;

	*f = (struct sd_ipi_flush_info){
		.mm = NULL, .new_tlb_gen = SD_IPI_GEN_INVALID, .initiating_cpu = cpu->id,
	};
	if (cpumask_any_but(cpus, cpu->id)) {
		flush_tlb_multi(cpu, cpus, f);
	} else if (sd_cpumask_test(cpus, cpu->id)) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
}

const struct sd_strategy_ops sd_ipi_ops = {
	.name = "ipi",
	.summary = "x86 shootdown: IPIs as signals, mm_cpumask, tlb_gen, 6 PCID slots",
	.machine_init = ipi_machine_init,
	.machine_fini = ipi_machine_fini,
	.mm_init = ipi_mm_init,
	.mm_fini = ipi_mm_fini,
	.flush_range = ipi_flush_range,
	.flush_mm = ipi_flush_mm,
	.switch_mm = ipi_switch,
	.enter_lazy = ipi_enter_lazy,
	.batch_add = ipi_batch_add,
	.batch_flush = ipi_batch_flush,
};
