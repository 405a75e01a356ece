/* SPDX-License-Identifier: MIT */
/*
 * `broadcast:select=active_cpu`: arm64 "tlbflush: Don't broadcast if mm was
 * only active on local cpu" (Ryan Roberts, RFC v1, August 2025; v2 by Linu
 * Cherian, May 2026, adapted to v7.1's flush API, with active_cpu reset
 * when the mm is given a new ASID, as Catalin Marinas suggested for
 * new_context()). Andrea Arcangeli's 2020 `local` stays beside it.
 *
 * The mm's context records in active_cpu whether it never ran (NONE), ran
 * on exactly one CPU (that CPU's id) or on more (MULTIPLE). It only moves
 * NONE -> id -> MULTIPLE, so a CPU that reads its own id knows no other CPU
 * ever had the mm's tables loaded. check_and_switch_context() updates it
 * before TTBR0 names the tables, and issues dsb(ishst) after the store, so
 * that the store is visible to every CPU before this CPU's walker can cache
 * anything from them (speculatively, at any time after the TTBR0 write).
 * The flush (flush_tlb_user_pre()) reads it after the PTE stores that made
 * it necessary; when it reads its own id it upgrades its dsb(ishst) to
 * dsb(ish) and reads again, and only if it still reads its own id does it
 * use non-shareable TLBIs (VALE1, ASIDE1, not ...IS):
 *
 *   switcher (check_and_switch_context)   flusher (flush_tlb_user_pre)
 *   active_cpu = MULTIPLE (or its id)     PTE store
 *   dsb(ishst)  ------ pairs with ------> dsb(ish)
 *   TTBR0 = tables: the walker may fill   read active_cpu: own id -> local
 *
 * If the flusher still reads its own id after its dsb(ish), the switcher's
 * store was not visible before the PTE store was, so the switcher's walker
 * (which starts after its dsb) reads the new PTE. Remove the switcher's
 * barrier and the walker may cache the old PTE while the store is still in
 * its store buffer: the flusher then flushes only itself and the switcher
 * keeps a stale translation (test/strategy/test_active_cpu.cpp forces it).
 *
 * v2's reset: an mm given a fresh ASID by new_context() has no entries in
 * any TLB under it, so active_cpu may start again from NONE. Not when
 * new_context() keeps the ASID a CPU still runs the mm with (its reserved
 * one, check_update_reserved_asid()): that CPU's entries are live and it
 * will not switch again to say so.
 *
 * The emulation: PTE stores here are atomic stores on the host and visible
 * at once, so the flusher's dsb(ish) orders nothing a test could break; it
 * is charged in modelled time (one DSB). The switcher's store goes through
 * the emulated store buffer (core/ordering.h), its dsb(ishst) is
 * sd_sb_fence(), and the point where the walker may start is
 * SD_ORDER_SWITCH_LOADED, at which a test fills the TLB as a speculative
 * walk would.
 */
#include "../core/ordering.h"
#include "../hw/event.h"
#include "../hw/machine_state.h"
#include "broadcast.h"

SD_ATOMIC(unsigned) sd_active_cpu_test_break;

static bool broken(unsigned bug)
{
	return atomic_load_explicit(&sd_active_cpu_test_break, memory_order_relaxed) & bug;
}

void sd_active_cpu_init(struct sd_broadcast_mm *bm)
{
	atomic_init(&bm->active_cpu, SD_ACTIVE_CPU_NONE);
	sd_model_line_init(&bm->active_cpu_line);
}

/* v2's reset, in new_context() under cpu_asid_lock and before the mm's new
 * id is published (sd_arm64_asid_switch_hook()): a CPU that switches in
 * under the new id reads NONE, or what a later switcher wrote, never the
 * old value after the reset. Only at a @fresh number, which no TLB holds
 * entries for. */
void sd_active_cpu_reset(struct sd_broadcast_mm *bm, bool fresh)
{
	if (broken(SD_ACTIVE_CPU_BREAK_RESET_LATE))
		return;
	if (fresh || broken(SD_ACTIVE_CPU_BREAK_RESET_RESERVED))
		atomic_store_explicit(&bm->active_cpu, SD_ACTIVE_CPU_NONE, memory_order_relaxed);
}

/* check_and_switch_context()'s update, after the ASID is chosen (@sw),
 * then the TTBR0 write that loads it. */
void sd_active_cpu_switch(struct sd_cpu *cpu, struct sd_broadcast_mm *bm,
			  const struct sd_arm64_switch *sw)
{
	uintptr_t me = cpu->id;
	uintptr_t active;

	/* The planted bug: the reset after the new id was published. */
	if (sw->fresh && broken(SD_ACTIVE_CPU_BREAK_RESET_LATE))
		atomic_store_explicit(&bm->active_cpu, SD_ACTIVE_CPU_NONE, memory_order_relaxed);
	sd_event_line(cpu, &bm->active_cpu_line, false);
	active = atomic_load_explicit(&bm->active_cpu, memory_order_relaxed);
	if (active == me || active == SD_ACTIVE_CPU_MULTIPLE) {
		cpu->asid = sw->asid;
		sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);
		return;
	}
	/* The first CPU claims it; a second, or one that lost the claim,
	 * makes it MULTIPLE for good. */
	if (active == SD_ACTIVE_CPU_NONE)
		atomic_compare_exchange_strong_explicit(&bm->active_cpu, &active, me,
							memory_order_relaxed, memory_order_relaxed);
	/* cmpxchg's old value: NONE if the claim was ours. */
	if (active != SD_ACTIVE_CPU_NONE)
		sd_sb_store(&bm->active_cpu, SD_ACTIVE_CPU_MULTIPLE);
	sd_event_line(cpu, &bm->active_cpu_line, true);
	sd_order_point(SD_ORDER_SWITCH_STORED, cpu->id);
	/* dsb(ishst): the store visible before TTBR0 lets the walker read the
	 * tables. Pairs with the flusher's dsb(ish) in sd_active_cpu_local(). */
	if (!broken(SD_ACTIVE_CPU_BREAK_NO_DSB))
		sd_sb_fence();
	sd_event(cpu, SD_EV_DSB, 0, 0);
	/* TTBR0 written: from here the walker may fill this CPU's TLB. */
	cpu->asid = sw->asid;
	sd_order_point(SD_ORDER_SWITCH_LOADED, cpu->id);
	sd_sb_drain();
}

/* flush_tlb_user_pre(): whether the flush of @bm's mm may stay local. */
bool sd_active_cpu_local(struct sd_cpu *cpu, struct sd_broadcast_mm *bm)
{
	uintptr_t me = cpu->id;

	/* Read without a barrier first, so the common case keeps its
	 * dsb(ishst); only our own id needs the dsb(ish) and a second read. */
	sd_event_line(cpu, &bm->active_cpu_line, false);
	if (atomic_load_explicit(&bm->active_cpu, memory_order_relaxed) != me)
		return false;
	/* dsb(ish): our PTE stores complete before the re-read. Pairs with
	 * the switcher's dsb(ishst) in sd_active_cpu_switch(). */
	sd_smp_mb();
	sd_event(cpu, SD_EV_DSB, 0, 0);
	sd_order_point(SD_ORDER_FLUSH_STORED, cpu->id);
	bool local = atomic_load_explicit(&bm->active_cpu, memory_order_relaxed) == me;
	sd_order_point(SD_ORDER_FLUSH_LOADED, cpu->id);
	return local;
}
