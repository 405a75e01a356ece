/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_RCU_H
#define SD_CORE_RCU_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/rcu.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <urcu-qsbr.h>

#include "atomic.h"
#include "compiler.h"
#include "tsan.h"

/*
 * Thin wrappers over liburcu-qsbr. They exist for one reason: TSan cannot
 * see that a grace period orders a reader's last access before the free, so
 * TSan builds annotate each quiescent state as a release and each callback
 * after a grace period as an acquire on one token. Release builds compile to
 * the bare liburcu calls.
 */
#ifdef SD_TSAN
extern char sd_rcu_tsan_token;
#define sd_rcu_tsan_release() sd_tsan_release(&sd_rcu_tsan_token)
#define sd_rcu_tsan_acquire() sd_tsan_acquire(&sd_rcu_tsan_token)
#else
#define sd_rcu_tsan_release() do { } while (0)
#define sd_rcu_tsan_acquire() do { } while (0)
#endif

/*
 * Whether this thread is an online QSBR reader, mirrored in our own
 * initial-exec TLS. urcu_qsbr_read_ongoing() is an out-of-line call that
 * reaches liburcu's TLS through __tls_get_addr: measured at about a third
 * of a 15 ns trap (the EL0 MRS emulation rework), on a path that asks on every call.
 */
extern SD_THREAD_LOCAL bool sd_rcu_is_online __attribute__((tls_model("initial-exec")));

static inline bool sd_rcu_online(void)
{
	return sd_rcu_is_online;
}

static inline void sd_rcu_register(void)
{
	urcu_qsbr_register_thread();
	sd_rcu_is_online = true;
}

static inline void sd_rcu_unregister(void)
{
	sd_rcu_tsan_release();
	sd_rcu_is_online = false;
	urcu_qsbr_unregister_thread();
}

static inline void sd_rcu_quiescent(void)
{
	sd_rcu_tsan_release();
	urcu_qsbr_quiescent_state();
}

static inline void sd_rcu_thread_offline(void)
{
	sd_rcu_tsan_release();
	sd_rcu_is_online = false;
	urcu_qsbr_thread_offline();
}

static inline void sd_rcu_thread_online(void)
{
	urcu_qsbr_thread_online();
	sd_rcu_is_online = true;
}

static inline void sd_rcu_synchronize(void)
{
	sd_rcu_tsan_release();
	urcu_qsbr_synchronize_rcu();
	sd_rcu_tsan_acquire();
}

/* call_rcu() from any thread: it reads its per-thread data under the read
 * lock, which an offline (idle) thread does not hold. @cb must start with
 * sd_rcu_tsan_acquire(), the partner of the release here. */
static inline void sd_rcu_call(struct rcu_head *head, void (*cb)(struct rcu_head *head))
{
	bool offline = !sd_rcu_online();

	if (offline)
		sd_rcu_thread_online();
	sd_rcu_tsan_release();
	urcu_qsbr_call_rcu(head, cb);
	if (offline)
		sd_rcu_thread_offline();
}

#endif
