/* SPDX-License-Identifier: MIT */
#ifndef SD_ARCH_TLBI_RANGE_H
#define SD_ARCH_TLBI_RANGE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_ARCH
#error "arch/tlbi_range.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"

/*
 * arm64 range TLBI encoding (FEAT_TLBIRANGE), __flush_tlb_range_op().
 *
 * A range op covers (num + 1) * 2^(5 * scale + 1) pages from its base, with
 * num in 0..31 and scale in 0..3, so always an even number of pages; single
 * pages go through ordinary per-VA ops. How a flush of P pages is split:
 *
 *  none        one op per page; from MAX_TLBI_OPS pages on, one ASID flush.
 *  ascending   before the range-TLBI scale patch (d1d3aa98, "arm64/mm:
 *              range-based tlbi decrements scale"): an odd page first,
 *              then scale counting up, each op one base-32 digit of P >> 1, using the
 *              old __TLBI_RANGE_NUM (the 5-bit field minus one, so num <= 30)
 *              and the old bound (P >= MAX_TLBI_RANGE_PAGES: ASID flush).
 *  descending  after that patch and the e3ba51ab fix: scale counting
 *              down from 3, the single page last, the clamped __TLBI_RANGE_NUM (num up
 *              to 31) and the inclusive bound (P > MAX_TLBI_RANGE_PAGES: ASID
 *              flush), so exactly 2^21 pages is one op.
 *
 * LPA2 mode: a range op's base must be 64 KiB (16-page) aligned, so single
 * page ops are issued until it is.
 */
#define SD_TLBI_RANGE_MAX_SCALE 3
#define SD_TLBI_RANGE_MAX_NUM 31
#define SD_MAX_TLBI_RANGE_PAGES (UINT64_C(32) << (5 * SD_TLBI_RANGE_MAX_SCALE + 1))
#define SD_LPA2_ALIGN_PAGES 16

enum sd_tlbi_range_order {
	SD_TLBI_RANGE_NONE = 0,
	SD_TLBI_RANGE_ASCENDING = 1,
	SD_TLBI_RANGE_DESCENDING = 2,
};

enum sd_tlbi_op_kind {
	SD_TLBI_OP_PAGE,       /* one page (VALE1IS / VAE1IS) */
	SD_TLBI_OP_RANGE,      /* RVALE1IS / RVAE1IS */
	SD_TLBI_OP_ASID,       /* ASIDE1IS: the whole ASID */
};

struct sd_tlbi_op {
	enum sd_tlbi_op_kind kind;
	uint64_t vpn;          /* first page */
	uint64_t pages;        /* pages covered (0 for ASID) */
	int scale;             /* range ops: 0..3 */
	int num;               /* range ops: 0..31 */
};

/* Pages one range op covers: __TLBI_RANGE_PAGES(num, scale). */
static inline uint64_t sd_tlbi_range_pages(int num, int scale)
{
	return (uint64_t)(num + 1) << (5 * scale + 1);
}

typedef void (*sd_tlbi_emit_fn)(const struct sd_tlbi_op *op, void *arg);

struct sd_tlbi_split_cfg {
	enum sd_tlbi_range_order order;
	bool lpa2;
	uint64_t max_tlbi_ops; /* for order none: per-page limit (512) */
};

/*
 * Split a flush of @pages pages from @vpn into ops and hand each to @emit
 * in issue order. Return: the number of ops. Pure: no allocation, no I/O.
 */
uint64_t sd_tlbi_split(const struct sd_tlbi_split_cfg *cfg, uint64_t vpn, uint64_t pages,
		       sd_tlbi_emit_fn emit, void *arg);

/* The op count every order must give for 1 < P < 2^21 with range ops:
 * (P & 1) + the non-zero base-32 digits of P >> 1. */
unsigned sd_tlbi_range_expected_ops(uint64_t pages);

/* Parse "none" / "ascending" / "descending"; -EINVAL otherwise. */
int sd_tlbi_range_order_parse(const char *s, enum sd_tlbi_range_order *out);
const char *sd_tlbi_range_order_name(enum sd_tlbi_range_order order);

#endif
