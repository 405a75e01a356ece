/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_TOPOLOGY_H
#define SD_HW_TOPOLOGY_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/topology.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdbool.h>
#include <stddef.h>
#include <hwloc.h>

#include <shootdown/machine.h>

/*
 * Topology layer: hwloc discovery, placement of emulated CPUs on PUs,
 * thread binding and node-local allocation. Nothing above this file sees a
 * hwloc type.
 */
struct sd_topology {
	hwloc_topology_t topo;
	int synthetic;
	unsigned nr_pus, nr_cores, nr_packages, nr_nodes;  /* of the allowed PUs */
	unsigned nr_host_pus;          /* the host's, allowed or not */
	char host_pus[64], allowed_pus[64], used_pus[64];  /* OS indexes as lists, "0-3,8" */
	unsigned nr_cpus;
	hwloc_obj_t *pu_of_cpu;        /* placement: PU object per emulated CPU */
	unsigned nr_places;            /* distinct PUs the placement uses */
	char summary[128];
};

int sd_topology_init(struct sd_topology *t, const struct sd_machine_config *cfg,
		     unsigned *nr_cpus);
void sd_topology_fini(struct sd_topology *t);

/* More emulated CPUs than the PUs they are placed on: threads share PUs. */
static inline bool sd_topology_oversubscribed(const struct sd_topology *t)
{
	return t->nr_cpus > t->nr_places;
}

/* Fill the placement fields of @info for emulated CPU @cpu. */
void sd_topology_cpu_info(const struct sd_topology *t, unsigned cpu, struct sd_cpu_info *info);

/* Saved binding of a thread, restored on detach. */
struct sd_topology_binding {
	hwloc_bitmap_t saved;
};

/*
 * Bind the calling thread to @cpu's PU.
 * Return: 1 pinned; 0 unpinned (reason in @note); negative errno if @strict
 * and binding failed.
 */
int sd_topology_bind_self(struct sd_topology *t, unsigned cpu, int strict,
			  struct sd_topology_binding *save, char *note, size_t note_len);
void sd_topology_unbind_self(struct sd_topology *t, struct sd_topology_binding *save);

/* Allocate @size zeroed bytes on @cpu's NUMA node, page aligned. */
void *sd_topology_alloc_local(struct sd_topology *t, unsigned cpu, size_t size);
void sd_topology_free_local(struct sd_topology *t, void *p, size_t size);

#endif
