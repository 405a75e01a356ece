/* SPDX-License-Identifier: MIT */
#ifndef SD_TIME_MODEL_H
#define SD_TIME_MODEL_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_TIME
#error "time/model.h is in a higher layer than the file including it (core/layer.h)"
/* Read the profile (sd_profile_locate() finds it), place @nr_cpus CPUs on
 * its topology (or on @topology, a hwloc synthetic string, if not NULL),
 * and fill the costs in ps (@tlb_entries, L1 + L2 of each CPU's TLB, sizes
 * the scan a whole-ASID or whole-TLB invalidation charges, tlb_scan_entry).
 * @profile NULL: no modelling, 0. -EINVAL for a bad file (the detail names
 * the field), -ENOENT, -ENOMEM. profile.c. The per-event table (ev_ps) is
 * left to the layer that owns the events (hw/model.c, sd_model_init()). */
int sd_model_load(struct sd_model *mod, const char *profile, const char *topology,
		  uint64_t window_ns, unsigned nr_cpus, unsigned tlb_entries);
void sd_model_fini(struct sd_model *mod);
/* A parameter's cost in ns by its key ("ipi_send", "line_transfer.llc"),
 * -1 with sd_last_error() set for an unknown key. */
double sd_model_param_ns(const struct sd_model *mod, const char *param);

#endif

#include <stdbool.h>
#include <stdint.h>

#include <shootdown/model.h>

#include "../core/compiler.h"
#include "clock.h"
#include "params.h"
#include "resource.h"
#include "sequencer.h"

/*
 * Modelled time (include/shootdown/model.h says what it is for). Times are
 * kept in picoseconds so that sub-ns costs (an L1 TLB hit) add up exactly;
 * the public calls speak ns.
 *
 * Who writes what:
 *   - a CPU's clock and everything in struct sd_cpu_model: the CPU alone
 *     (its IPI handler included: the same thread), so plain fields;
 *   - the stalls broadcasts owe a CPU (struct sd_cpu's recv_stall_ps):
 *     the issuers add, the CPU takes them into its clock at its sync
 *     points (time/sync.c, recv_pay());
 *   - its published clock and run state (struct sd_model_pub): the CPU
 *     stores, every CPU reads (lax synchronisation); a waiter may mark a
 *     laggard STALLED with a CAS;
 *   - shared resources (the interconnect, hot lines): a CAS on their
 *     free-at time, since they are used without a real lock;
 *   - modelled locks (struct sd_model_lock): only under the real lock
 *     they describe, which orders them, so plain fields.
 */


enum sd_model_param {
#define SD_MP_ENUM(id, key, what) SD_MP_##id,
	SD_MODEL_PARAM_LIST(SD_MP_ENUM)
#undef SD_MP_ENUM
	SD_MP_NR
};

enum sd_model_dist_param {
#define SD_MDP_ENUM(id, key, what) SD_MDP_##id,
	SD_MODEL_DIST_PARAM_LIST(SD_MDP_ENUM)
#undef SD_MDP_ENUM
	SD_MDP_NR
};

/* At least enum sd_lock_kind's SD_LOCK_KIND_NR (model.c checks). */
#define SD_MODEL_LOCK_KINDS 12

/* Strict mode's quantum by default (struct sd_model, seq_quantum_ps). */
#define SD_MODEL_SEQ_QUANTUM_PS (1000u * PS_PER_NS)

/* A clock as the others see it: its public line and its thread. */
struct sd_model_peer {
	struct sd_model_pub *pub;
	SD_ATOMIC(int) *tid;           /* 0: no thread attached */
};

/* Where an emulated CPU sits in the modelled topology. */
struct sd_model_place {
	uint32_t core, llc, package;
};

/* The machine-wide model (in struct sd_machine). */
/* The bits of sd_model.features (SD_MODEL_FEATURE_LIST's order). */
enum {
	SD_MODEL_FEATURE_RANGE_TLBI = 1u << 0,
	SD_MODEL_FEATURE_KPTI = 1u << 1,
	SD_MODEL_FEATURE_REPEAT_TLBI = 1u << 2,
	SD_MODEL_FEATURE_SVINVAL = 1u << 3,
	SD_MODEL_FEATURE_NO_ASID = 1u << 4,
};

struct sd_model {
	bool on;
	char name[64];
	char path[256];
	char topology[128];
	unsigned nr_pus;
	uint64_t window_ps;
	uint64_t quantum_ps;           /* a CPU publishes at least this often */
	/* Strict mode's quantum: how soon a holder looks again without a
	 * reason (a CPU back from away is seen within it). Not the window,
	 * which strict mode does not have. Where the sync points fall moves
	 * no clock (broadcast stalls go into the sequencer's clocks,
	 * sd_seq_recv_owe()): Strict.RunsDoNotDependOnTheQuantum sets it
	 * between creation and a run. */
	uint64_t seq_quantum_ps;
	unsigned mechanisms;           /* enum sd_mechanism: the profile's "mechanisms" */
	unsigned features;             /* SD_MODEL_FEATURE_LIST bits present */
	double param_ns[SD_MP_NR];
	double dist_ns[SD_MDP_NR][SD_DIST_NR];
	uint64_t param_ps[SD_MP_NR];
	uint64_t dist_ps[SD_MDP_NR][SD_DIST_NR];
	uint64_t ev_ps[256];           /* per enum sd_event; sized for any list */
	uint64_t scan_ps;              /* one whole-ASID/whole-TLB scan of a TLB */
	struct sd_model_place *place;  /* nr_cpus entries */
	/* The machine-wide modelled locks, by enum sd_lock_kind (the mm
	 * lock is per mm: struct sd_mm has its own). */
	struct sd_model_lock lock[SD_MODEL_LOCK_KINDS];
	struct sd_model_calendar cal[SD_MODEL_LOCK_KINDS];

	/* The lruvec's lines a hold of the LRU lock writes: the list head
	 * and size counters, and the folio last linked or unlinked next to
	 * them (mm/lru.c). */
	struct sd_model_line lru_lines[2];
	sd_cacheline_aligned struct sd_model_queue interconnect;
	sd_cacheline_aligned SD_ATOMIC(uint64_t) max_lead_ps;
	SD_ATOMIC(uint64_t) rejoins;
	SD_ATOMIC(uint64_t) stalls;    /* laggards a window wait took for stalled */
	struct sd_seq seq;             /* strict mode: on or not, fixed at creation */
	/* What a clock may read of the others', by CPU id (set as each CPU
	 * is made, read-only after): a table of its own, so a scan for the
	 * slowest touches their public lines only, never their owners'. */
	struct sd_model_peer *peer;
	unsigned nr_clk;
	bool oversubscribed;           /* more CPUs than PUs: a window wait yields */
};

/* Read the profile (sd_profile_locate() finds it), place @nr_cpus CPUs on
 * its topology (or on @topology, a hwloc synthetic string, if not NULL),
 * and fill the costs in ps (@tlb_entries, L1 + L2 of each CPU's TLB, sizes
 * the scan a whole-ASID or whole-TLB invalidation charges, tlb_scan_entry).
 * @profile NULL: no modelling, 0. -EINVAL for a bad file (the detail names
 * the field), -ENOENT, -ENOMEM. profile.c. The per-event table (ev_ps) is
 * left to the layer that owns the events (hw/model.c, sd_model_init()). */
int sd_model_load(struct sd_model *mod, const char *profile, const char *topology,
		  uint64_t window_ns, unsigned nr_cpus, unsigned tlb_entries);
void sd_model_fini(struct sd_model *mod);
/* A parameter's cost in ns by its key ("ipi_send", "line_transfer.llc"),
 * -1 with sd_last_error() set for an unknown key. */
double sd_model_param_ns(const struct sd_model *mod, const char *param);

#endif
