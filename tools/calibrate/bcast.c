/* SPDX-License-Identifier: MIT */
/*
 * Group bcast: the emulator's broadcast invalidations (software
 * DVM and INVLPGB) and the kernel's (none from user space on x86).
 */
#include "calibrate.h"

/* ---- broadcast invalidations: the emulator's software DVM and INVLPGB ---- */

static int flush_work(struct sd_cpu *cpu, struct duo *d)
{
	struct sd_stats s0 = SD_STATS_INIT, s1 = SD_STATS_INIT;
	double v[64];

	TRY(sd_access(cpu, VA_HIT, SD_READ, NULL));
	sd_stats_cpu(sd_cpu_machine(cpu), 0, &s0);
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < d->n; i++)
			TRY(sd_flush_tlb_range(cpu, d->mm, VA_HIT, PAGE));
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)d->n;
	}
	sd_stats_cpu(sd_cpu_machine(cpu), 0, &s1);
	d->invlpgb = s1.counter[SD_STAT_INVLPGB] - s0.counter[SD_STAT_INVLPGB];
	d->flush_ns = median(v, cal.reps);
	return 0;
}

static int host_bcast(void)
{
	struct duo b1 = { .work = flush_work, .n = iters(20000), .busy = true };
	struct duo b2 = b1, g2 = b1;

	if (duo_run("broadcast", 1, &b1) || duo_run("broadcast", 2, &b2) ||
	    duo_run("gbcast:threshold=1,sample=1", 2, &g2))
		return -1;
	set(&host, P_TLBI_ISSUE, b1.flush_ns, "sd-calibrate --only bcast: median of %d x %ld "
	    "sd_flush_tlb_range() of 1 page, strategy broadcast, 1 CPU: the issue, the DVM "
	    "lock and the issuer's own invalidation", cal.reps, b1.n);
	set(&host, P_DVM_TARGET, b2.flush_ns - b1.flush_ns, "sd-calibrate --only bcast: the same "
	    "on 2 CPUs with the mm live on both and CPU 1 hitting in its TLB (%.1f ns) minus 1 "
	    "CPU: the issuer invalidates one more TLB inside the DVM lock, fetching the lines "
	    "the running target holds", b2.flush_ns);
	set(&host, P_DVM_MESSAGE, 0, "sd-calibrate --only bcast: 0: the emulator's broadcast has "
	    "no message apart from the per-TLB work (charged in tlbi_issue and dvm_target)");
	set(&host, P_DVM_COMPLETION, 0, "sd-calibrate --only bcast: 0: the emulator invalidates "
	    "every TLB synchronously inside the issue; nothing completes later");
	set(&host, P_DSB, 0, "sd-calibrate --only bcast: 0: the emulator's DSB finds every "
	    "broadcast done (synchronous issue), so it costs nothing measurable apart from it");
	set(&host, P_INVLPGB_ISSUE, g2.flush_ns, "sd-calibrate --only bcast: median of %d x %ld "
	    "sd_flush_tlb_range() of 1 page, strategy gbcast:threshold=1,sample=1 (a global ASID "
	    "for an mm on 2 CPUs), 2 CPUs with the mm live on both "
	    "(%llu INVLPGBs counted): issue, invalidations and TLBSYNC in one call, not "
	    "separable through the public API", cal.reps, g2.n, (unsigned long long)g2.invlpgb);
	set(&host, P_INVLPGB_COMPLETION, 0, "sd-calibrate --only bcast: 0: included in "
	    "invlpgb_issue (the emulated INVLPGB completes within the flush call)");
	set(&host, P_TLBSYNC, 0, "sd-calibrate --only bcast: 0: included in invlpgb_issue");
	set(&host, P_TLBI_RECV, 0, "sd-calibrate --only bcast: 0: the emulator's issuer does "
	    "each target's invalidation itself (in dvm_target); the target's thread loses no time");
	set(&host, P_INVLPGB_RECV, 0, "sd-calibrate --only bcast: 0: the emulator's issuer does "
	    "each target's invalidation itself (in invlpgb_issue); the target's thread loses no time");
	return 0;
}

static void kern_bcast(void)
{
	static const enum param dvm[] = {
		P_TLBI_ISSUE, P_DVM_MESSAGE, P_DVM_TARGET, P_DVM_COMPLETION, P_DSB, P_TLBI_RECV,
	};
	static const enum param gb[] = {
		P_INVLPGB_ISSUE, P_INVLPGB_COMPLETION, P_TLBSYNC, P_INVLPGB_RECV,
	};

	for (size_t i = 0; i < sizeof(dvm) / sizeof(dvm[0]); i++)
		set(&kern, dvm[i], 0, "not measurable on this host%s: no broadcast TLBI (arm64 "
		    "DVM) to time; 0 (unused by the x86 strategies)",
#if defined(__x86_64__) || defined(__i386__)
		    " (x86)"
#else
		    ""
#endif
		    );
	for (size_t i = 0; i < sizeof(gb) / sizeof(gb[0]); i++)
		set(&kern, gb[i], 0, cal.has_invlpgb ? "not measured: INVLPGB is a kernel-mode "
		    "instruction user space cannot time; 0 (gbcast would need a value from a "
		    "profile of a measured machine)" : "not measurable: this CPU lacks INVLPGB "
		    "(no invlpgb flag in /proc/cpuinfo); 0 (unused by ipi)");
}
int group_bcast(void)
{
	kern_bcast();
	if (!cal.pu1) {
		fprintf(stderr, "sd-calibrate: bcast needs two PUs\n");
		return -1;
	}
	if (host_bcast())
		return -1;
	/* The emulator's own: a shared-memory broadcast stands for both.
	 * The kernel's profile names neither: user space cannot time a TLBI
	 * or an INVLPGB (kern_bcast() says why, per parameter). */
	host.mech_source[1] = "emulated: libshootdown's shared-memory broadcast, measured by "
			      "sd-calibrate --only bcast";
	host.mech_source[2] = host.mech_source[1];
	return 0;
}
