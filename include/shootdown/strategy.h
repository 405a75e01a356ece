/* SPDX-License-Identifier: MIT */
/**
 * @file strategy.h
 * @brief Your own shootdown strategy, registered by name at run time.
 * @ingroup strategy
 */
#ifndef SHOOTDOWN_STRATEGY_H
#define SHOOTDOWN_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include "export.h"

SD_BEGIN_DECLS

struct sd_machine;
struct sd_cpu;
struct sd_mm;

/**
 * @defgroup strategy User strategies
 *
 * A strategy decides how a change to an address space reaches the TLBs of
 * the other CPUs. Register one with sd_strategy_register(), then name it in
 * sd_machine_config.strategy ("name" or "name:key=value,...") like a
 * built-in one. The oracle checks it exactly as it checks the built-ins.
 *
 * What the library does for you: ASIDs (the arm64 allocator of `broadcast`,
 * so a translation of one mm is never served to another: invariant 3 of
 * docs/invariants.md), page tables and their RCU-deferred freeing
 * (invariant 4), the safety
 * of its own memory, interrupts and IPI delivery (invariant 5), and an
 * mm_cpumask kept eagerly (a CPU's bit is set when it switches to the mm
 * and cleared when it switches away, unless SD_STRATEGY_LAZY_CPUMASK).
 *
 * Whatever flush() does, the library never reads freed memory: the per-CPU
 * walk caches keep pointers to page-table pages, and the library, not your
 * flush(), makes sure no walk uses one after its table was unlinked (each
 * entry is tagged with the mm's table-free generation). A flush that
 * invalidates less than it should is a stale translation the oracle
 * counts, never a use-after-free, a wrong fault or a hang.
 *
 * flush() is also called when nothing in the range changed: a change that
 * found its pages already changed by a concurrent call whose flush is still
 * in flight (the kernel's mm_tlb_flush_nested()), and an sd_mmap() over a
 * range such a call unmapped. Treat it like any other flush.
 *
 * **The contract your flush() must keep** (invariant 1 (docs/invariants.md), in your
 * terms): when it returns, no CPU may hold a translation for any page of
 * [va, va + len) of @mm that was cached before the call. A CPU that never
 * ran @mm since its last invalidation has none. The library orders the
 * page-table change before flush() is called and the cpumask update before
 * a switching CPU can fill its TLB (both full barriers), and a CPU that
 * switches back to @mm after a flush that skipped it drops all of @mm's
 * cached entries at switch-in. So a CPU that is not in the cpumask when
 * flush() reads it needs nothing from you, and one that is in it must be
 * invalidated. Use the building
 * blocks below: an invalidation of your own TLB, a broadcast into every
 * TLB, or an IPI that makes another CPU invalidate its own.
 *
 * And the rules of the road: flush() runs on the initiating CPU's thread
 * with interrupts on; it may wait for other CPUs, but every wait must let
 * them make progress (sd_smp_call_single() does). switch_in() and switch_out() run
 * with interrupts off and must not wait for other CPUs. switch_out() may
 * also run inside the IPI signal handler: when sd_mm_destroy() shoots a CPU
 * that holds the mm only lazily, that CPU leaves the mm from its handler. So
 * switch_out() must be async-signal-safe (no malloc, no locks the
 * interrupted code may hold, no stdio).
 * @{
 */

/** Flags of struct sd_strategy. */
enum sd_strategy_flags {
	/** Leave mm_cpumask bits set when a CPU switches away: clear them
	 *  yourself (sd_mm_cpumask_clear()), as the x86 lazy mask does. */
	SD_STRATEGY_LAZY_CPUMASK = 1u << 0,
};

/** sd_strategy.flush() @flags. */
enum sd_flush_flags {
	/** Page-table pages were unlinked too. Informational: the library
	 *  defers their freeing past every lockless walker and keeps its walk
	 *  caches from using them, so a leaf-only invalidation is safe. */
	SD_FLUSH_FREED_TABLES = 1u << 0,
};

/**
 * A user strategy. Fill it, starting from SD_STRATEGY_INIT, and pass it to
 * sd_strategy_register(), which copies it.
 */
struct sd_strategy {
	/** sizeof(struct sd_strategy) as the caller compiled it. */
	size_t size;
	/** 1..31 characters of [a-z0-9_], not a built-in strategy's name. */
	const char *name;
	/** One line for listings; may be NULL. */
	const char *summary;
	/** enum sd_strategy_flags. */
	unsigned flags;
	/** Passed to every callback. */
	void *arg;
	/**
	 * Optional. Called by sd_machine_create() with the options after
	 * "name:" ("" if none), on the creating thread. Return 0 or a negative
	 * errno (-EINVAL for an option you do not accept), which the machine
	 * creation returns.
	 */
	int (*machine_init)(struct sd_machine *m, const char *options, void *arg);
	/** Optional. Called by sd_machine_destroy() after the last CPU left. */
	void (*machine_fini)(struct sd_machine *m, void *arg);
	/**
	 * Required. Make [@va, @va + @len) of @mm (bytes, page aligned; @len 0:
	 * the whole mm) unreachable in every TLB before returning: the contract
	 * above. Runs on @cpu's thread, interrupts on.
	 */
	void (*flush)(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
		      unsigned flags, void *arg);
	/** Optional. @cpu has just loaded @mm (its cpumask bit is set);
	 *  interrupts off. */
	void (*switch_in)(struct sd_cpu *cpu, struct sd_mm *mm, void *arg);
	/** Optional. @cpu is about to leave @mm; interrupts off, possibly in
	 *  the IPI signal handler (a lazy CPU shot by sd_mm_destroy()):
	 *  async-signal-safe. */
	void (*switch_out)(struct sd_cpu *cpu, struct sd_mm *mm, void *arg);
	/** Optional: the enum sd_mechanism bits (model.h) flush() uses, e.g.
	 *  SD_MECH_TLBI_BROADCAST if it calls sd_tlb_invalidate_broadcast(),
	 *  SD_MECH_IPI if it calls sd_smp_call_single(). A modelled machine
	 *  whose profile lacks one is refused at sd_machine_create(), as for
	 *  the built-in strategies; with 0 the first
	 *  sd_tlb_invalidate_broadcast() on such a machine fails instead.
	 *  Added in 0.3.0; a caller built against the older struct (size up to
	 *  switch_out) declares none. */
	unsigned mechanisms;
};

/** Initialiser for struct sd_strategy: the size set, everything else 0. */
#define SD_STRATEGY_INIT { sizeof(struct sd_strategy), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/** How many user strategies may be registered at once. */
#define SD_STRATEGY_MAX_USER 16

/**
 * sd_strategy_register() - make a strategy available to sd_machine_create().
 * @s: the strategy; copied (the name too), so it may be on the stack.
 *
 * Return: 0; -EINVAL for a NULL or unknown-size @s, a missing flush(), a bad
 * name, unknown flags or mechanisms;
 * -EEXIST if the name is taken (built-in or registered); -ENOSPC if
 * SD_STRATEGY_MAX_USER are registered. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_strategy_register(const struct sd_strategy *s);

/**
 * sd_strategy_unregister() - remove a user strategy.
 *
 * Return: 0 (sd_last_error() is left alone); -EINVAL for NULL; -ENOENT if
 * no user strategy has that name; -EBUSY while a machine uses it. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_strategy_unregister(const char *name);

/**
 * sd_strategy_error() - say why your machine_init() refuses: call it there
 * and return what it returns. sd_machine_create() then fails with @err and
 * leaves "strategy '<name>': <your message>" in sd_last_error(), in place
 * of the generic "machine_init refused options". Outside a machine_init()
 * it records the message in the caller's sd_last_error() all the same.
 *
 * Return: @err (a negative errno; 0 or a positive value is recorded but
 * makes no refusal of it: machine_init()'s return decides). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_strategy_error(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- building blocks, for the machine's own CPUs under a user strategy ---- */

/**
 * sd_tlb_invalidate_local() - drop @mm's translations of [@va, @va + @len)
 * (@len 0: all of them) from @cpu's own TLB, as a non-broadcast TLBI (or
 * INVLPG) does. Call it on @cpu's thread: from flush() for the initiator,
 * from an IPI function (sd_smp_call_single()) or a switch hook on a target.
 *
 * Return: 0; -EINVAL for NULL or an unaligned range; -EPERM if the caller is
 * not @cpu's thread; -EOPNOTSUPP if the machine does not run a user
 * strategy. Interrupts may be off.
 */
SD_EXPORT int sd_tlb_invalidate_local(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va,
				      uint64_t len);

/**
 * sd_tlb_invalidate_broadcast() - drop @mm's translations of [@va, @va +
 * @len) (@len 0: all) from every CPU's TLB, as arm64's TLBI ...IS: one
 * broadcast message per range operation, serialised with other broadcasts
 * like the interconnect does. Returns when every TLB is clean (DSB ISH).
 *
 * Return: 0; -EINVAL, -EPERM, -EOPNOTSUPP as sd_tlb_invalidate_local();
 * -EOPNOTSUPP too, invalidating nothing, on a modelled machine whose
 * profile lacks SD_MECH_TLBI_BROADCAST (model.h) unless it was created
 * with SD_MACHINE_ANY_MECHANISM. @cpu's thread; interrupts on or off.
 */
SD_EXPORT int sd_tlb_invalidate_broadcast(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va,
					  uint64_t len);

/**
 * sd_mm_cpumask_test() - whether CPU @cpu's bit is set in @mm's cpumask.
 * Return: 1 or 0; -EINVAL for NULL or a CPU out of range; -EOPNOTSUPP if
 * @mm's machine does not run a user strategy. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_mm_cpumask_test(const struct sd_mm *mm, unsigned cpu);

/**
 * sd_mm_cpumask_next() - the first CPU at or after @from whose bit is set.
 * Return: its id, or the machine's CPU count if none (also for an @mm not
 * under a user strategy); UINT_MAX for a NULL @mm, so a loop bounded by
 * the CPU count ends. Any thread. Bits change under
 * you: read the mask after your page-table change (flush() is called so).
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT unsigned sd_mm_cpumask_next(const struct sd_mm *mm, unsigned from);

/**
 * sd_mm_cpumask_set() / sd_mm_cpumask_clear() - set or clear CPU @cpu's bit.
 * Clearing the bit of a CPU that still runs @mm, or still caches its
 * translations, breaks your flush. Return: 0; -EINVAL; -EOPNOTSUPP. Any
 * thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_mm_cpumask_set(struct sd_mm *mm, unsigned cpu);
/**
 * See sd_mm_cpumask_set(). Never waits for another CPU: may be called with
 * interrupts off. Any thread.
 */
SD_EXPORT int sd_mm_cpumask_clear(struct sd_mm *mm, unsigned cpu);

/**
 * sd_mm_active_cpus() - how many CPUs have @mm loaded now (switched in and
 * not out; a CPU idling lazily on it counts).
 * Return: the count; -EINVAL; -EOPNOTSUPP. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_mm_active_cpus(const struct sd_mm *mm);

/** @} */

SD_END_DECLS

#endif
