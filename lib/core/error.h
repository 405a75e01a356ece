/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_ERROR_H
#define SD_CORE_ERROR_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/error.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <errno.h>

/*
 * sd_fail() - record the detail of a failure for sd_last_error() and return
 * @err (a negative errno), so error paths read "return sd_fail(-EINVAL, ...)".
 */
int sd_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The detail of every -EPERM for a call from a thread that is not the CPU
 * it names, with the way out. */
#define SD_NOT_ATTACHED \
	"caller is not attached as this CPU (attach this thread with sd_cpu_attach(), " \
	"or run the code under sd_machine_run())"

/*
 * sd_fail_lazy() - the same for paths where failing is routine (a fault on
 * sd_access): store @fmt (one %llx or %llu for @arg) and format it only when
 * sd_last_error() is called.
 */
int sd_fail_lazy(int err, const char *fmt, unsigned long long arg);

#endif
