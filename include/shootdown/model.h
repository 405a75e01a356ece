/* SPDX-License-Identifier: MIT */
/**
 * @file model.h
 * @brief Modelled time: each emulated CPU keeps a clock of what its work
 * would cost on a described machine.
 * @ingroup model
 *
 * With a machine profile (sd_machine_config.profile), every emulated CPU
 * carries a clock in modelled nanoseconds. Every hardware event the CPU
 * takes part in (a TLB hit, a walk, a local or broadcast invalidation, an
 * IPI sent, delivered, handled and acknowledged, an INVLPGB and its
 * TLBSYNC, a context switch, a system call, a fault, a trap, a lock or a
 * hot cache line changing hands) is charged the cost the profile gives it.
 * Shared resources (the broadcast interconnect, the modelled locks, the hot
 * cache lines the algorithms fight over) serialise their users in modelled
 * time, so contention shows up in the clocks however the host interleaved
 * the threads. In strict mode (SD_MACHINE_MODEL_STRICT) one emulated CPU
 * runs at a time, always the one whose clock is lowest, so a run's clocks
 * do not depend on the host at all; lax mode (asked for) keeps
 * running CPUs within a window of each other instead, as the Graphite
 * simulator does, and lets the host's order decide inside it. Either way 64 emulated CPUs
 * time-sharing 2 host cores interleave as 64 CPUs would. The real
 * execution is unchanged: real threads, real races, the oracle; modelled
 * time is computed beside it.
 *
 * A profile is a JSON file (format in the guide, "Modelled time"): the
 * modelled machine's topology as a hwloc synthetic string, and the cost in
 * ns of every event class, each with its source. Emulated CPU i sits on
 * the profile topology's PU i (logical order); the distance class of two
 * CPUs (same core, same last-level cache, same package, across packages)
 * picks the cache-line transfer and lock handoff costs between them.
 *
 * Without a profile nothing is modelled, every clock reads 0, and the hot
 * paths cost what they cost before modelled time existed.
 */
#ifndef SHOOTDOWN_MODEL_H
#define SHOOTDOWN_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup model Modelled time
 * Per-CPU modelled clocks charged from a machine profile.
 * @{
 */

/** Default lax-mode window (sd_machine_config.model_window_ns); strict mode
 *  has none. */
#define SD_MODEL_WINDOW_DEFAULT_NS 2000u

/** Distance classes between two emulated CPUs of a modelled machine. */
enum sd_model_distance {
	SD_DIST_CORE = 0,     /**< the same core (SMT siblings) */
	SD_DIST_LLC = 1,      /**< different cores sharing the last-level cache */
	SD_DIST_PACKAGE = 2,  /**< the same package, different LLCs */
	SD_DIST_SYSTEM = 3,   /**< different packages */
	SD_DIST_NR
};

/** What sd_machine_model_info() reports. */
struct sd_model_info {
	/** sizeof(struct sd_model_info) as the caller compiled it. */
	size_t size;
	/** 1 if the machine models time (a profile was given), else 0. */
	int modelled;
	/** The profile's "name" field, "" if not modelled. */
	char profile[64];
	/** The file the profile was read from, "" if not modelled. */
	char profile_path[256];
	/** The modelled topology as a hwloc synthetic string. */
	char topology[128];
	/** PUs in the modelled topology (at least the machine's CPUs). */
	unsigned nr_pus;
	/** Lax-synchronisation window in modelled ns. */
	uint64_t window_ns;
	/** Smallest and largest CPU clock now, in modelled ns. */
	uint64_t clock_min_ns;
	/** See clock_min_ns. */
	uint64_t clock_max_ns;
	/** Times a CPU waited because it was a window ahead of the slowest. */
	uint64_t window_waits;
	/** Largest lead of a CPU over the slowest running CPU at the moment
	 *  it went on (never more than window_ns plus the event that took it
	 *  past: the bound test/hw/test_model checks), since the machine was
	 *  created. Lax mode only: 0 in strict mode, where one CPU runs at a
	 *  time. How loosely the CPUs met shared resources, not a fault. */
	uint64_t max_lead_ns;
	/** CPUs that came back from idle, a wait or a stall outside the
	 *  library and were moved up to the running CPUs' time. Every attach
	 *  counts one too, so a run without any disturbance has some: the
	 *  stalls among them are in @stalls. */
	uint64_t rejoins;
	/** A virtual machine's profile (vcpu_preempt_interval not 0): host
	 *  preemptions charged to its vCPUs, in all. Added in 0.2.1; a caller
	 *  built against the older struct (size up to rejoins) still works. */
	uint64_t vcpu_preemptions;
	/** Of those, the ones that found the vCPU holding a modelled lock
	 *  (lock-holder preemption: the lock stays held meanwhile). */
	uint64_t vcpu_preemptions_locked;
	/** 1 if the machine runs in strict mode (SD_MACHINE_MODEL_STRICT):
	 *  one CPU at a time, lowest modelled clock first. The fields below
	 *  were added in 0.2.2; a caller built against an older struct (size
	 *  up to vcpu_preemptions_locked, or up to rejoins) still works. */
	int strict;
	/** Strict mode: times the machine passed from one CPU to another. */
	uint64_t seq_handoffs;
	/** Strict mode: times a CPU holding the machine was blocked or spun
	 *  outside the library so long (2 ms asleep, 100 ms of CPU time) that
	 *  the machine was taken from it. Each one makes the run depend on
	 *  the host: a run with any is not exact. */
	uint64_t seq_stalls;
	/** Strict mode: CPUs that came back (from a stall, or from idle or an
	 *  attach after others went on) with a clock behind the machine's
	 *  latest time. Coming back from idle is a program's choice and is
	 *  exact when the program's own order decides it; after a stall it is
	 *  not. */
	uint64_t seq_late;
	/** Strict mode: IPIs that brought a CPU away from the machine (idle,
	 *  or blocked outside the library) in to run them, by a real signal. */
	uint64_t seq_summons;
	/** Lax mode: times a CPU that held the others back was blocked
	 *  outside the library (2 ms asleep, or 200 ms spinning, of host time)
	 *  and was taken for stalled, so the others went on without it; it
	 *  rejoined later at their time. Each one makes the run depend on the
	 *  host: a run with any is disturbed (the guide, "What to report with
	 *  a modelled number"). Strict mode's are in @seq_stalls. Added in
	 *  0.2.3; a caller built against an older struct (size up to
	 *  seq_summons, vcpu_preemptions_locked or rejoins) still works. */
	uint64_t stalls;
};

/** Initialiser for struct sd_model_info. */
#define SD_MODEL_INFO_INIT { sizeof(struct sd_model_info), 0, "", "", "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * sd_cpu_clock_ns() - @cpu's modelled clock, in ns.
 *
 * From the CPU's own thread: exact. From any other thread: the value the
 * CPU last published, which trails the exact clock by at most half the
 * window (sd_machine_model_info()'s window_ns) plus one event; exact once
 * the CPU has detached (and when it went idle). 0 for a machine
 * that does not model time, and for NULL (error.h's getter rule). Any
 * thread. Never waits: may be called with interrupts off.
 */
SD_EXPORT uint64_t sd_cpu_clock_ns(const struct sd_cpu *cpu);

/**
 * sd_cpu_work() - charge @ns of modelled compute to @cpu, the calling CPU.
 *
 * For a workload to model its own work between the library's events (the
 * loop body of a benchmark, a task's compute). Does nothing on a machine
 * that does not model time, so workloads may call it unconditionally. May
 * wait, with interrupts on, if it takes the CPU a window ahead of the
 * slowest running CPU; with interrupts off it never waits (the check is
 * made at the next event with them on).
 *
 * Return: 0; -EPERM if the caller is not attached as @cpu (NULL included);
 * -EINVAL if @ns would take the CPU's clock past 2^63 ps (about 106 days
 * of modelled time; nothing is charged). Called by the attached thread.
 */
SD_EXPORT int sd_cpu_work(struct sd_cpu *cpu, uint64_t ns);

/**
 * sd_machine_model_info() - what @m models and how its clocks stand.
 *
 * @info->size must be set (SD_MODEL_INFO_INIT); at most that many bytes are
 * written. Safe while CPUs run (the clocks are then a sample).
 *
 * Return: 0; -EINVAL for a NULL argument or an unknown size. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_machine_model_info(const struct sd_machine *m, struct sd_model_info *info);

/**
 * sd_model_cost_ns() - a cost from a machine's profile, in ns.
 * @m: the machine.
 * @key: the parameter's JSON key ("ipi_delivery", "line_transfer.llc").
 *
 * Return: the cost, or a negative value (-1.0) if @m does not model time,
 * an argument is NULL or no parameter is named @key; the detail is in
 * sd_last_error(). Any thread. Never waits: may be called with interrupts
 * off.
 */
SD_EXPORT double sd_model_cost_ns(const struct sd_machine *m, const char *key);

/**
 * sd_profile_locate() - find the profile file for @name.
 *
 * A @name containing '/' or ending in ".json" is a path and is used as it
 * is. Any other name is looked up as NAME.json, in order, in the directories
 * of the environment variable SD_PROFILE_PATH (':'-separated), then in the
 * user's own directory ($XDG_DATA_HOME/shootdown/profiles, by default
 * ~/.local/share/shootdown/profiles, where sd-calibrate writes), then in
 * the installed profiles directory (PREFIX/share/shootdown/profiles), then
 * in the source tree's profiles/ directory the library was built from.
 *
 * Return: 0 with the path in @path; -EINVAL for a NULL or empty argument
 * or a @name (not a path) with characters other than letters, digits, '-',
 * '_' and '.', or starting with '.'; -ENOENT if no such file exists or it
 * cannot be read (the detail lists where it looked);
 * -ENAMETOOLONG if the path does not fit in @len bytes. Any thread; from
 * an attached CPU only with interrupts on (it looks at files).
 */
SD_EXPORT int sd_profile_locate(const char *name, char *path, size_t len);

/**
 * The shootdown mechanisms a machine may have. A profile lists the ones
 * its machine has in its "mechanisms" object, each with its source (the
 * guide, "Modelled time"); each strategy needs some: broadcast and local
 * SD_MECH_TLBI_BROADCAST, ipi SD_MECH_IPI, gbcast SD_MECH_INVLPGB and
 * SD_MECH_IPI (for the mms without a global ASID), rar SD_MECH_RAR and
 * SD_MECH_IPI (the same, and its cpumask trims), riscv SD_MECH_SBI with
 * rfence=sbi and SD_MECH_IPI with rfence=ipi (the native S-mode IPIs of an
 * ACLINT SSWI or an AIA IMSIC), a user strategy what
 * its sd_strategy.mechanisms declares. sd_machine_create() refuses a
 * modelled machine whose strategy needs one its profile lacks (-EOPNOTSUPP):
 * such a run would charge a mechanism the machine does not have at costs
 * the profile set to 0, which reads as a cheap algorithm. Added in 0.3.0.
 */
enum sd_mechanism {
	/** Interrupts between CPUs: x86 APIC IPIs, arm64 GIC SGIs. */
	SD_MECH_IPI = 1u << 0,
	/** arm64 broadcast TLBI ...IS, carried by DVM, completed by DSB. */
	SD_MECH_TLBI_BROADCAST = 1u << 1,
	/** AMD INVLPGB broadcasts, completed by TLBSYNC. */
	SD_MECH_INVLPGB = 1u << 2,
	/** Intel RAR remote action requests, serviced by the targets'
	 *  microcode even with interrupts off. Added in 0.5.0. */
	SD_MECH_RAR = 1u << 3,
	/** RISC-V SBI remote fences (the RFENCE extension of the firmware,
	 *  OpenSBI), serviced by the targets' M-mode trap handlers even with
	 *  S-mode interrupts off. Added in 0.5.0. */
	SD_MECH_SBI = 1u << 4,
	/** Every mechanism this release knows. */
	SD_MECH_ALL = (1u << 5) - 1,
};

/**
 * sd_mechanism_name() - the profile key of one mechanism: "ipi",
 * "tlbi_broadcast", "invlpgb", "rar" or "sbi".
 * Return: the name; NULL (with the detail in sd_last_error()) for anything
 * but exactly one bit of SD_MECH_ALL. Any thread. Never waits: may be
 * called with interrupts off.
 */
SD_EXPORT const char *sd_mechanism_name(unsigned mechanism);

/** A machine's mechanisms: what its strategy needs, what its profile has
 *  and what it used so far (sd_machine_mechanisms()). Added in 0.3.0. */
struct sd_mechanism_info {
	/** sizeof(struct sd_mechanism_info) as the caller compiled it. */
	size_t size;
	/** enum sd_mechanism bits the strategy needs (0: none, or a user
	 *  strategy that declared none). */
	unsigned needed;
	/** Of those, the one that sets the strategy apart (tlbi_broadcast for
	 *  broadcast and local, ipi for ipi, invlpgb for gbcast, rar for rar,
	 *  sbi or ipi for riscv by its rfence=), the one
	 *  @used is judged by; 0 for none and undeclared user strategies. */
	unsigned primary;
	/** The profile's mechanisms; SD_MECH_ALL for a machine that models no
	 *  time (the emulator itself has them all). */
	unsigned in_profile;
	/** Needed but not in the profile: non-zero only on a machine created
	 *  with SD_MACHINE_ANY_MECHANISM (or SD_MODEL_ANY_MECHANISM=1), whose
	 *  results then charge these at whatever the profile gives them
	 *  (often 0): every output must say so. */
	unsigned missing;
	/** The mechanisms used so far, from every CPU's counters: IPIs sent
	 *  (ipis_sent), broadcast TLBIs issued (tlbi_ops), INVLPGBs issued
	 *  (invlpgb_ops), RAR signals sent (rar_signals_sent), SBI remote
	 *  fences called (sbi_rfence_calls). */
	unsigned used;
	/** One line for a report: "" when the primary mechanism was used and
	 *  none is missing; else what was not, and why when the strategy knows
	 *  (gbcast: "no mm got a global ASID"). */
	char note[192];
};

/** Initialiser for struct sd_mechanism_info. */
#define SD_MECHANISM_INFO_INIT { sizeof(struct sd_mechanism_info), 0, 0, 0, 0, 0, "" }

/**
 * sd_machine_mechanisms() - what @m's strategy needs, has and has used.
 *
 * Read from the CPUs' counters as they are now: call it after a run for
 * the run's answer (a strategy that never used its mechanism, such as
 * gbcast when no mm was given a global ASID, then says so in @info's
 * @used and @note).
 *
 * Return: 0; -EINVAL for a NULL argument or a @info whose size is not
 * sizeof(struct sd_mechanism_info). Any thread. Never waits: may be called
 * with interrupts off.
 */
SD_EXPORT int sd_machine_mechanisms(const struct sd_machine *m, struct sd_mechanism_info *info);

/** @} */

SD_END_DECLS

#endif
