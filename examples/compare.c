/* SPDX-License-Identifier: MIT */
/*
 * compare: the main job. Runs a workload under each strategy at several CPU
 * counts and prints one table: time per operation, flush latency, and the
 * counters that explain it.
 *
 * The default workload is the arm64 skip-tlbi-broadcast patch's mprotect-threaded: every CPU runs its
 * own single-threaded process (one mm each), touches a page, and flips its
 * protection ITERS times. Each mprotect needs a flush; `broadcast` sends it
 * to every CPU in the machine, which is the cost the arm64 skip-tlbi-broadcast patch removes: `local`
 * sees that the mm runs nowhere else and flushes only its own TLB.
 *
 *   compare [--strategies broadcast,none] [--cpus 1,2,4] [--iterations N]
 *           [--checked] [--json FILE]
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shootdown/shootdown.h>

#define MAX_LIST 16
#define REGION 0x10000000ull

struct options {
	const char *strategies[MAX_LIST];
	unsigned nr_strategies;
	unsigned cpus[MAX_LIST];
	unsigned nr_cpus;
	unsigned iterations;
	int checked;
	const char *json;
};

struct run {
	struct sd_mm **mms;
	unsigned iterations;
	_Atomic int failed;
};

struct result {
	const char *strategy;
	unsigned cpus;
	int oversubscribed;
	double ns_per_op;
	struct sd_stats stats;
	uint64_t violations;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One "process" per CPU: touch, then flip protection. */
static void mprotect_threaded(struct sd_cpu *cpu, void *arg)
{
	struct run *r = arg;
	struct sd_mm *mm = r->mms[sd_cpu_id(cpu)];
	int err = sd_switch_mm(cpu, mm);

	for (unsigned i = 0; !err && i < r->iterations; i++) {
		err = sd_access(cpu, REGION, SD_WRITE, NULL);
		if (!err)
			err = sd_mprotect(cpu, mm, REGION, SD_PAGE_SIZE, SD_PROT_READ);
		if (!err)
			err = sd_mprotect(cpu, mm, REGION, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	}
	if (err) {
		fprintf(stderr, "cpu %u: %s: %s\n", sd_cpu_id(cpu), sd_strerror(err), sd_last_error());
		atomic_store(&r->failed, 1);
	}
	sd_switch_mm(cpu, NULL);
}

static int setup_mms(struct sd_machine *m, struct run *r, unsigned n)
{
	struct sd_cpu *cpu;
	int err = sd_cpu_attach(m, 0, &cpu);

	r->mms = calloc(n, sizeof(*r->mms));
	for (unsigned i = 0; !err && i < n; i++) {
		err = sd_mm_create(m, &r->mms[i]);
		if (!err)
			err = sd_mmap(cpu, r->mms[i], REGION, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	}
	if (cpu)
		sd_cpu_detach(cpu);
	return err;
}

static int run_one(const struct options *o, const char *strategy, unsigned cpus, struct result *res)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_machine_info info;
	struct sd_machine *m;
	struct run r = { .iterations = o->iterations };
	int err;

	cfg.nr_cpus = cpus;
	cfg.strategy = strategy;
	cfg.oracle = o->checked ? SD_ORACLE_CHECKED : SD_ORACLE_OFF;
	err = sd_machine_create(&cfg, &m);
	if (err) {
		fprintf(stderr, "%s: %s\n", sd_strerror(err), sd_last_error());
		return err;
	}
	sd_machine_info(m, &info);
	err = setup_mms(m, &r, cpus);
	if (!err) {
		double t0 = now_ns();
		err = sd_machine_run(m, mprotect_threaded, &r);
		double t1 = now_ns();
		res->ns_per_op = (t1 - t0) / (2.0 * o->iterations);
		if (!err && atomic_load(&r.failed))
			err = -EIO;
	}
	res->strategy = strategy;
	res->cpus = cpus;
	res->oversubscribed = info.oversubscribed;
	res->stats = (struct sd_stats)SD_STATS_INIT;
	sd_stats_snapshot(m, &res->stats);
	res->violations = sd_oracle_violations(m);
	for (unsigned i = 0; i < cpus; i++)
		if (r.mms && r.mms[i])
			sd_mm_destroy(r.mms[i]);
	free(r.mms);
	sd_machine_destroy(m);
	return err;
}

static unsigned split(char *s, const char **out)
{
	unsigned n = 0;

	for (char *tok = strtok(s, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
		out[n++] = tok;
	return n;
}

static int parse(int argc, char **argv, struct options *o)
{
	o->strategies[0] = "broadcast";
	o->strategies[1] = "local";
	o->strategies[2] = "ipi";
	o->nr_strategies = 3;
	o->cpus[0] = 1, o->cpus[1] = 2, o->cpus[2] = 4;
	o->nr_cpus = 3;
	o->iterations = 100000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--strategies") && i + 1 < argc) {
			o->nr_strategies = split(argv[++i], o->strategies);
		} else if (!strcmp(argv[i], "--cpus") && i + 1 < argc) {
			const char *list[MAX_LIST];
			o->nr_cpus = split(argv[++i], list);
			for (unsigned k = 0; k < o->nr_cpus; k++)
				o->cpus[k] = (unsigned)strtoul(list[k], NULL, 10);
		} else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
			o->iterations = (unsigned)strtoul(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--checked")) {
			o->checked = 1;
		} else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
			o->json = argv[++i];
		} else {
			fprintf(stderr, "usage: %s [--strategies a,b] [--cpus 1,2,4] "
					"[--iterations N] [--checked] [--json FILE]\n", argv[0]);
			return -1;
		}
	}
	return o->iterations ? 0 : -1;
}

static void print_row(const struct result *r)
{
	const struct sd_stats *s = &r->stats;
	uint64_t flushes = s->counter[SD_STAT_FLUSH];

	printf("%-10s %4u%-2s %10.0f %9llu %9llu %9llu %10.1f %12.1f %10llu\n", r->strategy, r->cpus,
	       r->oversubscribed ? "*" : "", r->ns_per_op,
	       (unsigned long long)(flushes ? s->flush_ns_total / flushes : 0),
	       (unsigned long long)sd_stats_flush_ns_quantile(s, 0.5),
	       (unsigned long long)sd_stats_flush_ns_quantile(s, 0.99),
	       flushes ? (double)s->counter[SD_STAT_TLBI_OP] / (double)flushes : 0.0,
	       flushes ? (double)s->counter[SD_STAT_REMOTE_INVAL] / (double)flushes : 0.0,
	       (unsigned long long)r->violations);
}

static void write_json(const char *path, const struct result *res, unsigned n)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		perror(path);
		return;
	}
	fprintf(f, "[\n");
	for (unsigned i = 0; i < n; i++) {
		fprintf(f, "{\"workload\": \"mprotect_threaded\", \"strategy\": \"%s\", \"cpus\": %u, "
			   "\"oversubscribed\": %d, \"ns_per_op\": %.1f, \"stats\": ",
			res[i].strategy, res[i].cpus, res[i].oversubscribed, res[i].ns_per_op);
		sd_stats_json(&res[i].stats, f);
		fprintf(f, "}%s\n", i + 1 < n ? "," : "");
	}
	fprintf(f, "]\n");
	fclose(f);
}

int main(int argc, char **argv)
{
	struct options o = { 0 };
	struct result res[MAX_LIST * MAX_LIST];
	struct sd_model_info model = SD_MODEL_INFO_INIT;
	unsigned n = 0;
	int failed = 0;

	if (parse(argc, argv, &o))
		return 2;
	{
		struct sd_machine *m;
		struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
		cfg.nr_cpus = 1;
		if (!sd_machine_create(&cfg, &m)) {
			struct sd_machine_info info;
			sd_machine_info(m, &info);
			printf("host: %s; TLB %u + %ux%u entries, %zu bytes per emulated CPU\n",
			       info.topology, info.tlb_l1_entries, info.tlb_sets, info.tlb_ways,
			       info.bytes_per_cpu);
			/* SD_PROFILE models every machine of the run alike. */
			sd_machine_model_info(m, &model);
			sd_machine_destroy(m);
		}
	}
	printf("workload: mprotect_threaded, one single-threaded mm per CPU, %u x 2 mprotect "
	       "each%s\n\n", o.iterations, o.checked ? ", oracle checked" : "");
	printf("%-10s %6s %10s %9s %9s %9s %10s %12s %10s\n", "strategy", "cpus", "ns/op",
	       "flush_ns", "p50_ns", "p99_ns", "tlbi/flush", "remote/flush", "violations");
	for (unsigned s = 0; s < o.nr_strategies; s++) {
		for (unsigned c = 0; c < o.nr_cpus; c++) {
			struct result *r = &res[n];
			memset(r, 0, sizeof(*r));
			if (run_one(&o, o.strategies[s], o.cpus[c], r)) {
				failed = 1;
				continue;
			}
			print_row(r);
			fflush(stdout);
			n++;
		}
	}
	printf("\n* oversubscribed: more emulated CPUs than PUs. p50/p99 are histogram bucket "
	       "upper bounds.\n");
	/* The flush latencies follow the machine's clock; ns/op is always
	 * this host's wall time. */
	if (model.modelled)
		printf("flush_ns, p50_ns and p99_ns are modelled ns on profile '%s'; ns/op is "
		       "host time.\n", model.profile);
	if (o.json)
		write_json(o.json, res, n);
	return failed;
}
