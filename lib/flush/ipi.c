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

#include "../core/backoff.h"
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

/* Options only `gbcast` has: the global ASID pool and its policy. */
static int gbcast_option(struct sd_ipi *ipi, const struct sd_strategy_opt *o)
{
	uint64_t v;
	int err;

	if (!strcmp(o->key, "pool")) {
		err = sd_strategy_opt_uint("gbcast", o, 1, 0xffffu - SD_IPI_NR_DYN_ASIDS - 2, &v);
		ipi->pool = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "threshold")) {
		err = sd_strategy_opt_uint("gbcast", o, 0, 1u << 20, &v);
		ipi->threshold = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "sample")) {
		err = sd_strategy_opt_uint("gbcast", o, 1, 1u << 20, &v);
		ipi->sample = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "count_max")) {
		err = sd_strategy_opt_uint("gbcast", o, 1, 1u << 16, &v);
		ipi->count_max = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "threshold_growth")) {
		err = sd_strategy_opt_uint("gbcast", o, 0, 1, &v);
		ipi->threshold_growth = v;
		return err;
	}
	return sd_strategy_unknown_opt("gbcast", o);
}

static int ipi_option(struct sd_ipi *ipi, const char *name, const struct sd_strategy_opt *o)
{
	uint64_t v;
	int err;

	if (!strcmp(o->key, "cpumask")) {
		if (!strcmp(o->value, "eager"))
			ipi->mode = SD_IPI_CPUMASK_EAGER;
		else if (!strcmp(o->value, "lazy"))
			ipi->mode = SD_IPI_CPUMASK_LAZY;
		else
			return sd_fail(-EINVAL, "option cpumask=%s for '%s': want eager or lazy",
				       o->value, name);
		return 0;
	}
	if (!strcmp(o->key, "ceiling")) {
		err = sd_strategy_opt_uint(name, o, 0, 1u << 20, &v);
		ipi->ceiling = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "csd_window")) {
		err = sd_strategy_opt_uint(name, o, 1, SD_IPI_CSD_WINDOW_MAX, &v);
		ipi->csd_window = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "trim_ms")) {
		err = sd_strategy_opt_uint(name, o, 1, 3600u * 1000u, &v);
		ipi->trim_ns = v * 1000000u;
		return err;
	}
	/* Page reclaim's lock is the machine's, for every strategy. */
	if (!strcmp(o->key, "lru"))
		return sd_fail(-EINVAL, "option lru=%s for '%s': the LRU lock is a machine "
			       "setting now (sd_machine_config.lru)", o->value, name);
	if (ipi->invlpgb)
		return gbcast_option(ipi, o);
	return sd_strategy_unknown_opt(name, o);
}

static void ipi_free(struct sd_ipi *ipi)
{
	if (ipi->invlpgb) {
		sd_global_asid_fini(&ipi->gasid);
		sd_invlpgb_fini(&ipi->ib);
	}
	free(ipi->percpu);
	free(ipi->csd_all);
	free(ipi);
}

static void flush_all_nonglobals_cb(void *arg);

/*
 * The per-CPU state and the request rings, zeroed here so that what a
 * machine costs is resident from creation on and sd_machine_info() can
 * report it: no flush pattern makes either grow.
 */
static int alloc_percpu(struct sd_ipi *ipi, unsigned n)
{
	size_t percpu_size = sd_round_up(n * sizeof(*ipi->percpu), SD_CACHELINE);
	size_t csd_size = sd_round_up((size_t)n * ipi->csd_window * sizeof(*ipi->csd_all),
				      SD_CACHELINE);

	ipi->percpu = aligned_alloc(SD_CACHELINE, percpu_size);
	ipi->csd_all = aligned_alloc(SD_CACHELINE, csd_size);
	if (!ipi->percpu || !ipi->csd_all)
		return -ENOMEM;
	memset(ipi->percpu, 0, percpu_size);
	memset(ipi->csd_all, 0, csd_size);
	for (unsigned i = 0; i < n; i++) {
		struct sd_ipi_cpu *pc = &ipi->percpu[i];
		atomic_init(&pc->loaded_mm, 0);
		atomic_init(&pc->loaded_asid, 0);
		atomic_init(&pc->is_lazy, false);
		pc->csd = &ipi->csd_all[(size_t)i * ipi->csd_window];
	}
	return 0;
}

/* What machine_init allocated, for sd_machine_info(): per-mm state is not
 * counted (it is per address space, not per CPU). */
static size_t ipi_state_bytes(const struct sd_machine *m, const void *priv)
{
	const struct sd_ipi *ipi = priv;
	unsigned n = m->nr_cpus;
	size_t bytes = sizeof(*ipi);

	bytes += sd_round_up(n * sizeof(*ipi->percpu), SD_CACHELINE);
	bytes += sd_round_up((size_t)n * ipi->csd_window * sizeof(*ipi->csd_all), SD_CACHELINE);
	if (ipi->invlpgb) {
		bytes += sd_invlpgb_bytes(&ipi->ib);
		bytes += sd_global_asid_bytes(&ipi->gasid);
	}
	return bytes;
}

static int gbcast_init(struct sd_machine *m, struct sd_ipi *ipi)
{
	int err = sd_invlpgb_init(&ipi->ib, m->nr_cpus);

	if (err)
		return err;
	err = sd_global_asid_init(&ipi->gasid, SD_IPI_NR_DYN_ASIDS, ipi->pool,
				  flush_all_nonglobals_cb, m);
	if (err) {
		sd_invlpgb_fini(&ipi->ib);
		return err == -EINVAL ? sd_fail(err, "gbcast: pool=%u is too large", ipi->pool)
				      : err;
	}
	return 0;
}

static int machine_init(struct sd_machine *m, const char *name, bool invlpgb,
			const struct sd_strategy_opt *opts, unsigned nr_opts, void **priv)
{
	unsigned n = m->nr_cpus;
	struct sd_ipi *ipi = calloc(1, sizeof(*ipi));
	int err = 0;

	if (!ipi)
		return -ENOMEM;
	ipi->mode = SD_IPI_CPUMASK_LAZY;      /* what Linux does since 6.13 */
	ipi->ceiling = SD_IPI_FLUSH_CEILING;
	ipi->csd_window = SD_IPI_CSD_WINDOW;
	ipi->trim_ns = 1000000000u;            /* HZ: once per second */
	ipi->invlpgb = invlpgb;
	ipi->pool = SD_GBCAST_POOL;
	ipi->threshold = SD_GBCAST_THRESHOLD;
	ipi->sample = SD_GBCAST_SAMPLE;
	ipi->count_max = SD_GBCAST_COUNT_MAX;
	atomic_init(&ipi->last_ctx_id, 0);
	for (unsigned i = 0; !err && i < nr_opts; i++)
		err = ipi_option(ipi, name, &opts[i]);
	ipi->invlpgb = false;                  /* nothing of gbcast's to free yet */
	if (!err && invlpgb) {
		err = gbcast_init(m, ipi);
		ipi->invlpgb = !err;
	}
	if (err) {
		ipi_free(ipi);
		return err;
	}
	/* No more requests in flight than there are other CPUs to take them. */
	if (ipi->csd_window > n - 1)
		ipi->csd_window = n > 1 ? n - 1 : 1;
	err = alloc_percpu(ipi, n);
	if (err) {
		ipi_free(ipi);
		return err;
	}
	*priv = ipi;
	return 0;
}

static int ipi_machine_init(struct sd_machine *m, const struct sd_strategy_opt *opts,
			    unsigned nr_opts, void **priv)
{
	return machine_init(m, "ipi", false, opts, nr_opts, priv);
}

static int gbcast_machine_init(struct sd_machine *m, const struct sd_strategy_opt *opts,
			       unsigned nr_opts, void **priv)
{
	return machine_init(m, "gbcast", true, opts, nr_opts, priv);
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
	atomic_init(&im->global_asid, 0);
	atomic_init(&im->asid_transition, false);
	*mm_priv = im;
	return 0;
}

static void ipi_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct sd_ipi_mm *im = mm_priv;
	uint16_t gasid = atomic_load_explicit(&im->global_asid, memory_order_relaxed);

	(void)mm;
	/* destroy_context_free_global_asid(): its entries may still be
	 * cached; the ASID is reused only after the next wrap-around. */
	if (gasid) {
		sd_global_asid_free(&ipi_of(m)->gasid, gasid);
		/* No CPU of this machine is attached here necessarily: count
		 * on the CPU that destroys, if any. */
		if (sd_this_cpu && sd_this_cpu->m == m)
			sd_stat_inc(sd_this_cpu, SD_STAT_GLOBAL_ASID_FREE);
	}
	sd_cpumask_destroy(&im->cpumask);
	free(im);
}

int sd_ipi_test_break(struct sd_machine *m, unsigned mask)
{
	if (!m || (m->ops != &sd_ipi_ops && m->ops != &sd_gbcast_ops))
		return sd_fail(-EINVAL, "sd_ipi_test_break: machine runs neither 'ipi' nor 'gbcast'");
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

static inline uint16_t loaded_asid(const struct sd_ipi_cpu *me)
{
	return atomic_load_explicit(&me->loaded_asid, memory_order_relaxed);
}

static inline bool is_global_asid(uint16_t asid)
{
	return asid >= SD_IPI_NR_DYN_ASIDS;
}

/* mm_global_asid(): acquire, pairing with the release in
 * mm_assign_global_asid(), so whoever sees the ASID sees the transition. */
static inline uint16_t mm_global_asid(struct sd_mm *mm)
{
	return atomic_load_explicit(&ipi_mm(mm)->global_asid, memory_order_acquire);
}

/* mm_needs_global_asid(): the mm has a global ASID this CPU is not using. */
static bool mm_needs_global_asid(struct sd_mm *mm, uint16_t asid)
{
	uint16_t gasid = mm_global_asid(mm);

	return gasid && asid != gasid;
}

/*
 * choose_new_asid(): the mm's global ASID (never needs a flush: INVLPGB
 * reached every TLB, lazy or not), else the slot already holding @next,
 * else the round-robin victim.
 */
static uint16_t choose_new_asid(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *next,
				uint64_t next_gen, bool *need_flush)
{
	const struct sd_ipi_mm *im = ipi_mm(next);
	uint16_t gasid = mm_global_asid(next);

	if (gasid) {
		*need_flush = false;
		return gasid;
	}
	for (unsigned s = 0; s < SD_IPI_NR_DYN_ASIDS; s++) {
		if (me->ctxs[s].ctx_id == im->ctx_id) {
			*need_flush = me->ctxs[s].tlb_gen < next_gen;
			return (uint16_t)s;
		}
	}
	unsigned s = me->next_asid;
	me->next_asid = (uint16_t)((s + 1) % SD_IPI_NR_DYN_ASIDS);
	sd_stat_inc(cpu, SD_STAT_ASID_ALLOC);
	*need_flush = true;
	return (uint16_t)s;
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

/*
 * reload_tlb: load @asid for @next, recording and flushing a dynamic slot
 * if choose_new_asid() said so. loaded_mm is published first and the scan
 * that stands for CR3-with-flush comes after, interrupts still off:
 * hardware drops a PCID's entries in a few cycles, while our scan inside
 * the SWITCHING window would make flushers IPI switching CPUs far more
 * often than on a real machine. No one can tell the order apart: no access
 * runs before interrupts are on again, and an IPI arriving meanwhile waits
 * for the scan.
 */
static void load_asid(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *next,
		      uint16_t asid, uint64_t next_gen, bool need_flush)
{
	if (need_flush) {
		me->ctxs[asid].ctx_id = ipi_mm(next)->ctx_id;
		me->ctxs[asid].tlb_gen = next_gen;
	}
	/* loaded_asid before loaded_mm (a release store): finish_asid_transition()
	 * reads loaded_mm with acquire, then loaded_asid, and so never pairs
	 * the new mm with the previous ASID. */
	atomic_store_explicit(&me->loaded_asid, asid, memory_order_relaxed);
	cpu->asid = slot_tag(asid);
	sd_sb_store(&me->loaded_mm, (uintptr_t)next);
	sd_sb_drain();
	if (need_flush) {
		flush_slot_full(cpu, asid);
		sd_stat_inc(cpu, SD_STAT_SWITCH_FLUSH);
	}
}

/* The mm got a global ASID while this CPU ran it on a dynamic one: move
 * over (the prev == next reload of switch_mm_irqs_off()). is_lazy is left
 * as it is: the IPI handler calls this for lazy CPUs too. */
static void reload_global(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *mm)
{
	uint64_t gen = atomic_load_explicit(&ipi_mm(mm)->tlb_gen, memory_order_acquire);
	bool need_flush;
	uint16_t asid = choose_new_asid(cpu, me, mm, gen, &need_flush);

	load_asid(cpu, me, mm, asid, gen, need_flush);
}

/* prev == next: leaving lazy mode on the mm we kept loaded. */
static void switch_same(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *mm, bool was_lazy)
{
	if (!mm)
		return;
	if (mm_needs_global_asid(mm, loaded_asid(me))) {
		reload_global(cpu, me, mm);
		return;
	}
	/* A global ASID is kept current by INVLPGB, lazy or not. */
	if (is_global_asid(loaded_asid(me)) || !was_lazy)
		return;
	/* Order is_lazy = false before the tlb_gen read. Pairs with the
	 * flusher's tlb_gen RMW before its is_lazy read: either it saw us
	 * not lazy and IPIs us, or we see its generation here. */
	sd_sb_fence();
	uint64_t gen = atomic_load_explicit(&ipi_mm(mm)->tlb_gen, memory_order_acquire);
	struct sd_ipi_ctx *ctx = &me->ctxs[loaded_asid(me)];

	if (ctx->tlb_gen == gen)
		return;
	flush_slot_full(cpu, loaded_asid(me));
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
		atomic_store_explicit(&me->loaded_asid, 0, memory_order_relaxed);
		sd_sb_store(&me->loaded_mm, 0);
		sd_sb_drain();
		return;
	}
	join_cpumask(cpu, ipi, next);
	sd_order_point(SD_ORDER_SWITCH_STORED, cpu->id);

	uint64_t next_gen = atomic_load_explicit(&ipi_mm(next)->tlb_gen, memory_order_acquire);
	sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);

	bool need_flush;
	uint16_t asid = choose_new_asid(cpu, me, next, next_gen, &need_flush);

	load_asid(cpu, me, next, asid, next_gen, need_flush);
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
	/* A transition IPI: move onto the mm's global ASID, which INVLPGB
	 * keeps current, and nothing is left to flush. */
	if (mm_needs_global_asid(loaded, loaded_asid(me)))
		reload_global(cpu, me, loaded);
	if (is_global_asid(loaded_asid(me)))
		return;
	if (atomic_load_explicit(&me->is_lazy, memory_order_relaxed)) {
		/* Only a forced IPI (freed page tables) gets here: stop using
		 * tables that are about to be freed, by leaving for init_mm. */
		ipi_switch_to(cpu, NULL);
		return;
	}

	uint16_t slot = loaded_asid(me);
	struct sd_ipi_ctx *ctx = &me->ctxs[slot];
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
			.kind = SD_TLB_INVAL_RANGE, .asid = slot_tag(slot),
			.leaf_only = !f->freed_tables, .vpn = f->vpn, .nr = f->nr,
		};
		sd_tlb_invalidate(&cpu->tlb, &inv);
		sd_stat_inc(cpu, SD_STAT_FLUSH_PARTIAL);
	} else {
		flush_slot_full(cpu, slot);
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
 * The requests of one flush: a ring over the initiator's csd_window
 * requests. Posted requests are reaped (waited for) in posting order, so
 * the oldest is the one a full ring reuses. A failed post (offline target)
 * takes no slot.
 */
struct csd_ring {
	struct sd_ipi_req *csd;
	unsigned size;
	unsigned nr_posted, nr_reaped;
};

/*
 * A request free to post. A full ring first waits for its oldest request's
 * ack: the endpoint's lfstack node may be pushed again only after the
 * target popped it and ran it (sd_ipi_wait()'s contract), or the target's
 * queue would be corrupted and its flush lost.
 */
static struct sd_ipi_req *csd_ring_get(struct sd_cpu *cpu, struct sd_ipi *ipi,
				       struct csd_ring *r)
{
	if (r->nr_posted - r->nr_reaped == r->size) {
		if (!(ipi->broken & SD_IPI_BREAK_CSD_REUSE))
			sd_ipi_wait(cpu, &r->csd[r->nr_reaped % r->size]);
		r->nr_reaped++;
	}
	return &r->csd[r->nr_posted % r->size];
}

static void csd_ring_reap_all(struct sd_cpu *cpu, struct csd_ring *r)
{
	for (; r->nr_reaped < r->nr_posted; r->nr_reaped++)
		sd_ipi_wait(cpu, &r->csd[r->nr_reaped % r->size]);
}

/*
 * native_flush_tlb_multi() through smp_call_function_many_cond(): pick the
 * targets, post a request to each (a signal only if its queue was idle),
 * run the flush here meanwhile, then wait for every ack. Past csd_window
 * targets, posting waits for the oldest ack first (see csd_ring_get()):
 * the flush is complete only when every target answered either way. A
 * target read after such a wait is still read after the tlb_gen RMW, so
 * the switch/flush argument at the top of this file holds for it as well.
 */
static void flush_tlb_multi(struct sd_cpu *cpu, const struct sd_cpumask *mask,
			    struct sd_ipi_flush_info *f)
{
	struct sd_ipi *ipi = ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	/* Freed tables reach lazy CPUs too: they must stop walking them. So
	 * does an ASID transition: every straggler must move over. */
	bool all = f->freed_tables ||
		   (f->mm && atomic_load_explicit(&ipi_mm(f->mm)->asid_transition,
						  memory_order_relaxed));
	bool run_local = false;
	struct csd_ring ring = { .csd = me->csd, .size = ipi->csd_window };
	unsigned t;

	/* cond(me) before any IPI goes out (smp_call_function_many_cond). */
	if (sd_cpumask_test(mask, cpu->id))
		run_local = all || should_flush_tlb(cpu, ipi, cpu->id, f);
	sd_cpumask_for_each(t, mask) {
		if (t == cpu->id || (!all && !should_flush_tlb(cpu, ipi, t, f)))
			continue;
		struct sd_ipi_req *req = csd_ring_get(cpu, ipi, &ring);
		req->fn = flush_ipi;
		req->arg = f;
		if (sd_ipi_post(cpu, cpu->m->cpus[t], req))
			ring.nr_posted++;
	}
	sd_order_point(SD_ORDER_FLUSH_LOADED, cpu->id);
	if (ring.nr_posted)
		sd_stat_inc(cpu, SD_STAT_REMOTE_FLUSH);
	if (run_local) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
	csd_ring_reap_all(cpu, &ring);
}

/* ---- gbcast: global ASIDs and INVLPGB ---- */

/* invlpgb_flush_all_nonglobals(): every user entry of every PCID on every
 * CPU, then TLBSYNC. The wrap-around of the global ASID space runs it,
 * under the global ASID lock, on the allocating CPU. */
static void flush_all_nonglobals(struct sd_cpu *cpu)
{
	struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ALL };
	struct sd_ipi *ipi = ipi_of(cpu->m);

	sd_invlpgb(cpu, &ipi->ib, &all);
	(void)sd_tlbsync(cpu, &ipi->ib);
}

static void flush_all_nonglobals_cb(void *arg)
{
	(void)arg;
	flush_all_nonglobals(sd_this_cpu);     /* the allocating CPU */
	sd_stat_inc(sd_this_cpu, SD_STAT_GLOBAL_ASID_RESET);
}

/*
 * The threshold of mm_active_cpus_exceeds(): the merged kernel's fixed 3,
 * or, with threshold_growth=1, one that doubles (2T + 1) each time the
 * free global ASIDs fall below another half of the pool. The cover letter
 * of the early series says the threshold grows as the space is used up;
 * its formula is not public, so this step function is an assumption.
 */
static unsigned global_asid_threshold(struct sd_ipi *ipi)
{
	unsigned t = ipi->threshold;

	if (!ipi->threshold_growth)
		return t;
	unsigned avail = sd_global_asid_available(&ipi->gasid);
	for (unsigned frac = ipi->pool / 2; frac && avail < frac; frac /= 2)
		t = 2 * t + 1;
	return t;
}

/* mm_active_cpus_exceeds(): more than @threshold CPUs run @mm, not lazily. */
static bool mm_active_cpus_exceeds(struct sd_ipi *ipi, struct sd_mm *mm, unsigned threshold)
{
	const struct sd_cpumask *mask = &ipi_mm(mm)->cpumask;
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

/*
 * use_global_asid() and mm_assign_global_asid(): under the lock, recheck,
 * allocate, then set the transition flag before publishing the ASID with
 * release ordering, so whoever sees the ASID sees the transition too.
 */
static void use_global_asid(struct sd_cpu *cpu, struct sd_ipi *ipi, struct sd_mm *mm)
{
	struct sd_ipi_mm *im = ipi_mm(mm);
	uint16_t asid = 0;

	sd_global_asid_lock(&ipi->gasid);
	if (!mm_global_asid(mm))
		asid = sd_global_asid_alloc_locked(&ipi->gasid);   /* 0: ran out */
	if (asid) {
		atomic_store_explicit(&im->asid_transition, true, memory_order_relaxed);
		atomic_store_explicit(&im->global_asid, asid, memory_order_release);
		sd_stat_inc(cpu, SD_STAT_GLOBAL_ASID_ALLOC);
	}
	sd_global_asid_unlock(&ipi->gasid);
}

/* consider_global_asid(): after IPI flushes, sampled, by the threshold. */
static void consider_global_asid(struct sd_cpu *cpu, struct sd_ipi *ipi, struct sd_mm *mm)
{
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];

	if (!ipi->invlpgb || ++me->flushes_sampled % ipi->sample)
		return;
	if (mm_active_cpus_exceeds(ipi, mm, global_asid_threshold(ipi)))
		use_global_asid(cpu, ipi, mm);
}

/*
 * finish_asid_transition(): CPUs that still run the mm on a dynamic ASID
 * are not reached by INVLPGB on the global one. Wait out CPUs in the middle
 * of a switch (they may have chosen a dynamic ASID just before the global
 * one was published); if any runs the mm on another ASID, IPI the whole
 * mask, whose handler also moves it over. Once none does, the transition
 * is over.
 */
static void finish_asid_transition(struct sd_cpu *cpu, struct sd_ipi *ipi,
				   struct sd_ipi_flush_info *f)
{
	struct sd_ipi_mm *im = ipi_mm(f->mm);
	uint16_t gasid = mm_global_asid(f->mm);
	unsigned t;

	if (!atomic_load_explicit(&im->asid_transition, memory_order_acquire))
		return;
	sd_cpumask_for_each(t, &im->cpumask) {
		struct sd_ipi_cpu *pc = &ipi->percpu[t];
		struct sd_backoff b = SD_BACKOFF_INIT;
		uintptr_t loaded;

		/* Acquire: pairs with the release store of loaded_mm in
		 * load_asid(), so loaded_asid below belongs to this mm. */
		while ((loaded = atomic_load_explicit(&pc->loaded_mm, memory_order_acquire)) ==
		       SD_IPI_LOADED_SWITCHING)
			sd_backoff_wait(&b);
		if (loaded != (uintptr_t)f->mm)
			continue;
		if (atomic_load_explicit(&pc->loaded_asid, memory_order_relaxed) != gasid) {
			if (ipi->broken & SD_IPI_BREAK_NO_TRANSITION)
				return;
			sd_stat_inc(cpu, SD_STAT_TRANSITION_IPI);
			flush_tlb_multi(cpu, &im->cpumask, f);
			return;
		}
	}
	atomic_store_explicit(&im->asid_transition, false, memory_order_relaxed);
}

/* broadcast_tlb_flush(): INVLPGBs on the global ASID (no IPI, lazy CPUs
 * included), the stragglers, then TLBSYNC on this same CPU. */
static void broadcast_tlb_flush(struct sd_cpu *cpu, struct sd_ipi *ipi,
				struct sd_ipi_flush_info *f)
{
	uint16_t tag = slot_tag(mm_global_asid(f->mm));

	if (!f->nr) {
		struct sd_tlb_inval all = { .kind = SD_TLB_INVAL_ASID, .asid = tag };
		sd_invlpgb(cpu, &ipi->ib, &all);
	} else {
		for (uint64_t v = f->vpn, end = f->vpn + f->nr; v < end;) {
			uint64_t n = end - v < ipi->count_max ? end - v : ipi->count_max;
			struct sd_tlb_inval op = {
				.kind = SD_TLB_INVAL_RANGE, .asid = tag,
				.leaf_only = !f->freed_tables, .vpn = v, .nr = n,
			};
			sd_invlpgb(cpu, &ipi->ib, &op);
			v += n;
		}
	}
	finish_asid_transition(cpu, ipi, f);
	(void)sd_tlbsync(cpu, &ipi->ib);
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

	if (ipi->invlpgb && mm_global_asid(mm)) {
		broadcast_tlb_flush(cpu, ipi, f);
	} else if (cpumask_any_but(&im->cpumask, cpu->id)) {
		f->trim_cpumask = should_trim_cpumask(ipi, mm);
		if (f->trim_cpumask)
			sd_stat_inc(cpu, SD_STAT_CPUMASK_TRIM);
		if (ipi->invlpgb)
			sd_stat_inc(cpu, SD_STAT_FALLBACK_IPI_FLUSH);
		flush_tlb_multi(cpu, &im->cpumask, f);
		consider_global_asid(cpu, ipi, mm);
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
	struct sd_ipi *ipi = ipi_of(cpu->m);
	struct sd_ipi_mm *im = ipi_mm(mm);

	/* The v4 series, planted back for the race test: an mm with a global
	 * ASID got an INVLPGB on that ASID alone, and its CPUs were not added,
	 * so stragglers on dynamic ASIDs kept their entries (Jann Horn). */
	if (ipi->invlpgb && (ipi->broken & SD_IPI_BREAK_BATCH_GLOBAL_ONLY) && mm_global_asid(mm)) {
		struct sd_tlb_inval op = { .kind = SD_TLB_INVAL_ASID,
					   .asid = slot_tag(mm_global_asid(mm)) };
		sd_invlpgb(cpu, &ipi->ib, &op);
		return;
	}
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
	struct sd_ipi *ipi = ipi_of(cpu->m);
	struct sd_ipi_flush_info *f = &ipi_cpu(cpu)->info;

	*f = (struct sd_ipi_flush_info){
		.mm = NULL, .new_tlb_gen = SD_IPI_GEN_INVALID, .initiating_cpu = cpu->id,
	};
	/* gbcast (6.15): one INVLPGB of every non-global entry, dynamic and
	 * global ASIDs alike, on every CPU, and its TLBSYNC: no IPI at all. */
	if (ipi->invlpgb && !(ipi->broken & SD_IPI_BREAK_BATCH_GLOBAL_ONLY)) {
		flush_all_nonglobals(cpu);
		sd_cpumask_clearall(cpus);
		return;
	}
	if (ipi->invlpgb)
		(void)sd_tlbsync(cpu, &ipi->ib);   /* the v4 global-ASID INVLPGBs */
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
	.state_bytes = ipi_state_bytes,
	.batch_add = ipi_batch_add,
	.batch_flush = ipi_batch_flush,
};

const struct sd_strategy_ops sd_gbcast_ops = {
	.name = "gbcast",
	.summary = "AMD INVLPGB: global ASIDs, broadcast + TLBSYNC, IPI fallback",
	.machine_init = gbcast_machine_init,
	.machine_fini = ipi_machine_fini,
	.mm_init = ipi_mm_init,
	.mm_fini = ipi_mm_fini,
	.flush_range = ipi_flush_range,
	.flush_mm = ipi_flush_mm,
	.switch_mm = ipi_switch,
	.enter_lazy = ipi_enter_lazy,
	.state_bytes = ipi_state_bytes,
	.batch_add = ipi_batch_add,
	.batch_flush = ipi_batch_flush,
};
