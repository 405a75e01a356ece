/* SPDX-License-Identifier: MIT */
/*
 * What a machine is: its configuration, its PUs and each CPU's placement,
 * for programs and for sd_machine_print_info().
 */


#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/error.h"
#include "../hw/machine_state.h"
#include "../mm/flush_ops.h"


/* ---- info ---- */

/*
 * What one emulated CPU costs: its area as mapped (hwloc hands out whole
 * pages), its slots in cpus[] and the topology's pu_of_cpu[], and its share
 * of what the strategy allocated at creation. Every one of those is zeroed
 * or written at creation, so this is resident memory, and no flush pattern
 * adds to it; per-mm state and CPU threads' stacks are not counted.
 */
static size_t machine_bytes_per_cpu(const struct sd_machine *m)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t strategy = m->ops->state_bytes ? m->ops->state_bytes(m, m->strategy) : 0;
	size_t bytes = sd_round_up(m->cpu_area_size, page);

	bytes += sizeof(m->cpus[0]) + sizeof(m->topo.pu_of_cpu[0]);
	bytes += (strategy + m->nr_cpus - 1) / m->nr_cpus;
	return sd_round_up(bytes, SD_CACHELINE);
}

int sd_machine_info(const struct sd_machine *m, struct sd_machine_info *info)
{
	if (!m || !info)
		return sd_fail(-EINVAL, "sd_machine_info: NULL argument");
	memset(info, 0, sizeof(*info));
	info->nr_cpus = m->nr_cpus;
	info->nr_pus = m->topo.nr_pus;
	info->nr_cores = m->topo.nr_cores;
	info->nr_packages = m->topo.nr_packages;
	info->nr_numa_nodes = m->topo.nr_nodes;
	info->oversubscribed = sd_topology_oversubscribed(&m->topo);
	info->synthetic = m->topo.synthetic;
	info->all_pinned = !atomic_load(&m->any_unpinned);
	info->placement = m->cfg.placement;
	info->oracle = m->cfg.oracle;
	info->tlb_sets = m->cfg.tlb_sets;
	info->tlb_ways = m->cfg.tlb_ways;
	info->tlb_l1_entries = m->cfg.tlb_l1_entries;
	info->asid_bits = m->cfg.asid_bits;
	info->ipi_signal = m->cfg.ipi_signal;
	info->bytes_per_cpu = machine_bytes_per_cpu(m);
	snprintf(info->strategy, sizeof(info->strategy), "%s", m->strategy_spec);
	snprintf(info->topology, sizeof(info->topology), "%s", m->topo.summary);
	pthread_mutex_lock((pthread_mutex_t *)&m->pin_note_lock);
	snprintf(info->pin_note, sizeof(info->pin_note), "%s", m->pin_note);
	pthread_mutex_unlock((pthread_mutex_t *)&m->pin_note_lock);
	return 0;
}

int sd_machine_pus(const struct sd_machine *m, struct sd_machine_pus *pus)
{
	if (!m || !pus)
		return sd_fail(-EINVAL, "sd_machine_pus: NULL argument");
	if (pus->size != sizeof(*pus))
		return sd_fail(-EINVAL, "sd_machine_pus: size %zu is not sizeof(struct "
			       "sd_machine_pus) (%zu): start from SD_MACHINE_PUS_INIT",
			       pus->size, sizeof(*pus));
	pus->nr_host_pus = m->topo.synthetic ? 0 : m->topo.nr_host_pus;
	pus->nr_allowed_pus = m->topo.nr_pus;
	snprintf(pus->allowed, sizeof(pus->allowed), "%s", m->topo.allowed_pus);
	snprintf(pus->used, sizeof(pus->used), "%s", m->topo.synthetic ? "" : m->topo.used_pus);
	return 0;
}

int sd_machine_cpu_info(const struct sd_machine *m, unsigned cpu, struct sd_cpu_info *info)
{
	if (!m || !info || cpu >= m->nr_cpus)
		return sd_fail(-EINVAL, "sd_machine_cpu_info: NULL argument or CPU out of range");
	memset(info, 0, sizeof(*info));
	sd_topology_cpu_info(&m->topo, cpu, info);
	info->pinned = m->cpus[cpu]->pinned;
	info->attached = atomic_load(&m->cpus[cpu]->attached);
	return 0;
}

static const char *placement_name(enum sd_placement p)
{
	switch (p) {
	case SD_PLACE_COMPACT:
		return "compact";
	case SD_PLACE_SCATTER:
		return "scatter";
	case SD_PLACE_LIST:
		return "list";
	}
	return "?";
}

void sd_machine_print_info(const struct sd_machine *m, FILE *f)
{
	struct sd_machine_pus pus = SD_MACHINE_PUS_INIT;
	struct sd_machine_info info;

	if (!f) {
		sd_fail(-EINVAL, "sd_machine_print_info: NULL file");
		return;
	}
	if (sd_machine_info(m, &info))
		return;
	fprintf(f, "machine: %u CPUs on %s%s, placement %s, strategy %s, oracle %s\n",
		info.nr_cpus, info.topology, info.oversubscribed ? " (oversubscribed)" : "",
		placement_name(info.placement), info.strategy,
		info.oracle == SD_ORACLE_CHECKED ? "checked" : "off");
	fprintf(f, "tlb: L1 %u direct-mapped + L2 %u sets x %u ways, %u-bit ASIDs, %zu bytes per CPU\n",
		info.tlb_l1_entries, info.tlb_sets, info.tlb_ways, info.asid_bits,
		info.bytes_per_cpu);
	if (!info.synthetic && !sd_machine_pus(m, &pus))
		fprintf(f, "pus: CPUs placed on %s, of the %s this process may use "
			"(affinity mask and cpuset; the host has %u)\n",
			pus.used, pus.allowed, pus.nr_host_pus);
	if (info.pin_note[0])
		fprintf(f, "pinning: unpinned: %s\n", info.pin_note);
	for (unsigned i = 0; i < info.nr_cpus; i++) {
		struct sd_cpu_info ci;
		sd_machine_cpu_info(m, i, &ci);
		fprintf(f, "  cpu %u -> PU %d (core %d, package %d, node %d) %s\n", i,
			ci.pu_os_index, ci.core, ci.package, ci.numa_node,
			ci.pinned == 1 ? "pinned" : ci.pinned == 0 ? "unpinned" : "not yet attached");
	}
}
