/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "cpumask.h"

int sd_cpumask_init(struct sd_cpumask *mask, unsigned nbits)
{
	unsigned nwords = (nbits + SD_BITS_PER_WORD - 1) / SD_BITS_PER_WORD;

	mask->nbits = nbits;
	/* Words on their own lines: masks are shared and contended. */
	mask->words = aligned_alloc(SD_CACHELINE,
				    ((nwords * sizeof(uint64_t) + SD_CACHELINE - 1) /
				     SD_CACHELINE) * SD_CACHELINE);
	if (!mask->words)
		return -ENOMEM;
	for (unsigned i = 0; i < nwords; i++)
		atomic_init(&mask->words[i], 0);
	return 0;
}

void sd_cpumask_destroy(struct sd_cpumask *mask)
{
	free(mask->words);
	mask->words = NULL;
}

void sd_cpumask_setall(struct sd_cpumask *mask)
{
	unsigned nwords = sd_cpumask_nwords(mask);

	for (unsigned i = 0; i < nwords; i++) {
		unsigned left = mask->nbits - i * SD_BITS_PER_WORD;
		uint64_t v = left >= SD_BITS_PER_WORD ? ~UINT64_C(0)
						      : (UINT64_C(1) << left) - 1;
		atomic_fetch_or(&mask->words[i], v);
	}
}

void sd_cpumask_clearall(struct sd_cpumask *mask)
{
	for (unsigned i = 0; i < sd_cpumask_nwords(mask); i++)
		atomic_store(&mask->words[i], 0);
}

unsigned sd_cpumask_weight(const struct sd_cpumask *mask)
{
	unsigned n = 0;

	for (unsigned i = 0; i < sd_cpumask_nwords(mask); i++)
		n += (unsigned)__builtin_popcountll(
			atomic_load_explicit(&mask->words[i], memory_order_relaxed));
	return n;
}

bool sd_cpumask_any_but(const struct sd_cpumask *mask, unsigned cpu)
{
	unsigned t;

	sd_cpumask_for_each(t, mask)
		if (t != cpu)
			return true;
	return false;
}
