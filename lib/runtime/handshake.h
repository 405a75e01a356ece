/* SPDX-License-Identifier: MIT */
#ifndef SD_RUNTIME_HANDSHAKE_H
#define SD_RUNTIME_HANDSHAKE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_RUNTIME
#error "runtime/handshake.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>

#include <shootdown/handshake.h>
#include <shootdown/shared.h>

#include "../core/compiler.h"
#include "../hw/machine_state.h"

/*
 * A handshake object (include/shootdown/handshake.h): the request, its
 * targets and the check in handshake.c, on top; one file per kind for how
 * a request reaches a target (membarrier.c, preempt_signal.c, poll_word.c,
 * mprotect_barrier.c); the targets' side and the steps the kinds share in
 * target.c, below them.
 */

/* A target's state towards handshakes (HotSpot's thread states, reduced). */
enum {
	SD_HS_RUNNING,          /* runs its own code: reached at its points */
	SD_HS_SAFE,             /* in native code or blocked: handled on its behalf */
	SD_HS_CLAIMED,          /* ...being handled now by a requester */
};

/* Per CPU. The first line is what the target and the requester share. */
struct sd_hs_cpu {
	/* The request this CPU must run at its next poll (POLL; SIGNAL after
	 * a refusal), 0 none; release by the requester after fn, arg and
	 * flow, acquire by the poll. */
	sd_cacheline_aligned SD_ATOMIC(uint64_t) armed;
	/* The last request whose function this CPU ran (Go's preemptGen):
	 * release by whoever ran it, acquire by the requester's wait. */
	SD_ATOMIC(uint64_t) acked;
	SD_ATOMIC(int) state;           /* SD_HS_* */
	SD_ATOMIC(uint64_t) flow;       /* the request's trace arrow, 0 none */
	uint64_t rng;                   /* SIGNAL's refusals: the target's alone */
	SD_ATOMIC(unsigned) refusals;   /* SIGNAL: signals it refused (its handler's) */
	/* The last request whose handler aborted this CPU's restartable
	 * sequence: release by the handler, acquire by the check. */
	SD_ATOMIC(uint64_t) rseq_aborted;
	struct sd_model_line word;      /* the poll word's line */
	struct sd_model_line ack;       /* the acknowledgement's line */
	/* The requester's, for the handshake in progress. */
	sd_cacheline_aligned struct sd_smp_call call;   /* SIGNAL: the signal in flight */
	uint64_t barriers_at_request;   /* the check's baseline */
	unsigned refusals_at_request;
	/* MEMBARRIER_RSEQ: the number of the target's section open at the
	 * request, 0 none (the check's baseline). */
	uint64_t rseq_open_at_request;
	bool target, in_flight, on_behalf, seen_done, left;
};

struct sd_handshake {
	struct sd_mm *mm;
	struct sd_machine *m;
	struct sd_handshake_config cfg;
	struct sd_lock *lock;           /* one handshake at a time */
	SD_ATOMIC(int) running;         /* for destroy's -EBUSY */
	/* The request in progress: written under @lock before any target is
	 * armed or sent to (the release of armed, or the IPI's push). */
	uint64_t seq;
	sd_smp_call_fn fn;
	void *arg;
	bool helper_mapped;             /* MPROTECT: the helper page exists */
	struct sd_hs_cpu *cpus;         /* one per CPU of the machine */
	unsigned *target_ids;           /* MEMBARRIER: the multicast's list, one per CPU */
};

/* The kinds: deliver the request to every target and wait until each has
 * run it, been handled on its behalf, or (MPROTECT) had its chance. */
int sd_hs_membarrier(struct sd_handshake *h, struct sd_cpu *cpu);
int sd_hs_signal(struct sd_handshake *h, struct sd_cpu *cpu, struct sd_handshake_result *res);
int sd_hs_poll_word(struct sd_handshake *h, struct sd_cpu *cpu);
int sd_hs_mprotect(struct sd_handshake *h, struct sd_cpu *cpu);

/* Test only: plant a bug in a kind, so a test can show the check catches
 * it (test/runtime/test_handshake.cpp). */
enum {
	SD_HS_BREAK_SKIP_LAST = 1u << 0,       /* membarrier: no IPI to the last target */
	SD_HS_BREAK_NO_WAIT = 1u << 1,         /* poll: arm, then return at once */
	SD_HS_BREAK_REFUSAL_ACKS = 1u << 2,    /* signal: a refused signal counts as done */
	SD_HS_BREAK_NO_RSEQ_ABORT = 1u << 3,   /* membarrier_rseq: ipi_mb() in place of ipi_rseq() */
};
extern SD_ATOMIC(unsigned) sd_hs_test_break;

/* The common steps the kinds share (target.c). */

/* The kind's name ("membarrier", ...); the host's CLOCK_MONOTONIC in ns. */
const char *sd_hs_kind_name(unsigned kind);
uint64_t sd_hs_host_ns(void);

/* @t runs the current request's function (interrupts off) and
 * acknowledges it: on its own thread, @on_behalf false; by the requester
 * @by for a target in a safe state, @on_behalf true. False if @t had
 * acknowledged the request already (its signal handler and its poll
 * both reached it). */
bool sd_hs_run_fn(struct sd_handshake *h, struct sd_cpu *by, struct sd_cpu *t, bool on_behalf);

/* rseq_preempt() or rseq_signal_deliver() in target @t's handler for the
 * current request: abort its restartable sequence, if it is in one, and
 * count it. */
void sd_hs_rseq_abort(struct sd_handshake *h, struct sd_cpu *t);

/* The number of the restartable sequence open on @c now, unaborted; 0 if
 * none. Any thread (a check's read). */
uint64_t sd_hs_rseq_open(const struct sd_cpu *c);

/* Whether target @t has run (or had run for it) the current request. */
bool sd_hs_done(const struct sd_handshake *h, unsigned t);

/* Whether target @t stopped running the mm since it was picked (and so
 * owes nothing: it passed switch_mm's barrier). Requester only. */
bool sd_hs_left(struct sd_handshake *h, unsigned t);

/* Try to handle target @t on its behalf: true if it was in a safe state
 * and now has been. Requester only. */
bool sd_hs_try_on_behalf(struct sd_handshake *h, struct sd_cpu *by, unsigned t);

/* One turn of the requester's wait for its targets: run IPIs, give the
 * machine away (sd_cpu_poll()), and every ipi_timeout_ms of host time say
 * on stderr who is still awaited. */
void sd_hs_wait_turn(struct sd_handshake *h, struct sd_cpu *by, uint64_t *next_report_ns,
		     const char *what);

#endif
