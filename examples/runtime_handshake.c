/* SPDX-License-Identifier: MIT */
/*
 * runtime_handshake: a language runtime prototyping its own shootdown.
 *
 * A runtime's mutator threads attach themselves as emulated CPUs and share
 * one heap (an mm). Now and then a thread write-protects a heap page (as a
 * concurrent GC might) and the other threads' translations must go. Instead
 * of interrupting them with signals, this runtime uses a *handshake*: the
 * initiator posts a request in each target's mailbox and the targets answer
 * at their next safepoint poll, the way JVM thread-local handshakes and Go's
 * preemption requests work. The strategy is registered with
 * sd_strategy_register() and run beside the kernel's `ipi` on the same
 * workload; the oracle checks both.
 *
 *     runtime_handshake [--threads N] [--ops N] [--broken]
 *
 * --broken plants a classic bug: targets ack without invalidating, as if a
 * write-protect needed no shootdown because writes "will fault anyway".
 * They do not: the stale writable entry lets them through, and the oracle
 * counts every such access.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shootdown/shootdown.h>

#define HEAP_VA 0x20000000ull
#define HEAP_PAGES 64
#define PROTECT_EVERY 64   /* one write-protect flip per this many accesses */
#define MAX_THREADS 64

/* ---- the handshake strategy ---- */

/* One request from one initiator to one target: a cache line of its own. */
struct slot {
	_Alignas(64) atomic_ullong posted;   /* request sequence number, by the initiator */
	atomic_ullong done;                  /* last one handled, by the target */
	struct sd_mm *mm;
	uint64_t va, len;
	uint64_t arrow;                      /* the request's trace arrow (events.h) */
};

struct handshake {
	unsigned nr_cpus;
	int broken;
	_Alignas(64) atomic_uint pending[MAX_THREADS];   /* per target: posted - done, summed */
	struct slot *slots;                              /* [target][initiator] */
	atomic_ullong handshakes;                        /* requests answered */
	/* The strategy's own events (events.h): counted in sd_stats under
	 * these names, drawn in the trace with an arrow from each request to
	 * its ack. */
	int ev_request, ev_ack;
};

static struct slot *slot_of(struct handshake *h, unsigned target, unsigned from)
{
	return &h->slots[target * h->nr_cpus + from];
}

/* The safepoint poll: one load of our own counter when nothing is asked. */
static void safepoint(struct handshake *h, struct sd_cpu *cpu)
{
	unsigned me = sd_cpu_id(cpu);

	if (!h || !atomic_load_explicit(&h->pending[me], memory_order_acquire))
		return;
	for (unsigned from = 0; from < h->nr_cpus; from++) {
		struct slot *s = slot_of(h, me, from);
		unsigned long long seq = atomic_load_explicit(&s->posted, memory_order_acquire);
		if (seq == atomic_load_explicit(&s->done, memory_order_relaxed))
			continue;
		if (!h->broken)
			sd_tlb_invalidate_local(cpu, s->mm, s->va, s->len);
		atomic_fetch_sub_explicit(&h->pending[me], 1, memory_order_relaxed);
		sd_user_flow_end(cpu, h->ev_ack, s->arrow);
		/* Release: the invalidation before the ack the initiator reads. */
		atomic_store_explicit(&s->done, seq, memory_order_release);
		atomic_fetch_add_explicit(&h->handshakes, 1, memory_order_relaxed);
		sd_cpu_poll_wake(cpu);  /* the initiator polls for that ack */
	}
}

static int hs_machine_init(struct sd_machine *m, const char *options, void *arg)
{
	struct handshake *h = arg;

	if (options[0])
		return sd_strategy_error(-EINVAL, "safepoint takes no options, not '%s'", options);
	h->nr_cpus = sd_machine_nr_cpus(m);
	if (h->nr_cpus > MAX_THREADS)
		return sd_strategy_error(-EINVAL, "at most %d threads, not %u", MAX_THREADS,
					 h->nr_cpus);
	h->ev_request = sd_user_event_register("safepoint_requests");
	h->ev_ack = sd_user_event_register("safepoint_acks");
	if (h->ev_request < 0 || h->ev_ack < 0)
		return h->ev_request < 0 ? h->ev_request : h->ev_ack;
	h->slots = aligned_alloc(64, sizeof(struct slot) * h->nr_cpus * h->nr_cpus);
	if (!h->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < h->nr_cpus * h->nr_cpus; i++) {
		atomic_init(&h->slots[i].posted, 0);
		atomic_init(&h->slots[i].done, 0);
	}
	for (unsigned i = 0; i < MAX_THREADS; i++)
		atomic_init(&h->pending[i], 0);
	atomic_init(&h->handshakes, 0);
	return 0;
}

static void hs_machine_fini(struct sd_machine *m, void *arg)
{
	struct handshake *h = arg;

	(void)m;
	free(h->slots);
	h->slots = NULL;
}

/* flush(): invalidate here, ask every other CPU in the mm's cpumask, and
 * wait for each ack, answering our own mailbox meanwhile (two threads may
 * be flushing at each other). */
static void hs_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
		     unsigned flags, void *arg)
{
	struct handshake *h = arg;
	unsigned me = sd_cpu_id(cpu), n = h->nr_cpus;
	unsigned long long want[MAX_THREADS] = { 0 };

	(void)flags;
	sd_tlb_invalidate_local(cpu, mm, va, len);
	for (unsigned t = sd_mm_cpumask_next(mm, 0); t < n; t = sd_mm_cpumask_next(mm, t + 1)) {
		struct slot *s = slot_of(h, t, me);
		if (t == me)
			continue;
		s->mm = mm;
		s->va = va;
		s->len = len;
		s->arrow = sd_user_flow_start(cpu, h->ev_request);
		want[t] = atomic_load_explicit(&s->posted, memory_order_relaxed) + 1;
		atomic_store_explicit(&s->posted, want[t], memory_order_release);
		atomic_fetch_add_explicit(&h->pending[t], 1, memory_order_release);
	}
	sd_cpu_poll_wake(cpu);  /* a target done with its work polls its mailbox */
	/* The wait polls through sd_cpu_poll(), which lets the targets run
	 * (they may share our PU) and, in modelled time, moves our clock to
	 * their acks instead of holding the machine while we spin. */
	for (unsigned t = 0; t < n; t++) {
		while (want[t] && atomic_load_explicit(&slot_of(h, t, me)->done,
						       memory_order_acquire) != want[t]) {
			safepoint(h, cpu);
			sd_cpu_poll(cpu);
		}
	}
}

/* ---- the same contract by interrupt: one multicast ---- */

/* A second user strategy, for comparison: the kernel's way, written with
 * the library's multicast (sd_smp_call_many(), the shape of
 * smp_call_function_many_cond()): every CPU in the mm's cpumask runs the
 * invalidation in its IPI handler, the caller included, and the caller
 * waits for all. */
struct multicast_req {
	struct sd_mm *mm;
	uint64_t va, len;
};

static void invalidate_here(struct sd_cpu *cpu, void *arg)
{
	struct multicast_req *q = arg;

	sd_tlb_invalidate_local(cpu, q->mm, q->va, q->len);
}

static void multicast_flush(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len,
			    unsigned flags, void *arg)
{
	struct multicast_req q = { mm, va, len };
	unsigned targets[MAX_THREADS], n = 0, nr = sd_machine_nr_cpus(sd_cpu_machine(cpu));

	(void)flags;
	(void)arg;
	for (unsigned t = sd_mm_cpumask_next(mm, 0); t < nr && n < MAX_THREADS;
	     t = sd_mm_cpumask_next(mm, t + 1))
		targets[n++] = t;
	if (!sd_mm_cpumask_test(mm, sd_cpu_id(cpu)) && n < MAX_THREADS)
		targets[n++] = sd_cpu_id(cpu);  /* the caller flushes its own TLB too */
	if (sd_smp_call_many(cpu, targets, n, invalidate_here, &q, 0) < 0)
		sd_tlb_invalidate_local(cpu, mm, va, len);
}

/* ---- the runtime's workload ---- */

struct runtime {
	struct handshake *hs;   /* NULL under `ipi` */
	struct sd_mm *heap;
	unsigned long ops;
	atomic_int failed;
	atomic_uint running;
};

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A mutator: random heap reads and writes, a safepoint poll after each,
 * and a write-protect flip of a random page every PROTECT_EVERY. */
static void mutator(struct sd_cpu *cpu, void *arg)
{
	struct runtime *rt = arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (sd_cpu_id(cpu) + 1);
	int err = sd_switch_mm(cpu, rt->heap);

	for (unsigned long i = 0; !err && i < rt->ops; i++) {
		uint64_t va = HEAP_VA + (next_rand(&rng) % HEAP_PAGES) * SD_PAGE_SIZE;
		int r = sd_access(cpu, va, (i & 3) ? SD_READ : SD_WRITE, NULL);
		if (r && r != -EACCES)
			err = r;        /* -EACCES: the page is write-protected now */
		if (!err && i % PROTECT_EVERY == PROTECT_EVERY - 1) {
			unsigned prot = (next_rand(&rng) & 1) ? SD_PROT_READ : SD_PROT_READ | SD_PROT_WRITE;
			err = sd_mprotect(cpu, rt->heap, va, SD_PAGE_SIZE, prot);
		}
		safepoint(rt->hs, cpu);
	}
	/* Keep answering handshakes until every mutator is done. */
	atomic_fetch_sub(&rt->running, 1);
	sd_cpu_poll_wake(cpu);
	while (rt->hs && atomic_load(&rt->running)) {
		safepoint(rt->hs, cpu);
		sd_cpu_poll(cpu);
	}
	if (err) {
		fprintf(stderr, "cpu %u: %s (%s)\n", sd_cpu_id(cpu), sd_strerror(err), sd_last_error());
		atomic_store(&rt->failed, 1);
	}
	sd_switch_mm(cpu, NULL);
}

struct result {
	double ns_per_op;
	uint64_t flushes, ipis, handshakes, violations;
	uint64_t acks_counted;          /* the strategy's own counter, from sd_stats */
	/* Under a profile (SD_PROFILE): the modelled machine's time per
	 * access, and the waits strict mode could not keep exact. */
	int modelled;
	double model_ns_per_op;
	uint64_t stalls;
};

static int run(const char *strategy, struct handshake *hs, unsigned threads, unsigned long ops,
	       struct result *res)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_machine *m;
	struct sd_cpu *cpu;
	struct runtime rt = { .hs = hs, .ops = ops };
	struct sd_stats st = SD_STATS_INIT;
	struct timespec t0, t1;
	int err;

	cfg.nr_cpus = threads;
	cfg.strategy = strategy;
	cfg.oracle = SD_ORACLE_CHECKED;
	if ((err = sd_machine_create(&cfg, &m)))
		return err;
	atomic_init(&rt.failed, 0);
	atomic_init(&rt.running, threads);
	err = sd_cpu_attach(m, 0, &cpu);
	if (!err)
		err = sd_mm_create(m, &rt.heap);
	if (!err)
		err = sd_mmap(cpu, rt.heap, HEAP_VA, HEAP_PAGES * SD_PAGE_SIZE,
			      SD_PROT_READ | SD_PROT_WRITE);
	if (cpu)
		sd_cpu_detach(cpu);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!err)
		err = sd_machine_run(m, mutator, &rt);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (!err && atomic_load(&rt.failed))
		err = -EIO;
	if (!err) {
		sd_stats_snapshot(m, &st);
		res->ns_per_op = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)ops;
		res->flushes = st.counter[SD_STAT_FLUSH];
		res->ipis = st.counter[SD_STAT_IPI_SENT];
		res->handshakes = hs ? atomic_load(&hs->handshakes) : 0;
		res->acks_counted = hs ? st.counter[hs->ev_ack] : 0;
		res->violations = sd_oracle_violations(m);
		struct sd_model_info info = SD_MODEL_INFO_INIT;
		if (!sd_machine_model_info(m, &info) && info.modelled) {
			res->modelled = 1;
			res->model_ns_per_op = (double)info.clock_max_ns / (double)ops;
			res->stalls = info.seq_stalls + info.stalls;
		}
	}
	if (rt.heap)
		sd_mm_destroy(rt.heap);
	sd_machine_destroy(m);
	return err;
}

int main(int argc, char **argv)
{
	unsigned threads = 4;
	unsigned long ops = 100000;
	int broken = 0, err;
	static struct handshake hs;
	struct sd_strategy s = SD_STRATEGY_INIT;
	struct result r[3] = { 0 };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			ops = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--broken"))
			broken = 1;
		else {
			fprintf(stderr, "usage: %s [--threads N] [--ops N] [--broken]\n", argv[0]);
			return 2;
		}
	}
	if (threads < 2 || threads > MAX_THREADS || !ops) {
		fprintf(stderr, "runtime_handshake: --threads 2..%d, --ops > 0\n", MAX_THREADS);
		return 2;
	}
	hs.broken = broken;
	s.name = "safepoint";
	s.summary = "runtime handshake: mailboxes answered at safepoint polls, no signals";
	s.arg = &hs;
	s.machine_init = hs_machine_init;
	s.machine_fini = hs_machine_fini;
	s.flush = hs_flush;
	if ((err = sd_strategy_register(&s))) {
		fprintf(stderr, "sd_strategy_register: %s (%s)\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	printf("%u runtime threads, %lu heap accesses each, a write-protect flip every %d%s\n",
	       threads, ops, PROTECT_EVERY, broken ? "; PLANTED BUG: acks without invalidating" : "");
	printf("%-10s %12s %9s %9s %11s %11s\n", "strategy", "ns/access", "flushes", "signals",
	       "handshakes", "violations");
	struct sd_strategy mc = SD_STRATEGY_INIT;
	mc.name = "multicast";
	mc.summary = "every CPU of the cpumask invalidates in its IPI handler (sd_smp_call_many)";
	mc.flush = multicast_flush;
	mc.mechanisms = SD_MECH_IPI;
	if ((err = sd_strategy_register(&mc))) {
		fprintf(stderr, "sd_strategy_register: %s (%s)\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	const char *names[3] = { "safepoint", "ipi", "multicast" };
	for (int k = 0; k < 3; k++) {
		if ((err = run(names[k], k ? NULL : &hs, threads, ops, &r[k]))) {
			fprintf(stderr, "%s: %s (%s)\n", names[k], sd_strerror(err), sd_last_error());
			return 1;
		}
		printf("%-10s %12.1f %9llu %9llu %11llu %11llu\n", names[k], r[k].ns_per_op,
		       (unsigned long long)r[k].flushes, (unsigned long long)r[k].ipis,
		       (unsigned long long)r[k].handshakes, (unsigned long long)r[k].violations);
	}
	printf("safepoint / ipi time per access: %.2fx\n", r[0].ns_per_op / r[1].ns_per_op);
	printf("safepoint acks in sd_stats ('%s'): %llu, %s the strategy's own count\n",
	       sd_stat_name((enum sd_stat)hs.ev_ack), (unsigned long long)r[0].acks_counted,
	       r[0].acks_counted == r[0].handshakes ? "equal to" : "NOT equal to");
	if (r[0].modelled)
		printf("modelled ns/access: safepoint %.1f, ipi %.1f (%.2fx); stalls %llu, %llu\n",
		       r[0].model_ns_per_op, r[1].model_ns_per_op,
		       r[0].model_ns_per_op / r[1].model_ns_per_op,
		       (unsigned long long)r[0].stalls, (unsigned long long)r[1].stalls);
	if (r[0].violations)
		printf("oracle: REJECTED safepoint: %llu stale translations used\n",
		       (unsigned long long)r[0].violations);
	else
		printf("oracle: accepted safepoint: no stale translation used\n");
	sd_strategy_unregister("safepoint");
	sd_strategy_unregister("multicast");
	return 0;
}
