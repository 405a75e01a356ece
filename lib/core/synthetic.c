/* SPDX-License-Identifier: MIT */
/*
 * The size of a hwloc synthetic topology ("pack:2 l3:4 core:8 pu:2"), read
 * before hwloc builds it: hwloc builds every object of the description,
 * so a typo of a few digits ("pu:1000000000") would take all the memory
 * before any size check could run. hwloc offers no such count; this reads
 * only the "type:count" levels and skips attribute groups in parentheses,
 * which carry no count of objects.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "synthetic.h"

int sd_synthetic_pus(const char *s, uint64_t limit, uint64_t *pus)
{
	uint64_t n = 1;
	unsigned levels = 0;

	while (*s) {
		if (isspace((unsigned char)*s)) {
			s++;
			continue;
		}
		if (*s == '(') {
			const char *close = s;

			while (*close && *close != ')')
				close++;
			if (!*close)
				return -EINVAL;
			s = close + 1;
			continue;
		}
		const char *colon = s;

		while (*colon && *colon != ':' && !isspace((unsigned char)*colon) && *colon != '(')
			colon++;
		if (*colon != ':')
			return -EINVAL;
		char *end;
		unsigned long long count = strtoull(colon + 1, &end, 10);

		if (end == colon + 1 || count == 0)
			return -EINVAL;
		if (count > limit || n > limit / count)
			n = limit + 1;          /* saturated: too big, however it goes on */
		else
			n *= count;
		levels++;
		s = end;
	}
	if (!levels)
		return -EINVAL;
	*pus = n;
	return 0;
}
