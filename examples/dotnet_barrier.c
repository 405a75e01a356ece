/* SPDX-License-Identifier: MIT */
/*
 * dotnet_barrier: .NET's FlushProcessWriteBuffers(), a process-wide memory
 * barrier, the two ways coreclr makes it on Linux.
 *
 * The GC and the tiered JIT call it to make every other thread of the
 * process pass a full barrier. coreclr uses membarrier(PRIVATE_EXPEDITED)
 * where the kernel has it, and otherwise mprotect()s a helper page RW then
 * NONE with a write in between, counting on the TLB shootdown's IPIs to
 * interrupt every CPU that runs the process (pal/src/thread/process.cpp).
 * On arm64 the kernel invalidates with a broadcast TLBI and interrupts
 * nobody, so the fallback is no barrier at all (dotnet/coreclr issue 12246;
 * OpenJ9 issue 14870 on Apple M1).
 *
 * Here each way runs on an x86 machine (the `ipi` strategy, profile
 * milan-36) and an arm64 one (`broadcast`, profile ampere-emag-32), four
 * runtime threads busy in managed code and one calling the barrier. For
 * each: the real time a barrier took on this host, its modelled time on
 * the profile's machine, and how many threads the library's check found
 * to have passed a barrier after the request.
 *
 * The real time is this host's: with fewer PUs than threads, whose loops
 * never sleep, it is mostly the host scheduler's time slices (milliseconds),
 * not the handshake. The modelled time is the profile's machine's, with a
 * PU for every thread.
 *
 *     cc -std=c11 dotnet_barrier.c $(pkg-config --cflags --libs shootdown)
 *     ./dotnet_barrier [--barriers N]
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <shootdown/shootdown.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 5               /* CPU 0 calls the barrier; 1-4 run managed code */

struct run {
	struct sd_handshake *h;
	struct sd_mm *mm;
	unsigned barriers;
	atomic_int ready, done, failed;
	struct sd_handshake_result total;
	double real_ns;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The thread calling FlushProcessWriteBuffers() over and over. */
static int caller(struct sd_cpu *cpu, struct run *r)
{
	struct sd_handshake_result res;
	double t0;
	int err = 0;

	while (atomic_load(&r->ready) < THREADS)
		sd_cpu_poll(cpu);
	t0 = now_ns();
	for (unsigned i = 0; !err && i < r->barriers; i++) {
		err = sd_handshake_run(r->h, cpu, NULL, NULL, &res);
		r->total.targets += res.targets;
		r->total.barriers += res.barriers;
		r->total.unreached += res.unreached;
		r->total.ns += res.ns;
	}
	r->real_ns = (now_ns() - t0) / r->barriers;
	return err;
}

static void thread_body(struct sd_cpu *cpu, void *arg)
{
	struct run *r = arg;
	int err = sd_switch_mm(cpu, r->mm);

	atomic_fetch_add(&r->ready, 1);
	sd_cpu_poll_wake(cpu);
	if (!err && sd_cpu_id(cpu) == 0) {
		err = caller(cpu, r);
		atomic_store(&r->done, 1);
		sd_cpu_poll_wake(cpu);
	} else {
		/* Managed code: compute, and take interrupts as they come (a
		 * real signal on this host, at the work's end in modelled time). */
		while (!err && !atomic_load(&r->done))
			err = sd_cpu_work(cpu, 500);
	}
	if (err) {
		fprintf(stderr, "cpu %u: %s (%s)\n", sd_cpu_id(cpu), sd_strerror(err), sd_last_error());
		atomic_store(&r->failed, 1);
	}
	sd_switch_mm(cpu, NULL);
}

static int run(const char *strategy, const char *profile, unsigned kind, unsigned barriers,
	       struct run *r)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	struct sd_machine *m;
	int err;

	cfg.nr_cpus = THREADS;
	cfg.strategy = strategy;
	cfg.profile = profile;
	memset(r, 0, sizeof(*r));
	r->barriers = barriers;
	if ((err = sd_machine_create(&cfg, &m)))
		return err;
	hc.kind = kind;
	err = sd_mm_create(m, &r->mm);
	if (!err)
		err = sd_handshake_create(r->mm, &hc, &r->h);
	if (!err)
		err = sd_machine_run(m, thread_body, r);
	if (!err && atomic_load(&r->failed))
		err = -ECANCELED;       /* a thread said why on stderr */
	if (r->h)
		sd_handshake_destroy(r->h);
	if (r->mm)
		sd_mm_destroy(r->mm);
	sd_machine_destroy(m);
	return err;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *arch, *strategy, *profile;
	} machines[] = { { "x86", "ipi", "milan-36" }, { "arm64", "broadcast", "ampere-emag-32" } };
	static const struct {
		const char *name;
		unsigned kind;
	} ways[] = { { "membarrier", SD_HANDSHAKE_MEMBARRIER },
		     { "mprotect", SD_HANDSHAKE_MPROTECT } };
	unsigned barriers = 200;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--barriers") && i + 1 < argc && atoi(argv[i + 1]) > 0)
			barriers = (unsigned)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--barriers N]\n", argv[0]);
			return 2;
		}
	}
	printf("FlushProcessWriteBuffers(): %d threads, %u barriers each way\n", THREADS, barriers);
	printf("%-6s %-10s %-11s %14s %16s  %s\n", "arch", "way", "strategy", "real ns/call",
	       "modelled ns/call", "threads that passed a barrier");
	for (unsigned mi = 0; mi < 2; mi++) {
		for (unsigned wi = 0; wi < 2; wi++) {
			struct run real, model;
			int err = run(machines[mi].strategy, NULL, ways[wi].kind, barriers, &real);

			if (!err)
				err = run(machines[mi].strategy, machines[mi].profile, ways[wi].kind,
					  barriers, &model);
			if (err) {
				fprintf(stderr, "%s/%s: %s (%s)\n", machines[mi].arch, ways[wi].name,
					sd_strerror(err), sd_last_error());
				return 1;
			}
			printf("%-6s %-10s %-11s %14.0f %16.0f  %u of %u%s\n", machines[mi].arch,
			       ways[wi].name, machines[mi].strategy, real.real_ns,
			       (double)model.total.ns / barriers,
			       model.total.targets - model.total.unreached, model.total.targets,
			       model.total.unreached ? "  BROKEN: not a process-wide barrier" : "");
		}
	}
	return 0;
}
