/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "ipi_signal.h"

static const char ipi_cookie;

int sd_ipi_signal_send(int sig, int tid)
{
	siginfo_t si;
	pid_t pid = getpid();

	memset(&si, 0, sizeof(si));
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = pid;
	si.si_value.sival_ptr = (void *)&ipi_cookie;
	if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si) < 0)
		return -errno;
	return 0;
}

bool sd_ipi_signal_is_ours(const siginfo_t *si)
{
	return si && si->si_code == SI_QUEUE && si->si_value.sival_ptr == (void *)&ipi_cookie;
}
