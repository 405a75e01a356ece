/* SPDX-License-Identifier: MIT */
/*
 * The `ipi` strategy: x86 TLB shootdown (arch/x86/mm/tlb.c), with the lazy
 * mm_cpumask of "x86,tlb: update mm_cpumask lazily" and its two later
 * fixes. `gbcast` (gbcast.c) is built on it.
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
#include "../hw/event.h"
#include "../core/error.h"
#include "../core/ordering.h"
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "ipi.h"
#include "builtin.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- setup ---- */

static int ipi_option(struct sd_ipi *ipi, const char *name, const struct sd_opt *o,
		      sd_ipi_extra_opt_fn extra, void *extra_arg)
{
	static const struct sd_opt_choice cpumask[] = { { "eager", NULL }, { "lazy", NULL } };
	static const struct sd_opt_choice order[] = { { "concurrent", "5.13" },
						      { "serial", "before" } };
	static const struct sd_opt_choice ack[] = { { "late", NULL }, { "early", NULL } };
	static const struct sd_opt_choice lines[] = { { "consolidated", "EuroSys 2020" },
						      { "split", "the kernel's layout" } };
	bool lazy;
	uint64_t v;
	int err;

	if (!strcmp(o->key, "cpumask")) {
		err = sd_opt_flag(name, o, cpumask, 0, &lazy);
		if (!err)
			ipi->mode = lazy ? SD_IPI_CPUMASK_LAZY : SD_IPI_CPUMASK_EAGER;
		return err;
	}
	if (!strcmp(o->key, "order"))
		return sd_opt_flag(name, o, order, 0, &ipi->serial);
	if (!strcmp(o->key, "ack"))
		return sd_opt_flag(name, o, ack, 0, &ipi->early_ack);
	if (!strcmp(o->key, "lines"))
		return sd_opt_flag(name, o, lines, 0, &ipi->split_lines);
	if (!strcmp(o->key, "ceiling")) {
		err = sd_opt_uint(name, o, 0, 1u << 20, &v);
		ipi->ceiling = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "csd_window")) {
		err = sd_opt_uint(name, o, 1, SD_IPI_CSD_WINDOW_MAX, &v);
		ipi->csd_window = (unsigned)v;
		return err;
	}
	if (!strcmp(o->key, "trim_ms")) {
		err = sd_opt_uint(name, o, 1, 3600u * 1000u, &v);
		ipi->trim_ns = v * 1000000u;
		return err;
	}
	/* Page reclaim's lock is the machine's, for every strategy. */
	if (!strcmp(o->key, "lru"))
		return sd_fail(-EINVAL, "option lru=%s for '%s': the LRU lock is a machine "
			       "setting now (sd_machine_config.lru)", o->value, name);
	return extra ? extra(extra_arg, o) : sd_opt_unknown(name, o);
}

void sd_ipi_machine_destroy(struct sd_ipi *ipi)
{
	free(ipi->percpu);
	free(ipi->csd_all);
	ipi->percpu = NULL;
	ipi->csd_all = NULL;
}

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
		sd_model_line_init(&pc->lazy_line);
		pc->csd = &ipi->csd_all[(size_t)i * ipi->csd_window];
	}
	return 0;
}

/* What machine_init allocated, for sd_machine_info(): per-mm state is not
 * counted (it is per address space, not per CPU). */
size_t sd_ipi_bytes(const struct sd_machine *m, const struct sd_ipi *ipi)
{
	unsigned n = m->nr_cpus;

	return sd_round_up(n * sizeof(*ipi->percpu), SD_CACHELINE) +
	       sd_round_up((size_t)n * ipi->csd_window * sizeof(*ipi->csd_all), SD_CACHELINE);
}

static size_t ipi_state_bytes(const struct sd_machine *m, const void *priv)
{
	return sizeof(struct sd_ipi) + sd_ipi_bytes(m, priv);
}

int sd_ipi_machine_create(struct sd_machine *m, struct sd_ipi *ipi, const char *name,
			  const struct sd_opt *opts, unsigned nr_opts,
			  sd_ipi_extra_opt_fn extra, void *extra_arg)
{
	unsigned n = m->nr_cpus;
	int err = 0;

	memset(ipi, 0, sizeof(*ipi));
	ipi->mode = SD_IPI_CPUMASK_LAZY;      /* what Linux does since 6.13 */
	ipi->ceiling = SD_IPI_FLUSH_CEILING;
	ipi->csd_window = SD_IPI_CSD_WINDOW;
	ipi->trim_ns = 1000000000u;            /* HZ: once per second */
	atomic_init(&ipi->last_ctx_id, 0);
	for (unsigned i = 0; !err && i < nr_opts; i++)
		err = ipi_option(ipi, name, &opts[i], extra, extra_arg);
	if (err)
		return err;
	/* No more requests in flight than there are other CPUs to take them. */
	if (ipi->csd_window > n - 1)
		ipi->csd_window = n > 1 ? n - 1 : 1;
	err = alloc_percpu(ipi, n);
	if (err) {
		sd_ipi_machine_destroy(ipi);
		return err;
	}
	return 0;
}

static int ipi_machine_init(struct sd_machine *m, const struct sd_opt *opts,
			    unsigned nr_opts, void **priv)
{
	struct sd_ipi *ipi = malloc(sizeof(*ipi));
	int err;

	if (!ipi)
		return -ENOMEM;
	err = sd_ipi_machine_create(m, ipi, "ipi", opts, nr_opts, NULL, NULL);
	if (err) {
		free(ipi);
		return err;
	}
	*priv = ipi;
	return 0;
}

static void ipi_machine_fini(struct sd_machine *m, void *priv)
{
	(void)m;
	sd_ipi_machine_destroy(priv);
	free(priv);
}

int sd_ipi_mm_init(struct sd_machine *m, struct sd_mm *mm, void **mm_priv)
{
	struct sd_ipi *ipi = sd_ipi_of(m);
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
	/* The trim period runs on modelled time when the machine models it
	 * (a host clock would make a modelled run's trims depend on the
	 * host's speed): from the mm's creation, which in modelled time is
	 * no later than any CPU's first use of it. */
	atomic_init(&im->next_trim_ns, (m->model.on ? 0 : now_ns()) + ipi->trim_ns);
	atomic_init(&im->global_asid, 0);
	atomic_init(&im->asid_transition, false);
	sd_model_line_init(&im->gen_line);
	sd_model_line_init(&im->mask_line);
	*mm_priv = im;
	return 0;
}

void sd_ipi_mm_fini(struct sd_machine *m, struct sd_mm *mm, void *mm_priv)
{
	struct sd_ipi_mm *im = mm_priv;

	(void)m;
	(void)mm;
	sd_cpumask_destroy(&im->cpumask);
	free(im);
}

int sd_ipi_test_break(struct sd_machine *m, unsigned mask)
{
	/* gbcast and rar are built on ipi: their m->strategy is a struct
	 * sd_ipi too. */
	if (!m || !m->ops || (strcmp(m->ops->name, "ipi") && strcmp(m->ops->name, "gbcast") &&
			      strcmp(m->ops->name, "rar")))
		return sd_fail(-EINVAL, "sd_ipi_test_break: machine runs none of 'ipi', 'gbcast', 'rar'");
	sd_ipi_of(m)->broken = mask;
	return 0;
}

/* ---- local TLB operations ---- */

static void flush_slot_full(struct sd_cpu *cpu, unsigned slot)
{
	struct sd_tlb_inval inv = { .kind = SD_TLB_INVAL_ASID, .asid = sd_ipi_slot_tag(slot) };

	sd_tlb_invalidate(&cpu->tlb, &inv);
	sd_event(cpu, SD_EV_FLUSH_FULL, 0, 0);
}

static void cpumask_write(struct sd_cpu *cpu, struct sd_mm *mm, bool set)
{
	if (set)
		sd_sb_cpumask_set(&sd_ipi_mm_of(mm)->cpumask, cpu->id);
	else
		sd_sb_cpumask_clear(&sd_ipi_mm_of(mm)->cpumask, cpu->id);
	sd_event(cpu, SD_EV_CPUMASK_WRITE, 0, 0);
	sd_event_line(cpu, &sd_ipi_mm_of(mm)->mask_line, true);
}

/* tlb_gen read by a switch or a flush (an acquire load). */
static uint64_t read_tlb_gen(struct sd_cpu *cpu, struct sd_mm *mm)
{
	struct sd_ipi_mm *im = sd_ipi_mm_of(mm);

	sd_event_line(cpu, &im->gen_line, false);
	return atomic_load_explicit(&im->tlb_gen, memory_order_acquire);
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

/* mm_needs_global_asid(): the mm has a global ASID this CPU is not using. */
static bool mm_needs_global_asid(struct sd_mm *mm, uint16_t asid)
{
	uint16_t gasid = sd_ipi_mm_global_asid(mm);

	return gasid && asid != gasid;
}

/*
 * choose_new_asid(): the mm's global ASID, else the slot already holding
 * @next, else the round-robin victim. A global ASID needs no flush under
 * INVLPGB, which reached every TLB, lazy or not; under RAR, which reached
 * the mm's cpumask only, a CPU that was not in it (@new_cpu) may have
 * missed flushes and flushes the ASID (the RAR series' new_cpu rule).
 */
static uint16_t choose_new_asid(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *next,
				uint64_t next_gen, bool new_cpu, bool *need_flush)
{
	const struct sd_ipi_mm *im = sd_ipi_mm_of(next);
	const struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	uint16_t gasid = sd_ipi_mm_global_asid(next);

	if (gasid) {
		*need_flush = ipi->rar && new_cpu && !(ipi->broken & SD_IPI_BREAK_RAR_NEW_CPU);
		if (*need_flush)
			sd_event(cpu, SD_EV_RAR_NEW_CPU_FLUSH, 0, 0);
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
	sd_event(cpu, SD_EV_ASID_ALLOC, 0, 0);
	*need_flush = true;
	return (uint16_t)s;
}

/*
 * Make sure this CPU is in next's mm_cpumask, and order the SWITCHING
 * store before the tlb_gen read that follows. Eager mode and an unset bit
 * use the RMW, a full barrier; an already-set bit needs an explicit one.
 * Returns whether the bit was clear (RAR's new_cpu; eager mode clears it
 * at every switch-out).
 */
static bool join_cpumask(struct sd_cpu *cpu, struct sd_ipi *ipi, struct sd_mm *next)
{
	struct sd_ipi_mm *im = sd_ipi_mm_of(next);

	if (ipi->mode != SD_IPI_CPUMASK_EAGER)
		sd_event_line(cpu, &im->mask_line, false);
	if (ipi->mode == SD_IPI_CPUMASK_EAGER || !sd_cpumask_test(&im->cpumask, cpu->id)) {
		cpumask_write(cpu, next, true);
		return true;
	}
	if (!(ipi->broken & SD_IPI_BREAK_SWITCH_FENCE))
		sd_sb_fence();         /* CVE-2025-40174 */
	return false;
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
	/* A global ASID has no slot to record (is_dyn_asid()). */
	if (need_flush && !is_global_asid(asid)) {
		me->ctxs[asid].ctx_id = sd_ipi_mm_of(next)->ctx_id;
		me->ctxs[asid].tlb_gen = next_gen;
	}
	/* loaded_asid before loaded_mm (a release store): finish_asid_transition()
	 * reads loaded_mm with acquire, then loaded_asid, and so never pairs
	 * the new mm with the previous ASID. */
	atomic_store_explicit(&me->loaded_asid, asid, memory_order_relaxed);
	cpu->asid = sd_ipi_slot_tag(asid);
	sd_sb_store(&me->loaded_mm, (uintptr_t)next);
	sd_sb_drain();
	sd_wait_released();     /* partner of finish_asid_transition()'s poll (gbcast.c) */
	if (need_flush) {
		flush_slot_full(cpu, asid);
		sd_event(cpu, SD_EV_SWITCH_FLUSH, 0, 0);
	}
}

/* The mm got a global ASID while this CPU ran it on a dynamic one: move
 * over (the prev == next reload of switch_mm_irqs_off(), which passes
 * new_cpu true: under RAR the global ASID's entries here may predate
 * flushes this CPU was not reached by). is_lazy is left as it is: the IPI
 * handler calls this for lazy CPUs too. */
static void reload_global(struct sd_cpu *cpu, struct sd_ipi_cpu *me, struct sd_mm *mm)
{
	uint64_t gen = read_tlb_gen(cpu, mm);
	bool need_flush;
	uint16_t asid = choose_new_asid(cpu, me, mm, gen, true, &need_flush);

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
	uint64_t gen = read_tlb_gen(cpu, mm);
	struct sd_ipi_ctx *ctx = &me->ctxs[loaded_asid(me)];

	if (ctx->tlb_gen == gen)
		return;
	flush_slot_full(cpu, loaded_asid(me));
	sd_event(cpu, SD_EV_SWITCH_FLUSH, 0, 0);
	ctx->tlb_gen = gen;
}

/* switch_mm_irqs_off(): interrupts are off. @next NULL is init_mm. */
static void ipi_switch_to(struct sd_cpu *cpu, struct sd_mm *next)
{
	struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	struct sd_mm *prev = (struct sd_mm *)atomic_load_explicit(&me->loaded_mm,
								  memory_order_relaxed);
	bool was_lazy = atomic_load_explicit(&me->is_lazy, memory_order_relaxed);

	/* Cleared before loaded_mm is written: a flusher that reads our new
	 * loaded_mm then (after its read barrier) is_lazy sees false. */
	if (was_lazy) {
		atomic_store_explicit(&me->is_lazy, false, memory_order_relaxed);
		if (ipi->split_lines)
			sd_event_line(cpu, &me->lazy_line, true);
	}
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
		sd_wait_released();
		return;
	}
	bool new_cpu = join_cpumask(cpu, ipi, next);
	sd_order_point(SD_ORDER_SWITCH_STORED, cpu->id);

	uint64_t next_gen = read_tlb_gen(cpu, next);
	sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);

	bool need_flush;
	uint16_t asid = choose_new_asid(cpu, me, next, next_gen, new_cpu, &need_flush);

	load_asid(cpu, me, next, asid, next_gen, need_flush);
}

void sd_ipi_switch(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next)
{
	(void)prev;    /* the strategy's own loaded_mm is prev, as in the kernel */
	ipi_switch_to(cpu, next);
}

/* enter_lazy_tlb(): keep CR3 and the cpumask, just say so. */
void sd_ipi_enter_lazy(struct sd_cpu *cpu, struct sd_mm *mm)
{
	struct sd_ipi_cpu *me = sd_ipi_cpu_of(cpu);

	(void)mm;
	if (atomic_load_explicit(&me->loaded_mm, memory_order_relaxed)) {
		atomic_store_explicit(&me->is_lazy, true, memory_order_relaxed);
		if (sd_ipi_of(cpu->m)->split_lines)
			sd_event_line(cpu, &me->lazy_line, true);
	}
}

/* ---- the target side ---- */

/*
 * flush_tlb_func() on a global ASID under RAR: no slot records a
 * generation (the series reads local_tlb_gen only for is_dyn_asid()), so
 * it counts as 0, and only the flush of generation 1 may stay partial;
 * every other one flushes the whole ASID, as the series' does.
 */
static void flush_global_rar(struct sd_cpu *cpu, const struct sd_ipi_flush_info *f,
			     struct sd_mm *loaded, uint16_t asid)
{
	/* Acquire: the walks after this flush see the PTE stores before the
	 * bump to mm_gen. */
	uint64_t mm_gen = read_tlb_gen(cpu, loaded);

	if (f->nr && f->new_tlb_gen == 1 && mm_gen == 1) {
		struct sd_tlb_inval inv = {
			.kind = SD_TLB_INVAL_RANGE, .asid = sd_ipi_slot_tag(asid),
			.leaf_only = !f->freed_tables, .vpn = f->vpn, .nr = f->nr,
		};
		sd_tlb_invalidate(&cpu->tlb, &inv);
		sd_event(cpu, SD_EV_FLUSH_PARTIAL, f->nr, 0);
		return;
	}
	flush_slot_full(cpu, asid);
}

/* flush_tlb_func(): runs on @cpu with interrupts off, remote or local. */
static void flush_tlb_func(struct sd_cpu *cpu, const struct sd_ipi_flush_info *f, bool local)
{
	struct sd_ipi_cpu *me = sd_ipi_cpu_of(cpu);
	struct sd_mm *loaded = (struct sd_mm *)atomic_load_explicit(&me->loaded_mm,
								    memory_order_relaxed);

	if (!local)
		sd_event(cpu, SD_EV_REMOTE_INVAL_RECV, 0, 0);
	/* The CPU was left in the mm's mask (lazy mode): leave it now. */
	if (f->mm && f->mm != loaded) {
		cpumask_write(cpu, f->mm, false);
		if (!local)
			sd_event(cpu, SD_EV_IPI_UNNEEDED, 0, 0);
		return;
	}
	if (!loaded)
		return;                            /* init_mm: no user entries */
	/* A transition IPI: move onto the mm's global ASID, which INVLPGB
	 * keeps current, and nothing is left to flush. RAR keeps it current
	 * on the mask's CPUs only, and flushes through here (its trims). */
	if (mm_needs_global_asid(loaded, loaded_asid(me)))
		reload_global(cpu, me, loaded);
	if (is_global_asid(loaded_asid(me)) && !sd_ipi_of(cpu->m)->rar)
		return;
	if (atomic_load_explicit(&me->is_lazy, memory_order_relaxed)) {
		/* Only a forced IPI (freed page tables) gets here: stop using
		 * tables that are about to be freed, by leaving for init_mm. */
		ipi_switch_to(cpu, NULL);
		return;
	}
	if (is_global_asid(loaded_asid(me))) {
		flush_global_rar(cpu, f, loaded, loaded_asid(me));
		return;
	}

	uint16_t slot = loaded_asid(me);
	struct sd_ipi_ctx *ctx = &me->ctxs[slot];
	uint64_t local_gen = ctx->tlb_gen;

	/* Already caught up: no touch of the contended mm line at all. */
	if (f->new_tlb_gen != SD_IPI_GEN_INVALID && f->new_tlb_gen <= local_gen) {
		sd_event(cpu, SD_EV_FLUSH_GEN_SKIP, 0, 0);
		return;
	}
	/* Acquire: the walks after this flush see the PTE stores that came
	 * before the bump to mm_gen. */
	uint64_t mm_gen = read_tlb_gen(cpu, loaded);

	if (local_gen == mm_gen) {
		sd_event(cpu, SD_EV_FLUSH_GEN_SKIP, 0, 0);
		return;
	}
	/*
	 * Per page only when this flush is exactly the next generation and
	 * the last one: applying a partial flush for gen+2 over a missed full
	 * flush for gen+1 and recording gen+2 would lose the full flush.
	 */
	if (f->nr && f->new_tlb_gen == local_gen + 1 && f->new_tlb_gen == mm_gen) {
		struct sd_tlb_inval inv = {
			.kind = SD_TLB_INVAL_RANGE, .asid = sd_ipi_slot_tag(slot),
			.leaf_only = !f->freed_tables, .vpn = f->vpn, .nr = f->nr,
		};
		sd_tlb_invalidate(&cpu->tlb, &inv);
		sd_event(cpu, SD_EV_FLUSH_PARTIAL, f->nr, 0);
	} else {
		flush_slot_full(cpu, slot);
	}
	/* The generation read before flushing: later bumps still need us. */
	ctx->tlb_gen = mm_gen;
}

/*
 * The IPI's function. With ack=early (Amit, Tai and Wei, "Don't shoot down
 * TLB shootdowns!", EuroSys 2020; not merged) the target acknowledges on
 * entry, then flushes: the initiator goes on meanwhile, which is safe only
 * because the target, still in its handler with interrupts off, runs no
 * access before its flush, and because it copied the flush's description
 * first: the initiator reuses its flush_tlb_info from the ack on.
 * SD_IPI_BREAK_EARLY_ACK_NO_COPY acks before the copy.
 */
static void flush_ipi(struct sd_cpu *cpu, void *arg)
{
	struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	struct sd_ipi_flush_info copy;

	if (!ipi->early_ack) {
		flush_tlb_func(cpu, arg, false);
		return;
	}
	if (ipi->broken & SD_IPI_BREAK_EARLY_ACK_NO_COPY) {
		sd_smp_call_ack_early(cpu);
		sd_order_point(SD_ORDER_IPI_ACKED_EARLY, cpu->id);
		flush_tlb_func(cpu, arg, false);
		return;
	}
	copy = *(const struct sd_ipi_flush_info *)arg;
	sd_smp_call_ack_early(cpu);
	sd_order_point(SD_ORDER_IPI_ACKED_EARLY, cpu->id);
	flush_tlb_func(cpu, &copy, false);
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
	/* Split lines: the flag's line is one more transfer than the queue's
	 * (consolidated, the IPI's write brings both). */
	if (ipi->split_lines)
		sd_event_line(from, &pc->lazy_line, false);
	if (atomic_load_explicit(&pc->is_lazy, memory_order_relaxed)) {
		sd_event(from, SD_EV_LAZY_SKIP, 0, 0);
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
static bool should_trim_cpumask(struct sd_ipi *ipi, struct sd_cpu *cpu, struct sd_mm *mm)
{
	struct sd_ipi_mm *im = sd_ipi_mm_of(mm);
	uint64_t now;

	if (ipi->mode == SD_IPI_CPUMASK_EAGER)
		return false;
	/* The initiator's modelled clock when modelled (see mm_init). */
	now = cpu->m->model.on ? sd_cpu_clock_ns(cpu) : now_ns();
	if (now < atomic_load_explicit(&im->next_trim_ns, memory_order_relaxed))
		return false;
	/* Racing initiators may both trim once: harmless, as in the kernel. */
	atomic_store_explicit(&im->next_trim_ns, now + ipi->trim_ns, memory_order_relaxed);
	return true;
}


/*
 * The requests of one flush: a ring over the initiator's csd_window
 * requests. Posted requests are reaped (waited for) in posting order, so
 * the oldest is the one a full ring reuses. A failed post (offline target)
 * takes no slot.
 */
struct csd_ring {
	struct sd_smp_call_req *csd;
	unsigned size;
	unsigned nr_posted, nr_reaped;
};

/*
 * A request free to post. A full ring first waits for its oldest request's
 * ack: the endpoint's lfstack node may be pushed again only after the
 * target popped it and ran it (sd_smp_call_wait()'s contract), or the target's
 * queue would be corrupted and its flush lost.
 */
static struct sd_smp_call_req *csd_ring_get(struct sd_cpu *cpu, struct sd_ipi *ipi,
				       struct csd_ring *r)
{
	if (r->nr_posted - r->nr_reaped == r->size) {
		if (!(ipi->broken & SD_IPI_BREAK_CSD_REUSE))
			sd_smp_call_wait(cpu, &r->csd[r->nr_reaped % r->size]);
		r->nr_reaped++;
	}
	return &r->csd[r->nr_posted % r->size];
}

static void csd_ring_reap_all(struct sd_cpu *cpu, struct csd_ring *r)
{
	for (; r->nr_reaped < r->nr_posted; r->nr_reaped++)
		sd_smp_call_wait(cpu, &r->csd[r->nr_reaped % r->size]);
}

/* flush_tlb_func(@f) on CPU @t, by an IPI from the ring. */
static void post_flush_ipi(struct sd_cpu *cpu, struct sd_ipi *ipi, struct csd_ring *r,
			   unsigned t, struct sd_ipi_flush_info *f)
{
	struct sd_smp_call_req *req = csd_ring_get(cpu, ipi, r);

	req->fn = flush_ipi;
	req->async = false;
	req->arg = f;
	if (sd_smp_call_post(cpu, cpu->m->cpus[t], req))
		r->nr_posted++;
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
void sd_ipi_flush_tlb_multi(struct sd_cpu *cpu, const struct sd_cpumask *mask,
			    struct sd_ipi_flush_info *f)
{
	struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	/* Freed tables reach lazy CPUs too: they must stop walking them. So
	 * does an ASID transition: every straggler must move over. */
	bool all = f->freed_tables ||
		   (f->mm && atomic_load_explicit(&sd_ipi_mm_of(f->mm)->asid_transition,
						  memory_order_relaxed));
	bool run_local = false;
	struct csd_ring ring = { .csd = me->csd, .size = ipi->csd_window };
	unsigned t;

	/* cond(me) before any IPI goes out (smp_call_function_many_cond). */
	if (sd_cpumask_test(mask, cpu->id))
		run_local = all || should_flush_tlb(cpu, ipi, cpu->id, f);
	/* order=serial: before 5.13 ("x86/mm/tlb: Flush remote and local TLBs
	 * concurrently", from the EuroSys 2020 paper) flush_tlb_mm_range()
	 * flushed here first and only then sent the IPIs. */
	if (run_local && ipi->serial) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
		run_local = false;
	}
	sd_cpumask_for_each(t, mask) {
		if (t == cpu->id || (!all && !should_flush_tlb(cpu, ipi, t, f)))
			continue;
		post_flush_ipi(cpu, ipi, &ring, t, f);
	}
	sd_order_point(SD_ORDER_FLUSH_LOADED, cpu->id);
	if (ring.nr_posted)
		sd_event(cpu, SD_EV_REMOTE_FLUSH, 0, 0);
	if (run_local) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
	csd_ring_reap_all(cpu, &ring);
}

/*
 * RAR v4's trim_cpumask(): an IPI to each CPU of the mask that runs
 * another mm, not lazily, whose flush_tlb_func() then leaves the mask.
 * The flush itself goes afterwards, by RAR, to what is left. Lazy CPUs
 * stay, as should_flush_tlb() leaves them; a CPU in the middle of a switch
 * stays too (it may be joining, and the RAR reaches it).
 */
void sd_ipi_trim_cpumask(struct sd_cpu *cpu, struct sd_ipi_flush_info *f)
{
	struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	struct csd_ring ring = { .csd = me->csd, .size = ipi->csd_window };
	unsigned t;

	sd_cpumask_for_each(t, &sd_ipi_mm_of(f->mm)->cpumask) {
		struct sd_ipi_cpu *pc = &ipi->percpu[t];
		uintptr_t loaded = atomic_load_explicit(&pc->loaded_mm, memory_order_relaxed);

		atomic_thread_fence(memory_order_acquire);   /* smp_rmb(), as should_flush_tlb() */
		if (t == cpu->id || atomic_load_explicit(&pc->is_lazy, memory_order_relaxed) ||
		    loaded == (uintptr_t)f->mm || loaded == SD_IPI_LOADED_SWITCHING)
			continue;
		post_flush_ipi(cpu, ipi, &ring, t, f);
	}
	csd_ring_reap_all(cpu, &ring);
}

struct sd_ipi_flush_info *sd_ipi_flush_prepare(struct sd_cpu *cpu, struct sd_mm *mm,
						uint64_t vpn, uint64_t nr, bool freed_tables)
{
	struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	struct sd_ipi_flush_info *f = &ipi->percpu[cpu->id].info;

	/* A full barrier: the PTE stores before it are ordered before the
	 * cpumask, loaded_mm and is_lazy reads after it. */
	uint64_t new_gen = atomic_fetch_add(&sd_ipi_mm_of(mm)->tlb_gen, 1) + 1;
	sd_smp_mb__after_atomic();
	sd_event_line(cpu, &sd_ipi_mm_of(mm)->gen_line, true);
	sd_order_point(SD_ORDER_FLUSH_STORED, cpu->id);

	f->mm = mm;
	f->vpn = vpn;
	f->nr = nr > ipi->ceiling ? 0 : nr;
	f->new_tlb_gen = new_gen;
	f->initiating_cpu = cpu->id;
	f->freed_tables = freed_tables;
	f->trim_cpumask = false;
	return f;
}

bool sd_ipi_should_trim(struct sd_cpu *cpu, struct sd_mm *mm)
{
	bool trim = should_trim_cpumask(sd_ipi_of(cpu->m), cpu, mm);

	if (trim)
		sd_event(cpu, SD_EV_CPUMASK_TRIM, 0, 0);
	return trim;
}

void sd_ipi_flush_local(struct sd_cpu *cpu, struct sd_ipi_flush_info *f)
{
	sd_irq_off(cpu);
	flush_tlb_func(cpu, f, true);
	sd_irq_on(cpu);
}

bool sd_ipi_flush_send(struct sd_cpu *cpu, struct sd_ipi_flush_info *f)
{
	struct sd_ipi *ipi = sd_ipi_of(cpu->m);
	struct sd_ipi_cpu *me = &ipi->percpu[cpu->id];
	struct sd_mm *mm = f->mm;
	struct sd_ipi_mm *im = sd_ipi_mm_of(mm);

	sd_event_line(cpu, &im->mask_line, false);
	if (sd_cpumask_any_but(&im->cpumask, cpu->id)) {
		f->trim_cpumask = should_trim_cpumask(ipi, cpu, mm);
		if (f->trim_cpumask)
			sd_event(cpu, SD_EV_CPUMASK_TRIM, 0, 0);
		sd_ipi_flush_tlb_multi(cpu, &im->cpumask, f);
		return true;
	}
	if (atomic_load_explicit(&me->loaded_mm, memory_order_relaxed) == (uintptr_t)mm) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
	/* Otherwise the bump alone is enough: the slot is behind now, and
	 * the next switch-in flushes it. */
	return false;
}

/* flush_tlb_mm_range(): @nr == 0 flushes the whole mm. */
static void ipi_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t vpn, uint64_t nr,
		      bool freed_tables)
{
	(void)sd_ipi_flush_send(cpu, sd_ipi_flush_prepare(cpu, mm, vpn, nr, freed_tables));
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
void sd_ipi_batch_add(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm,
		      uint64_t vpn)
{
	struct sd_ipi_mm *im = sd_ipi_mm_of(mm);

	(void)vpn;     /* x86 flushes whole PCIDs at the batch's end */
	atomic_fetch_add(&im->tlb_gen, 1);
	sd_smp_mb__after_atomic();
	sd_event_line(cpu, &im->gen_line, true);
	sd_event_line(cpu, &im->mask_line, false);
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
void sd_ipi_batch_flush(struct sd_cpu *cpu, struct sd_cpumask *cpus)
{
	struct sd_ipi_flush_info *f = &sd_ipi_cpu_of(cpu)->info;

	*f = (struct sd_ipi_flush_info){
		.mm = NULL, .new_tlb_gen = SD_IPI_GEN_INVALID, .initiating_cpu = cpu->id,
	};
	if (sd_cpumask_any_but(cpus, cpu->id)) {
		sd_ipi_flush_tlb_multi(cpu, cpus, f);
	} else if (sd_cpumask_test(cpus, cpu->id)) {
		sd_irq_off(cpu);
		flush_tlb_func(cpu, f, true);
		sd_irq_on(cpu);
	}
}

const struct sd_strategy_ops sd_ipi_ops = {
	.name = "ipi",
	.summary = "x86 shootdown: IPIs as signals, mm_cpumask, tlb_gen, 6 PCID slots",
	.mechanisms = SD_MECH_IPI,
	.primary_mechanism = SD_MECH_IPI,
	.unused_why = "no flush found another CPU in its mm_cpumask to interrupt",
	.machine_init = ipi_machine_init,
	.machine_fini = ipi_machine_fini,
	.mm_init = sd_ipi_mm_init,
	.mm_fini = sd_ipi_mm_fini,
	.flush_range = ipi_flush_range,
	.flush_mm = ipi_flush_mm,
	.switch_mm = sd_ipi_switch,
	.enter_lazy = sd_ipi_enter_lazy,
	.state_bytes = ipi_state_bytes,
	.batch_add = sd_ipi_batch_add,
	.batch_flush = sd_ipi_batch_flush,
};
