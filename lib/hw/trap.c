/* SPDX-License-Identifier: MIT */
/*
 * Emulated traps (the EL0 MRS emulation rework: arch/arm64/kernel/traps.c and cpufeature.c).
 *
 * Before the seed, do_el0_undef() took undef_lock, a global raw spinlock
 * with interrupts saved, walked undef_hook, dropped the lock and called the
 * handler: every trap on every CPU serialised on one line, though the only
 * writer (register_undef_hook) ran at boot. After it, try_emulate_mrs() is
 * called first and touches no shared writable state. The three dispatch
 * modes are those two plus an RCU walk of the same list.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "event.h"
#include "machine_state.h"
#include "trap.h"

/* ---- built-in emulations ---- */

/* MRS fields: op0 = 2 + bit 19, op1 [18:16], CRn [15:12], CRm [11:8], op2 [7:5]. */
static bool mrs_is_id_reg(uint32_t insn)
{
	return ((insn >> 19) & 1) && !((insn >> 16) & 7) && !((insn >> 12) & 0xf);
}

static void write_reg(struct sd_cpu *cpu, unsigned rt, uint64_t v)
{
	if (rt < 31)                   /* 31 is XZR: the write is discarded */
		cpu->regs[rt] = v;
}

/* try_emulate_mrs(): an ID register read, answered from the sanitised
 * table; any other system register is not emulated (SIGILL). */
static int emulate_mrs(struct sd_cpu *cpu, uint32_t insn, void *arg)
{
	const struct sd_traps *t = arg;

	if ((insn & SD_INSN_MRS_MASK) != SD_INSN_MRS_VALUE || !mrs_is_id_reg(insn))
		return -EILSEQ;
	write_reg(cpu, insn & 31, t->id_regs[(insn >> 5) & (SD_TRAP_ID_REGS - 1)]);
	return 0;
}

#define SWP_MASK 0x0fb00ff0u           /* SWP and SWPB, any condition */
#define SWP_VALUE 0x01000090u

/* armv8_deprecated's SWP{B}: exchange a register with a memory word. */
static int emulate_swp(struct sd_cpu *cpu, uint32_t insn, void *arg)
{
	struct sd_traps *t = arg;
	unsigned rn = (insn >> 16) & 0xf, rt = (insn >> 12) & 0xf, rt2 = insn & 0xf;
	SD_ATOMIC(uint32_t) *w = &t->swp_mem[(cpu->regs[rn] >> 2) & (SD_TRAP_SWP_WORDS - 1)];
	uint32_t in = (uint32_t)cpu->regs[rt2], old;

	if (insn & (1u << 22)) {       /* SWPB: the low byte only */
		old = atomic_load(w);
		while (!atomic_compare_exchange_weak(w, &old, (old & ~0xffu) | (in & 0xffu)))
			;
		old &= 0xffu;
	} else {
		old = atomic_exchange(w, in);
	}
	write_reg(cpu, rt, old);
	return 0;
}

/* ---- hooks ---- */

static int add_hook(struct sd_traps *t, uint32_t mask, uint32_t value, sd_trap_fn fn,
		    void *arg, bool builtin, struct sd_trap_hook **out)
{
	struct sd_trap_hook *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->mask = mask;
	h->value = value;
	h->fn = fn;
	h->arg = arg;
	h->builtin = builtin;
	pthread_mutex_lock(&t->reg_mutex);
	/* Locked mode: walkers hold the spinlock, so exclude them too. The
	 * release store is what the other modes' walkers rely on: whoever
	 * finds the hook sees it whole. */
	if (t->mode == SD_TRAP_LOCKED)
		sd_spin_lock(&t->lock);
	atomic_store_explicit(&h->next, atomic_load_explicit(&t->hooks, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&t->hooks, h, memory_order_release);
	if (t->mode == SD_TRAP_LOCKED)
		sd_spin_unlock(&t->lock);
	pthread_mutex_unlock(&t->reg_mutex);
	if (out)
		*out = h;
	return 0;
}

/* Sanitised ID register values: a Neoverse-like part, features the
 * kernel exposes to EL0 only (as arm64_ftr_reg sanitising leaves them). */
static void fill_id_regs(uint64_t *r)
{
	r[4 * 8 + 0] = 0x0000000000110011ull;  /* ID_AA64PFR0_EL1: EL0/EL1 AArch64, FP, AdvSIMD */
	r[5 * 8 + 0] = 0x0000000000000000ull;  /* ID_AA64DFR0_EL1: hidden */
	r[6 * 8 + 0] = 0x0000100010211120ull;  /* ID_AA64ISAR0_EL1: AES, SHA1/2, CRC32, atomics */
	r[6 * 8 + 1] = 0x0000000000100001ull;  /* ID_AA64ISAR1_EL1: DPB, LRCPC */
	r[7 * 8 + 0] = 0x0000000000000000ull;  /* ID_AA64MMFR0_EL1: hidden */
	r[0 * 8 + 0] = 0x00000000410fd0c0ull;  /* MIDR_EL1 */
	r[0 * 8 + 5] = 0x0000000080000000ull;  /* MPIDR_EL1: only bit 31 */
}

int sd_traps_init(struct sd_traps *t, enum sd_trap_dispatch mode)
{
	int err;

	if (mode != SD_TRAP_DIRECT && mode != SD_TRAP_RCU && mode != SD_TRAP_LOCKED)
		return sd_fail(-EINVAL, "trap_dispatch %d unknown (want SD_TRAP_DIRECT, "
			       "SD_TRAP_RCU or SD_TRAP_LOCKED)", (int)mode);
	memset(t, 0, sizeof(*t));
	t->mode = mode;
	sd_spin_init(&t->lock);
	pthread_mutex_init(&t->reg_mutex, NULL);
	atomic_init(&t->hooks, NULL);
	fill_id_regs(t->id_regs);
	for (unsigned i = 0; i < SD_TRAP_SWP_WORDS; i++)
		atomic_init(&t->swp_mem[i], 0);
	/* Boot-time hooks, as register_undef_hook() did for MRS and SWP. */
	err = add_hook(t, SWP_MASK, SWP_VALUE, emulate_swp, t, true, NULL);
	if (!err)
		err = add_hook(t, SD_INSN_MRS_MASK, SD_INSN_MRS_VALUE, emulate_mrs, t, true, NULL);
	if (err)
		sd_traps_fini(t);
	return err;
}

void sd_traps_fini(struct sd_traps *t)
{
	/* No CPU is attached any more: nothing walks the list. */
	struct sd_trap_hook *h = atomic_load(&t->hooks);

	while (h) {
		struct sd_trap_hook *next = atomic_load(&h->next);
		free(h);
		h = next;
	}
	atomic_store(&t->hooks, NULL);
	pthread_mutex_destroy(&t->reg_mutex);
}

int sd_trap_register(struct sd_machine *m, uint32_t mask, uint32_t value, sd_trap_fn fn,
		     void *arg, struct sd_trap_hook **out)
{
	if (!m || !fn || !out)
		return sd_fail(-EINVAL, "sd_trap_register: NULL argument");
	if (value & ~mask)
		return sd_fail(-EINVAL, "sd_trap_register: value 0x%08x has bits outside "
			       "mask 0x%08x: it could never match", value, mask);
	return add_hook(&m->traps, mask, value, fn, arg, false, out);
}

static void free_hook(struct rcu_head *head)
{
	free(caa_container_of(head, struct sd_trap_hook, rcu));
}

int sd_trap_unregister(struct sd_machine *m, struct sd_trap_hook *hook)
{
	struct sd_traps *t;
	struct sd_trap_hook *h;
	bool found;

	if (!m || !hook)
		return sd_fail(-EINVAL, "sd_trap_unregister: NULL argument");
	if (hook->builtin)
		return sd_fail(-EINVAL, "sd_trap_unregister: built-in hooks stay");
	t = &m->traps;
	pthread_mutex_lock(&t->reg_mutex);
	SD_ATOMIC(struct sd_trap_hook *) *pp = &t->hooks;
	for (h = atomic_load_explicit(pp, memory_order_relaxed); h && h != hook;
	     h = atomic_load_explicit(pp, memory_order_relaxed))
		pp = &h->next;
	found = h == hook;
	if (found) {
		if (t->mode == SD_TRAP_LOCKED)
			sd_spin_lock(&t->lock);
		/* Unlink: a walker already on the hook still finds its next. */
		atomic_store_explicit(pp, atomic_load_explicit(&hook->next, memory_order_relaxed),
				      memory_order_release);
		if (t->mode == SD_TRAP_LOCKED)
			sd_spin_unlock(&t->lock);
	}
	pthread_mutex_unlock(&t->reg_mutex);
	if (!found)
		return sd_fail(-ENOENT, "sd_trap_unregister: hook not registered on this machine");
	/* RCU walkers may still be on it; locked-mode walkers never are (they
	 * copied fn and arg), but one rule for all keeps it simple. */
	urcu_qsbr_call_rcu(&hook->rcu, free_hook);
	return 0;
}

/* ---- dispatch ---- */

/* call_undef_hook() before the seed: find under undef_lock, interrupts
 * off, then call with the lock dropped. */
static int dispatch_locked(struct sd_cpu *cpu, struct sd_traps *t, uint32_t insn)
{
	struct sd_trap_hook *h;
	sd_trap_fn fn = NULL;
	void *arg = NULL;

	sd_irq_off(cpu);
	sd_event_spin_lock(cpu, &t->lock, SD_LOCK_TRAP);
	for (h = atomic_load_explicit(&t->hooks, memory_order_relaxed); h;
	     h = atomic_load_explicit(&h->next, memory_order_relaxed)) {
		if ((insn & h->mask) == h->value) {
			fn = h->fn;
			arg = h->arg;
			break;
		}
	}
	sd_event_spin_unlock(cpu, &t->lock, SD_LOCK_TRAP);
	sd_irq_on(cpu);
	return fn ? fn(cpu, insn, arg) : -EILSEQ;
}

/* The same list, walked as an RCU reader: no shared write at all. The
 * hook cannot be freed while we run it: this CPU passes no quiescent
 * state until the trap is over. */
static int dispatch_rcu(struct sd_cpu *cpu, struct sd_traps *t, uint32_t insn)
{
	struct sd_trap_hook *h;

	/* Acquire: pairs with the release publishing each hook and link. */
	for (h = atomic_load_explicit(&t->hooks, memory_order_acquire); h;
	     h = atomic_load_explicit(&h->next, memory_order_acquire))
		if ((insn & h->mask) == h->value)
			return h->fn(cpu, insn, h->arg);
	return -EILSEQ;
}

/* do_el0_undef(): find the instruction's hook, in the machine's mode. */
static int trap_dispatch(struct sd_cpu *cpu, struct sd_traps *t, uint32_t insn)
{
	int err;

	switch (t->mode) {
	case SD_TRAP_DIRECT:
		/* do_el0_undef() after the seed: MRS first, no list. */
		err = emulate_mrs(cpu, insn, t);
		if (err == -EILSEQ && (insn & SD_INSN_MRS_MASK) != SD_INSN_MRS_VALUE)
			err = dispatch_rcu(cpu, t, insn);
		return err;
	case SD_TRAP_RCU:
		return dispatch_rcu(cpu, t, insn);
	default:
		return dispatch_locked(cpu, t, insn);
	}
}

int sd_trap(struct sd_cpu *cpu, uint32_t insn)
{
	struct sd_traps *t;
	int err;

	if (sd_cpu_check_self(cpu))
		return sd_fail(-EPERM, "sd_trap: " SD_NOT_ATTACHED);
	if (cpu->irq_depth)
		return sd_fail(-EINVAL, "sd_trap: called with interrupts off");
	t = &cpu->m->traps;
	/* An idle CPU is an RCU extended quiescent state: come back online. */
	if (!sd_rcu_online())
		sd_rcu_thread_online();
	sd_event(cpu, SD_EV_TRAP_BEGIN, insn, 0);
	err = trap_dispatch(cpu, t, insn);
	sd_event(cpu, SD_EV_TRAP_END, insn, 0);
	if (++cpu->ops_since_qs >= 64)
		sd_cpu_qs(cpu);
	if (err == -EILSEQ) {
		sd_event(cpu, SD_EV_TRAP_UNDEF, insn, 0);
		return sd_fail_lazy(-EILSEQ, "sd_trap: undefined instruction 0x%08x", insn);
	}
	return err;
}

uint64_t sd_cpu_reg(const struct sd_cpu *cpu, unsigned n)
{
	if (!cpu)
		return (uint64_t)sd_fail(0, "sd_cpu_reg: NULL CPU");
	return n < 31 ? cpu->regs[n] : 0;       /* X31 reads as XZR: documented, no error */
}

int sd_cpu_set_reg(struct sd_cpu *cpu, unsigned n, uint64_t value)
{
	if (!cpu)
		return sd_fail(-EINVAL, "sd_cpu_set_reg: NULL CPU");
	if (n > 30)
		return sd_fail(-EINVAL, "sd_cpu_set_reg: X%u does not exist", n);
	cpu->regs[n] = value;
	return 0;
}

uint64_t sd_trap_id_reg(const struct sd_machine *m, unsigned crm, unsigned op2)
{
	if (!m || crm > 7 || op2 > 7)
		return (uint64_t)sd_fail(0, "sd_trap_id_reg: %s", m ? "crm or op2 above 7" : "NULL machine");
	return m->traps.id_regs[crm * 8 + op2];
}
