/* SPDX-License-Identifier: MIT */
/*
 * shootdown-memory: what an emulated CPU costs, per strategy and CPU count
 * (BENCHMARKS.md, "Memory at scale"). Public API only, so the same source
 * measures any version of the library.
 *
 * Each (strategy, CPU count) runs in a child process with a fresh heap and
 * a fixed mmap threshold (large arrays are mapped whole, and unmapped whole
 * when freed). It prints sd_machine_info()'s bytes_per_cpu and the resident
 * growth of creating the machine, per CPU. With --flush=N,... it also runs
 * the machine at those counts: every CPU loads one mm and caches a page of
 * its own, then every CPU write-protects its page, a flush aimed at every
 * other CPU (n * (n - 1) remote flushes in all, the worst case for per-pair
 * state), and it prints the heap the run left allocated and the resident
 * growth of the run (which includes the CPU threads' stacks).
 *
 *   shootdown-memory [--cpus=64,1024,4096] [--flush=64,256]
 *                    [--strategies=broadcast,local,ipi,gbcast,memuser]
 */
#include <malloc.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shootdown/shootdown.h>

#define MAX_LIST 16
#define PAGE_VA 0x40000000ull

struct list {
	unsigned n;
	unsigned v[MAX_LIST];
};

struct run {
	struct sd_mm *mm;
	unsigned nr_cpus;
	atomic_uint mapped, touched, protected_;
	atomic_int err;
};

static long rss_bytes(void)
{
	long pages = 0, resident = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static size_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* Spin until *@v reaches @want. Interrupts are on: IPIs are answered. */
static void wait_for(atomic_uint *v, unsigned want)
{
	while (atomic_load(v) < want)
		sched_yield();
}

static void note_err(struct run *r, int err)
{
	if (err)
		atomic_store(&r->err, err);
}

/* Every CPU caches its own page of one mm, then write-protects it: each
 * mprotect is a flush aimed at every other CPU. */
static void all_to_all(struct sd_cpu *cpu, void *arg)
{
	struct run *r = arg;
	unsigned id = sd_cpu_id(cpu);
	uint64_t va = PAGE_VA + (uint64_t)id * SD_PAGE_SIZE;

	if (id == 0) {
		note_err(r, sd_mmap(cpu, r->mm, PAGE_VA, (uint64_t)r->nr_cpus * SD_PAGE_SIZE,
				    SD_PROT_READ | SD_PROT_WRITE));
		atomic_store(&r->mapped, 1);
	}
	wait_for(&r->mapped, 1);
	note_err(r, sd_switch_mm(cpu, r->mm));
	note_err(r, sd_access(cpu, va, SD_WRITE, NULL));
	atomic_fetch_add(&r->touched, 1);
	wait_for(&r->touched, r->nr_cpus);
	note_err(r, sd_mprotect(cpu, r->mm, va, SD_PAGE_SIZE, SD_PROT_READ));
	atomic_fetch_add(&r->protected_, 1);
	/* Stay loaded until every flush is done, so each one reaches all. */
	wait_for(&r->protected_, r->nr_cpus);
	sd_switch_mm(cpu, NULL);
}

static void memuser_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
			  unsigned flags, void *arg)
{
	/* Never run: memuser machines are created, not run. */
	(void)cpu, (void)mm, (void)va, (void)len, (void)flags, (void)arg;
}

static int measure(const char *spec, unsigned cpus, int flush)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_machine_info info;
	struct sd_machine *m = NULL;
	struct run r = { .nr_cpus = cpus };
	long rss0, rss1;
	int err;

	mallopt(M_MMAP_THRESHOLD, 64 * 1024);
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);    /* 4 KiB pages: RSS counts bytes */
	cfg.nr_cpus = cpus;
	cfg.strategy = spec;
	cfg.oracle = SD_ORACLE_OFF;
	rss0 = rss_bytes();
	err = sd_machine_create(&cfg, &m);
	rss1 = rss_bytes();
	if (err) {
		fprintf(stderr, "%s at %u CPUs: %s: %s\n", spec, cpus, sd_strerror(err),
			sd_last_error());
		return 1;
	}
	sd_machine_info(m, &info);
	printf("%-10s %5u  reported %7zu B/CPU  created %7.0f B/CPU (%6.1f MiB)", spec, cpus,
	       info.bytes_per_cpu, (double)(rss1 - rss0) / cpus,
	       (double)(rss1 - rss0) / (1 << 20));
	if (flush) {
		err = sd_mm_create(m, &r.mm);
		size_t heap0 = heap_in_use();
		long rss2 = rss_bytes();
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (!err)
			err = sd_machine_run(m, all_to_all, &r);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (!err)
			err = atomic_load(&r.err);
		long rss3 = rss_bytes();
		long heap = (long)heap_in_use() - (long)heap0;
		struct sd_stats st = SD_STATS_INIT;
		sd_stats_snapshot(m, &st);
		printf("  flushed: %llu IPIs in %.0f ms, heap left %+ld B, run rss %+.0f B/CPU",
		       (unsigned long long)st.counter[SD_STAT_IPI_RECV],
		       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
		       heap, (double)(rss3 - rss2) / cpus);
		if (err)
			printf("  error %s: %s", sd_strerror(err), sd_last_error());
		if (r.mm)
			sd_mm_destroy(r.mm);
	}
	printf("\n");
	fflush(stdout);
	sd_machine_destroy(m);
	return err ? 1 : 0;
}

static int parse_list(const char *s, struct list *l)
{
	char *end;

	l->n = 0;
	while (*s && l->n < MAX_LIST) {
		unsigned long v = strtoul(s, &end, 10);
		if (end == s || !v)
			return -1;
		l->v[l->n++] = (unsigned)v;
		s = *end == ',' ? end + 1 : end;
	}
	return *s ? -1 : 0;
}

static int in_list(const struct list *l, unsigned v)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->v[i] == v)
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	struct list cpus = { 3, { 64, 1024, 4096 } }, flush = { 0, { 0 } };
	char strategies[256] = "broadcast,local,ipi,gbcast,memuser";
	struct sd_strategy user = SD_STRATEGY_INIT;
	int failed = 0;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--cpus=", 7) && !parse_list(argv[i] + 7, &cpus))
			continue;
		if (!strncmp(argv[i], "--flush=", 8) && !parse_list(argv[i] + 8, &flush))
			continue;
		if (!strncmp(argv[i], "--strategies=", 13) &&
		    strlen(argv[i] + 13) < sizeof(strategies)) {
			strcpy(strategies, argv[i] + 13);
			continue;
		}
		fprintf(stderr, "usage: %s [--cpus=N,...] [--flush=N,...] [--strategies=S,...]\n",
			argv[0]);
		return 2;
	}
	user.name = "memuser";
	user.flush = memuser_flush;
	if (sd_strategy_register(&user)) {
		fprintf(stderr, "sd_strategy_register: %s\n", sd_last_error());
		return 1;
	}
	for (char *save = NULL, *spec = strtok_r(strategies, ",", &save); spec;
	     spec = strtok_r(NULL, ",", &save)) {
		for (unsigned i = 0; i < cpus.n; i++) {
			int flushes = in_list(&flush, cpus.v[i]) && strcmp(spec, "memuser");
			pid_t pid = fork();
			int status = 1;

			if (pid == 0)
				_exit(measure(spec, cpus.v[i], flushes));
			if (pid < 0 || waitpid(pid, &status, 0) < 0 || status)
				failed = 1;
		}
	}
	sd_strategy_unregister("memuser");
	return failed;
}
