/* SPDX-License-Identifier: MIT */
#include "ordering.h"

SD_ATOMIC(sd_order_hook_fn) sd_order_hook;
SD_ATOMIC(bool) sd_order_delayed;

#define SD_SB_ENTRIES 8

struct sb_entry {
	enum { SB_ADD, SB_SETALL, SB_STORE, SB_SETBIT } kind;
	void *p;
	uintptr_t v;
};

static _Thread_local struct {
	unsigned n;
	struct sb_entry e[SD_SB_ENTRIES];
} sb;

void sd_order_set_hook(sd_order_hook_fn fn)
{
	atomic_store(&sd_order_hook, fn);
}

void sd_order_set_delayed_stores(bool on)
{
	atomic_store(&sd_order_delayed, on);
}

void sd_sb_drain(void)
{
	for (unsigned i = 0; i < sb.n; i++) {
		if (sb.e[i].kind == SB_ADD)
			atomic_fetch_add((SD_ATOMIC(int) *)sb.e[i].p, (int)sb.e[i].v);
		else if (sb.e[i].kind == SB_STORE)
			atomic_store_explicit((SD_ATOMIC(uintptr_t) *)sb.e[i].p, sb.e[i].v,
					      memory_order_release);
		else if (sb.e[i].kind == SB_SETBIT)
			sd_cpumask_set(sb.e[i].p, (unsigned)sb.e[i].v);
		else
			sd_cpumask_setall(sb.e[i].p);
	}
	sb.n = 0;
}

static void sb_push(int kind, void *p, uintptr_t v)
{
	if (sb.n == SD_SB_ENTRIES)
		sd_sb_drain();         /* a full buffer drains, as hardware's does */
	sb.e[sb.n].kind = kind;
	sb.e[sb.n].p = p;
	sb.e[sb.n].v = v;
	sb.n++;
}

void sd_sb_add_slow(SD_ATOMIC(int) *p, int v)
{
	sb_push(SB_ADD, (void *)p, (uintptr_t)v);
}

void sd_sb_store_slow(SD_ATOMIC(uintptr_t) *p, uintptr_t v)
{
	sb_push(SB_STORE, (void *)p, v);
}

void sd_sb_setbit_slow(struct sd_cpumask *mask, unsigned cpu)
{
	sb_push(SB_SETBIT, mask, cpu);
}

void sd_sb_setall_slow(struct sd_cpumask *mask)
{
	sb_push(SB_SETALL, mask, 0);
}
