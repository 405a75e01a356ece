/* SPDX-License-Identifier: MIT */
/*
 * Attaching a thread as an emulated CPU and detaching it. Detach crosses
 * every layer, top down: the strategy finishes what only this thread can
 * (its ops' cpu_detach: gbcast's TLBSYNC), the mm layer switches to no mm,
 * then the hardware goes offline (hw/cpu.c). So it lives here, above them.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <shootdown/mm.h>

#include "../core/error.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "../mm/flush_ops.h"

/*
 * A thread that exits while attached is detached on its way out (the
 * destructor runs on that thread, with its thread-locals still valid), so
 * its IPIs are answered and nobody waits for a thread that is gone. A
 * thread that leaves without running destructors (a raw exit) is caught by
 * the IPI watchdog instead (-ESRCH: treated as offline).
 */
static pthread_key_t attach_key;
static pthread_once_t attach_key_once = PTHREAD_ONCE_INIT;
static int attach_key_err;      /* pthread_key_create()'s result, once */

static void detach_at_thread_exit(void *p)
{
	struct sd_cpu *c = p;

	if (c != sd_this_cpu)
		return;
	/* It will never come back to turn them on: the queued IPIs must run. */
	c->irq_depth = 0;
	/* Requests it posted and left unwaited must be answered before the
	 * CPU goes offline (their memory is the program's: cpu.h says it
	 * must still be valid). */
	sd_smp_async_settle(c);
	sd_cpu_detach(c);
}

static void attach_key_create(void)
{
	attach_key_err = pthread_key_create(&attach_key, detach_at_thread_exit);
}

int sd_cpu_attach(struct sd_machine *m, unsigned id, struct sd_cpu **out)
{
	int err;

	if (!m || !out)
		return sd_fail(-EINVAL, "sd_cpu_attach: NULL argument");
	if (id >= m->nr_cpus)
		return sd_fail(-EINVAL, "CPU %u out of range (machine has %u)", id, m->nr_cpus);
	if (sd_this_cpu)
		return sd_fail(-EBUSY, "this thread is already attached as CPU %u", sd_this_cpu->id);
	pthread_once(&attach_key_once, attach_key_create);
	if (attach_key_err)
		return sd_fail(-EAGAIN, "sd_cpu_attach: no thread-exit key: %s",
			       strerror(attach_key_err));
	err = sd_cpu_online(m, id, out);
	if (!err)
		pthread_setspecific(attach_key, *out);
	return err;
}

int sd_cpu_detach(struct sd_cpu *c)
{
	const struct sd_strategy_ops *ops;

	if (sd_cpu_check_self(c))
		return sd_fail(-EPERM, "sd_cpu_detach: " SD_NOT_ATTACHED);
	if (c->irq_depth)
		return sd_fail(-EBUSY, "sd_cpu_detach: interrupts are off");
	if (c->nr_async_posted)
		return sd_fail(-EBUSY, "sd_cpu_detach: %u request(s) of sd_smp_call_async() not "
			       "waited for", c->nr_async_posted);
	ops = c->m->ops;
	if (ops->cpu_detach)
		ops->cpu_detach(c);
	sd_switch_mm(c, NULL);
	sd_cpu_offline(c);
	pthread_setspecific(attach_key, NULL);
	return 0;
}
