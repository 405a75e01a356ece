/* SPDX-License-Identifier: MIT */
#ifndef SD_STRATEGY_RISCV_H
#define SD_STRATEGY_RISCV_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_STRATEGY
#error "strategy/riscv.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"

/* Test only: planted bugs of the `riscv` strategy (test/strategy/test_riscv.cpp). */
enum {
	/* The switcher's fence between its mask bit and satp removed. */
	SD_RISCV_BREAK_NO_FENCE = 1u << 0,
	/* A CPU's bit cleared from prev's mask at every switch, ASIDs or not:
	 * the code before Guo Ren's "riscv: asid: Fixup stale TLB entry
	 * cause application crash" (2022). */
	SD_RISCV_BREAK_CLEAR_FOOTMARK = 1u << 1,
};
extern SD_ATOMIC(unsigned) sd_riscv_test_break;

#endif
