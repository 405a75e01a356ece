/* SPDX-License-Identifier: MIT */
/*
 * The two-mprotect trick of .NET's FlushProcessWriteBuffers() fallback
 * (coreclr pal/src/thread/process.cpp), OpenJ9's and Mono's: make a helper
 * page writable, write it (so the kernel cannot skip the flush of a clean
 * PTE), make it inaccessible. The second mprotect's TLB shootdown is meant
 * to interrupt every CPU that runs the process, and an interrupt is a full
 * barrier there. It runs over the machine's strategy like any mprotect: on
 * `ipi` the CPUs running the mm take the flush IPI; on `broadcast`,
 * `local` or `gbcast` the invalidation needs no interrupt, so nobody is
 * interrupted (dotnet/coreclr issue 12246 on arm64, OpenJ9 issue 14870 on
 * Apple M1). The handshake's check (handshake.c) reports whom it reached.
 */
#include <shootdown/mm.h>

#include "../core/error.h"
#include "handshake.h"

int sd_hs_mprotect(struct sd_handshake *h, struct sd_cpu *cpu)
{
	const uint64_t va = h->cfg.helper_va;
	int err = 0;

	/* The write goes through the caller's TLB: it must run the mm. */
	if (atomic_load_explicit(&cpu->mm, memory_order_relaxed) != h->mm)
		return sd_fail(-EINVAL, "sd_handshake_run: an mprotect handshake's caller must run "
			       "its mm (sd_switch_mm()): CPU %u does not", cpu->id);

	/* s_helperPage: mapped once, by the first handshake's caller. */
	if (!h->helper_mapped) {
		err = sd_mmap(cpu, h->mm, va, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
		if (err)
			return err;
		h->helper_mapped = true;
	}
	err = sd_mprotect(cpu, h->mm, va, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	/* "Ensure that the page is dirty before we change the protection so
	 * that we prevent the OS from skipping the global TLB flush." */
	if (!err)
		err = sd_access(cpu, va, SD_WRITE, NULL);
	if (!err)
		err = sd_mprotect(cpu, h->mm, va, SD_PAGE_SIZE, SD_PROT_NONE);
	return err;
}
