/* SPDX-License-Identifier: MIT */
#ifndef SD_FLUSH_STRATEGY_H
#define SD_FLUSH_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sd_machine;
struct sd_cpu;
struct sd_mm;
struct sd_cpumask;

/* One flush request from the mm layer: [vpn, vpn + nr) of @mm changed. */
struct sd_flush_req {
	struct sd_mm *mm;
	uint64_t vpn;
	uint64_t nr;
	bool freed_tables;     /* page-table pages were unlinked: not leaf-only */
};

/* key=value pairs after the strategy name. */
struct sd_strategy_opt {
	char key[32];
	char value[32];
};

#define SD_STRATEGY_MAX_OPTS 8

/*
 * The ops table behind every strategy. The mm layer calls only these; a
 * strategy reaches lower layers (TLBs, ASIDs, IPIs) directly.
 *
 * flush_range and flush_mm run on the initiating CPU with interrupts on and
 * return only when invariant 1 holds for the range. switch_mm runs with
 * interrupts off and must leave cpu->asid set for @next. enter_lazy runs
 * with interrupts off when the CPU goes idle keeping @mm loaded.
 */
struct sd_strategy_ops {
	const char *name;
	const char *summary;
	int (*machine_init)(struct sd_machine *m, const struct sd_strategy_opt *opts,
			    unsigned nr_opts, void **priv);
	void (*machine_fini)(struct sd_machine *m, void *priv);
	int (*mm_init)(struct sd_machine *m, struct sd_mm *mm, void **mm_priv);
	void (*mm_fini)(struct sd_machine *m, struct sd_mm *mm, void *mm_priv);
	void (*flush_range)(struct sd_cpu *cpu, const struct sd_flush_req *req);
	void (*flush_mm)(struct sd_cpu *cpu, struct sd_mm *mm);
	void (*switch_mm)(struct sd_cpu *cpu, struct sd_mm *prev, struct sd_mm *next);
	void (*enter_lazy)(struct sd_cpu *cpu, struct sd_mm *mm);
	/*
	 * Optional batched flushes (arch_tlbbatch_*). batch_add notes a
	 * deferred flush of @mm in the batch's @cpus; batch_flush then runs one
	 * flush for everything noted and returns only when invariant 1 holds
	 * for all of it. Without them, a batch flushes each noted mm with
	 * flush_mm.
	 */
	void (*batch_add)(struct sd_cpu *cpu, struct sd_cpumask *cpus, struct sd_mm *mm);
	void (*batch_flush)(struct sd_cpu *cpu, struct sd_cpumask *cpus);
	/*
	 * Optional: the bytes machine_init allocated (machine-wide state and
	 * per-CPU arrays, not per-mm state), for sd_machine_info()'s
	 * bytes_per_cpu. NULL counts nothing. Any thread.
	 */
	size_t (*state_bytes)(const struct sd_machine *m, const void *priv);
};

/*
 * Parse "name[:key=value[,key=value]]" and find the strategy.
 * Return: 0; -ENOENT for an unknown name; -EINVAL for a malformed spec.
 */
int sd_strategy_lookup(const char *spec, const struct sd_strategy_ops **ops,
		       struct sd_strategy_opt *opts, unsigned *nr_opts);

/* Whether the name before any ':' in @spec is a built-in strategy: *ops and
 * the name's length are set either way (*ops only when found). */
bool sd_strategy_builtin(const char *spec, const struct sd_strategy_ops **ops, size_t *name_len);

/* Helper for machine_init: an option the strategy does not know. */
int sd_strategy_unknown_opt(const char *strategy, const struct sd_strategy_opt *opt);
/* Parse an unsigned option value in [min, max]; -EINVAL naming it otherwise. */
int sd_strategy_opt_uint(const char *strategy, const struct sd_strategy_opt *opt,
			 uint64_t min, uint64_t max, uint64_t *out);

extern const struct sd_strategy_ops sd_broadcast_ops;
extern const struct sd_strategy_ops sd_local_ops;
extern const struct sd_strategy_ops sd_ipi_ops;
extern const struct sd_strategy_ops sd_gbcast_ops;
extern const struct sd_strategy_ops sd_none_ops;

#endif
