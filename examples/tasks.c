/* SPDX-License-Identifier: MIT */
/*
 * tasks: a writer and two readers passing messages through a pipe on
 * emulated CPUs, the readers sleeping while the pipe is empty; the writer
 * then forks a child that writes to a copy-on-write page of its own. The
 * scheduler (include/shootdown/task.h) puts them on the CPUs, switches
 * between them, wakes idle CPUs with reschedule IPIs, and the oracle
 * checks every access.
 *
 *   tasks [strategy]        (default ipi)
 *
 * Build: cc -std=c11 tasks.c $(pkg-config --cflags --libs shootdown)
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <shootdown/shootdown.h>

#define BUF 0x10000000ull
#define MESSAGES 1000

struct pipe {
	struct sd_waitq *readers;
	atomic_int queued;
	atomic_int left;        /* messages not yet read */
};

static bool has_message(void *arg)
{
	struct pipe *p = arg;

	return atomic_load(&p->queued) > 0 || atomic_load(&p->left) <= 0;
}

static void reader(struct sd_task *self, void *arg)
{
	struct pipe *p = arg;

	for (;;) {
		/* Sleeps while the pipe is empty; the CPU runs another task
		 * or idles, keeping this mm loaded lazily. */
		if (sd_task_wait(self, p->readers, has_message, p))
			return;
		if (atomic_load(&p->left) <= 0)
			return;
		int q = atomic_load(&p->queued);
		if (q > 0 && atomic_compare_exchange_strong(&p->queued, &q, q - 1)) {
			atomic_fetch_sub(&p->left, 1);
			sd_access(sd_task_cpu(self), BUF, SD_READ, NULL);
		}
	}
}

static void child(struct sd_task *self, void *arg)
{
	uint64_t pfn = 0;

	(void)arg;
	/* The first write to the parent's page breaks copy-on-write. */
	sd_access(sd_task_cpu(self), BUF, SD_WRITE, &pfn);
	printf("child: wrote its own copy of the buffer (frame %llu)\n", (unsigned long long)pfn);
}

static void writer(struct sd_task *self, void *arg)
{
	struct pipe *p = arg;
	struct sd_cpu *cpu = sd_task_cpu(self);

	sd_mmap(cpu, sd_task_mm(self), BUF, SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	for (int i = 0; i < MESSAGES; i++) {
		sd_access(sd_task_cpu(self), BUF, SD_WRITE, NULL);
		atomic_fetch_add(&p->queued, 1);
		sd_task_wake(self, p->readers, 1);      /* may run a reader first */
	}
	sd_task_fork(self, child, NULL, NULL);
	/* Wake the readers for the last time once all is read. */
	while (atomic_load(&p->left) > 0)
		sd_task_wake(self, p->readers, 0), sd_task_yield(self);
	sd_task_wake(self, p->readers, 0);
}

int main(int argc, char **argv)
{
	struct sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	struct sd_task_config tc = SD_TASK_CONFIG_INIT;
	struct pipe p = { .queued = 0, .left = MESSAGES };
	struct sd_machine *m;
	struct sd_mm *mm;
	struct sd_stats st = SD_STATS_INIT;
	int err;

	cfg.nr_cpus = 2;
	cfg.strategy = argc > 1 ? argv[1] : "ipi";
	cfg.oracle = SD_ORACLE_CHECKED;
	if ((err = sd_machine_create(&cfg, &m)) || (err = sd_mm_create(m, &mm)) ||
	    (err = sd_waitq_create(m, "pipe", &p.readers))) {
		fprintf(stderr, "tasks: %s: %s\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	/* One process: the writer and the readers are threads of one mm. */
	tc.mm = mm;
	sd_task_create(m, &tc, reader, &p, NULL);
	sd_task_create(m, &tc, reader, &p, NULL);
	tc.cpu = 0;
	sd_task_create(m, &tc, writer, &p, NULL);
	if ((err = sd_sched_run(m))) {
		fprintf(stderr, "tasks: sd_sched_run: %s: %s\n", sd_strerror(err), sd_last_error());
		return 1;
	}
	sd_stats_snapshot(m, &st);
	printf("messages read: %d of %d\n", MESSAGES - atomic_load(&p.left), MESSAGES);
	printf("task switches %llu, wakeups %llu, wakeup IPIs %llu, forks %llu, "
	       "copy-on-write faults %llu\n",
	       (unsigned long long)st.counter[SD_STAT_TASK_SWITCH],
	       (unsigned long long)st.counter[SD_STAT_TASK_WAKEUP],
	       (unsigned long long)st.counter[SD_STAT_WAKEUP_IPI],
	       (unsigned long long)st.counter[SD_STAT_TASK_FORK],
	       (unsigned long long)st.counter[SD_STAT_WP_FAULT]);
	printf("stale translations seen by the oracle: %llu\n",
	       (unsigned long long)sd_oracle_violations(m));
	sd_waitq_destroy(p.readers);
	sd_mm_destroy(mm);
	sd_machine_destroy(m);
	return 0;
}
