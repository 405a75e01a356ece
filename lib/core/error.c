/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <shootdown/error.h>
#include "error.h"

static _Thread_local char last_error[256];
/* A detail recorded on a hot path, formatted only if someone asks. */
static _Thread_local struct {
	const char *fmt;
	unsigned long long arg;
} lazy_error;

int sd_fail(int err, const char *fmt, ...)
{
	va_list ap;

	lazy_error.fmt = NULL;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}

int sd_fail_lazy(int err, const char *fmt, unsigned long long arg)
{
	lazy_error.fmt = fmt;
	lazy_error.arg = arg;
	return err;
}

const char *sd_last_error(void)
{
	if (lazy_error.fmt) {
		snprintf(last_error, sizeof(last_error), lazy_error.fmt, lazy_error.arg);
		lazy_error.fmt = NULL;
	}
	return last_error;
}

/* Our own table, not strerror(): it must be async-signal-safe and say what
 * the code means for this library. */
const char *sd_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument (configuration, range or alignment)";
	case -ENOENT:
		return "no such strategy, option or record";
	case -ENOMEM:
		return "out of memory, frames or ASIDs";
	case -EPERM:
		return "calling thread is not the attached CPU";
	case -EBUSY:
		return "already attached or still in use";
	case -EEXIST:
		return "range already mapped";
	case -EFAULT:
		return "address not mapped";
	case -EACCES:
		return "access forbidden by the mapping's protection";
	case -ESRCH:
		return "no address space loaded on this CPU";
	case -ENOSYS:
		return "thread binding not supported";
	case -EAGAIN:
		return "resource temporarily unavailable";
	case -EDEADLK:
		return "would deadlock (interrupts are off)";
	default:
		return err < 0 ? "unknown error" : "not an error code";
	}
}
