/* SPDX-License-Identifier: MIT */
/*
 * Group trap: a trapped instruction's round trip, the emulator's
 * trap hooks and the kernel's (an emulated ID-register read or CPUID).
 */
#include "calibrate.h"

int host_trap(void)
{
	struct emu e;
	double v[64];
	long n = iters(200000);
	int ret = -1;

	if (emu_open(&e, "broadcast"))
		goto out;
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			sd_trap(e.cpu, SD_ID_AA64ISAR0_EL1(0));
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	double t = median(v, cal.reps);

	set(&host, P_TRAP_ENTRY, t / 2, "sd-calibrate --only trap: half the median of %d x %ld "
	    "sd_trap(MRS ID_AA64ISAR0_EL1) round trips (entry, direct dispatch, emulation, "
	    "return), split evenly: entry and return are not separable", cal.reps, n);
	set(&host, P_TRAP_EXIT, t / 2, "sd-calibrate --only trap: the other half of the same "
	    "round trip");
	ret = 0;
out:
	emu_close(&e);
	return ret;
}

#if defined(__x86_64__)
static void ill_handler(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;

	(void)sig;
	(void)si;
	uc->uc_mcontext.gregs[REG_RIP] += 2;    /* past the ud2 */
}

static int kern_trap(void)
{
	struct sigaction sa, old;
	double v[64];
	long n = iters(50000);

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = ill_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGILL, &sa, &old);
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			__asm__ volatile("ud2" ::: "memory");
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	sigaction(SIGILL, &old, NULL);
	double ud = median(v, cal.reps), sig = pos(self_signal_ns() - syscall_ns());

	set(&kern, P_TRAP_ENTRY, (ud - sig) / 2, "sd-calibrate --only trap: half of (ud2 -> SIGILL "
	    "handler that skips it, median of %d x %ld, %.1f ns, minus the signal delivery and "
	    "sigreturn measured by a self-tgkill minus getppid, %.1f ns): the exception's entry; "
	    "the kernel's own emulation (arm64 MRS) is not on this host", cal.reps, n, ud, sig);
	set(&kern, P_TRAP_EXIT, (ud - sig) / 2, "sd-calibrate --only trap: the other half of the "
	    "same (exception return)");
	return 0;
}

double cpuid_ns(void)
{
	double v[64];
	long n = iters(20000);

	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			unsigned a = 0, b, c = 0, d;

			__asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return median(v, cal.reps);
}
#else
static int kern_trap(void)
{
	set(&kern, P_TRAP_ENTRY, 0, "not measured: sd-calibrate measures traps with x86's ud2 only");
	set(&kern, P_TRAP_EXIT, 0, "not measured: sd-calibrate measures traps with x86's ud2 only");
	return 0;
}

double cpuid_ns(void)
{
	return 0;
}
#endif
int host_trap_group(void)
{
	return host_trap() || kern_trap() ? -1 : 0;
}
