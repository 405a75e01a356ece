/* SPDX-License-Identifier: MIT */
/*
 * trace_hello: see a shootdown. Four emulated CPUs share one address space
 * under the x86 `ipi` strategy; in each round every CPU reads a page, then
 * one CPU (a different one each round) unmaps it, which interrupts the
 * other three with IPIs. The library writes the run as a timeline:
 *
 *     ./trace_hello [trace.json]      (default: trace_hello.json)
 *
 * Open the file in https://ui.perfetto.dev or chrome://tracing (drag it in):
 * one track per CPU, the munmap's flush as a slice, an arrow from each IPI
 * to the handler that ran it and from the handler back to the ack.
 * Any program gets the same without code: SD_TRACE=trace.json ./program.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <shootdown/shootdown.h>

#define PAGE_VA 0x10000000ull
#define NR_CPUS 4
#define ROUNDS 4

struct run {
	struct sd_mm *mm;
	atomic_uint arrived;    /* barrier: CPUs through it, all rounds */
};

/* Wait until every CPU has arrived @n times, answering IPIs meanwhile. */
static void barrier(struct sd_cpu *cpu, struct run *r, unsigned n)
{
	atomic_fetch_add(&r->arrived, 1);
	while (atomic_load(&r->arrived) < n * NR_CPUS) {
		sd_cpu_quiescent(cpu);
		sched_yield();          /* 4 CPUs may share fewer PUs */
	}
}

static void body(struct sd_cpu *cpu, void *arg)
{
	struct run *r = arg;
	unsigned id = sd_cpu_id(cpu), n = 0;
	int err = sd_switch_mm(cpu, r->mm);

	for (unsigned round = 0; !err && round < ROUNDS; round++) {
		if (id == round % NR_CPUS)
			err = sd_mmap(cpu, r->mm, PAGE_VA, SD_PAGE_SIZE, SD_PROT_READ);
		barrier(cpu, r, ++n);
		if (!err)
			err = sd_access(cpu, PAGE_VA, SD_READ, NULL);   /* every TLB caches it */
		barrier(cpu, r, ++n);
		if (!err && id == round % NR_CPUS)
			err = sd_munmap(cpu, r->mm, PAGE_VA, SD_PAGE_SIZE);     /* the shootdown */
		barrier(cpu, r, ++n);
	}
	if (err)
		fprintf(stderr, "cpu %u: %s (%s)\n", id, sd_strerror(err), sd_last_error());
	sd_switch_mm(cpu, NULL);
}

int main(int argc, char **argv)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_stats stats = SD_STATS_INIT;
	struct run r = { 0 };
	struct sd_machine *m;
	int err;

	cfg.nr_cpus = NR_CPUS;
	cfg.strategy = "ipi";
	cfg.trace_path = argc > 1 ? argv[1] : "trace_hello.json";
	if ((err = sd_machine_create(&cfg, &m))) {
		fprintf(stderr, "sd_machine_create: %s (%s)\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	err = sd_mm_create(m, &r.mm);
	if (!err)
		err = sd_machine_run(m, body, &r);
	if (!err)
		err = sd_stats_snapshot(m, &stats);
	if (!err) {
		printf("ipis_sent %llu\n", (unsigned long long)stats.counter[SD_STAT_IPI_SENT]);
		printf("trace_records_dropped %llu\n",
		       (unsigned long long)stats.counter[SD_STAT_TRACE_DROPPED]);
	}
	if (err)
		fprintf(stderr, "trace_hello: %s (%s)\n", sd_strerror(err), sd_last_error());
	if (r.mm)
		sd_mm_destroy(r.mm);
	/* Destroying the machine writes the trace (a failure is on stderr). */
	sd_machine_destroy(m);
	FILE *f = fopen(cfg.trace_path, "r");
	if (f) {
		fclose(f);
		printf("trace written to %s\n", cfg.trace_path);
	}
	return err || !f ? 1 : 0;
}
