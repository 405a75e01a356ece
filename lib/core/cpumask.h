/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_CPUMASK_H
#define SD_CORE_CPUMASK_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/cpumask.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "compiler.h"

/*
 * An atomic CPU bitmap, written by hand because neither hwloc's bitmaps nor
 * liburcu offer atomic per-bit updates. Bit operations are atomic RMWs on the
 * word holding the bit, like the kernel's cpumask_set_cpu(); for_each reads
 * each word once with a relaxed load.
 */
#define SD_BITS_PER_WORD 64u

struct sd_cpumask {
	unsigned nbits;
	SD_ATOMIC(uint64_t) *words;
};

int sd_cpumask_init(struct sd_cpumask *mask, unsigned nbits);

/* What sd_cpumask_init() allocated for @mask's words. */
static inline size_t sd_cpumask_bytes(const struct sd_cpumask *mask)
{
	size_t words = (mask->nbits + SD_BITS_PER_WORD - 1) / SD_BITS_PER_WORD;

	return (words * sizeof(uint64_t) + SD_CACHELINE - 1) / SD_CACHELINE * SD_CACHELINE;
}
void sd_cpumask_destroy(struct sd_cpumask *mask);

static inline unsigned sd_cpumask_nwords(const struct sd_cpumask *mask)
{
	return (mask->nbits + SD_BITS_PER_WORD - 1) / SD_BITS_PER_WORD;
}

static inline SD_ATOMIC(uint64_t) *sd_cpumask_word(const struct sd_cpumask *mask, unsigned cpu)
{
	return &mask->words[cpu / SD_BITS_PER_WORD];
}

static inline uint64_t sd_cpumask_bit(unsigned cpu)
{
	return UINT64_C(1) << (cpu % SD_BITS_PER_WORD);
}

static inline bool sd_cpumask_test(const struct sd_cpumask *mask, unsigned cpu)
{
	return atomic_load_explicit(sd_cpumask_word(mask, cpu), memory_order_relaxed) &
	       sd_cpumask_bit(cpu);
}

static inline void sd_cpumask_set(struct sd_cpumask *mask, unsigned cpu)
{
	atomic_fetch_or(sd_cpumask_word(mask, cpu), sd_cpumask_bit(cpu));
}

static inline void sd_cpumask_clear(struct sd_cpumask *mask, unsigned cpu)
{
	atomic_fetch_and(sd_cpumask_word(mask, cpu), ~sd_cpumask_bit(cpu));
}

static inline bool sd_cpumask_test_and_clear(struct sd_cpumask *mask, unsigned cpu)
{
	return atomic_fetch_and(sd_cpumask_word(mask, cpu), ~sd_cpumask_bit(cpu)) &
	       sd_cpumask_bit(cpu);
}

void sd_cpumask_setall(struct sd_cpumask *mask);
/* cpumask_any_but() < nr_cpu_ids: a CPU of @mask other than @cpu. */
bool sd_cpumask_any_but(const struct sd_cpumask *mask, unsigned cpu);
void sd_cpumask_clearall(struct sd_cpumask *mask);
unsigned sd_cpumask_weight(const struct sd_cpumask *mask);

#define sd_cpumask_for_each(cpu, mask)                                             \
	for (unsigned __w = 0; __w < sd_cpumask_nwords(mask); __w++)               \
		for (uint64_t __bits = atomic_load_explicit(&(mask)->words[__w],   \
							    memory_order_relaxed); \
		     __bits && ((cpu) = __w * SD_BITS_PER_WORD +                    \
					(unsigned)__builtin_ctzll(__bits), 1);     \
		     __bits &= __bits - 1)

#endif
