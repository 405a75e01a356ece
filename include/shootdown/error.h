/* SPDX-License-Identifier: MIT */
/**
 * @file error.h
 * @brief The error convention, written once.
 * @ingroup errors
 *
 * Every libshootdown function that can fail returns 0 (or a non-negative
 * value where its documentation says so) on success and a negative errno
 * value on failure. A failed call changes nothing: no object is half built,
 * no mapping half changed. The codes keep their POSIX meaning:
 *
 * | code        | meaning in libshootdown                                      |
 * |-------------|--------------------------------------------------------------|
 * | -EINVAL     | a bad argument: a NULL object, a config field, range,        |
 * |             | alignment or option value; a change with interrupts off      |
 * | -ENOENT     | an unknown strategy, option key, trap hook or violation index |
 * | -ENOMEM     | memory, frames or ASIDs ran out; sd_mprotect(): part of the  |
 * |             | range is not mapped (as mprotect(2) says)                    |
 * | -EPERM      | the calling thread is not the attached CPU it names; strict  |
 * |             | pinning refused by the OS                                    |
 * | -EBUSY      | already attached, still in use, interrupts off at detach,    |
 * |             | or every IPI signal slot is taken                            |
 * | -EEXIST     | sd_mmap() over mapped pages; a strategy name that is taken   |
 * | -EFAULT     | sd_access(): the address is not mapped                       |
 * | -EACCES     | sd_access(): the mapping forbids this kind of access         |
 * | -ESRCH      | sd_access(): the CPU has no address space loaded             |
 * | -ENOSYS     | strict pinning asked for, but the OS cannot bind threads     |
 * | -EAGAIN     | sd_machine_run(): a thread could not be created              |
 * | -EDEADLK    | sd_smp_call_single() with interrupts off                            |
 * | -EOPNOTSUPP | a user-strategy building block on a machine without one;     |
 * |             | a strategy needing a mechanism its profile lacks (model.h)   |
 * | -ENOSPC     | SD_STRATEGY_MAX_USER strategies are registered already       |
 * | -EILSEQ     | sd_trap(): no hook matches the instruction                   |
 *
 * NULL and out-of-range object arguments, one rule for every public call:
 * - a call that returns int fails with -EINVAL (and its detail);
 * - a getter that returns a value returns a neutral value and records the
 *   detail in sd_last_error(): 0 for counts, ids, flags and registers
 *   (sd_cpu_id(), sd_mm_id(), sd_machine_nr_cpus(), sd_irqs_disabled(),
 *   sd_oracle_checked(), sd_oracle_violations(), sd_cpu_reg(),
 *   sd_trap_id_reg(), sd_stats_flush_ns_quantile()), NULL for pointers
 *   (sd_cpu_machine(), sd_cpu_current_mm(), sd_stat_name()), and UINT_MAX
 *   for sd_mm_cpumask_next(), so a loop "c < nr_cpus" over it ends;
 * - a call that returns nothing does nothing (sd_stats_print(),
 *   sd_stats_json(), sd_stats_delta(), sd_machine_print_info(),
 *   sd_irq_disable(), sd_irq_enable(), sd_cpu_quiescent()) and records the
 *   detail in sd_last_error() where it is not a hot path.
 * A getter cannot tell "neutral" from a real 0 by its value: callers that
 * must know check their arguments first. sd_last_error() is only written by
 * calls that fail (or, for getters, that got a bad argument): a call that
 * succeeds leaves the previous detail alone.
 *
 * sd_strerror() names the code; sd_last_error() gives the detail of the
 * calling thread's last failure (for example which option was unknown).
 */
#ifndef SHOOTDOWN_ERROR_H
#define SHOOTDOWN_ERROR_H

#include <errno.h>

#include "export.h"

SD_BEGIN_DECLS

/**
 * @defgroup errors Errors
 * Negative errno returns, sd_strerror() and the thread's last error message.
 * @{
 */

/**
 * sd_strerror() - describe a return value of this library.
 * @err: a negative errno value returned by an sd_ function (0 is "success").
 *
 * Return: a static string; never NULL. Any thread; async-signal-safe.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT const char *sd_strerror(int err);

/**
 * sd_last_error() - the detail of this thread's most recent failure.
 *
 * Return: a thread-local string such as "unknown strategy option 'foo' for
 * 'broadcast'"; "" if no call has failed on this thread yet. It stays valid
 * until the next failing sd_ call on the same thread. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT const char *sd_last_error(void);

/** @} */

SD_END_DECLS

#endif
