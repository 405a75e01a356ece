/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "tlbi_range.h"

static void emit_one(sd_tlbi_emit_fn emit, void *arg, enum sd_tlbi_op_kind kind, uint64_t vpn,
		     uint64_t pages, int scale, int num, uint64_t *count)
{
	struct sd_tlbi_op op = {
		.kind = kind, .vpn = vpn, .pages = pages, .scale = scale, .num = num,
	};

	emit(&op, arg);
	(*count)++;
}

/* The old __TLBI_RANGE_NUM: the 5-bit digit of pages at @scale, minus one. */
static int range_num_field(uint64_t pages, int scale)
{
	return (int)((pages >> (5 * scale + 1)) & SD_TLBI_RANGE_MAX_NUM) - 1;
}

/* The current __TLBI_RANGE_NUM: clamp to what one op at @scale can cover. */
static int range_num_clamped(uint64_t pages, int scale)
{
	uint64_t max = sd_tlbi_range_pages(SD_TLBI_RANGE_MAX_NUM, scale);

	return (int)((pages < max ? pages : max) >> (5 * scale + 1)) - 1;
}

static bool lpa2_misaligned(const struct sd_tlbi_split_cfg *cfg, uint64_t vpn)
{
	return cfg->lpa2 && (vpn & (SD_LPA2_ALIGN_PAGES - 1));
}

static uint64_t split_ascending(const struct sd_tlbi_split_cfg *cfg, uint64_t vpn,
				uint64_t pages, sd_tlbi_emit_fn emit, void *arg)
{
	uint64_t count = 0;
	int scale = 0;

	while (pages > 0) {
		if ((pages & 1) || lpa2_misaligned(cfg, vpn)) {
			emit_one(emit, arg, SD_TLBI_OP_PAGE, vpn, 1, -1, -1, &count);
			vpn++;
			pages--;
			continue;
		}
		int num = range_num_field(pages, scale);
		if (num >= 0) {
			uint64_t n = sd_tlbi_range_pages(num, scale);
			emit_one(emit, arg, SD_TLBI_OP_RANGE, vpn, n, scale, num, &count);
			vpn += n;
			pages -= n;
		}
		scale++;
	}
	return count;
}

static uint64_t split_descending(const struct sd_tlbi_split_cfg *cfg, uint64_t vpn,
				 uint64_t pages, sd_tlbi_emit_fn emit, void *arg)
{
	uint64_t count = 0;
	int scale = SD_TLBI_RANGE_MAX_SCALE;

	while (pages > 0) {
		if (pages == 1 || lpa2_misaligned(cfg, vpn)) {
			emit_one(emit, arg, SD_TLBI_OP_PAGE, vpn, 1, -1, -1, &count);
			vpn++;
			pages--;
			continue;
		}
		int num = range_num_clamped(pages, scale);
		if (num >= 0) {
			uint64_t n = sd_tlbi_range_pages(num, scale);
			emit_one(emit, arg, SD_TLBI_OP_RANGE, vpn, n, scale, num, &count);
			vpn += n;
			pages -= n;
		}
		scale--;
	}
	return count;
}

uint64_t sd_tlbi_split(const struct sd_tlbi_split_cfg *cfg, uint64_t vpn, uint64_t pages,
		       sd_tlbi_emit_fn emit, void *arg)
{
	uint64_t count = 0;

	/* __flush_tlb_range_limit_excess(): too large for the encoding (or,
	 * without range ops, for a soft-lockup-free loop): flush the ASID. */
	bool excess;
	switch (cfg->order) {
	case SD_TLBI_RANGE_ASCENDING:
		excess = pages >= SD_MAX_TLBI_RANGE_PAGES;     /* the old ">=" */
		break;
	case SD_TLBI_RANGE_DESCENDING:
		excess = pages > SD_MAX_TLBI_RANGE_PAGES;      /* after e3ba51ab */
		break;
	default:
		excess = pages >= cfg->max_tlbi_ops;
		break;
	}
	if (excess) {
		emit_one(emit, arg, SD_TLBI_OP_ASID, vpn, 0, -1, -1, &count);
		return count;
	}
	switch (cfg->order) {
	case SD_TLBI_RANGE_ASCENDING:
		return split_ascending(cfg, vpn, pages, emit, arg);
	case SD_TLBI_RANGE_DESCENDING:
		return split_descending(cfg, vpn, pages, emit, arg);
	default:
		for (uint64_t i = 0; i < pages; i++)
			emit_one(emit, arg, SD_TLBI_OP_PAGE, vpn + i, 1, -1, -1, &count);
		return count;
	}
}

unsigned sd_tlbi_range_expected_ops(uint64_t pages)
{
	unsigned ops = (unsigned)(pages & 1);

	for (uint64_t rest = pages >> 1; rest; rest >>= 5)
		ops += (rest & 31) != 0;
	return ops;
}

int sd_tlbi_range_order_parse(const char *s, enum sd_tlbi_range_order *out)
{
	if (!strcmp(s, "none"))
		*out = SD_TLBI_RANGE_NONE;
	else if (!strcmp(s, "ascending"))
		*out = SD_TLBI_RANGE_ASCENDING;
	else if (!strcmp(s, "descending"))
		*out = SD_TLBI_RANGE_DESCENDING;
	else
		return -EINVAL;
	return 0;
}

const char *sd_tlbi_range_order_name(enum sd_tlbi_range_order order)
{
	switch (order) {
	case SD_TLBI_RANGE_NONE:
		return "none";
	case SD_TLBI_RANGE_ASCENDING:
		return "ascending";
	case SD_TLBI_RANGE_DESCENDING:
		return "descending";
	}
	return "?";
}
