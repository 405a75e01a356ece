/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/synthetic.h"
#include "../core/error.h"
#include "topology.h"

#define SD_MAX_CPUS 4096

static unsigned count(hwloc_topology_t topo, hwloc_obj_type_t type)
{
	int n = hwloc_get_nbobjs_by_type(topo, type);

	return n > 0 ? (unsigned)n : 0;
}

/*
 * The binding a thread had before one of our CPUs pinned it: the creating
 * thread may itself be attached to another machine, and the PUs its user
 * allowed are the ones it had then, not the one PU we put it on.
 */
static _Thread_local hwloc_const_bitmap_t thread_user_binding;

/*
 * The PUs the creating thread may use: its affinity mask (taskset, or
 * sched_setaffinity() by the program) within the cgroup cpuset, which hwloc
 * already left out of the topology. Without this the placement would bind
 * emulated CPUs anywhere on the host, and binding widens a mask that is
 * only inherited (sched_setaffinity() is not limited by it).
 */
static int restrict_to_affinity(struct sd_topology *t)
{
	hwloc_const_bitmap_t host = hwloc_topology_get_topology_cpuset(t->topo);
	hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
	int err = 0;

	if (!allowed)
		return sd_fail(-ENOMEM, "topology: no memory for the allowed cpuset");
	if (thread_user_binding)
		hwloc_bitmap_copy(allowed, thread_user_binding);
	else if (hwloc_get_cpubind(t->topo, allowed, HWLOC_CPUBIND_THREAD) < 0)
		hwloc_bitmap_copy(allowed, host);  /* the OS cannot say: all it has */
	hwloc_bitmap_and(allowed, allowed, host);
	hwloc_bitmap_list_snprintf(t->host_pus, sizeof(t->host_pus), host);
	hwloc_bitmap_list_snprintf(t->allowed_pus, sizeof(t->allowed_pus), allowed);
	if (hwloc_bitmap_iszero(allowed))
		err = sd_fail(-EINVAL, "topology: this thread's affinity mask has no PU of the "
			      "host's %s", t->host_pus);
	else if (!hwloc_bitmap_isequal(allowed, host) &&
		 hwloc_topology_restrict(t->topo, allowed, 0) < 0)
		err = sd_fail(errno ? -errno : -ENOMEM,
			      "topology: restricting to the allowed PUs %s failed", t->allowed_pus);
	hwloc_bitmap_free(allowed);
	return err;
}

static int load_topology(struct sd_topology *t)
{
	const char *synthetic = getenv("SD_TOPOLOGY");

	uint64_t pus;

	/* Sized before hwloc builds it, which it does object by object. */
	if (synthetic && *synthetic && !sd_synthetic_pus(synthetic, SD_SYNTHETIC_MAX_PUS, &pus) &&
	    pus > SD_SYNTHETIC_MAX_PUS)
		return sd_fail(-EINVAL, "SD_TOPOLOGY '%s': more than %u PUs", synthetic,
			       SD_SYNTHETIC_MAX_PUS);
	if (hwloc_topology_init(&t->topo) < 0)
		return sd_fail(-ENOMEM, "hwloc_topology_init failed");
	if (synthetic && *synthetic) {
		if (hwloc_topology_set_synthetic(t->topo, synthetic) < 0) {
			hwloc_topology_destroy(t->topo);
			return sd_fail(-EINVAL, "SD_TOPOLOGY: bad hwloc synthetic description '%s'",
				       synthetic);
		}
		t->synthetic = 1;
	}
	if (hwloc_topology_load(t->topo) < 0) {
		hwloc_topology_destroy(t->topo);
		return sd_fail(-EINVAL, "hwloc_topology_load failed");
	}
	t->nr_host_pus = count(t->topo, HWLOC_OBJ_PU);
	if (!t->synthetic) {
		int err = restrict_to_affinity(t);

		if (err) {
			hwloc_topology_destroy(t->topo);
			return err;
		}
	}
	t->nr_pus = count(t->topo, HWLOC_OBJ_PU);
	t->nr_cores = count(t->topo, HWLOC_OBJ_CORE);
	t->nr_packages = count(t->topo, HWLOC_OBJ_PACKAGE);
	t->nr_nodes = count(t->topo, HWLOC_OBJ_NUMANODE);
	snprintf(t->summary, sizeof(t->summary), "%u package%s, %u cores, %u PUs%s, %u NUMA node%s%s",
		 t->nr_packages, t->nr_packages == 1 ? "" : "s", t->nr_cores, t->nr_pus,
		 t->nr_pus < t->nr_host_pus ? " allowed" : "",
		 t->nr_nodes, t->nr_nodes == 1 ? "" : "s", t->synthetic ? " (synthetic)" : "");
	return 0;
}

/* Rank of @obj among the objects of its type inside @within (0 if none). */
static unsigned rank_within(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_obj_t within)
{
	hwloc_obj_t first;

	if (!obj || !within)
		return 0;
	first = hwloc_get_next_obj_inside_cpuset_by_type(topo, within->cpuset, obj->type, NULL);
	return first ? obj->logical_index - first->logical_index : 0;
}

struct scatter_key {
	unsigned pu_in_core, core_in_package, package;
	hwloc_obj_t pu;
};

static int scatter_cmp(const void *a, const void *b)
{
	const struct scatter_key *x = a, *y = b;

	if (x->pu_in_core != y->pu_in_core)
		return x->pu_in_core < y->pu_in_core ? -1 : 1;
	if (x->core_in_package != y->core_in_package)
		return x->core_in_package < y->core_in_package ? -1 : 1;
	if (x->package != y->package)
		return x->package < y->package ? -1 : 1;
	return 0;
}

/*
 * Scatter: consecutive CPUs go to different packages first, then to
 * different cores of a package, and only then to SMT siblings. That is a
 * sort of the PUs by (rank in core, rank of the core in its package,
 * package), hwloc telling each object's place.
 */
static int place_scatter(struct sd_topology *t, hwloc_obj_t *order)
{
	struct scatter_key *keys = calloc(t->nr_pus, sizeof(*keys));

	if (!keys)
		return -ENOMEM;
	for (unsigned i = 0; i < t->nr_pus; i++) {
		hwloc_obj_t pu = hwloc_get_obj_by_type(t->topo, HWLOC_OBJ_PU, i);
		hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t->topo, HWLOC_OBJ_CORE, pu);
		hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t->topo, HWLOC_OBJ_PACKAGE, pu);

		keys[i].pu = pu;
		keys[i].pu_in_core = rank_within(t->topo, pu, core);
		keys[i].core_in_package = rank_within(t->topo, core, pkg);
		keys[i].package = pkg ? pkg->logical_index : 0;
	}
	qsort(keys, t->nr_pus, sizeof(*keys), scatter_cmp);
	for (unsigned i = 0; i < t->nr_pus; i++)
		order[i] = keys[i].pu;
	free(keys);
	return 0;
}

/* The one PU of a strict machine: of the placement's, the one the creating
 * thread runs on if it is one (so that machines made by threads, or
 * processes, the host has spread do not all pile onto the first PU),
 * else the first. */
static hwloc_obj_t strict_pu(hwloc_obj_t *order, unsigned n)
{
	int here = sched_getcpu();

	for (unsigned i = 0; here >= 0 && i < n; i++)
		if (order[i]->os_index == (unsigned)here)
			return order[i];
	return order[0];
}

/* The PUs the placement uses (a list may name one twice). */
static unsigned distinct_pus(struct sd_topology *t)
{
	hwloc_bitmap_t used = hwloc_bitmap_alloc();
	int n;

	if (!used)
		return 1;               /* counts as oversubscribed: the safe side */
	for (unsigned c = 0; c < t->nr_cpus; c++)
		hwloc_bitmap_or(used, used, t->pu_of_cpu[c]->cpuset);
	n = hwloc_bitmap_weight(used);
	hwloc_bitmap_list_snprintf(t->used_pus, sizeof(t->used_pus), used);
	hwloc_bitmap_free(used);
	return n > 0 ? (unsigned)n : 1;
}

static int place(struct sd_topology *t, const struct sd_machine_config *cfg)
{
	hwloc_obj_t *order = calloc(t->nr_pus, sizeof(*order));
	unsigned n = t->nr_pus;
	int err = 0;

	if (!order)
		return -ENOMEM;
	switch (cfg->placement) {
	case SD_PLACE_COMPACT:
		for (unsigned i = 0; i < n; i++)
			order[i] = hwloc_get_obj_by_type(t->topo, HWLOC_OBJ_PU, i);
		break;
	case SD_PLACE_SCATTER:
		err = place_scatter(t, order);
		break;
	case SD_PLACE_LIST:
		if (!cfg->pu_list || !cfg->pu_list_len) {
			err = sd_fail(-EINVAL, "SD_PLACE_LIST needs a non-empty pu_list");
			break;
		}
		n = cfg->pu_list_len;
		free(order);
		order = calloc(n, sizeof(*order));
		if (!order)
			return -ENOMEM;
		for (unsigned i = 0; i < n; i++) {
			order[i] = hwloc_get_pu_obj_by_os_index(t->topo, cfg->pu_list[i]);
			if (!order[i]) {
				err = t->nr_pus < t->nr_host_pus
				      ? sd_fail(-EINVAL, "pu_list[%u] = %u is not one of the PUs "
						"this thread may use (%s of the host's %s: its "
						"affinity mask and cpuset)", i, cfg->pu_list[i],
						t->allowed_pus, t->host_pus)
				      : sd_fail(-EINVAL, "pu_list[%u] = %u is not a PU of this "
						"machine (%s)", i, cfg->pu_list[i], t->host_pus);
				break;
			}
		}
		break;
	default:
		err = sd_fail(-EINVAL, "unknown placement %d", (int)cfg->placement);
	}
	/* Strict modelled time runs one CPU at a time (time/sequencer.h): on
	 * one PU, a hand-off is a switch on that core, where across PUs it
	 * wakes an idle PU or preempts what runs there (2-4 us against
	 * 12-36 us a hand-off on a 2-PU VM, docs/design.md). */
	if (cfg->flags & SD_MACHINE_MODEL_STRICT) {
		order[0] = strict_pu(order, n);
		n = 1;
	}
	if (!err) {
		for (unsigned c = 0; c < t->nr_cpus; c++)
			t->pu_of_cpu[c] = order[c % n];
		t->nr_places = distinct_pus(t);
	}
	free(order);
	return err;
}

int sd_topology_init(struct sd_topology *t, const struct sd_machine_config *cfg,
		     unsigned *nr_cpus)
{
	int err;

	memset(t, 0, sizeof(*t));
	err = load_topology(t);
	if (err)
		return err;
	t->nr_cpus = cfg->nr_cpus == SD_NR_CPUS_ALL_PUS ? t->nr_pus : cfg->nr_cpus;
	if (!t->nr_pus || !t->nr_cpus || t->nr_cpus > SD_MAX_CPUS) {
		err = sd_fail(-EINVAL, "nr_cpus = %u: a machine needs 1..%u CPUs (topology has %u PUs)",
			      t->nr_cpus, SD_MAX_CPUS, t->nr_pus);
		goto fail;
	}
	t->pu_of_cpu = calloc(t->nr_cpus, sizeof(*t->pu_of_cpu));
	if (!t->pu_of_cpu) {
		err = -ENOMEM;
		goto fail;
	}
	err = place(t, cfg);
	if (err)
		goto fail;
	*nr_cpus = t->nr_cpus;
	return 0;
fail:
	sd_topology_fini(t);
	return err;
}

void sd_topology_fini(struct sd_topology *t)
{
	free(t->pu_of_cpu);
	t->pu_of_cpu = NULL;
	if (t->topo)
		hwloc_topology_destroy(t->topo);
	t->topo = NULL;
}

static int ancestor_index(hwloc_topology_t topo, hwloc_obj_t pu, hwloc_obj_type_t type)
{
	hwloc_obj_t o = hwloc_get_ancestor_obj_by_type(topo, type, pu);

	return o ? (int)o->logical_index : -1;
}

void sd_topology_cpu_info(const struct sd_topology *t, unsigned cpu, struct sd_cpu_info *info)
{
	hwloc_obj_t pu = t->pu_of_cpu[cpu];
	hwloc_obj_t node = NULL;

	info->cpu = cpu;
	info->pu_os_index = (int)pu->os_index;
	info->core = ancestor_index(t->topo, pu, HWLOC_OBJ_CORE);
	info->package = ancestor_index(t->topo, pu, HWLOC_OBJ_PACKAGE);
	node = hwloc_get_next_obj_covering_cpuset_by_type(t->topo, pu->cpuset,
							  HWLOC_OBJ_NUMANODE, NULL);
	if (!node && pu->nodeset)
		node = hwloc_get_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE, 0);
	info->numa_node = node ? (int)node->logical_index : -1;
}

int sd_topology_bind_self(struct sd_topology *t, unsigned cpu, int strict,
			  struct sd_topology_binding *save, char *note, size_t note_len)
{
	hwloc_obj_t pu = t->pu_of_cpu[cpu];
	const struct hwloc_topology_support *support = hwloc_topology_get_support(t->topo);

	save->saved = NULL;
	note[0] = '\0';
	if (t->synthetic) {
		snprintf(note, note_len, "synthetic topology: its PUs do not exist, threads run unpinned");
		return strict ? sd_fail(-ENOSYS, "%s", note) : 0;
	}
	if (!support->cpubind->set_thisthread_cpubind) {
		snprintf(note, note_len, "this OS cannot bind threads");
		return strict ? sd_fail(-ENOSYS, "%s", note) : 0;
	}
	save->saved = hwloc_bitmap_alloc();
	if (save->saved && hwloc_get_cpubind(t->topo, save->saved, HWLOC_CPUBIND_THREAD) < 0) {
		hwloc_bitmap_free(save->saved);
		save->saved = NULL;
	}
	if (hwloc_set_cpubind(t->topo, pu->cpuset, HWLOC_CPUBIND_THREAD) < 0) {
		int e = errno;
		snprintf(note, note_len, "binding to PU %u failed: %s", pu->os_index, strerror(e));
		if (save->saved)
			hwloc_bitmap_free(save->saved);
		save->saved = NULL;
		return strict ? sd_fail(e == EPERM ? -EPERM : -ENOSYS, "%s", note) : 0;
	}
	if (!thread_user_binding)
		thread_user_binding = save->saved;
	return 1;
}

void sd_topology_unbind_self(struct sd_topology *t, struct sd_topology_binding *save)
{
	if (!save->saved)
		return;
	if (thread_user_binding == save->saved)
		thread_user_binding = NULL;
	hwloc_set_cpubind(t->topo, save->saved, HWLOC_CPUBIND_THREAD);
	hwloc_bitmap_free(save->saved);
	save->saved = NULL;
}

void *sd_topology_alloc_local(struct sd_topology *t, unsigned cpu, size_t size)
{
	hwloc_obj_t pu = t->pu_of_cpu[cpu];
	void *p = NULL;

	/* Bind to the PU's node where the OS can; plain aligned memory
	 * otherwise. Either way page aligned; the caller zeroes it. */
	if (!t->synthetic && pu->nodeset)
		p = hwloc_alloc_membind(t->topo, size, pu->nodeset, HWLOC_MEMBIND_BIND,
					HWLOC_MEMBIND_BYNODESET);
	if (!p)
		p = hwloc_alloc(t->topo, size);
	return p;
}

void sd_topology_free_local(struct sd_topology *t, void *p, size_t size)
{
	if (p)
		hwloc_free(t->topo, p, size);
}
