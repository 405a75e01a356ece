/* SPDX-License-Identifier: MIT */
/*
 * What every group measures with: medians, iteration counts, the
 * profile's setters, error reports, linear fits, the clock's own cost,
 * spins with a deadline, hwloc pinning and distance classes, and the host
 * primitives both profiles use (a system call, a signal to oneself).
 */
#include "calibrate.h"

/* ---- small helpers ---- */

double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}
int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}
double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
long iters(long n)
{
	long k = (long)((double)n * cal.scale);

	return k < 16 ? 16 : k;
}
double pos(double v)
{
	return v > 0 && isfinite(v) ? v : 0;
}
void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void vset(struct cost *c, double ns, const char *fmt, va_list ap)
{
	c->ns = pos(ns);
	int n = vsnprintf(c->src, sizeof(c->src), fmt, ap);

	if (emu_profile[0] && n > 0 && (size_t)n < sizeof(c->src))
		snprintf(c->src + n, sizeof(c->src) - (size_t)n, "; second pass, modelling on");
	c->set = true;
}
__attribute__((format(printf, 4, 5)))
void set(struct profile *p, enum param k, double ns, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset(&p->c[k], ns, fmt, ap);
	va_end(ap);
}
__attribute__((format(printf, 5, 6)))
void dset(struct profile *p, enum dparam k, int dist, double ns, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset(&p->d[k][dist], ns, fmt, ap);
	va_end(ap);
}
int lib_fail(const char *what, int err)
{
	fprintf(stderr, "sd-calibrate: %s: %s (%s)\n", what, sd_strerror(err), sd_last_error());
	return -1;
}
int sys_fail(const char *what)
{
	fprintf(stderr, "sd-calibrate: %s: %s\n", what, strerror(errno));
	return -1;
}

/* Linear fit y = a + b x by least squares (fixed part and per-unit part). */
void fit(const double *x, const double *y, int n, double *a, double *b)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0;

	for (int i = 0; i < n; i++) {
		sx += x[i];
		sy += y[i];
		sxx += x[i] * x[i];
		sxy += x[i] * y[i];
	}
	*b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
	*a = (sy - *b * sx) / n;
}

/* The cost of reading the clock itself, subtracted from single-op timings. */
double clock_overhead(void)
{
	static double co = -1;
	double v[101];

	if (co >= 0)
		return co;
	for (int i = 0; i < 101; i++) {
		double t0 = now_ns();

		v[i] = now_ns() - t0;
	}
	co = median(v, 101);
	return co;
}

/*
 * Wait for *v to reach @want, spinning, at most @secs seconds: every wait
 * in the calibrator is bounded, so a peer that never runs is an error
 * message, not a hang.
 */
int spin_until(atomic_int *v, int want, double secs)
{
	double deadline = now_ns() + secs * 1e9;

	for (unsigned i = 0; atomic_load_explicit(v, memory_order_acquire) < want; i++) {
		cpu_relax();
		if (!(i & 1023) && now_ns() > deadline)
			return -1;
	}
	return 0;
}

/* The other side of a request flag: wait until it was cleared. */
int spin_until_zero(atomic_int *v, double secs)
{
	double deadline = now_ns() + secs * 1e9;

	for (unsigned i = 0; atomic_load_explicit(v, memory_order_acquire); i++) {
		cpu_relax();
		if (!(i & 1023) && now_ns() > deadline)
			return -1;
	}
	return 0;
}

/* ---- pinning ---- */

int bind_self(hwloc_obj_t pu)
{
	if (hwloc_set_cpubind(cal.topo, pu->cpuset, HWLOC_CPUBIND_THREAD) < 0)
		return sys_fail("hwloc_set_cpubind");
	return 0;
}
void unbind_self(void)
{
	hwloc_set_cpubind(cal.topo, hwloc_topology_get_allowed_cpuset(cal.topo),
			  HWLOC_CPUBIND_THREAD);
}

/* The last-level cache above @pu: the cache ancestor nearest the root. */
static hwloc_obj_t llc_of(hwloc_obj_t pu)
{
	hwloc_obj_t llc = NULL;

	for (hwloc_obj_t o = pu->parent; o; o = o->parent)
		if (hwloc_obj_type_is_cache(o->type))
			llc = o;
	return llc;
}

static hwloc_obj_t ancestor(hwloc_obj_t pu, hwloc_obj_type_t t)
{
	return hwloc_get_ancestor_obj_by_type(cal.topo, t, pu);
}
int distance_class(hwloc_obj_t a, hwloc_obj_t b)
{
	hwloc_obj_t llc = llc_of(a);

	if (ancestor(a, HWLOC_OBJ_CORE) && ancestor(a, HWLOC_OBJ_CORE) == ancestor(b, HWLOC_OBJ_CORE))
		return DIST_CORE;
	if (llc && hwloc_bitmap_isset(llc->cpuset, (unsigned)b->os_index))
		return DIST_LLC;
	if (ancestor(a, HWLOC_OBJ_PACKAGE) && ancestor(a, HWLOC_OBJ_PACKAGE) == ancestor(b, HWLOC_OBJ_PACKAGE))
		return DIST_PACKAGE;
	return DIST_SYSTEM;
}

/* For each class, the first PU (from PU 0) at that distance, or NULL. */
void class_partners(hwloc_obj_t partner[4])
{
	int n = hwloc_get_nbobjs_by_type(cal.topo, HWLOC_OBJ_PU);
	hwloc_obj_t pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);

	for (int d = 0; d < 4; d++)
		partner[d] = NULL;
	for (int i = 1; i < n; i++) {
		hwloc_obj_t pu = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, (unsigned)i);
		int d = distance_class(pu0, pu);

		if (!partner[d])
			partner[d] = pu;
	}
}

/* ---- host primitives shared by both profiles ---- */

double syscall_ns(void)
{
	static double t = -1;
	double v[64];
	long n = iters(500000);

	if (t >= 0)
		return t;
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return t = median(v, cal.reps);
}

atomic_int raw_signals;

static void raw_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	atomic_fetch_add_explicit(&raw_signals, 1, memory_order_release);
}

/* Our own signal, apart from the library's (SIGRTMIN+4 by default). */
int raw_signo(void)
{
	return SIGRTMIN + 6;
}
void raw_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = raw_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(raw_signo(), &sa, NULL);
}

/* A signal sent to oneself and handled: delivery entry plus sigreturn. */
double self_signal_ns(void)
{
	static double t = -1;
	double v[64];
	long n = iters(100000);
	pid_t pid = getpid(), tid = gettid();

	if (t >= 0)
		return t;
	raw_install();
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			syscall(SYS_tgkill, pid, tid, raw_signo());
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return t = median(v, cal.reps);
}
