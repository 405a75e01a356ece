/* SPDX-License-Identifier: MIT */
/*
 * Group syscall: the kernel's system-call entry and exit, and a
 * pipe message.
 */
#include "calibrate.h"

/* ---- the real kernel ---- */

/* A 100-byte message written to a pipe and read back by the same thread:
 * nobody sleeps, so no wakeup and no switch are in it. */
static double pipe_message_ns(void)
{
	double v[64];
	long n = iters(200000);
	char buf[128] = { 0 };
	int p[2];

	if (pipe(p))
		return -1;
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			if (write(p[1], buf, 100) != 100 || read(p[0], buf, 100) != 100)
				break;
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	close(p[0]);
	close(p[1]);
	return median(v, cal.reps);
}
int kern_syscall(void)
{
	double t = syscall_ns(), msg = pipe_message_ns();

	set(&kern, P_SYSCALL_ENTRY, t / 2, "sd-calibrate --only syscall: half the median of %d x "
	    "%ld syscall(SYS_getppid) (entry and exit split evenly)", cal.reps, iters(500000));
	set(&kern, P_SYSCALL_EXIT, t / 2, "sd-calibrate --only syscall: the other half of the "
	    "same getppid() round trip");
	if (msg < 0)
		return sys_fail("pipe");
	set(&kern, P_PIPE_MESSAGE, pos(msg - 2 * t), "sd-calibrate --only syscall: median of %d x "
	    "%ld write() + read() of 100 bytes through one pipe by one thread (%.1f ns) minus two "
	    "getppid() (%.1f ns each): both calls' bodies and the copy; no sleeping reader, so no "
	    "wakeup", cal.reps, iters(200000), msg, t);
	return 0;
}
