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

/*
 * Our own table, not strerror(): it must be async-signal-safe and say what
 * the code means for this library. Each text covers every place the code is
 * returned (test_errors' EveryReturnedCodeHasAFittingMessage greps lib/ for
 * them); sd_last_error() gives the detail of the one that happened.
 */
const char *sd_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument (NULL object, bad configuration, profile, range, "
		       "alignment or option, or called with interrupts off)";
	case -ENOENT:
		return "no such strategy, option, trap hook, recorded violation, trace "
		       "file directory or machine profile";
	case -ENOMEM:
		/* mprotect(2) says ENOMEM for a range with unmapped pages too. */
		return "out of memory, frames or ASIDs, or the range is not (fully) mapped";
	case -EPERM:
		return "not permitted: the calling thread is not the attached CPU, or the OS "
		       "refused to bind it";
	case -EBUSY:
		return "busy: already attached, still in use, interrupts off, or no IPI "
		       "signal slot left";
	case -EEXIST:
		return "already exists: a page of the range is mapped, or the strategy name "
		       "is taken";
	case -EFAULT:
		return "address not mapped";
	case -EACCES:
		return "access forbidden by the mapping's protection (or by the file system, "
		       "for a trace file)";
	case -ESRCH:
		return "no address space loaded on this CPU (none, or it is idle)";
	case -ENOSYS:
		return "thread binding not supported";
	case -EAGAIN:
		return "could not create a thread; try again";
	case -EDEADLK:
		return "would deadlock (interrupts are off)";
	case -EOPNOTSUPP:
		return "not supported: the machine does not run a user strategy, or its profile "
		       "lacks a mechanism the strategy needs";
	case -ENOSPC:
		return "no room left: every user strategy or user event slot is taken, or the "
		       "disk is full (a trace file)";
	case -EXDEV:
		return "not the sender: only the CPU that posted an asynchronous IPI may wait for it";
	case -EOVERFLOW:
		return "too many slices of the program's own events open on one CPU";
	case -EILSEQ:
		return "undefined instruction: no trap hook matches";
	case -EIO:
		return "I/O error writing a trace file";
	case -ENAMETOOLONG:
		return "a profile's path does not fit in the buffer given";
	case -EISDIR:
		return "the trace path is a directory";
	case -ENODATA:
		return "the machine is not tracing";
	case -ENOTDIR:
		return "a component of the trace file's path is not a directory";
	case -EROFS:
		return "the trace file's file system is read-only";
	case -ELOOP:
		return "too many symbolic links in the trace file's path, or a profile's "
		       "bases more than four deep";
	default:
		return err < 0 ? "a system call's error (sd_last_error() has the detail)"
			       : "not an error code";
	}
}
