/* SPDX-License-Identifier: MIT */
/*
 * hello: the smallest complete libshootdown program.
 *
 * Four emulated CPUs share one address space. Every CPU reads a page, so
 * every TLB caches it; CPU 0 then write-protects it with sd_mprotect(),
 * which must shoot the stale writable translation down on the other three.
 * The oracle (on by default) counts any access served by a stale entry.
 *
 *     cc hello.c $(pkg-config --cflags --libs shootdown) -o hello
 *     ./hello [strategy]        # broadcast by default; try ipi, local, gbcast
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <shootdown/shootdown.h>

#define PAGE_VA 0x10000000ull

struct hello {
	struct sd_mm *mm;
	atomic_uint filled;     /* CPUs whose TLB holds the page */
	atomic_int phase;       /* 0: read the page; 1: page made read-only */
};

/* Runs on every emulated CPU, on that CPU's own thread. */
static void body(struct sd_cpu *cpu, void *arg)
{
	struct hello *h = arg;
	unsigned id = sd_cpu_id(cpu);
	int err = sd_switch_mm(cpu, h->mm);

	if (!err)
		err = sd_access(cpu, PAGE_VA, SD_READ, NULL);   /* fill this CPU's TLB */
	atomic_fetch_add(&h->filled, 1);
	while (id == 0 && atomic_load(&h->filled) < sd_machine_nr_cpus(sd_cpu_machine(cpu))) {
		sd_cpu_quiescent(cpu);
		sched_yield();                  /* 4 CPUs may share fewer PUs */
	}
	if (!err && id == 0) {
		/* The shootdown: returns once no CPU can still write the page. */
		err = sd_mprotect(cpu, h->mm, PAGE_VA, SD_PAGE_SIZE, SD_PROT_READ);
		if (!err)
			atomic_store(&h->phase, 1);
	}
	while (!err && id != 0 && !atomic_load(&h->phase)) {
		sd_cpu_quiescent(cpu);          /* wait for CPU 0, staying responsive */
		sched_yield();
	}
	if (!err) {
		/* Every CPU now finds the page read-only: a write faults. */
		int werr = sd_access(cpu, PAGE_VA, SD_WRITE, NULL);
		printf("cpu %u: write after mprotect: %s\n", id, sd_strerror(werr));
	}
	if (err)
		fprintf(stderr, "cpu %u: %s (%s)\n", id, sd_strerror(err), sd_last_error());
	sd_switch_mm(cpu, NULL);
}

int main(int argc, char **argv)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_machine *m;
	struct sd_cpu *cpu;
	struct sd_stats stats = SD_STATS_INIT;
	struct hello h = { 0 };
	int err;

	cfg.nr_cpus = 4;
	cfg.strategy = argc > 1 ? argv[1] : "broadcast";
	cfg.oracle = SD_ORACLE_CHECKED;        /* count any stale translation used */
	if ((err = sd_machine_create(&cfg, &m))) {
		fprintf(stderr, "sd_machine_create: %s (%s)\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	/* Map and touch the page from this thread, attached as CPU 0 for it. */
	err = sd_cpu_attach(m, 0, &cpu);
	if (!err)
		err = sd_mm_create(m, &h.mm);
	if (!err)
		err = sd_mmap(cpu, h.mm, PAGE_VA, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	if (!err)
		err = sd_cpu_detach(cpu);
	if (!err)
		err = sd_machine_run(m, body, &h);
	if (err) {
		fprintf(stderr, "hello: %s (%s)\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	sd_stats_snapshot(m, &stats);
	sd_stats_print(&stats, stdout);
	/* With a profile (SD_PROFILE=name), what the run would take there. */
	struct sd_model_info model = SD_MODEL_INFO_INIT;
	if (!sd_machine_model_info(m, &model) && model.modelled)
		printf("modelled time on '%s' (%s): %llu ns, the CPU that did least at %llu ns\n",
		       model.profile, model.topology, (unsigned long long)model.clock_max_ns,
		       (unsigned long long)model.clock_min_ns);
	printf("stale translations seen by the oracle: %llu\n",
	       (unsigned long long)sd_oracle_violations(m));
	sd_mm_destroy(h.mm);
	sd_machine_destroy(m);
	return 0;
}
