/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_LAYER_H
#define SD_CORE_LAYER_H

/*
 * The library's layers, bottom up. Each folder of lib/ is one layer and one
 * static library in meson, compiled with -DSD_LAYER=<its number>; every
 * header starts by refusing to be included from a layer below its own, so
 * an upward include is a compile error, not a review comment. Code outside
 * the library (tests, benchmarks) sees every layer.
 *
 *   core      atomics, locks, futex, backoff, options, errors, the IPI's
 *             tagged real signal
 *   time      modelled time below the CPUs: a clock (clock.h), keeping
 *             clocks in step (sync.c: lax window, strict sync points),
 *             strict mode's sequencer over clocks, the machine's model
 *             (model.h) and its profile's reading, the parameters, and
 *             the shared resources (the interconnect queue, lock histories
 *             and calendars, the rwsem, lines) as pure functions of
 *             modelled timestamps
 *   hw        the emulated hardware: topology, CPUs and interrupts, the IPI
 *             endpoint, TLBs, frames, traps, the oracle, counters
 *   mm        page tables, address spaces, reclaim and TLB batches; the
 *             strategy's ops table, through which alone it reaches one
 *   arch      mechanisms that take an ASID or context, never an mm: arm64
 *             ASIDs and TLBI range encoding, x86 INVLPGB and global ASIDs
 *   strategy  one file per strategy, and the registry
 *   machine   creation, destruction, running, attach and detach
 *   sched     tasks on the CPUs: run queues, the switch between host
 *             threads, wait queues, wakeups, balancing, fork and exec;
 *             it runs its idle threads through sd_machine_run()
 *   runtime   what language runtimes build over the machine: handshakes
 *             among the threads of an mm (membarrier, signals, poll
 *             words, the mprotect trick)
 */
#define SD_LAYER_CORE 1
#define SD_LAYER_TIME 2
#define SD_LAYER_HW 3
#define SD_LAYER_MM 4
#define SD_LAYER_ARCH 5
#define SD_LAYER_STRATEGY 6
#define SD_LAYER_MACHINE 7
#define SD_LAYER_SCHED 8
#define SD_LAYER_RUNTIME 9

#ifndef SD_LAYER
#define SD_LAYER 99     /* outside the library: above every layer */
#endif

#endif
