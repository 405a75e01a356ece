/* SPDX-License-Identifier: MIT */
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backoff.h"
#include "futex.h"

void sd_futex_wait(SD_ATOMIC(int) *word, int expected)
{
#ifdef SD_TSAN
	/* TSan holds a signal back while its thread sits in a raw futex
	 * syscall, so a parked CPU could never answer an IPI. nanosleep() is
	 * one of its blocking interceptors, where signals are delivered at
	 * once: poll with short sleeps instead (callers loop anyway). */
	struct timespec ts = { 0, 20000 };

	if (atomic_load_explicit(word, memory_order_relaxed) == expected)
		nanosleep(&ts, NULL);
#else
	syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#endif
}

void sd_futex_wait_ns(SD_ATOMIC(int) *word, int expected, uint64_t ns)
{
#ifdef SD_TSAN
	/* Same reason as above: poll in short sleeps TSan can interrupt. */
	(void)ns;
	sd_futex_wait(word, expected);
#else
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
#endif
}

void sd_futex_wake(SD_ATOMIC(int) *word, int nr)
{
	syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, nr, NULL, NULL, 0);
}

void sd_wait_while_eq(SD_ATOMIC(int) *word, int old)
{
	unsigned n;

	for (n = 0; n < SD_BACKOFF_SPINS + SD_BACKOFF_YIELDS; n++) {
		if (atomic_load_explicit(word, memory_order_acquire) != old)
			return;
		if (n < SD_BACKOFF_SPINS)
			sd_cpu_relax();
		else
			sched_yield();
	}
	while (atomic_load_explicit(word, memory_order_acquire) == old)
		sd_futex_wait(word, old);
}
