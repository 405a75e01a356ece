/* SPDX-License-Identifier: MIT */
/**
 * @file trap.h
 * @brief Emulated instruction traps and their hook dispatch.
 * @ingroup trap
 *
 * An emulated CPU raises a trap for an instruction word it cannot execute;
 * the machine finds the emulation by matching (insn & mask) == value
 * against registered hooks, and the emulation writes the CPU's register
 * file. Built in: the EL0 read of an ID register (MRS), answered from the
 * machine's table of sanitised values, and the deprecated AArch32 SWP.
 * An instruction nothing matches is reported to the caller (-EILSEQ), as
 * the kernel delivers SIGILL.
 *
 * How a trap finds its hook is the machine's dispatch mode
 * (sd_machine_config.trap_dispatch):
 * - SD_TRAP_LOCKED: the code before the seed: a global spinning lock, held
 *   with emulated interrupts off, around the walk of the hook list;
 * - SD_TRAP_RCU: the walk is an RCU read section with no shared writes;
 *   registration takes a mutex, and a node is freed after a grace period;
 * - SD_TRAP_DIRECT: the code after the seed: MRS is decoded and emulated
 *   with no shared writable state; the list is only the fallback.
 * All three give identical results.
 */
#ifndef SHOOTDOWN_TRAP_H
#define SHOOTDOWN_TRAP_H

#include <stdint.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup trap Traps
 * Emulated undefined-instruction traps: ID-register MRS, SWP, user hooks.
 * @{
 */

struct sd_trap_hook;

/** MRS Xt, sysreg: 1101 0101 0011 op0 op1 CRn CRm op2 Rt; the mask of its fixed bits. */
#define SD_INSN_MRS_MASK 0xfff00000u
/** The fixed bits' value in an MRS. */
#define SD_INSN_MRS_VALUE 0xd5300000u
/** MRS of an ID register (op0 3, op1 0, CRn 0) into Xt. */
#define SD_INSN_MRS_ID(crm, op2, rt) \
	(0xd5380000u | ((uint32_t)(crm) << 8) | ((uint32_t)(op2) << 5) | (uint32_t)(rt))
/** ID_AA64ISAR0_EL1 (S3_0_C0_C6_0), the register of the seed's benchmark. */
#define SD_ID_AA64ISAR0_EL1(rt) SD_INSN_MRS_ID(6, 0, rt)
/** AArch32 SWP Rt, Rt2, [Rn] (condition always): 1110 0001 0000 Rn Rt 0000 1001 Rt2. */
#define SD_INSN_SWP(rt, rt2, rn) \
	(0xe1000090u | ((uint32_t)(rn) << 16) | ((uint32_t)(rt) << 12) | (uint32_t)(rt2))

/**
 * A hook's emulation: runs on the trapping CPU's thread (interrupts on).
 * Return 0 when it emulated @insn, or a negative errno (reported to the
 * trapping caller as is).
 */
typedef int (*sd_trap_fn)(struct sd_cpu *cpu, uint32_t insn, void *arg);

/**
 * sd_trap_register() - add a hook for instructions with (insn & @mask) == @value.
 * Later hooks are tried first. May run while other CPUs trap.
 * Return: 0 with *@out set; -EINVAL for a NULL argument or @value outside
 * @mask; -ENOMEM. Any thread.
 * Not with interrupts off: it may wait for other CPUs.
 */
SD_EXPORT int sd_trap_register(struct sd_machine *m, uint32_t mask, uint32_t value,
			       sd_trap_fn fn, void *arg, struct sd_trap_hook **out);

/**
 * sd_trap_unregister() - remove a hook. When it returns, no trap that
 * starts afterwards calls it; traps already inside it may still be running
 * (its memory is freed only after an RCU grace period).
 * Return: 0; -EINVAL for NULL or a built-in hook; -ENOENT if it is not
 * registered on @m. Any thread; an attached CPU must not hold emulated
 * interrupts off.
 */
SD_EXPORT int sd_trap_unregister(struct sd_machine *m, struct sd_trap_hook *hook);

/**
 * sd_trap() - @cpu traps on instruction word @insn.
 * Return: 0 when emulated (results in the register file); -EILSEQ when no
 * hook matches (an undefined instruction); a hook's own error; -EPERM if
 * the caller is not attached as @cpu; -EINVAL with interrupts off.
 * Attached thread.
 */
SD_EXPORT int sd_trap(struct sd_cpu *cpu, uint32_t insn);

/**
 * sd_cpu_reg() - register Xn (0..30) of @cpu; 0 for n > 30. Attached thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT uint64_t sd_cpu_reg(const struct sd_cpu *cpu, unsigned n);
/**
 * sd_cpu_set_reg() - set Xn (0..30); -EINVAL for n > 30. Attached thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_cpu_set_reg(struct sd_cpu *cpu, unsigned n, uint64_t value);

/**
 * sd_trap_id_reg() - the machine's sanitised value of ID register
 * S3_0_C0_C<crm>_<op2> (@crm 0..7, @op2 0..7): what an emulated MRS returns.
 * Unallocated ones read as zero, as the kernel's do. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT uint64_t sd_trap_id_reg(const struct sd_machine *m, unsigned crm, unsigned op2);

/** @} */

SD_END_DECLS

#endif
