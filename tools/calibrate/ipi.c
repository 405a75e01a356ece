/* SPDX-License-Identifier: MIT */
/*
 * Group ipi: the emulator's IPIs (real signals between two
 * attached CPUs) and the kernel's (membarrier() across CPUs).
 */
#include "calibrate.h"

static void duo_target(struct sd_cpu *cpu, struct duo *d)
{
	double deadline = now_ns() + 60e9;

	if (sd_switch_mm(cpu, d->mm) || sd_access(cpu, VA_HIT, SD_READ, NULL))
		d->err = -1;
	atomic_store(&d->ready, 1);
	for (unsigned i = 0; !atomic_load_explicit(&d->done, memory_order_acquire); i++) {
		/* A busy target keeps its TLB's lines in its own cache, so an
		 * issuer that invalidates them fetches them: the cost a
		 * broadcast pays at a running CPU. Its hits also move its
		 * modelled clock, so the issuer is not held at the window. */
		if (d->busy)
			sd_access(cpu, VA_HIT, SD_READ, NULL);
		else
			cpu_relax();
		if (!(i & 255)) {
			sd_cpu_quiescent(cpu);
			if (now_ns() > deadline)
				break;
		}
	}
	sd_switch_mm(cpu, NULL);
}

static void duo_body(struct sd_cpu *cpu, void *arg)
{
	struct duo *d = arg;

	if (sd_cpu_id(cpu) == 1) {
		duo_target(cpu, d);
		return;
	}
	if (spin_until(&d->ready, 1, 10) || d->err || sd_switch_mm(cpu, d->mm)) {
		fprintf(stderr, "sd-calibrate: CPU 1 did not start\n");
		d->err = -1;
	} else if (d->work(cpu, d)) {
		d->err = -1;
	}
	sd_switch_mm(cpu, NULL);
	atomic_store_explicit(&d->done, 1, memory_order_release);
}
int duo_run(const char *strategy, unsigned nr_cpus, struct duo *d)
{
	struct sd_machine *m;
	struct sd_cpu *cpu;
	int err = 0;

	if (emu_create(&m, strategy, nr_cpus))
		return -1;
	/* Map the page from this thread attached as CPU 0 for the purpose. */
	err = sd_cpu_attach(m, 0, &cpu);
	if (!err)
		err = sd_mm_create(m, &d->mm);
	if (!err)
		err = sd_mmap(cpu, d->mm, VA_HIT, PAGE, SD_PROT_READ | SD_PROT_WRITE);
	if (!err)
		err = sd_cpu_detach(cpu);
	if (!err && nr_cpus == 1) {
		atomic_store(&d->ready, 1);
		err = sd_machine_run(m, duo_body, d);
	} else if (!err) {
		err = sd_machine_run(m, duo_body, d);
	}
	if (err)
		lib_fail("two-CPU run", err);
	if (d->mm)
		sd_mm_destroy(d->mm);
	sd_machine_destroy(m);
	return err || d->err ? -1 : 0;
}

static void stamp_fn(struct sd_cpu *target, void *arg)
{
	(void)target;
	*(double *)arg = now_ns();
}

static int ipi_work(struct sd_cpu *cpu, struct duo *d)
{
	for (long i = -d->n / 4; i < d->n; i++) {
		double t2 = 0, t0 = now_ns();

		TRY(sd_smp_call_single(cpu, 1, stamp_fn, &t2));
		double t3 = now_ns();

		if (i >= 0) {
			d->a[i] = t2 - t0;
			d->rtt[i] = t3 - t0;
		}
	}
	return 0;
}

/* The sender's side of a raw signal to a spinning thread on pu1. */
struct spinner {
	hwloc_obj_t pu;
	atomic_int stop, started;
	atomic_int reset;       /* main asks, the spinner empties gaps and clears */
	double *gaps;           /* gaps in the spin loop longer than gap_min */
	long nr_gaps, max_gaps;
	double gap_min;
	bool plain;             /* spin on @stop alone: no clock, no gaps */
	pid_t tid;
};

static void *spinner_thread(void *arg)
{
	struct spinner *s = arg;
	double deadline = now_ns() + 60e9;

	bind_self(s->pu);
	s->tid = gettid();
	atomic_store(&s->started, 1);
	if (s->plain) {
		while (!atomic_load_explicit(&s->stop, memory_order_relaxed))
			;
		return NULL;
	}
	double prev = now_ns();

	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		double t = now_ns();

		/* Only this thread writes the gaps until it is joined. */
		if (atomic_load_explicit(&s->reset, memory_order_relaxed)) {
			s->nr_gaps = 0;
			atomic_store(&s->reset, 0);
		}
		if (t - prev > s->gap_min && s->nr_gaps < s->max_gaps)
			s->gaps[s->nr_gaps++] = t - prev;
		prev = t;
		if (t > deadline)
			break;
	}
	return NULL;
}

static int spinner_start(struct spinner *s, pthread_t *th)
{
	if (pthread_create(th, NULL, spinner_thread, s))
		return sys_fail("pthread_create");
	if (spin_until(&s->started, 1, 5)) {
		atomic_store(&s->stop, 1);
		pthread_join(*th, NULL);
		fprintf(stderr, "sd-calibrate: spinning thread did not start\n");
		return -1;
	}
	return 0;
}

static void spinner_stop(struct spinner *s, pthread_t th)
{
	atomic_store(&s->stop, 1);
	pthread_join(th, NULL);
}

static int raw_send_ns(double *ns)
{
	struct spinner s = { .pu = cal.pu1, .gap_min = 1e18 };
	long n = iters(20000);
	double *v = calloc((size_t)n, sizeof(*v));
	pthread_t th;
	int err = 0;

	if (!v)
		return sys_fail("calloc");
	raw_install();
	if (bind_self(cal.pu0) || spinner_start(&s, &th)) {
		free(v);
		return -1;
	}
	for (long i = -n / 4; i < n && !err; i++) {
		int before = atomic_load(&raw_signals);
		double t0 = now_ns();

		pthread_sigqueue(th, raw_signo(), (union sigval){ 0 });
		double t1 = now_ns();

		err = spin_until(&raw_signals, before + 1, 2);
		if (i >= 0)
			v[i] = t1 - t0 - clock_overhead();
	}
	spinner_stop(&s, th);
	unbind_self();
	if (err)
		fprintf(stderr, "sd-calibrate: a raw signal to PU %u was never handled\n",
			cal.pu1->os_index);
	*ns = median(v, (int)n);
	free(v);
	return err;
}

static int host_ipi(void)
{
	struct duo d = { .work = ipi_work, .n = iters(20000) };
	int ret = -1;
	double send = 0;

	d.a = calloc((size_t)d.n, sizeof(double));
	d.rtt = calloc((size_t)d.n, sizeof(double));
	if (!d.a || !d.rtt) {
		sys_fail("calloc");
		goto out;
	}
	if (duo_run("ipi", 2, &d) || raw_send_ns(&send))
		goto out;
	double a = median(d.a, (int)d.n), rtt = median(d.rtt, (int)d.n);
	double entry = pos(self_signal_ns() - syscall_ns()) / 2, lt = line_ns();

	set(&host, P_IPI_SEND, send, "sd-calibrate --only ipi: median of %ld pthread_sigqueue() "
	    "(rt_tgsigqueueinfo, the emulator's IPI) to a thread spinning on PU %u, sender-side "
	    "duration of the call; the request-queue push is not included", d.n,
	    cal.pu1->os_index);
	set(&host, P_IPI_SEND_TARGET, send, "sd-calibrate --only ipi: = ipi_send: each further "
	    "target of the emulator's IPI is one more rt_tgsigqueueinfo()");
	set(&host, P_IRQ_ENTRY, entry, "sd-calibrate --only ipi: half of (tgkill() of a signal to "
	    "oneself with an empty handler, %.1f ns, minus getppid(), %.1f ns): signal frame "
	    "setup and sigreturn, split evenly", self_signal_ns(), syscall_ns());
	set(&host, P_IRQ_EXIT, entry, "sd-calibrate --only ipi: the other half of the same");
	set(&host, P_IPI_DELIVERY, a - send - entry, "sd-calibrate --only ipi: median over %ld "
	    "sd_smp_call_single() CPU 0 -> 1 (PUs %u, %u) of the time from the call to the "
	    "function's start on the target (%.1f ns), minus ipi_send and irq_entry", d.n,
	    cal.pu0->os_index, cal.pu1->os_index, a);
	set(&host, P_IPI_HANDLER, rtt - a - lt, "sd-calibrate --only ipi: median round trip of "
	    "the same calls (%.1f ns) minus the time to the function's start, minus one "
	    "line_transfer (%.1f ns, the ack): the library's handler and ack", rtt, lt);
	ret = 0;
out:
	free(d.a);
	free(d.rtt);
	return ret;
}

/* @n membarrier(PRIVATE_EXPEDITED) calls, each timed into @v. */
static void membarrier_ns(double *v, long n)
{
	for (long i = 0; i < n; i++) {
		double t0 = now_ns();

		syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
		if (v)
			v[i] = now_ns() - t0 - clock_overhead();
	}
}

/* Mean ns of @n membarrier(PRIVATE_EXPEDITED) calls timed as one batch,
 * with a thread of the process spinning on pu1 that touches nothing but
 * its stop flag (@spin), or with none: the native twin's shape
 * (component/ipi_roundtrip/native). */
static int membarrier_batch_ns(long n, bool spin, double *ns)
{
	struct spinner s = { .pu = cal.pu1, .plain = true };
	pthread_t th;

	if (spin && spinner_start(&s, &th))
		return -1;
	membarrier_ns(NULL, n / 4);
	double t0 = now_ns();

	membarrier_ns(NULL, n);
	*ns = (now_ns() - t0) / (double)n;
	if (spin)
		spinner_stop(&s, th);
	return 0;
}

/*
 * The calls that sent an IPI: a call finds the other thread off its PU
 * whenever the host preempts it, and then costs what a call with nobody
 * to interrupt costs (on a loaded machine, most calls). Those slower than
 * twice the 99th percentile of the lone calls are taken as the IPI calls;
 * their median is returned, their count in *@nr.
 */
static double ipi_calls_median(double *with, long n, double *without, long *nr)
{
	qsort(without, (size_t)n, sizeof(double), cmp_double);
	double cut = 2 * without[n * 99 / 100];
	long k = 0;

	for (long i = 0; i < n; i++)
		if (with[i] > cut)
			with[k++] = with[i];
	*nr = k;
	return k ? median(with, (int)k) : cut;
}

static double fence_ns(void)
{
	static _Atomic unsigned long word;
	double v[64];
	long n = iters(1000000);

	/* A seq_cst read-modify-write: a full barrier (a locked instruction
	 * on x86), as smp_mb() is, and one ThreadSanitizer builds accept,
	 * unlike atomic_thread_fence(). */
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			atomic_fetch_add_explicit(&word, 0, memory_order_seq_cst);
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return median(v, cal.reps);
}

static void kern_ipi_unmeasured(const char *why)
{
	for (int k = P_IPI_SEND; k <= P_IPI_HANDLER; k++)
		set(&kern, (enum param)k, 0, "not measured: %s; 0", why);
}

static int kern_ipi(void)
{
	long n = iters(50000), nr_ipi;
	struct spinner s = { .pu = cal.pu1, .gap_min = 150, .max_gaps = 2 * n };
	double *with = calloc((size_t)n, sizeof(double)), *without = calloc((size_t)n, sizeof(double));
	pthread_t th;

	if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) {
		kern_ipi_unmeasured("membarrier(REGISTER_PRIVATE_EXPEDITED) failed");
		free(with);
		free(without);
		return 0;
	}
	s.gaps = calloc((size_t)s.max_gaps, sizeof(double));
	if (!s.gaps || !with || !without) {
		free(with);
		free(without);
		free(s.gaps);
		return sys_fail("calloc");
	}
	bind_self(cal.pu0);
	membarrier_ns(NULL, n / 4);
	membarrier_ns(without, n);
	double lone = median(without, (int)n);

	if (spinner_start(&s, &th)) {
		free(s.gaps);
		free(with);
		free(without);
		return -1;
	}
	membarrier_ns(NULL, n / 4);
	atomic_store(&s.reset, 1);
	if (spin_until_zero(&s.reset, 5)) {
		spinner_stop(&s, th);
		free(s.gaps);
		free(with);
		free(without);
		return -1;
	}
	membarrier_ns(with, n);
	spinner_stop(&s, th);
	/* The round trip itself with a target that only spins: a target
	 * reading the clock to find the IPI's gap (above) takes IPIs
	 * measurably slower in a guest (about 1.4x here), and the per-call
	 * clock reads add their own. */
	double batch_with, batch_lone;
	int err = membarrier_batch_ns(n, true, &batch_with) ||
		  membarrier_batch_ns(n, false, &batch_lone);
	unbind_self();
	if (err) {
		free(s.gaps);
		free(with);
		free(without);
		return -1;
	}

	double per_call = ipi_calls_median(with, n, without, &nr_ipi) - lone;
	double d = batch_with - batch_lone;
	long nr_gaps = s.nr_gaps;
	double stolen = nr_gaps ? median(s.gaps, (int)nr_gaps) - clock_overhead() : 0;
	double h = fence_ns(), send = cpuid_ns(), lt = line_ns();
	double entry = pos(stolen - h) / 2;
	/* The round trip is measured; its split is not. When the estimated
	 * send and entry (a CPUID, half an IPI's gap beside a clock-reading
	 * spinner, which takes IPIs slower) leave no time for delivery, scale
	 * them down together so that the parts still add up to the round
	 * trip: a model of this machine must charge what it measured. */
	double scale = 1;
	if (send + entry > 0 && send + entry + h + lt > d) {
		scale = pos(d - h - lt) / (send + entry);
		send *= scale;
		entry *= scale;
	}

	free(with);
	free(without);
	free(s.gaps);
	set(&kern, P_IPI_HANDLER, h, "sd-calibrate --only ipi: membarrier's IPI handler is one full "
	    "barrier (ipi_mb): median of %d x %ld seq_cst atomic_fetch_add (a full barrier) in user space",
	    cal.reps, iters(1000000));
	set(&kern, P_IRQ_ENTRY, entry, "sd-calibrate --only ipi: half of (the median gap an IPI "
	    "leaves in a clock-reading loop spinning on PU %u, %.1f ns over %ld gaps for %ld "
	    "membarrier calls, minus ipi_handler): interrupt entry and exit split evenly; times "
	    "%.3f, the scale that keeps the round trip's parts within it (ipi_delivery)",
	    cal.pu1->os_index, stolen, nr_gaps, n, scale);
	set(&kern, P_IRQ_EXIT, entry, "sd-calibrate --only ipi: the other half of the same gap");
	set(&kern, P_IPI_SEND, send, "sd-calibrate --only ipi: estimate: median CPUID time (%s), "
	    "as the ICR write of an IPI %s; not separable from delivery in user space; times %.3f "
	    "(ipi_delivery says why)", cal.hypervisor ? "a VM exit in this guest" :
	    "a serialising instruction", cal.hypervisor ? "exits to the hypervisor the same way" :
	    "costs a serialising MSR write", scale);
	set(&kern, P_IPI_SEND_TARGET, send, "sd-calibrate --only ipi: = ipi_send: x2APIC sends one "
	    "ICR write per further target");
	set(&kern, P_IPI_DELIVERY, pos(d - send - entry - h - lt), "sd-calibrate --only ipi: "
	    "membarrier(PRIVATE_EXPEDITED) (registered) from PU %u with a thread of the process "
	    "spinning on PU %u, the mean of %ld calls timed together (%.1f ns), minus the same "
	    "with no other thread (%.1f ns), = %.1f ns an IPI round trip, minus ipi_send, "
	    "irq_entry, ipi_handler and one line_transfer (the ack, %.1f ns), the first two scaled "
	    "down together when they would leave less than nothing; timed one by one "
	    "beside the clock-reading spinner the round trip is %.1f ns (median of the %ld of %ld "
	    "calls that sent an IPI)", cal.pu0->os_index, cal.pu1->os_index, n, batch_with,
	    batch_lone, d, lt, per_call, nr_ipi, n);
	return 0;
}
int group_ipi(void)
{
	if (!cal.pu1) {
		for (int k = P_IPI_SEND; k <= P_IPI_HANDLER; k++)
			set(&host, (enum param)k, 0, "not measured: this machine has one PU; 0");
		kern_ipi_unmeasured("this machine has one PU");
		return 0;
	}
	if (kern_ipi() || host_ipi())
		return -1;
	kern.mech_source[0] = "this host's kernel IPIs, measured by sd-calibrate --only ipi";
	host.mech_source[0] = "emulated: libshootdown's IPIs (POSIX signals between pinned "
			      "threads), measured by sd-calibrate --only ipi";
	return 0;
}
