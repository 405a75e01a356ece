/* SPDX-License-Identifier: MIT */
#ifndef SD_MACHINE_MACHINE_H
#define SD_MACHINE_MACHINE_H

#include <shootdown/machine.h>

#include "../core/compiler.h"
#include "../core/spinlock.h"
#include "../cpu/cpu.h"
#include "../flush/strategy.h"
#include "../mm/frame.h"
#include "../oracle/oracle.h"
#include "../topology/topology.h"
#include "../trap/trap.h"

struct sd_machine {
	struct sd_machine_config cfg;  /* normalised: every default filled in */
	struct sd_topology topo;
	unsigned nr_cpus;
	struct sd_cpu **cpus;
	size_t cpu_area_size;
	bool checked;                  /* oracle mode, fixed at creation */

	const struct sd_strategy_ops *ops;
	void *strategy;
	char strategy_spec[64];

	struct sd_frame_pool frames;
	struct sd_traps traps;
	struct sd_oracle oracle;

	/* sd_machine_config.lru == SD_LRU_GLOBAL: freeing pages takes one machine-wide
	 * lock and touches the shared LRU line, as release_pages() and
	 * lru_add_drain() do under the lruvec lock. */
	bool lru_global;
	sd_cacheline_aligned struct sd_spinlock lru_lock;
	uint64_t lru_pages;            /* under lru_lock */

	sd_cacheline_aligned SD_ATOMIC(unsigned) nr_attached;
	SD_ATOMIC(unsigned) nr_mms;
	SD_ATOMIC(uint64_t) next_mm_id;
	SD_ATOMIC(int) any_unpinned;
	char pin_note[128];
	pthread_mutex_t pin_note_lock;
};

static inline struct sd_cpu *sd_machine_cpu(const struct sd_machine *m, unsigned id)
{
	return m->cpus[id];
}

#endif
