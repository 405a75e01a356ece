/* SPDX-License-Identifier: MIT */
/*
 * The test-only `none` strategy: broken on purpose. It keeps the arm64 ASIDs
 * of `broadcast` but flushes only the initiator's own TLB, so any other CPU
 * that cached a changed page keeps using it. It exists so that tests can
 * show the oracle catching a strategy that breaks invariant 1. Its state is
 * broadcast's own (sd_broadcast_machine_create()), so broadcast's ops serve.
 */
#include "../hw/machine_state.h"
#include "../mm/mm.h"
#include "broadcast.h"
#include "builtin.h"

static void none_flush_range(struct sd_cpu *cpu, const struct sd_flush_req *req)
{
	sd_broadcast_flush(cpu, req->mm, req->vpn, req->nr, req->freed_tables, true);
}

static void none_flush_mm(struct sd_cpu *cpu, struct sd_mm *mm)
{
	sd_broadcast_flush(cpu, mm, 0, 0, true, true);
}

static int none_machine_init(struct sd_machine *m, const struct sd_opt *opts,
			     unsigned nr_opts, void **priv)
{
	if (nr_opts)
		return sd_opt_unknown("none", &opts[0]);
	return sd_broadcast_machine_create(m, "none", opts, 0, priv);
}

const struct sd_strategy_ops sd_none_ops = {
	.name = "none",
	.summary = "TEST ONLY, broken on purpose: flushes the initiator's TLB alone",
	.mechanisms = 0,
	.primary_mechanism = 0,
	.machine_init = none_machine_init,
	.machine_fini = sd_broadcast_machine_fini,
	.mm_init = sd_broadcast_mm_init,
	.mm_fini = sd_broadcast_mm_fini,
	.flush_range = none_flush_range,
	.flush_mm = none_flush_mm,
	.switch_mm = sd_broadcast_switch,
	.enter_lazy = NULL,
	.state_bytes = sd_broadcast_state_bytes,
};
