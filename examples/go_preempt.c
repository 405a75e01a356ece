/* SPDX-License-Identifier: MIT */
/*
 * go_preempt: stopping every goroutine's thread, as Go's garbage collector
 * does, with and without asynchronous preemption.
 *
 * Since Go 1.14 the runtime preempts a running goroutine with a signal
 * (runtime/preempt.go, suspendG() and preemptM(); SIGURG). The handler
 * preempts only at an asynchronous safe point; elsewhere (runtime code,
 * a write barrier, an unsafe point the compiler marked) it refuses, and
 * suspendG() signals again after a short wait, while the goroutine also
 * stops by itself at its next synchronous safe point, a function prologue.
 * Before 1.14 (and with GODEBUG=asyncpreemptoff=1) only those prologues
 * stopped it: a loop without calls could hold up the whole world (golang/go
 * issue 10958).
 *
 * Four goroutine threads loop over work units; a unit is at an
 * asynchronous safe point 70% of the time, and a call, with its prologue's
 * check, comes every CALL_EVERY units. A fifth thread stops them all, one
 * world stop after another, by signals (SD_HANDSHAKE_SIGNAL) and by the
 * prologue checks alone (SD_HANDSHAKE_POLL), in real time on this host and
 * in modelled time on milan-36.
 *
 * The real time is this host's: with fewer PUs than threads, whose loops
 * never sleep, it is mostly the host scheduler's time slices (milliseconds),
 * not the handshake. The modelled time is the profile's machine's, with a
 * PU for every thread.
 *
 *     cc -std=c11 go_preempt.c $(pkg-config --cflags --libs shootdown)
 *     ./go_preempt [--stops N]
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <shootdown/shootdown.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 5               /* CPU 0 stops the world; 1-4 run goroutines */
#define UNIT_NS 200             /* one work unit of a goroutine */
#define CALL_EVERY 25           /* units between two function calls (prologue checks) */

struct run {
	struct sd_handshake *h;
	struct sd_mm *mm;
	unsigned stops;
	atomic_int ready, done, failed;
	_Atomic unsigned char unsafe[THREADS];  /* in a unit that is no async safe point */
	struct sd_handshake_result total;
	double real_ns;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* isAsyncSafePoint(), as the signal handler sees the interrupted thread. */
static int async_safe_point(struct sd_cpu *target, void *arg)
{
	struct run *r = arg;

	return !atomic_load_explicit(&r->unsafe[sd_cpu_id(target)], memory_order_relaxed);
}

static void stopped(struct sd_cpu *target, void *arg)
{
	(void)target;
	(void)arg;              /* the goroutine is parked here; the GC scans its stack */
}

static int stop_the_world(struct sd_cpu *cpu, struct run *r)
{
	struct sd_handshake_result res;
	double t0;
	int err = 0;

	while (atomic_load(&r->ready) < THREADS)
		sd_cpu_poll(cpu);
	t0 = now_ns();
	for (unsigned i = 0; !err && i < r->stops; i++) {
		err = sd_handshake_run(r->h, cpu, stopped, NULL, &res);
		r->total.targets += res.targets;
		r->total.unreached += res.unreached;
		r->total.refusals += res.refusals;
		r->total.resends += res.resends;
		r->total.ns += res.ns;
		if (!err)
			err = sd_cpu_work(cpu, 20000);  /* the mutators run between two stops */
	}
	r->real_ns = (now_ns() - t0) / r->stops;
	return err;
}

static int goroutine(struct sd_cpu *cpu, struct run *r)
{
	unsigned id = sd_cpu_id(cpu);
	uint64_t x = 0x9e3779b97f4a7c15ull * (id + 1);
	int err = 0;

	for (unsigned long u = 0; !err && !atomic_load(&r->done); u++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		atomic_store_explicit(&r->unsafe[id], x % 10 >= 7, memory_order_relaxed);
		err = sd_cpu_work(cpu, UNIT_NS);
		atomic_store_explicit(&r->unsafe[id], 0, memory_order_relaxed);
		/* Signals arrive by themselves: a real one on this host, at the
		 * work's end in modelled time. sd_cpu_poll() is for waits, not
		 * for this: in strict mode it would park the thread until woken. */
		if (!err && u % CALL_EVERY == 0 && sd_handshake_poll(r->h, cpu) < 0)
			err = -EINVAL;
	}
	return err;
}

static void thread_body(struct sd_cpu *cpu, void *arg)
{
	struct run *r = arg;
	int err = sd_switch_mm(cpu, r->mm);

	atomic_fetch_add(&r->ready, 1);
	sd_cpu_poll_wake(cpu);
	if (!err && sd_cpu_id(cpu) == 0) {
		err = stop_the_world(cpu, r);
		atomic_store(&r->done, 1);
		sd_cpu_poll_wake(cpu);
	} else if (!err) {
		err = goroutine(cpu, r);
	}
	if (err) {
		fprintf(stderr, "cpu %u: %s (%s)\n", sd_cpu_id(cpu), sd_strerror(err), sd_last_error());
		atomic_store(&r->failed, 1);
	}
	sd_switch_mm(cpu, NULL);
}

static int run(const char *profile, unsigned kind, unsigned stops, struct run *r)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	struct sd_machine *m;
	int err;

	cfg.nr_cpus = THREADS;
	cfg.strategy = "ipi";
	cfg.profile = profile;
	memset(r, 0, sizeof(*r));
	r->stops = stops;
	if ((err = sd_machine_create(&cfg, &m)))
		return err;
	hc.kind = kind;
	hc.safe_point = async_safe_point;
	hc.safe_point_arg = r;
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
		const char *name;
		unsigned kind;
	} ways[] = { { "signals (Go 1.14+)", SD_HANDSHAKE_SIGNAL },
		     { "prologues only (asyncpreemptoff)", SD_HANDSHAKE_POLL } };
	unsigned stops = 100;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--stops") && i + 1 < argc && atoi(argv[i + 1]) > 0)
			stops = (unsigned)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--stops N]\n", argv[0]);
			return 2;
		}
	}
	printf("stop the world: %d goroutine threads, a call every %d units of %d ns, "
	       "30%% of units unsafe; %u stops\n", THREADS - 1, CALL_EVERY, UNIT_NS, stops);
	printf("%-34s %13s %15s %9s %8s  %s\n", "preemption", "real ns/stop", "modelled ns/stop",
	       "refusals", "resends", "threads stopped");
	for (unsigned wi = 0; wi < 2; wi++) {
		struct run real, model;
		int err = run(NULL, ways[wi].kind, stops, &real);

		if (!err)
			err = run("milan-36", ways[wi].kind, stops, &model);
		if (err) {
			fprintf(stderr, "%s: %s (%s)\n", ways[wi].name, sd_strerror(err), sd_last_error());
			return 1;
		}
		printf("%-34s %13.0f %15.0f %9.2f %8.2f  %u of %u\n", ways[wi].name, real.real_ns,
		       (double)model.total.ns / stops, (double)model.total.refusals / stops,
		       (double)model.total.resends / stops,
		       model.total.targets - model.total.unreached, model.total.targets);
	}
	return 0;
}
