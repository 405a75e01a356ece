/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_TRAP_H
#define SD_HW_TRAP_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/trap.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <pthread.h>
#include <urcu/urcu-qsbr.h>

#include <shootdown/trap.h>

#include "../core/compiler.h"
#include "../core/rcu.h"
#include "../core/spinlock.h"

/*
 * One hook (the kernel's struct undef_hook), on the machine's list. The list
 * is singly linked with C11 atomics rather than liburcu's cds_list: its
 * rcu_assign_pointer() is an inline-asm barrier TSan cannot see, and the
 * project keeps its own RCU-protected data checked. Grace periods and the
 * deferred free are liburcu's.
 */
struct sd_trap_hook {
	SD_ATOMIC(struct sd_trap_hook *) next;
	uint32_t mask, value;
	sd_trap_fn fn;
	void *arg;
	bool builtin;
	struct rcu_head rcu;
};

#define SD_TRAP_ID_REGS 64             /* S3_0_C0_C{0..7}_{0..7} */
#define SD_TRAP_SWP_WORDS 256          /* the memory SWP emulation swaps into */

struct sd_traps {
	enum sd_trap_dispatch mode;
	/* undef_lock (locked mode): every trap takes it. */
	sd_cacheline_aligned struct sd_spinlock lock;
	/* Register and unregister (all modes). */
	pthread_mutex_t reg_mutex;
	SD_ATOMIC(struct sd_trap_hook *) hooks;   /* newest first */
	/* Read-only after creation: the direct path touches nothing else. */
	sd_cacheline_aligned uint64_t id_regs[SD_TRAP_ID_REGS];
	sd_cacheline_aligned SD_ATOMIC(uint32_t) swp_mem[SD_TRAP_SWP_WORDS];
};

struct sd_machine;
int sd_traps_init(struct sd_traps *t, enum sd_trap_dispatch mode);
void sd_traps_fini(struct sd_traps *t);

#endif
