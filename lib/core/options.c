/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "options.h"

/* A blank anywhere in "key=value": strtoull() would skip a leading one and
 * a key compare would miss a padded one, so "ceiling= 5" is refused whole. */
static bool has_blank(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (isspace((unsigned char)p[i]))
			return true;
	return false;
}

/* Whether @key was given already: the later one would silently win. */
static bool repeated_key(const struct sd_opt *opts, unsigned nr, const char *key)
{
	for (unsigned i = 0; i < nr; i++)
		if (!strcmp(opts[i].key, key))
			return true;
	return false;
}

int sd_opts_parse(const char *owner, const char *p, struct sd_opt *opts, unsigned *nr_opts)
{
	*nr_opts = 0;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		struct sd_opt *o = &opts[*nr_opts];

		if (*nr_opts == SD_OPTS_MAX)
			return sd_fail(-EINVAL, "too many options for '%s'", owner);
		if (!eq || eq == p || (size_t)(eq - p) >= sizeof(o->key) ||
		    len - (size_t)(eq - p) - 1 >= sizeof(o->value) || eq + 1 == p + len)
			return sd_fail(-EINVAL, "malformed option '%.*s' for '%s' (want key=value)",
				       (int)len, p, owner);
		if (has_blank(p, len))
			return sd_fail(-EINVAL, "malformed option '%.*s' for '%s': blanks are not "
				       "allowed in key=value", (int)len, p, owner);
		memcpy(o->key, p, (size_t)(eq - p));
		o->key[eq - p] = '\0';
		if (repeated_key(opts, *nr_opts, o->key))
			return sd_fail(-EINVAL, "option '%s' given twice for '%s'", o->key, owner);
		memcpy(o->value, eq + 1, len - (size_t)(eq - p) - 1);
		o->value[len - (size_t)(eq - p) - 1] = '\0';
		(*nr_opts)++;
		p += len + (comma ? 1 : 0);
		if (comma && !*p)
			return sd_fail(-EINVAL, "trailing ',' in options for '%s'", owner);
	}
	return 0;
}

int sd_opt_unknown(const char *owner, const struct sd_opt *opt)
{
	return sd_fail(-ENOENT, "unknown option '%s' for strategy '%s'", opt->key, owner);
}

int sd_opt_uint(const char *owner, const struct sd_opt *opt, uint64_t min, uint64_t max,
		uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(opt->value, &end, 10);
	if (errno || *end || end == opt->value || opt->value[0] == '-' || v < min || v > max)
		return sd_fail(-EINVAL, "option %s=%s for '%s': want an integer in %llu..%llu",
			       opt->key, opt->value, owner, (unsigned long long)min,
			       (unsigned long long)max);
	*out = v;
	return 0;
}

/* "a (hint), b or c" into @buf: @choices[@first] first, then the others
 * in their order. */
static void list_choices(char *buf, size_t size, const struct sd_opt_choice *choices,
			 unsigned nr, unsigned first)
{
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < nr && used < size; i++) {
		unsigned k = i == 0 ? first : i <= first ? i - 1 : i;
		const char *sep = i == 0 ? "" : i + 1 == nr ? " or " : ", ";
		int n = choices[k].hint ? snprintf(buf + used, size - used, "%s%s (%s)", sep,
						   choices[k].value, choices[k].hint)
					: snprintf(buf + used, size - used, "%s%s", sep,
						   choices[k].value);

		if (n < 0)
			break;
		used += (size_t)n;
	}
}

static int choose(const char *owner, const struct sd_opt *opt, const struct sd_opt_choice *choices,
		  unsigned nr, unsigned first, unsigned *out)
{
	char want[256];

	for (unsigned i = 0; i < nr; i++) {
		if (!strcmp(opt->value, choices[i].value)) {
			*out = i;
			return 0;
		}
	}
	list_choices(want, sizeof(want), choices, nr, first);
	return sd_fail(-EINVAL, "option %s=%s for '%s': want %s", opt->key, opt->value, owner,
		       want);
}

int sd_opt_choose(const char *owner, const struct sd_opt *opt,
		  const struct sd_opt_choice *choices, unsigned nr, unsigned *out)
{
	return choose(owner, opt, choices, nr, 0, out);
}

int sd_opt_flag(const char *owner, const struct sd_opt *opt,
		const struct sd_opt_choice choices[2], unsigned first_listed, bool *out)
{
	unsigned i = 0;
	int err = choose(owner, opt, choices, 2, first_listed ? 1 : 0, &i);

	if (!err)
		*out = i == 1;
	return err;
}
