/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_ERROR_H
#define SD_CORE_ERROR_H

#include <errno.h>

/*
 * sd_fail() - record the detail of a failure for sd_last_error() and return
 * @err (a negative errno), so error paths read "return sd_fail(-EINVAL, ...)".
 */
int sd_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
