/* SPDX-License-Identifier: MIT */
/**
 * @file machine.h
 * @brief The emulated machine: topology, placement, CPUs, and its strategy.
 * @ingroup machine
 *
 * A machine owns a set of emulated CPUs. Each CPU is an OS thread bound to
 * one processing unit (PU) with hwloc, and holds a software TLB. All address
 * spaces created on a machine are flushed with the machine's strategy.
 *
 * Lifecycle: sd_machine_create() -> sd_machine_run() or sd_cpu_attach() /
 * sd_cpu_detach() from your own threads -> sd_machine_destroy().
 */
#ifndef SHOOTDOWN_MACHINE_H
#define SHOOTDOWN_MACHINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "export.h"

SD_BEGIN_DECLS

/**
 * @defgroup machine Machine
 * A machine: emulated CPUs pinned to PUs, a strategy, an oracle, traps.
 * @{
 */

struct sd_machine;
struct sd_cpu;

/** How emulated CPUs are placed on processing units. Every placement
 *  chooses among the PUs the creating thread may use: its affinity mask
 *  (taskset, sched_setaffinity()) within its cgroup cpuset, as hwloc reports
 *  them; the others are left out of the machine's topology. */
enum sd_placement {
	/** CPU i on the i-th allowed PU in hwloc's logical order (default). */
	SD_PLACE_COMPACT = 0,
	/** Spread over packages, then cores, then PUs (hwloc_distrib). */
	SD_PLACE_SCATTER = 1,
	/** CPU i on PU pu_list[i % pu_list_len] (OS indexes); a PU the
	 *  creating thread may not use makes sd_machine_create() fail with
	 *  -EINVAL, naming the allowed ones. */
	SD_PLACE_LIST = 2,
};

/** Flags for sd_machine_config.flags. The default (0) is lenient. */
enum sd_machine_flags {
	/** Fail with -ENOSYS/-EPERM instead of running unpinned. */
	SD_MACHINE_STRICT_PIN = 1u << 0,
	/** Take over ipi_signal even if the host already installed a handler
	 *  on it (without this flag sd_machine_create() fails with -EBUSY).
	 *  The host's handler is kept and still receives every signal of that
	 *  number that is not one of ours (see "Signals and the host program"
	 *  in the guide). */
	SD_MACHINE_TAKE_SIGNAL = 1u << 1,
	/** Modelled time in strict mode, what a machine with a profile gets
	 *  when neither mode flag is set and the environment does not ask for
	 *  lax (SD_MODEL_LAX=1 or SD_MODEL_STRICT=0): one emulated CPU runs at a time, always the one with the
	 *  lowest modelled clock, so every shared resource, lock, cpumask
	 *  read and IPI is met in modelled-time order and a run's modelled
	 *  results depend on the workload, the profile and the program's own
	 *  seeds alone, not on the host's load. sd_model_info.seq_stalls
	 *  counts what could not be kept exact (guide, "Strict mode"). As only
	 *  one runs at a time, all the CPUs are placed on one PU of the
	 *  placement (the one the creating thread runs on, else the first),
	 *  where a hand-off is a switch on one core. Without a
	 *  profile, or with SD_MACHINE_MODEL_LAX: -EINVAL. */
	SD_MACHINE_MODEL_STRICT = 1u << 2,
	/** Modelled time in lax mode (needs a profile; SD_MODEL_LAX=1 or
	 *  SD_MODEL_STRICT=0 in the environment sets it too, for a
	 *  configuration that sets neither mode flag; two variables that
	 *  disagree make sd_machine_create() fail with -EINVAL): the CPUs run at once, kept within
	 *  model_window_ns of each other, and shared resources serve them in
	 *  the host's order inside the window (Graphite's lax
	 *  synchronisation). Faster than strict mode on many PUs, but its
	 *  results move with the window and the host's interleaving (guide,
	 *  "Strict mode (the default) and lax mode"). Without a profile, or with
	 *  SD_MACHINE_MODEL_STRICT: -EINVAL. */
	SD_MACHINE_MODEL_LAX = 1u << 3,
	/** Run a strategy on a profile that lacks a mechanism it needs
	 *  (enum sd_mechanism in model.h), charging that mechanism whatever
	 *  the profile gives it, often 0: a what-if, not a measurement of that
	 *  machine. SD_MODEL_ANY_MECHANISM=1 in the environment sets it too.
	 *  sd_machine_mechanisms() reports what is missing, for the output to
	 *  state on every row. Without it sd_machine_create() fails with
	 *  -EOPNOTSUPP. Added in 0.3.0. */
	SD_MACHINE_ANY_MECHANISM = 1u << 4,
};

/** Oracle mode for sd_machine_config.oracle. */
enum sd_oracle_mode {
	/** From the environment: SD_ORACLE=1 checks, anything else does not. */
	SD_ORACLE_DEFAULT = 0,
	SD_ORACLE_OFF = 1,
	SD_ORACLE_CHECKED = 2,
};

/** sd_machine_config.nr_cpus value meaning "one CPU per PU" (the default). */
#define SD_NR_CPUS_ALL_PUS 0xffffffffu

/** Trap-hook dispatch (trap.h): how sd_trap() finds the registered hooks. */
enum sd_trap_dispatch {
	SD_TRAP_DIRECT = 0,     /**< MRS decoded directly; the list is the fallback */
	SD_TRAP_RCU = 1,        /**< the hook list walked under RCU */
	SD_TRAP_LOCKED = 2,     /**< the hook list walked under one spinning lock, irqs off */
};

/**
 * The LRU lock, for sd_machine_config.lru. A page populated on first touch
 * joins its CPU's batch of 31 (folio_add_lru()), which is moved onto the
 * machine-wide LRU under one lock when it is full or drained; a page freed
 * by a change (munmap, madvise, the frees after a flush) leaves the LRU
 * under that lock, or with its batch's drain if it is still in it. The
 * setting says whether each free first drains the freeing CPU's batch, as
 * free_pages_and_swap_cache() did before the lru_add_drain() removal that
 * came with the AMD INVLPGB series. A property of the machine's mm, not of
 * the TLB strategy: every strategy honours it. lru_lock_pages counts the
 * folios added or removed under the lock.
 */
enum sd_lru_mode {
	/** Batches drain when full (31 populated pages per CPU): the lock is
	 *  taken about twice per 31 pages (the default). */
	SD_LRU_PERCPU = 0,
	/** Every free of a change drains the CPU's batch first, then takes the
	 *  lock again for the freed pages: twice per change that frees pages. */
	SD_LRU_GLOBAL = 1,
};

/**
 * struct sd_machine_config - everything a machine can be told.
 *
 * Start from SD_MACHINE_CONFIG_INIT (or sd_machine_config_init()), which gives
 * every field its default; for the fields documented so, 0 also means "the
 * default". @size records which version of the struct the caller compiled
 * against, so fields added later take their defaults for old callers.
 */
struct sd_machine_config {
	/** sizeof(struct sd_machine_config) as the caller compiled it. */
	size_t size;
	/** Emulated CPUs, 1..4096; SD_NR_CPUS_ALL_PUS (the default) = one per
	 *  PU the creating thread may use (its affinity mask within its
	 *  cpuset). May exceed the PUs (oversubscribed). 0 is an error. */
	unsigned nr_cpus;
	/** Placement policy; SD_PLACE_COMPACT by default. */
	enum sd_placement placement;
	/** For SD_PLACE_LIST: OS indexes of PUs. */
	const unsigned *pu_list;
	/** Entries in pu_list. */
	unsigned pu_list_len;
	/** enum sd_machine_flags. */
	unsigned flags;
	/** Strategy spec "name[:key=value[,key=value]]"; NULL = "broadcast". */
	const char *strategy;
	/** L2 TLB sets, a power of two; 0 = 256. */
	unsigned tlb_sets;
	/** L2 TLB ways, a power of two; 0 = 8 (so 2048 entries by default). */
	unsigned tlb_ways;
	/** Direct-mapped L1 TLB entries, a power of two; 0 = 64. */
	unsigned tlb_l1_entries;
	/** IPI signal; 0 = SIGRTMIN+4. Must be SIGUSR1, SIGUSR2 or in SIGRTMIN..SIGRTMAX. */
	int ipi_signal;
	/** ASID width in bits, 4..16; 0 = 16. Small widths force rollovers. */
	unsigned asid_bits;
	/** Oracle mode; see enum sd_oracle_mode. */
	enum sd_oracle_mode oracle;
	/** Fake physical frames; 0 = 1 << 20 (4 GiB). At most 1 << 24. */
	uint64_t nr_frames;
	/** How traps find their hook (trap.h); SD_TRAP_DIRECT by default. */
	enum sd_trap_dispatch trap_dispatch;
	/** IPI watchdog, in ms; 0 = 1000. A CPU that has waited this long for
	 *  one IPI reports the target (CPU id, interrupt depth, pending flags,
	 *  queue, what its thread is blocked in) on stderr and counts
	 *  ipi_stuck_reports, then keeps waiting and reports again every
	 *  period. Independently, every SD_SMP_CALL_RESEND_MS of waiting it sends
	 *  the signal again (a lost signal costs a delay, never a hang). */
	unsigned ipi_timeout_ms;
	/** Page reclaim's LRU lock, enum sd_lru_mode; SD_LRU_PERCPU (0) by
	 *  default. Any other value is -EINVAL. */
	unsigned lru;
	/** Chrome trace-event JSON file written at sd_machine_destroy() (see
	 *  sd_machine_trace_write()); NULL = the environment variable SD_TRACE
	 *  if set and not empty, else no tracing. The string is copied. This
	 *  field wins over SD_TRACE. "" is -EINVAL. Checked at creation: it
	 *  must be a regular file or absent (a directory: -EISDIR; a symbolic
	 *  link, a device, a FIFO or a socket, which a trace never replaces:
	 *  -EINVAL), and a file must be creatable beside it (else the -errno
	 *  of that open: -ENOENT for a missing directory, -EACCES, -EROFS). */
	const char *trace_path;
	/** Records kept per CPU when tracing (32 bytes each); 0 = 65536. The
	 *  first ones are kept, later ones counted as trace_records_dropped. */
	unsigned trace_events_per_cpu;
	/** Machine profile for modelled time (model.h): a name found by
	 *  sd_profile_locate(), or a path. NULL = the environment variable
	 *  SD_PROFILE if set and not empty, else no modelling. The string is
	 *  copied. This field wins over SD_PROFILE. "" is -EINVAL. */
	const char *profile;
	/** The modelled topology as a hwloc synthetic string, instead of the
	 *  profile's own (the same costs on a bigger or differently shaped
	 *  machine); NULL = the environment variable SD_MODEL_TOPOLOGY if set
	 *  and not empty, else the profile's. Needs a profile (-EINVAL). */
	const char *model_topology;
	/** Lax mode's synchronisation window in modelled ns: no running CPU
	 *  gets further than this ahead of the slowest; 0 =
	 *  SD_MODEL_WINDOW_DEFAULT_NS (model.h). At most 1000000000; not 0
	 *  without a profile (-EINVAL). Strict mode has no window and does
	 *  not use it. */
	uint64_t model_window_ns;
};

/** How long (ms) a parked IPI waiter waits before sending the signal again. */
#define SD_SMP_CALL_RESEND_MS 20

/** Initialiser for struct sd_machine_config: all defaults. */
#define SD_MACHINE_CONFIG_INIT { sizeof(struct sd_machine_config), SD_NR_CPUS_ALL_PUS, SD_PLACE_COMPACT, 0, 0, 0, 0, 0, 0, 0, 0, 0, SD_ORACLE_DEFAULT, 0, SD_TRAP_DIRECT, 0, SD_LRU_PERCPU, 0, 0, 0, 0, 0 }

/**
 * sd_machine_config_init() - fill @cfg with defaults (same as SD_MACHINE_CONFIG_INIT).
 * NULL: nothing done, detail in sd_last_error(). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT void sd_machine_config_init(struct sd_machine_config *cfg);

/**
 * sd_machine_create() - discover the topology and build a machine.
 * @cfg: configuration, or NULL for all defaults.
 * @out: receives the machine.
 *
 * The environment variable SD_TOPOLOGY, if set, is a hwloc synthetic
 * topology description ("pack:2 core:8 pu:2") used instead of the real one;
 * threads then run unpinned (there are no such PUs to bind to).
 *
 * Return: 0; -EINVAL for a bad field (zero or unknown size, nr_cpus of 0 or
 * above 4096, a TLB geometry that is not a power of
 * two, a bad signal, asid_bits out of range or too small for nr_cpus, a bad
 * PU list, a bad synthetic topology, unknown bits in flags, an lru that is
 * not an enum sd_lru_mode, an empty profile, a profile file that is not a
 * valid profile or models fewer PUs than the machine has CPUs (the detail
 * names the field), a model_topology without a profile or not a hwloc
 * synthetic string, a model_window_ns above 1 s or without a profile, a strategy spec
 * of 64 characters or more, a malformed (blanks included), repeated or
 * out-of-range strategy option); -ENOENT for an unknown strategy or
 * option, or a profile that sd_profile_locate() (model.h) cannot find (or
 * the base a profile "inherits"); -ELOOP for a profile whose bases go
 * more than four deep (guide: "What if: a profile that inherits"); a
 * trace path that cannot be written (trace_path says which code); -EBUSY if 8 distinct IPI signals are already in use by other
 * machines, or if the program already installed a handler on ipi_signal
 * and SD_MACHINE_TAKE_SIGNAL is not set (SIG_IGN is not a handler: it is
 * kept and chained to); -EDEADLK if the caller is an attached CPU with
 * interrupts off; -EOPNOTSUPP for a strategy needing a mechanism
 * (enum sd_mechanism, model.h) its profile lacks, without
 * SD_MACHINE_ANY_MECHANISM; -ENOMEM. Nothing is left allocated on failure.
 * Any thread, an attached CPU (of any machine) included.
 *
 * The signal stays the program's too: a signal of that number that is not
 * one of the library's IPIs (they carry a cookie in their siginfo) goes to
 * the action the program had before, on any thread: its handler (with its
 * mask and SA_SIGINFO convention), nothing for SIG_IGN, and the default
 * action (the process ends) for SIG_DFL.
 * From an attached CPU only with interrupts on (off: -EDEADLK).
 */
SD_EXPORT int sd_machine_create(const struct sd_machine_config *cfg,
				struct sd_machine **out);

/**
 * sd_machine_destroy() - free a machine.
 *
 * A tracing machine first writes its trace (sd_machine_trace_write()) to
 * its trace path; if that fails the machine is still destroyed, the
 * failure is reported on stderr and in sd_last_error(), which names where
 * what was written is kept, and returned.
 *
 * The last machine using a signal gives the program back the action it had
 * before sd_machine_create(), unless the program installed another one
 * meanwhile: that one is left in place.
 *
 * Return: 0; -EINVAL for NULL; -EBUSY if a CPU is still attached, an
 * address space still exists, or a file is not closed (file.h; the
 * machine is left intact); the
 * sd_machine_trace_write() error of a tracing machine whose trace could
 * not be written at its path (the machine destroyed all the same). Any
 * thread that is not one of its CPUs.
 * Not from an attached CPU, so never with interrupts off.
 */
SD_EXPORT int sd_machine_destroy(struct sd_machine *m);

/** The body run on each CPU by sd_machine_run(). */
typedef void (*sd_cpu_fn)(struct sd_cpu *cpu, void *arg);

/**
 * sd_machine_run() - start one thread per CPU, run @fn on each, join them.
 *
 * Each thread is bound to its PU, attached as its CPU, runs @fn(cpu, @arg),
 * then idles (lazily keeping its last mm, which sd_mm_destroy() may still
 * take away) and keeps answering IPIs until every CPU's @fn has returned,
 * so a late shootdown never waits on a CPU that has gone. Then every CPU is
 * detached. Blocks until all are done.
 *
 * A body that breaks the CPU's interrupt balance does not leave a zombie
 * CPU behind: if it returns with interrupts off, they are turned back on
 * (deferred IPIs run) and the CPU is detached as usual, and the run reports
 * it; sd_irq_enable() calls it made with interrupts on are reported too. A
 * body that leaves its thread with pthread_exit() (or is cancelled) has its
 * CPU detached on the way out, and the other bodies are not held up. Only
 * the first error is returned; its sd_last_error() names the CPU.
 *
 * Return: 0; -EINVAL for a NULL @m or @fn; -EBUSY if any CPU is already
 * attached, or the caller is itself an attached CPU; -EAGAIN if threads could
 * not be created (none are left running); -ENOSYS/-EPERM with
 * SD_MACHINE_STRICT_PIN when binding fails; -EDEADLK if a body returned with
 * interrupts off; -EINVAL if a body called sd_irq_enable() with interrupts
 * on; -EBUSY if a body returned with requests of sd_smp_call_async() it
 * never waited for (they are waited for then; their memory was the body's,
 * so that is a bug of the body's). After any of these every CPU is detached, so the machine may be run
 * again or destroyed. Any thread that is not a CPU.
 * Not from an attached CPU, so never with interrupts off.
 */
SD_EXPORT int sd_machine_run(struct sd_machine *m, sd_cpu_fn fn, void *arg);

/** Per-CPU facts reported by sd_machine_cpu_info(). */
struct sd_cpu_info {
	unsigned cpu;      /**< emulated CPU id */
	int pu_os_index;   /**< PU it is placed on (OS index) */
	int core;          /**< logical index of that PU's core, -1 if unknown */
	int package;       /**< logical index of its package, -1 if unknown */
	int numa_node;     /**< logical index of its NUMA node, -1 if unknown */
	int pinned;        /**< 1 pinned, 0 ran unpinned, -1 never attached */
	int attached;      /**< 1 while a thread is attached */
};

/** Machine facts reported by sd_machine_info(). */
struct sd_machine_info {
	unsigned nr_cpus;       /**< emulated CPUs */
	unsigned nr_pus;        /**< processing units the placement may use */
	unsigned nr_cores;      /**< cores in the topology */
	unsigned nr_packages;   /**< packages in the topology */
	unsigned nr_numa_nodes; /**< NUMA nodes in the topology */
	int oversubscribed;     /**< more CPUs than the PUs they are placed on
				 *   (every multi-CPU machine in strict mode,
				 *   which places all its CPUs on one PU) */
	int synthetic;          /**< topology came from SD_TOPOLOGY */
	int all_pinned;         /**< every CPU that attached so far was pinned */
	enum sd_placement placement; /**< placement in use */
	enum sd_oracle_mode oracle;  /**< SD_ORACLE_OFF or SD_ORACLE_CHECKED */
	unsigned tlb_sets;      /**< L2 TLB sets */
	unsigned tlb_ways;      /**< L2 TLB ways */
	unsigned tlb_l1_entries; /**< L1 TLB entries */
	unsigned asid_bits;     /**< ASID width */
	int ipi_signal;         /**< signal number used for IPIs */
	/**
	 * What one emulated CPU costs, in bytes: its per-CPU area (state and
	 * TLB) as mapped, in whole pages, plus its share of what the strategy
	 * allocated at creation (per-CPU arrays, request rings, ASID maps).
	 * All of it is resident from sd_machine_create() on and no flush adds
	 * to it. Not counted: per-mm state, the CPU threads of sd_machine_run(),
	 * what a user strategy allocates itself, and a tracing machine's ring
	 * (trace_events_per_cpu records of 32 bytes a CPU).
	 */
	size_t bytes_per_cpu;
	char strategy[64];      /**< strategy spec as parsed, e.g. "broadcast" */
	char topology[128];     /**< short summary such as "1 pack, 2 cores, 2 PUs" */
	char pin_note[128];     /**< why CPUs run unpinned, or "" */
};

/** The PUs a machine's placement chose from and the ones it used
 *  (sd_machine_pus()). Added in 0.3.0. */
struct sd_machine_pus {
	/** sizeof(struct sd_machine_pus) as the caller compiled it. */
	size_t size;
	/** PUs of the host, allowed to the creating thread or not (0 for a
	 *  synthetic topology). */
	unsigned nr_host_pus;
	/** PUs the placement chose from: sd_machine_info()'s nr_pus. */
	unsigned nr_allowed_pus;
	/** OS indexes of those PUs as a list such as "0-3,8": the creating
	 *  thread's affinity mask (taskset, sched_setaffinity()) within its
	 *  cgroup cpuset, as it was before any CPU of this library pinned that
	 *  thread. "" for a synthetic topology, whose PUs do not exist. */
	char allowed[64];
	/** OS indexes of the PUs the CPUs are placed on, as a list ("" for a
	 *  synthetic topology). */
	char used[64];
};

/** Initialiser for struct sd_machine_pus. */
#define SD_MACHINE_PUS_INIT { sizeof(struct sd_machine_pus), 0, 0, "", "" }

/**
 * sd_machine_pus() - the PUs @m may use and the ones its CPUs are placed on.
 * Return: 0; -EINVAL for a NULL argument or a @pus whose size is not
 * sizeof(struct sd_machine_pus). Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_machine_pus(const struct sd_machine *m, struct sd_machine_pus *pus);

/**
 * sd_machine_info() - describe the machine.
 * Return: 0; -EINVAL if an argument is NULL. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_machine_info(const struct sd_machine *m, struct sd_machine_info *info);

/**
 * sd_machine_cpu_info() - describe one CPU.
 * Return: 0; -EINVAL for a NULL argument or a CPU id out of range. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_machine_cpu_info(const struct sd_machine *m, unsigned cpu,
				  struct sd_cpu_info *info);

/**
 * sd_machine_print_info() - write sd_machine_info() and each CPU's placement
 * to @f in human-readable form. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT void sd_machine_print_info(const struct sd_machine *m, FILE *f);

/**
 * sd_machine_trace_write() - write what the CPUs traced so far to @path as
 * a Chrome trace-event JSON file (the JSON Object Format that Perfetto's UI
 * and chrome://tracing open): one track per CPU with its flushes, IPI
 * handlers, switches, traps and lock waits as slices, arrows from each IPI
 * sent to its handler and from the handler to the sender's ack, and counter
 * tracks. Slices still open are closed at the write's time and marked
 * "unfinished". CPUs may keep running: what they record after the call
 * began is not in the file. The file is written under a new temporary
 * name beside @path ("@path.<pid>.tmp", created, never opened through a
 * link) and renamed over @path, so @path is either the whole trace or
 * untouched; only a regular file at @path is ever replaced.
 * Tracing must be on (sd_machine_config.trace_path or SD_TRACE).
 *
 * Return: 0; -EINVAL for a NULL or empty argument, or when @path is a
 * symbolic link, a device, a FIFO or a socket; -EISDIR when it is a
 * directory; -ENODATA if the machine is not tracing; -EDEADLK from an
 * attached CPU with interrupts off; -EEXIST if the temporary name exists
 * already; the -errno of a failed create, write or rename. Once the
 * temporary file exists, a failure keeps it, with what was written, and
 * sd_last_error() names it; @path is untouched. Any thread; from an
 * attached CPU only with interrupts on (it writes a file: -EDEADLK
 * otherwise). Never waits for another CPU.
 */
SD_EXPORT int sd_machine_trace_write(struct sd_machine *m, const char *path);

/**
 * sd_machine_nr_cpus() - number of emulated CPUs; 0 for NULL. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT unsigned sd_machine_nr_cpus(const struct sd_machine *m);

/**
 * sd_machine_cpu() - emulated CPU @id of @m, attached or not: the handle a
 * strategy or a runtime reads a target's state through (its clock,
 * sd_cpu_clock_ns(); its id). Calls that act on a CPU still need its own
 * thread (cpu.h); this only names it.
 *
 * Return: the CPU; NULL for a NULL @m or @id out of range (the detail in
 * sd_last_error()). The handle lives as long as @m. Any thread. Never
 * waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT struct sd_cpu *sd_machine_cpu(const struct sd_machine *m, unsigned id);

/** @} */

SD_END_DECLS

#endif
