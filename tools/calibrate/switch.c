/* SPDX-License-Identifier: MIT */
/*
 * Group switch: context switches and the scheduler, in the
 * emulator (tasks, task.h) and in the kernel (pipe ping-pong between
 * threads and processes, thread and process creation).
 */
#include "calibrate.h"

/* ---- tasks (task.h): the emulator's scheduler ---- */

/* Two tasks on one CPU pass a turn through two wait queues: each turn is
 * one sd_task_wake() of a sleeper and one switch between host threads. */
struct host_pp {
	struct sd_waitq *q[2];
	atomic_uint turn;
	long turns;
	double wake_ns;          /* summed over task 0's wakes */
	long wakes;
};

struct host_player {
	struct host_pp *pp;
	unsigned me;
};

static bool host_turn_is(void *arg)
{
	struct host_player *p = arg;

	return atomic_load(&p->pp->turn) == p->me;
}

static void host_player(struct sd_task *self, void *arg)
{
	struct host_player *p = arg;
	struct host_pp *pp = p->pp;

	for (long i = 0; i < pp->turns; i++) {
		if (sd_task_wait(self, pp->q[p->me], host_turn_is, p))
			return;
		atomic_store(&pp->turn, 1 - p->me);
		double t0 = now_ns();

		sd_task_wake(self, pp->q[1 - p->me], 1);
		if (p->me == 0 && i) {
			pp->wake_ns += now_ns() - t0;
			pp->wakes++;
		}
	}
}

/* One run of @turns turns each: ns per turn (a wake and a switch), and
 * the mean of task 0's sd_task_wake() of a waiting task in *@wake. */
static double host_pp_run(long turns, double *wake)
{
	struct sd_machine *m = NULL;
	struct sd_mm *mm = NULL;
	struct host_pp pp = { .turns = turns };
	struct host_player pl[2] = { { &pp, 0 }, { &pp, 1 } };
	struct sd_task_config cfg = SD_TASK_CONFIG_INIT;
	double t = -1;

	atomic_init(&pp.turn, 0);
	if (emu_create(&m, "ipi", 1) || sd_mm_create(m, &mm) ||
	    sd_waitq_create(m, "ping", &pp.q[0]) || sd_waitq_create(m, "pong", &pp.q[1]))
		goto out;
	cfg.mm = mm;
	if (sd_task_create(m, &cfg, host_player, &pl[0], NULL) ||
	    sd_task_create(m, &cfg, host_player, &pl[1], NULL))
		goto out;
	double t0 = now_ns();

	if (sd_sched_run(m))
		goto out;
	t = (now_ns() - t0) / (2.0 * (double)turns);
	*wake = pp.wakes ? pp.wake_ns / (double)pp.wakes : 0;
out:
	if (t < 0)
		fprintf(stderr, "sd-calibrate: tasks: %s\n", sd_last_error());
	if (pp.q[0])
		sd_waitq_destroy(pp.q[0]);
	if (pp.q[1])
		sd_waitq_destroy(pp.q[1]);
	if (mm)
		sd_mm_destroy(mm);
	if (m)
		sd_machine_destroy(m);
	return t;
}

static void host_nop_task(struct sd_task *self, void *arg)
{
	(void)self;
	(void)arg;
}

struct host_forker {
	long n, done;
	double fork_ns, mm_fork_ns;
};

/* sd_task_fork() of an empty mm against sd_mm_fork() of one: the task's
 * own part (its thread's creation, its queueing). */
static void host_forker(struct sd_task *self, void *arg)
{
	struct host_forker *f = arg;
	struct sd_cpu *c = sd_task_cpu(self);
	struct sd_mm *child;

	for (long i = 0; i < f->n; i++) {
		double t0 = now_ns();

		if (sd_mm_fork(c, sd_task_mm(self), &child)) {
			fprintf(stderr, "sd-calibrate: sd_mm_fork: %s\n", sd_last_error());
			return;
		}
		f->mm_fork_ns += now_ns() - t0;
		sd_mm_destroy(child);
		t0 = now_ns();
		if (sd_task_fork(self, host_nop_task, NULL, NULL)) {
			fprintf(stderr, "sd-calibrate: sd_task_fork: %s\n", sd_last_error());
			return;
		}
		f->fork_ns += now_ns() - t0;
		f->done++;
		sd_task_yield(self);    /* the child runs and returns */
	}
}

static int host_sched(void)
{
	double v[64], w[64], wake = 0;
	long n = iters(20000);
	struct sd_machine *m = NULL;
	struct sd_mm *mm = NULL;
	struct host_forker f = { .n = iters(200) };
	struct sd_task_config cfg = SD_TASK_CONFIG_INIT;

	for (int r = -1; r < cal.reps; r++) {
		double t = host_pp_run(n, &wake);

		if (t < 0)
			return -1;
		if (r >= 0) {
			v[r] = t;
			w[r] = wake;
		}
	}
	double turn = median(v, cal.reps), wk = median(w, cal.reps);

	set(&host, P_SCHED_WAKEUP, wk, "sd-calibrate --only switch: median of %d runs of the mean "
	    "sd_task_wake() of a waiting task by a task on the same CPU, %ld turns, 1 CPU, "
	    "strategy ipi: the wait queue, try_to_wake_up() and the run-queue lock", cal.reps, n);
	set(&host, P_SCHED_SWITCH, turn - wk, "sd-calibrate --only switch: median of %d x %ld "
	    "turns of two tasks passing a turn through two wait queues on 1 CPU (%.1f ns a "
	    "turn), minus its wakeup: __schedule() and the hand-over of the CPU between two host "
	    "threads (a futex wake and a futex wait)", cal.reps, 2 * n, turn);
	set(&host, P_SCHED_MIGRATE, wk, "not measured apart: a migration here is the same "
	    "dequeue and enqueue under run-queue locks as a wakeup's, taken as sched_wakeup");
	set(&host, P_SCHED_BALANCE_INTERVAL, 4000000, "the library's default without a model "
	    "(task.h): 4 ms of the CPU's time");
	if (emu_create(&m, "ipi", 1) || sd_mm_create(m, &mm))
		goto fail;
	cfg.mm = mm;
	if (sd_task_create(m, &cfg, host_forker, &f, NULL) || sd_sched_run(m) || f.done != f.n)
		goto fail;
	sd_mm_destroy(mm);
	sd_machine_destroy(m);
	set(&host, P_TASK_FORK, pos(f.fork_ns / (double)f.n - f.mm_fork_ns / (double)f.n),
	    "sd-calibrate --only switch: mean of %ld sd_task_fork() of an empty mm (%.1f ns) "
	    "minus sd_mm_fork() of one (%.1f ns), 1 CPU: the task's part (its host thread's "
	    "creation, its queueing)", f.n, f.fork_ns / (double)f.n, f.mm_fork_ns / (double)f.n);
	return 0;
fail:
	fprintf(stderr, "sd-calibrate: tasks: %s\n", sd_last_error());
	if (mm)
		sd_mm_destroy(mm);
	if (m)
		sd_machine_destroy(m);
	return -1;
}

/* ---- context switch and traps ---- */

static int host_switch(void)
{
	struct emu e;
	struct sd_mm *mm2 = NULL;
	double v[64];
	long n = iters(200000);
	int ret = -1;

	if (emu_open(&e, "ipi") || emu_map(&e, 1))
		goto out;
	if (sd_mm_create(e.m, &mm2)) {
		lib_fail("sd_mm_create", -ENOMEM);
		goto out;
	}
	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			sd_switch_mm(e.cpu, mm2);
			sd_switch_mm(e.cpu, e.mm);
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (2.0 * (double)n);
	}
	set(&host, P_CONTEXT_SWITCH, median(v, cal.reps), "sd-calibrate --only switch: median of "
	    "%d x %ld sd_switch_mm() alternating between two mms, 1 CPU, strategy ipi: the "
	    "x86 switch_mm_irqs_off() bookkeeping (loaded_mm, the mm_cpumask bits, the "
	    "tlb_gen check, the PCID slots) on top of what every strategy's switch does; "
	    "an arm64 ASID switch costs less in this emulator", cal.reps, 2 * n);
	ret = 0;
out:
	if (mm2) {
		sd_switch_mm(e.cpu, e.mm);
		sd_mm_destroy(mm2);
	}
	emu_close(&e);
	return ret;
}

/* Pin the calling process (after fork: one thread) to @os_index. */
static void pin_process(unsigned os_index)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(os_index, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static double pipe_rtt_ns(int w, int r, long n)
{
	char c = 0;
	double t0 = now_ns();

	for (long i = 0; i < n; i++)
		if (write(w, &c, 1) != 1 || read(r, &c, 1) != 1)
			return -1;
	return (now_ns() - t0) / (double)n;
}

/* A thread of this process on the same PU, echoing what comes through
 * one pipe back through another. */
struct echo {
	int r, w;
	unsigned pu;
};

static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	char c;

	pin_process(e->pu);     /* the calling thread: sched_setaffinity(0) */
	while (read(e->r, &c, 1) == 1 && write(e->w, &c, 1) == 1)
		;
	return NULL;
}

/* Ping-pong with an echo thread on @pu: the median round trip. */
static double echo_rtt(hwloc_obj_t pu, long n)
{
	int a[2], b[2];
	double v[64];
	struct echo e;
	pthread_t th;
	int err;

	if (pipe(a) || pipe(b))
		return -1;
	e = (struct echo){ a[0], b[1], pu->os_index };
	if (pthread_create(&th, NULL, echo_thread, &e))
		return -1;
	err = pipe_rtt_ns(a[1], b[0], n / 4) < 0;
	for (int r = 0; r < cal.reps && !err; r++) {
		v[r] = pipe_rtt_ns(a[1], b[0], n);
		err = v[r] < 0;
	}
	close(a[1]);
	pthread_join(th, NULL);
	close(a[0]);
	close(b[0]);
	close(b[1]);
	if (err)
		return -1;
	return median(v, cal.reps);
}

/*
 * The scheduler apart from switch_mm: two threads of one process pinned on
 * one PU ping-pong through pipes (perf bench sched pipe -T's shape): a
 * round trip is two wakeups, two switches without an address-space change
 * and two write+read pairs. The wakeup is not measured apart: on one PU
 * the woken reader preempts the writer inside the write() that wakes it,
 * and across PUs (a KVM guest here) that write() pays the guest's IPI
 * exit. So sched_switch holds both, as the ping-pong pays them, one
 * wakeup per switch.
 */
static int kern_sched(double *thread_rtt)
{
	int self[2];
	long n = iters(20000);
	double pr[64];
	int err = 0;

	if (pipe(self))
		return sys_fail("pipe");
	bind_self(cal.pu0);
	double rtt = echo_rtt(cal.pu0, n);

	for (int r = 0; r < cal.reps && !err; r++) {
		pr[r] = pipe_rtt_ns(self[1], self[0], n);
		err = pr[r] < 0;
	}
	unbind_self();
	close(self[0]);
	close(self[1]);
	if (err || rtt < 0)
		return sys_fail("thread ping-pong");
	double pair = median(pr, cal.reps);

	*thread_rtt = rtt;
	set(&kern, P_SCHED_SWITCH, pos((rtt - 2 * pair) / 2), "sd-calibrate --only switch: two "
	    "threads of one process pinned on PU %u ping-pong a byte through two pipes (perf "
	    "bench sched pipe -T's shape), median of %d x %ld round trips (%.1f ns), minus two "
	    "write+read pairs without a sleeper (%.1f ns each), halved: try_to_wake_up(), "
	    "__schedule() and __switch_to() between two threads of one mm (no switch_mm), the "
	    "wakeup included (sched_wakeup 0)", cal.pu0->os_index, cal.reps, n, rtt, pair);
	set(&kern, P_SCHED_WAKEUP, 0, "not measured apart: included in sched_switch (the "
	    "ping-pong pays one wakeup per switch; on one PU the woken reader preempts the "
	    "writer inside the write() that wakes it); 0");
	set(&kern, P_SCHED_MIGRATE, 0, "not measured: detach_task() and attach_task() are a "
	    "dequeue and an enqueue under run-queue locks, no figure apart from a switch's; 0");
	set(&kern, P_SCHED_BALANCE_INTERVAL, 4000000, "Linux kernel/sched/topology.c sd_init(): "
	    "min_interval = sd_weight ms, balance_interval from 1 ms up to max_interval = 2 x "
	    "sd_weight ms as balancing finds nothing; 4 ms taken for a small LLC domain (an "
	    "estimate, not this host's domains)");
	return 0;
}

/* pthread_create() and pthread_join() of an empty thread: copy_process()
 * with CLONE_VM (no dup_mmap()) and the wake of the new task. */
static void *empty_thread(void *arg)
{
	return arg;
}

static int kern_fork(void)
{
	double v[64];
	long n = iters(2000);

	for (int r = -1; r < cal.reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			pthread_t th;

			if (pthread_create(&th, NULL, empty_thread, NULL))
				return sys_fail("pthread_create");
			pthread_join(th, NULL);
		}
		if (r >= 0)
			v[r] = (now_ns() - t0) / (double)n;
	}
	set(&kern, P_TASK_FORK, median(v, cal.reps), "sd-calibrate --only switch: median of %d x "
	    "%ld pthread_create() + pthread_join() of an empty thread: copy_process() without "
	    "dup_mmap() (CLONE_VM), wake_up_new_task(), the thread's exit and reaping; its stack's "
	    "mmap included", cal.reps, n);
	return 0;
}

static int kern_switch(void)
{
	int p1[2], p2[2], self[2];
	long n = iters(20000);
	double v[64], wr[64];
	pid_t pid;

	if (pipe(p1) || pipe(p2) || pipe(self))
		return sys_fail("pipe");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return sys_fail("fork");
	if (pid == 0) {
		char c;

		/* Only the parent may hold the write end: its close is our EOF. */
		close(p1[1]);
		close(p2[0]);
		alarm(30);      /* bounds the parent's waitpid() too */
		pin_process(cal.pu0->os_index);
		while (read(p1[0], &c, 1) == 1 && write(p2[1], &c, 1) == 1)
			;
		_exit(0);
	}
	close(p1[0]);
	close(p2[1]);
	bind_self(cal.pu0);
	int err = pipe_rtt_ns(p1[1], p2[0], n / 4) < 0;

	for (int r = 0; r < cal.reps && !err; r++) {
		v[r] = pipe_rtt_ns(p1[1], p2[0], n);
		wr[r] = pipe_rtt_ns(self[1], self[0], n);
		err = v[r] < 0 || wr[r] < 0;
	}
	close(p1[1]);
	waitpid(pid, NULL, 0);
	unbind_self();
	close(p2[0]);
	close(self[0]);
	close(self[1]);
	if (err)
		return sys_fail("pipe ping-pong");
	double rtt = median(v, cal.reps), pair = median(wr, cal.reps);

	double thread_rtt = 0;

	if (kern_sched(&thread_rtt) || kern_fork())
		return -1;
	set(&kern, P_CONTEXT_SWITCH, pos((rtt - thread_rtt) / 2), "sd-calibrate --only switch: "
	    "pipe ping-pong between two processes pinned on PU %u, median of %d x %ld round trips "
	    "(%.1f ns), minus the same between two threads of one process (%.1f ns; "
	    "sched_switch), halved: what a switch between address spaces adds (switch_mm)",
	    cal.pu0->os_index, cal.reps, n, rtt, thread_rtt);
	(void)pair;
	return 0;
}
int group_switch(void)
{
	return host_switch() || host_sched() || kern_switch() ? -1 : 0;
}
int host_switch_group(void)
{
	return host_switch() || host_sched() ? -1 : 0;
}
