/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_ORDERING_H
#define SD_CORE_ORDERING_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/ordering.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "compiler.h"
#include "cpumask.h"

/*
 * Test instrumentation for the store-buffering (Dekker) races, so that a test
 * can force the interleavings that matter and see a missing fence fail.
 *
 * On x86 a pause between a store and a load drains the store buffer, so no
 * schedule of real threads can show a StoreLoad reordering. Delay mode makes
 * the reordering explicit instead: the ordering-critical stores (sd_sb_*) go
 * into the calling thread's emulated store buffer and become visible only at
 * the next sd_sb_fence(), which stands for the kernel's smp_mb(), or at
 * sd_sb_drain() when the operation ends. Delete an sd_sb_fence() and the store
 * stays invisible across the load that follows, exactly what a real store
 * buffer allows. Hooks let the test stop a thread at the named points.
 *
 * In production both switches are off: a store is a plain atomic RMW and a
 * point costs one relaxed load of a global that is never written.
 */
enum sd_order_point {
	SD_ORDER_SWITCH_STORED,  /* switcher: its store done, before its fence */
	SD_ORDER_SWITCH_LOADED,  /* switcher: the flusher's word read, op not ended */
	SD_ORDER_FLUSH_STORED,   /* flusher: its store done, before its fence */
	SD_ORDER_FLUSH_LOADED,   /* flusher: the switcher's word read (targets
				  * chosen), before the op ends */
	SD_ORDER_IPI_DRAINED,    /* IPI target: queue found empty, interrupts
				  * still off (ipi_run_queue()); may run in
				  * the signal handler */
	SD_ORDER_SWITCH_ENTER,   /* sd_switch_mm(): entered, interrupts still on
				  * (test_lifecycle lands an IPI here) */
	SD_ORDER_CHANGE_FLUSH,   /* mm layer: a mapping change (PTEs edited,
				  * unlocked) or a TLB batch flush is about to
				  * call the strategy's flush */
	SD_ORDER_RECLAIM_ZAPPED, /* sd_reclaim(): its zap done, every split lock
				  * dropped, the mmap_lock still held for read */
	SD_ORDER_LEAF_EDITED,    /* mm layer: a change's edits of one page table
				  * done and its split lock dropped, more tables
				  * of the range may follow (edit_leaves()) */
	SD_ORDER_TRACE_CLAIMED,  /* trace ring: a slot claimed, not yet filled
				  * (test_trace records from here, as the
				  * CPU's own IPI handler may) */
	SD_ORDER_WP_LOCKED,      /* copy-on-write break: the split lock taken,
				  * the write-protected PTE not yet read again
				  * (wp_fault()) */
	SD_ORDER_TASK_BLOCKING,  /* sd_task_wait(): BLOCKED and on the wait
				  * queue, its lock dropped, the switch not yet
				  * begun (a wakeup may come now) */
	SD_ORDER_CPU_HANDED,     /* a switch between tasks: the outgoing thread
				  * has let go of the CPU, the incoming one not
				  * yet woken (an IPI to the CPU finds no thread) */
	SD_ORDER_RESCHED_CLAIMED, /* a reschedule IPI's request claimed by its
				  * sender, not yet posted (the CPU is the
				  * target's) */
	SD_ORDER_VMA_CHANGED,    /* sd_mprotect(): its VMAs split, given the new
				  * protection and write-locked under the
				  * mmap_lock, no PTE edited yet */
	SD_ORDER_TASK_EXITED,    /* a task's exit: its mm reference dropped
				  * (and the mm destroyed if it was the last
				  * user), its CPU not yet switched away */
	SD_ORDER_HS_POLLED,      /* sd_handshake_poll(): a request found armed,
				  * its function not yet run (the target's
				  * signal handler may run it now) */
	SD_ORDER_ASID_PUBLISHED, /* arm64 switch: new_context() ran and the mm's
				  * new id is published, the switcher's own
				  * update of per-mm state not yet made */
	SD_ORDER_IPI_ACKED_EARLY, /* IPI target (ipi:ack=early): its request
				  * acknowledged, the flush not yet done */
	SD_ORDER_FILE_ALLOCATED, /* a file's page fault: a frame taken for an
				  * absent page, not yet inserted into the
				  * page cache (another fault may insert first) */
	SD_ORDER_FILE_LOOKED_UP, /* a file page's fault: the cached frame found
				  * and held for the PTE, the PTE not yet set
				  * (an eviction may run now) */
	SD_ORDER_EXEC_SWITCHED,  /* sd_task_exec(): the CPU switched to the new
				  * mm, the old mm's reference not yet dropped
				  * (a preemption may come here) */
	SD_ORDER_IDLE_RESUMED,   /* the idle thread given its CPU back by a
				  * task's switch, its loop not yet run (the
				  * CPU must already hold the last mm lazily) */
	SD_ORDER_NR_POINTS,
};

typedef void (*sd_order_hook_fn)(enum sd_order_point point, unsigned cpu);

/* Test-only switches (plain functions: callable from C++ tests). */
void sd_order_set_hook(sd_order_hook_fn fn);
void sd_order_set_delayed_stores(bool on);

extern SD_ATOMIC(sd_order_hook_fn) sd_order_hook;
extern SD_ATOMIC(bool) sd_order_delayed;

static inline void sd_order_point(enum sd_order_point p, unsigned cpu)
{
	sd_order_hook_fn fn = atomic_load_explicit(&sd_order_hook, memory_order_relaxed);

	if (unlikely(fn))
		fn(p, cpu);
}

void sd_sb_add_slow(SD_ATOMIC(int) *p, int v);
void sd_sb_store_slow(SD_ATOMIC(uintptr_t) *p, uintptr_t v);
void sd_sb_setall_slow(struct sd_cpumask *mask);
void sd_sb_setbit_slow(struct sd_cpumask *mask, unsigned cpu);
void sd_sb_drain(void);

/* atomic_fetch_add(p, v) through the (possibly emulated) store buffer. */
static inline void sd_sb_add(SD_ATOMIC(int) *p, int v)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_add_slow(p, v);
	else
		atomic_fetch_add(p, v);
}

/* sd_cpumask_setall(mask) through the store buffer. */
static inline void sd_sb_cpumask_setall(struct sd_cpumask *mask)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_setall_slow(mask);
	else
		sd_cpumask_setall(mask);
}

/* A plain (release) store of a word through the store buffer. */
static inline void sd_sb_store(SD_ATOMIC(uintptr_t) *p, uintptr_t v)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_store_slow(p, v);
	else
		atomic_store_explicit(p, v, memory_order_release);
}

/*
 * cpumask_set_cpu() on arm64: a relaxed atomic (STSET), which orders
 * nothing, so it may sit in the store buffer like a plain store until the
 * next barrier (sd_sb_fence()).
 */
static inline void sd_sb_cpumask_set_relaxed(struct sd_cpumask *mask, unsigned cpu)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_setbit_slow(mask, cpu);
	else
		sd_cpumask_set(mask, cpu);
}

/*
 * sd_cpumask_set/clear(mask, cpu) as a fully ordered RMW: a locked
 * instruction drains the store buffer before it, and orders everything
 * after it, as x86's `lock bts` does.
 */
static inline void sd_sb_cpumask_set(struct sd_cpumask *mask, unsigned cpu)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_drain();
	sd_cpumask_set(mask, cpu);
	sd_smp_mb__after_atomic();
}

static inline void sd_sb_cpumask_clear(struct sd_cpumask *mask, unsigned cpu)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_drain();
	sd_cpumask_clear(mask, cpu);
	sd_smp_mb__after_atomic();
}

/* smp_mb(): drain this thread's emulated buffer, then a full fence. */
static inline void sd_sb_fence(void)
{
	if (unlikely(atomic_load_explicit(&sd_order_delayed, memory_order_relaxed)))
		sd_sb_drain();
	sd_smp_mb();
}

#endif
