/* SPDX-License-Identifier: MIT */
/*
 * jvm_safepoint: HotSpot's thread-local handshakes (JEP 312), the way the
 * VM thread asks each Java thread to run an operation (revoke a bias,
 * deoptimize a frame, take a stack trace) without stopping them all.
 *
 * The VM thread arms each Java thread's poll word
 * (SafepointMechanism::arm_local_poll()); compiled code polls it at every
 * loop back-edge and method return and runs the operation there. A thread
 * in native code (a JNI call) or blocked is not waited for: the VM thread
 * runs the operation on its behalf, and the thread, coming back from
 * native, waits until that is done and polls (HandshakeState).
 *
 * Four Java threads: three in compiled loops (a back-edge poll every
 * 100-300 ns of work), one that spends every other stretch in a JNI call.
 * The VM thread makes a handshake after each 20 us of its own work, in
 * real time on this host and in modelled time on milan-36, with the JNI
 * thread and without it.
 *
 * The real time is this host's: with fewer PUs than threads, whose loops
 * never sleep, it is mostly the host scheduler's time slices (milliseconds),
 * not the handshake. The modelled time is the profile's machine's, with a
 * PU for every thread.
 *
 *     cc -std=c11 jvm_safepoint.c $(pkg-config --cflags --libs shootdown)
 *     ./jvm_safepoint [--handshakes N]
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <shootdown/shootdown.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 5               /* CPU 0 is the VM thread; 1-4 run Java code */
#define JNI_THREAD 4            /* the one that calls into native code */

struct run {
	struct sd_handshake *h;
	struct sd_mm *mm;
	unsigned handshakes;
	int with_jni;
	atomic_int ready, done, failed;
	atomic_uint operations[THREADS];        /* ran on the thread, or for it */
	struct sd_handshake_result total;
	double real_ns;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The handshake's operation: runs on the Java thread at its poll, or on
 * the VM thread for a thread in native code. */
static void operation(struct sd_cpu *target, void *arg)
{
	struct run *r = arg;

	atomic_fetch_add(&r->operations[sd_cpu_id(target)], 1);
}

static int vm_thread(struct sd_cpu *cpu, struct run *r)
{
	struct sd_handshake_result res;
	double t0;
	int err = 0;

	while (atomic_load(&r->ready) < THREADS)
		sd_cpu_poll(cpu);
	t0 = now_ns();
	for (unsigned i = 0; !err && i < r->handshakes; i++) {
		err = sd_cpu_work(cpu, 20000);
		if (!err)
			err = sd_handshake_run(r->h, cpu, operation, r, &res);
		r->total.targets += res.targets;
		r->total.ran += res.ran;
		r->total.on_behalf += res.on_behalf;
		r->total.unreached += res.unreached;
		r->total.ns += res.ns;
	}
	r->real_ns = (now_ns() - t0) / r->handshakes;
	return err;
}

static int java_thread(struct sd_cpu *cpu, struct run *r)
{
	unsigned id = sd_cpu_id(cpu);
	uint64_t x = 0x9e3779b97f4a7c15ull * (id + 1);
	int err = 0;

	for (unsigned long i = 0; !err && !atomic_load(&r->done); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (r->with_jni && id == JNI_THREAD && i % 2) {
			/* A JNI call: safe for the whole call, then back to Java,
			 * which waits out a VM thread working for it and polls. */
			err = sd_handshake_set_safe(r->h, cpu, 1);
			if (!err)
				err = sd_cpu_work(cpu, 5000);
			if (!err)
				err = sd_handshake_set_safe(r->h, cpu, 0) < 0 ? -EINVAL : 0;
			continue;
		}
		err = sd_cpu_work(cpu, 100 + x % 200);  /* a loop body */
		if (!err && sd_handshake_poll(r->h, cpu) < 0)   /* its back-edge poll */
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
		err = vm_thread(cpu, r);
		atomic_store(&r->done, 1);
		sd_cpu_poll_wake(cpu);
	} else if (!err) {
		err = java_thread(cpu, r);
	}
	if (err) {
		fprintf(stderr, "cpu %u: %s (%s)\n", sd_cpu_id(cpu), sd_strerror(err), sd_last_error());
		atomic_store(&r->failed, 1);
	}
	sd_switch_mm(cpu, NULL);
}

static int run(const char *profile, int with_jni, unsigned handshakes, struct run *r)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_handshake_config hc = SD_HANDSHAKE_CONFIG_INIT;
	struct sd_machine *m;
	int err;

	cfg.nr_cpus = THREADS;
	cfg.strategy = "ipi";
	cfg.profile = profile;
	memset(r, 0, sizeof(*r));
	r->handshakes = handshakes;
	r->with_jni = with_jni;
	if ((err = sd_machine_create(&cfg, &m)))
		return err;
	hc.kind = SD_HANDSHAKE_POLL;
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
	unsigned handshakes = 200;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--handshakes") && i + 1 < argc && atoi(argv[i + 1]) > 0)
			handshakes = (unsigned)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--handshakes N]\n", argv[0]);
			return 2;
		}
	}
	printf("thread-local handshakes: a VM thread, %d Java threads, %u handshakes\n",
	       THREADS - 1, handshakes);
	printf("%-22s %16s %20s %10s %11s  %s\n", "java threads", "real ns/handshake",
	       "modelled ns/handshake", "ran there", "on behalf", "reached");
	for (int jni = 0; jni < 2; jni++) {
		struct run real, model;
		int err = run(NULL, jni, handshakes, &real);

		if (!err)
			err = run("milan-36", jni, handshakes, &model);
		if (err) {
			fprintf(stderr, "%s: %s (%s)\n", jni ? "with JNI" : "all compiled",
				sd_strerror(err), sd_last_error());
			return 1;
		}
		printf("%-22s %16.0f %20.0f %10u %11u  %u of %u\n",
		       jni ? "one in a JNI call" : "all in compiled code", real.real_ns,
		       (double)model.total.ns / handshakes, model.total.ran, model.total.on_behalf,
		       model.total.targets - model.total.unreached, model.total.targets);
	}
	return 0;
}
