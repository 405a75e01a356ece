/* SPDX-License-Identifier: MIT */
/**
 * @file shared.h
 * @brief The program's own lock and hot cache line, in modelled time.
 * @ingroup shared
 *
 * A program that runs on emulated CPUs (a workload, a user strategy, a
 * runtime's handshake) has shared state of its own: a lock its threads
 * take, a counter or flag word they all write. Its real execution needs no
 * help from the library, but modelled time does: an access to a line
 * another CPU wrote last costs a transfer on the modelled machine, and a
 * lock last released by another CPU costs a handoff, neither of which the
 * host's own cache shows. These two objects charge them from the profile,
 * through the same model as the library's own locks and lines (the
 * mmap_lock, the LRU lock, mm_cpumask, tlb_gen):
 *
 * - sd_lock: a spinning lock with real mutual exclusion. An acquisition
 *   costs lock_acquire, plus lock_handoff at the distance from the CPU that
 *   released it last; it starts at the first gap in the lock's recent holds
 *   at or after the acquirer's clock, so waiters queue in modelled time
 *   whatever order the host ran them in. The wait for a held lock is a
 *   lock_waits event, drawn in the trace as a "user_lock" wait.
 * - sd_line: a modelled cache line with no data (the data stays in the
 *   program's own memory, written with its own atomics). An access costs
 *   nothing if this CPU holds the line, a line_transfer at the distance from
 *   the last writer if it does not, and a transfer at last-level-cache
 *   distance for a write that invalidates other readers' copies; transfers
 *   of one line serialise, so a line that every CPU writes saturates.
 *
 * Without a profile both still work (the lock excludes, the line is a
 * no-op) and nothing is charged.
 *
 * The recent holds a lock remembers are eight: exact in strict mode, where
 * holds come in modelled order; in lax mode an acquirer that is more than
 * eight holds behind the others in modelled time queues behind them (an
 * error of at most the window a hold).
 */
#ifndef SHOOTDOWN_SHARED_H
#define SHOOTDOWN_SHARED_H

#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup shared Modelled locks and lines
 * @{
 */

/** A lock of the program's own, modelled (opaque). */
struct sd_lock;
/** A hot cache line of the program's own, modelled (opaque). */
struct sd_line;

/**
 * sd_lock_create() - a free lock on @m, named @name in reports and stuck-wait
 * messages (NULL: "lock"; at most 31 bytes are kept).
 *
 * Return: 0 with the lock in *@out; -EINVAL if @m or @out is NULL; -ENOMEM.
 * Any thread, interrupts on or off (it allocates: not from an IPI's
 * function).
 */
SD_EXPORT int sd_lock_create(struct sd_machine *m, const char *name, struct sd_lock **out);

/**
 * sd_lock_destroy() - free @lock.
 *
 * Return: 0; -EINVAL for NULL; -EBUSY if a CPU holds it (nothing freed:
 * the detail names the holder), or if CPUs wait for it. Any thread, once no
 * CPU will take it again; interrupts on or off (not from an IPI's function).
 */
SD_EXPORT int sd_lock_destroy(struct sd_lock *lock);

/**
 * sd_lock_acquire() - take @lock on @cpu, waiting while another CPU holds
 * it (the kernel's spin_lock()).
 *
 * The wait spins on the host as the library's own waits do (briefly, then
 * yielding). With interrupts on, IPIs sent to @cpu run while it waits, so a
 * holder that sends one to the waiter is answered; in strict modelled time
 * the waiter gives the machine to the others until a release. With
 * interrupts off (spin_lock_irqsave()) IPIs wait, as the kernel's would: a
 * holder that waits for an IPI to this CPU then never finishes. A wait that
 * lasts the machine's ipi_timeout_ms is reported on stderr with the waiter,
 * the lock and its holder, every ipi_timeout_ms, and counted
 * (lock_stuck_reports); the wait goes on until the holder releases.
 *
 * Like a kernel spinlock, a lock is not a scheduling point: a task must not
 * wait on a wait queue, sleep or yield while it holds one (a task queued
 * on the same CPU that then wants the lock spins for ever; that is
 * reported as a stuck wait).
 *
 * Return: 0, @cpu holds @lock; -EPERM if the caller is not attached as @cpu
 * (NULL included); -EINVAL if @lock is NULL or belongs to another machine;
 * -EDEADLK if @cpu already holds @lock (a recursive acquisition: nothing
 * done). Attached thread only.
 */
SD_EXPORT int sd_lock_acquire(struct sd_cpu *cpu, struct sd_lock *lock);

/**
 * sd_lock_release() - release @lock, held by @cpu (the kernel's
 * spin_unlock(), a release store: what @cpu wrote before it is seen by the
 * next holder). Never waits: may be called with interrupts off.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu (NULL included),
 * or @cpu does not hold @lock (nothing done: the detail names the holder);
 * -EINVAL if @lock is NULL or belongs to another machine. Attached thread
 * only.
 */
SD_EXPORT int sd_lock_release(struct sd_cpu *cpu, struct sd_lock *lock);

/**
 * sd_lock_holder() - the id of the CPU that holds @lock, or -1 if it is free
 * (a snapshot: it may change as soon as it is read). -EINVAL for NULL. Any
 * thread; never waits, so interrupts may be off.
 */
SD_EXPORT int sd_lock_holder(const struct sd_lock *lock);

/**
 * sd_line_create() - a line on @m that no CPU holds yet.
 *
 * Return: 0 with the line in *@out; -EINVAL if @m or @out is NULL; -ENOMEM.
 * Any thread, interrupts on or off (it allocates: not from an IPI's
 * function).
 */
SD_EXPORT int sd_line_create(struct sd_machine *m, struct sd_line **out);

/**
 * sd_line_destroy() - free @line. Return: 0; -EINVAL for NULL. Any thread,
 * once no CPU will access it again; interrupts on or off (not from an IPI's
 * function).
 */
SD_EXPORT int sd_line_destroy(struct sd_line *line);

/**
 * sd_line_access() - @cpu reads (@write 0) or writes (@write nonzero; an
 * atomic read-modify-write is a write) the line: charge what the access
 * costs in modelled time, and move the line's coherence state (this CPU
 * becomes its writer, or one of its readers). Call it beside the program's
 * own access to the data the line stands for. Never waits: may be called
 * with interrupts off and from an IPI's function.
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu (NULL included);
 * -EINVAL if @line is NULL or belongs to another machine. Attached thread
 * only.
 */
SD_EXPORT int sd_line_access(struct sd_cpu *cpu, struct sd_line *line, int write);

/** @} */

SD_END_DECLS

#endif
