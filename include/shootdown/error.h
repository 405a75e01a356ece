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
 * | code      | meaning in libshootdown                                        |
 * |-----------|----------------------------------------------------------------|
 * | -EINVAL   | a bad argument: config field, range, alignment, option value   |
 * | -ENOENT   | an unknown strategy name or option key                         |
 * | -ENOMEM   | memory, frames or ASIDs ran out                                |
 * | -EPERM    | the calling thread is not the attached CPU it names            |
 * | -EBUSY    | already attached, or an object is still in use                 |
 * | -EEXIST   | sd_mmap over pages that are already mapped                     |
 * | -EFAULT   | sd_access: the address is not mapped                           |
 * | -EACCES   | sd_access: the mapping forbids this kind of access             |
 * | -ESRCH    | sd_access: the CPU has no address space loaded                 |
 * | -ENOSYS   | strict pinning asked for, but the OS cannot bind threads       |
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
