/* SPDX-License-Identifier: MIT */
/**
 * @file rseq.h
 * @brief Restartable sequences (Linux rseq(2)) on an emulated CPU: per-CPU
 * data without atomics, and membarrier's RSEQ fence.
 * @ingroup rseq
 *
 * A thread begins a critical section on the CPU it runs on, reads and
 * prepares that CPU's data, and ends with a single commit store. The
 * kernel aborts the section, so that the commit never happens, when before
 * the commit the thread
 *
 * - was preempted or migrated: its task switched out (__schedule()'s
 *   rseq_preempt(), in prepare_task_switch());
 * - took a signal (rseq_signal_deliver()): a SIGNAL handshake's, whether
 *   its handler refused or not;
 * - was fenced by a MEMBARRIER_RSEQ handshake (membarrier(MEMBARRIER_CMD_
 *   PRIVATE_EXPEDITED_RSEQ): ipi_rseq() calls rseq_preempt()).
 *
 * An ordinary interrupt does not abort a section, here as in the kernel (it
 * returns to user mode without TIF_NOTIFY_RESUME): a TLB shootdown IPI, a
 * plain MEMBARRIER handshake's ipi_mb(). An aborted sd_rseq_end() stores
 * nothing and returns -EAGAIN; the caller starts again from
 * sd_rseq_begin(), as rseq's abort handler does.
 *
 * That is what per-CPU data structures rest on (tcmalloc's per-CPU caches,
 * liburcu's and librseq's per-CPU counters and lists): a thread updates its
 * CPU's slot with plain loads and one store, and a thread that wants to
 * change another CPU's slot (resize a cache, drain a list) first fences
 * that CPU with a MEMBARRIER_RSEQ handshake (SD_HANDSHAKE_FLAG_CPU for
 * one CPU), after which no section that began before the fence can commit.
 *
 * The emulation: the section's state is per CPU (the thread that runs on
 * it) and per thread (which section it began, on which CPU, so a task that
 * migrated learns that its section is gone). The commit runs with the
 * CPU's emulated interrupts off, so an IPI arriving during it runs after
 * it: the single commit instruction, which an interrupt cannot split.
 * Sections cost nothing in modelled time (real rseq's are a store of the
 * rseq_cs pointer and the commit store); what an abort costs is the work
 * the program does again. Counted as rseq_commits and rseq_aborts
 * (stats.h), and an abort is an instant in the trace.
 * @{
 */
#ifndef SHOOTDOWN_RSEQ_H
#define SHOOTDOWN_RSEQ_H

#include <stdint.h>

#include "export.h"
#include "cpu.h"

SD_BEGIN_DECLS

/**
 * sd_rseq_begin() - begin a critical section on @cpu, the caller's CPU
 * (rseq's cpu_id_start): the data the section may touch without atomics
 * is @cpu's. A section begun while the thread is in another one replaces
 * it (sections do not nest; the older one can no longer commit).
 *
 * Return: @cpu's id (>= 0); -EPERM if the caller is not attached as @cpu
 * (or @cpu is NULL). Attached thread only; interrupts may be off
 * (a fence then waits until they are on again).
 */
SD_EXPORT int sd_rseq_begin(struct sd_cpu *cpu);

/**
 * sd_rseq_end() - end the calling thread's critical section on @cpu. If
 * nothing aborted it since sd_rseq_begin(), store @value to *@word as one
 * relaxed 64-bit atomic store (the commit), and return 0. If it was
 * aborted, or the thread now runs on another CPU than the one it began on
 * (its task migrated), store nothing. Either way the section is over.
 * @word may be NULL: a section with no store, which learns whether what
 * it read was read in one piece.
 *
 * Return: 0 (committed); -EAGAIN (aborted: begin again); -EPERM if the
 * caller is not attached as @cpu (or @cpu is NULL); -EINVAL for a @word
 * not 8-byte aligned, or a thread with no section begun. Attached thread only;
 * interrupts may be off.
 */
SD_EXPORT int sd_rseq_end(struct sd_cpu *cpu, uint64_t *word, uint64_t value);

/** @} */

SD_END_DECLS

#endif
