/* SPDX-License-Identifier: MIT */
/*
 * Group lines: a cache line and a lock bounced between two pinned
 * threads, at every distance class hwloc reports.
 */
#include "calibrate.h"

/* ---- cache-line and lock ping-pong between two pinned threads ---- */

struct pingpong {
	_Alignas(64) atomic_int turn;
	atomic_int lock;
	hwloc_obj_t pu[2];
	long rounds;
	bool use_lock;
	atomic_int started;
	int err;
	double ns;
};

static void pp_lock(atomic_int *l)
{
	while (atomic_exchange_explicit(l, 1, memory_order_acquire))
		while (atomic_load_explicit(l, memory_order_relaxed))
			cpu_relax();
}

/*
 * Side @me (0 or 1) waits for its turn and passes it on.
 *
 * Without use_lock, the turn's line alone moves, as nviennot's
 * core-to-core-latency measures it (src/bench/cas.rs, the source of the
 * patch machines' line_transfer): each side spins on a compare-and-swap
 * from the other's value to its own, so a pass is one fetch of the line
 * for ownership from the side that wrote it last, the transfer the model
 * charges (params.h, line_transfer). A load-spin then a store would add an
 * upgrade of the shared copy to each pass.
 *
 * With use_lock each pass takes the lock (last released by the other
 * side) and updates the turn under it: a lock handoff, whose acquisition
 * and release group_lines() takes off (lock_acquire, charged apart).
 */
static int pp_side(struct pingpong *pp, int me)
{
	double deadline = now_ns() + 10e9;

	for (long i = 0; i < pp->rounds; i++) {
		int want = (int)(2 * i + me);

		for (unsigned k = 0;; k++) {
			int seen = want;

			if (pp->use_lock) {
				if (atomic_load_explicit(&pp->turn, memory_order_acquire) == want)
					break;
			} else if (atomic_compare_exchange_weak_explicit(&pp->turn, &seen, want + 1,
									 memory_order_acq_rel,
									 memory_order_relaxed)) {
				break;
			}
			cpu_relax();
			if (!(k & 4095) && now_ns() > deadline)
				return -1;
		}
		if (pp->use_lock) {
			pp_lock(&pp->lock);
			atomic_store_explicit(&pp->turn, want + 1, memory_order_relaxed);
			atomic_store_explicit(&pp->lock, 0, memory_order_release);
		}
	}
	return 0;
}

static void *pp_thread(void *arg)
{
	struct pingpong *pp = arg;

	if (bind_self(pp->pu[1]))
		pp->err = -1;
	atomic_store(&pp->started, 1);
	if (!pp->err && pp_side(pp, 1))
		pp->err = -1;
	return NULL;
}

/* ns per one-way pass between pu[0] and pu[1]: a round trip is two. */
static int pingpong_ns(hwloc_obj_t a, hwloc_obj_t b, bool use_lock, long rounds, double *ns)
{
	struct pingpong pp = { .pu = { a, b }, .rounds = rounds, .use_lock = use_lock };
	pthread_t th;

	if (bind_self(a))
		return -1;
	if (pthread_create(&th, NULL, pp_thread, &pp))
		return sys_fail("pthread_create");
	int err = spin_until(&pp.started, 1, 5);
	double t0 = now_ns();

	if (!err && !pp.err)
		err = pp_side(&pp, 0);
	double t1 = now_ns();

	pthread_join(th, NULL);
	unbind_self();
	if (err || pp.err) {
		fprintf(stderr, "sd-calibrate: ping-pong between PU %u and PU %u timed out\n",
			a->os_index, b->os_index);
		return -1;
	}
	*ns = (t1 - t0) / (2.0 * (double)rounds);
	return 0;
}

#define PP_BATCH 2000    /* round trips a batch */

/*
 * The median over many short batches: on a shared or virtual machine a
 * thread preempted mid-run inflates one batch's mean, not the median.
 */
static int pingpong_median(hwloc_obj_t a, hwloc_obj_t b, bool use_lock, double *ns)
{
	int nr = cal.quick ? 15 : 61;
	double v[64], w;

	if (pingpong_ns(a, b, use_lock, PP_BATCH, &w))
		return -1;
	for (int r = 0; r < nr; r++)
		if (pingpong_ns(a, b, use_lock, PP_BATCH, &v[r]))
			return -1;
	*ns = median(v, nr);
	return 0;
}

static double pair_line_ns = -1;        /* line_transfer of (pu0, pu1) */
static double lock_acquire_ns;          /* lock_pair_ns(), before the handoffs */

static const char *const pp_what[D_NR] = {
	"a cache-line ping-pong (one atomic int, each side spinning on a compare-and-swap "
	"from the other's value, as nviennot/core-to-core-latency's cas.rs) between two "
	"threads",
	"a spinlock ping-pong (xchg lock; the turn is passed under the lock) between two "
	"threads, less lock_acquire (the pass's own acquisition and release, charged apart)",
};

static int measure_dist(enum dparam k, hwloc_obj_t partner[4])
{
	hwloc_obj_t pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);
	int nearest = -1;
	double val[4];

	for (int d = 0; d < 4; d++) {
		if (!partner[d])
			continue;
		if (pingpong_median(pu0, partner[d], k == D_LOCK_HANDOFF, &val[d]))
			return -1;
		if (k == D_LOCK_HANDOFF)
			val[d] = pos(val[d] - lock_acquire_ns);
		for (int p = 0; p < 2; p++)
			dset(p ? &kern : &host, k, d, val[d], "sd-calibrate --only lines: median of "
			     "%d batches of %d round trips of %s pinned on PU %u and PU %u (%s), "
			     "per one-way pass%s", cal.quick ? 15 : 61, PP_BATCH, pp_what[k],
			     pu0->os_index,
			     partner[d]->os_index, dist_key[d], p ? "" : "; the emulator's "
			     "lines and locks are the host's own");
		if (k == D_LINE_TRANSFER && partner[d] == cal.pu1)
			pair_line_ns = val[d];
	}
	for (int d = 0; d < 4; d++) {
		if (partner[d])
			continue;
		/* The nearest measured class: first farther, then nearer. */
		nearest = -1;
		for (int s = 1; s < 4 && nearest < 0; s++) {
			if (d + s < 4 && partner[d + s])
				nearest = d + s;
			else if (d - s >= 0 && partner[d - s])
				nearest = d - s;
		}
		for (int p = 0; p < 2; p++) {
			if (nearest < 0)
				dset(p ? &kern : &host, k, d, 0, "not present on this machine (one "
				     "PU): no pair to measure; 0");
			else
				dset(p ? &kern : &host, k, d, val[nearest], "not present on this "
				     "machine; copied from %s", dist_key[nearest]);
		}
	}
	return 0;
}

/* An uncontended acquire and release on one thread: the lock's line stays here. */
static double lock_pair_ns(void)
{
	atomic_int l = 0;
	double v[64];
	long n = iters(2000000);

	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			pp_lock(&l);
			atomic_store_explicit(&l, 0, memory_order_release);
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	return median(v, cal.reps);
}
int group_lines(void)
{
	hwloc_obj_t partner[4];

	class_partners(partner);
	const double lk = lock_pair_ns();

	lock_acquire_ns = lk;
	if (measure_dist(D_LINE_TRANSFER, partner) || measure_dist(D_LOCK_HANDOFF, partner))
		return -1;

	for (struct profile *p = &host; p; p = p == &host ? &kern : NULL)
		set(p, P_LOCK_ACQUIRE, lk, "sd-calibrate --only lines: median of %d x %ld "
		    "uncontended acquire (atomic exchange) and release (store-release) pairs of "
		    "a test-and-set lock on one thread, the shape of lib/core/spinlock.c's and of "
		    "an uncontended queued spinlock's fast path", cal.reps, iters(2000000));
	return 0;
}
double line_ns(void)
{
	hwloc_obj_t pu0 = hwloc_get_obj_by_type(cal.topo, HWLOC_OBJ_PU, 0);

	if (pair_line_ns < 0 && cal.pu1 && pingpong_median(pu0, cal.pu1, false, &pair_line_ns))
		pair_line_ns = 0;
	return pos(pair_line_ns);
}
