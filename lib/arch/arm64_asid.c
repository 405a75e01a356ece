/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "arm64_asid.h"

static inline bool test_bit(const uint64_t *map, uint64_t i)
{
	return map[i / 64] & (UINT64_C(1) << (i % 64));
}

static inline void set_bit(uint64_t *map, uint64_t i)
{
	map[i / 64] |= UINT64_C(1) << (i % 64);
}

static uint64_t find_next_zero(const uint64_t *map, uint64_t nr, uint64_t from)
{
	for (uint64_t i = from; i < nr; i++)
		if (!test_bit(map, i))
			return i;
	return nr;
}

static inline bool same_generation(const struct sd_arm64_asid *a, uint64_t id, uint64_t gen)
{
	return !((id ^ gen) >> a->bits);
}

int sd_arm64_asid_init(struct sd_arm64_asid *a, unsigned bits, unsigned nr_cpus)
{
	memset(a, 0, sizeof(*a));
	a->bits = bits;
	a->nr = UINT64_C(1) << bits;
	/* asids_update_limit(): a rollover must always find a free number
	 * after reserving one per CPU, so usable ASIDs must exceed the CPUs. */
	if (a->nr - 1 < (uint64_t)nr_cpus + 2)
		return sd_fail(-EINVAL, "asid_bits=%u gives %llu ASIDs, too few for %u CPUs",
			       bits, (unsigned long long)(a->nr - 1), nr_cpus);
	a->map = calloc((a->nr + 63) / 64, sizeof(uint64_t));
	a->percpu = aligned_alloc(SD_CACHELINE, nr_cpus * sizeof(*a->percpu));
	if (!a->map || !a->percpu || sd_cpumask_init(&a->flush_pending, nr_cpus)) {
		sd_arm64_asid_fini(a);
		return -ENOMEM;
	}
	memset(a->percpu, 0, nr_cpus * sizeof(*a->percpu));
	a->nr_cpus = nr_cpus;
	atomic_init(&a->generation, a->nr);
	a->cur_idx = 1;
	sd_spin_init(&a->lock);
	set_bit(a->map, 0);            /* ASID 0 goes with the reserved TTBR0 */
	return 0;
}

size_t sd_arm64_asid_bytes(const struct sd_arm64_asid *a)
{
	return (a->nr + 63) / 64 * sizeof(uint64_t) + a->nr_cpus * sizeof(*a->percpu) +
	       sd_cpumask_bytes(&a->flush_pending);
}

void sd_arm64_asid_fini(struct sd_arm64_asid *a)
{
	free(a->map);
	free(a->percpu);
	if (a->flush_pending.words)
		sd_cpumask_destroy(&a->flush_pending);
	a->map = NULL;
	a->percpu = NULL;
}

/* flush_context(), under the lock: start the new generation's map from what
 * every CPU is running or last ran, and make every CPU flush locally. */
static void flush_context(struct sd_arm64_asid *a)
{
	memset(a->map, 0, ((a->nr + 63) / 64) * sizeof(uint64_t));
	set_bit(a->map, 0);
	for (unsigned cpu = 0; cpu < a->nr_cpus; cpu++) {
		uint64_t id = atomic_exchange_explicit(&a->percpu[cpu].active, 0,
						       memory_order_relaxed);
		/* 0: the CPU already sat through a rollover without switching;
		 * its reserved id is the only trace of what it runs. */
		if (id == 0)
			id = a->percpu[cpu].reserved;
		set_bit(a->map, id & (a->nr - 1));
		a->percpu[cpu].reserved = id;
	}
	sd_cpumask_setall(&a->flush_pending);
}

/* check_update_reserved_asid(): rewrite every matching slot, never stop at
 * the first, or a stale copy would later be reserved for the wrong mm. */
static bool update_reserved(struct sd_arm64_asid *a, uint64_t id, uint64_t new_id)
{
	bool hit = false;

	for (unsigned cpu = 0; cpu < a->nr_cpus; cpu++) {
		if (a->percpu[cpu].reserved == id) {
			hit = true;
			a->percpu[cpu].reserved = new_id;
		}
	}
	return hit;
}

static uint64_t new_context(struct sd_arm64_asid *a, uint64_t id, bool *rolled, bool *fresh)
{
	uint64_t gen = atomic_load_explicit(&a->generation, memory_order_relaxed);
	uint64_t asid;

	*fresh = true;
	if (id) {
		uint64_t new_id = gen | (id & (a->nr - 1));
		/* A CPU still runs the mm under this number. */
		if (update_reserved(a, id, new_id)) {
			*fresh = false;
			return new_id;
		}
		if (!test_bit(a->map, id & (a->nr - 1))) {
			set_bit(a->map, id & (a->nr - 1));
			return new_id;
		}
	}
	asid = find_next_zero(a->map, a->nr, a->cur_idx);
	if (asid == a->nr) {
		gen = atomic_fetch_add_explicit(&a->generation, a->nr, memory_order_relaxed) +
		      a->nr;
		flush_context(a);
		*rolled = true;
		/* Cannot fail: more ASIDs than CPUs (checked at init). */
		asid = find_next_zero(a->map, a->nr, 1);
	}
	set_bit(a->map, asid);
	a->cur_idx = asid;
	return gen | asid;
}

void sd_arm64_asid_switch(struct sd_arm64_asid *a, unsigned cpu, SD_ATOMIC(uint64_t) *ctx_id,
			  struct sd_arm64_switch *out, struct sd_cpu *self)
{
	sd_arm64_asid_switch_hook(a, cpu, ctx_id, out, self, NULL, NULL);
}

void sd_arm64_asid_switch_hook(struct sd_arm64_asid *a, unsigned cpu, SD_ATOMIC(uint64_t) *ctx_id,
			       struct sd_arm64_switch *out, struct sd_cpu *self,
			       void (*on_new)(void *arg, bool fresh), void *arg)
{
	SD_ATOMIC(uint64_t) *active = &a->percpu[cpu].active;
	/* Acquire: pairs with the release that published a new id below,
	 * so what @on_new reset before it is seen by a CPU taking the fast
	 * path with that id. */
	uint64_t id = atomic_load_explicit(ctx_id, memory_order_acquire);
	uint64_t old = atomic_load_explicit(active, memory_order_relaxed);

	out->flush_local_all = false;
	out->allocated = false;
	out->fresh = false;
	out->rolled_over = false;

	/* Fast path. The relaxed CAS and flush_context()'s exchange on the
	 * same word are totally ordered: if we win, the rollover reads our
	 * id and reserves it; if it won, we see 0 and take the lock. */
	if (old && same_generation(a, id, atomic_load_explicit(&a->generation,
							       memory_order_relaxed)) &&
	    atomic_compare_exchange_strong_explicit(active, &old, id, memory_order_relaxed,
						    memory_order_relaxed)) {
		out->asid = sd_arm64_asid_of(a, id);
		return;
	}

	if (self)
		sd_event_spin_lock(self, &a->lock, SD_LOCK_ASID);
	else
		sd_spin_lock(&a->lock);
	/* Re-read under the lock: another CPU running this mm may have
	 * allocated for it already. */
	id = atomic_load_explicit(ctx_id, memory_order_relaxed);
	if (!same_generation(a, id, atomic_load_explicit(&a->generation, memory_order_relaxed))) {
		id = new_context(a, id, &out->rolled_over, &out->fresh);
		if (on_new)
			on_new(arg, out->fresh);
		atomic_store_explicit(ctx_id, id, memory_order_release);
		out->allocated = true;
	}
	if (sd_cpumask_test_and_clear(&a->flush_pending, cpu))
		out->flush_local_all = true;
	atomic_store_explicit(active, id, memory_order_relaxed);
	if (self)
		sd_event_spin_unlock(self, &a->lock, SD_LOCK_ASID);
	else
		sd_spin_unlock(&a->lock);
	out->asid = sd_arm64_asid_of(a, id);
}
