/* SPDX-License-Identifier: MIT */
/*
 * sd-calibrate: measure this machine and write two modelled-time profiles.
 *
 *   host.json         what the emulator's own events cost here, measured
 *                     through the public API, so that a workload's modelled
 *                     time under this profile can be checked against its
 *                     real time (the model's self-consistency check);
 *   host-kernel.json  what the real Linux kernel's primitives cost here,
 *                     for predicting native-kernel runs.
 *
 * Every value is a median over repetitions, after a warm-up, with the
 * measuring threads pinned by hwloc. Where an event cannot be isolated the
 * smallest operation containing it is measured and the "source" string of
 * the value says how it was derived. The parameter list is the library's
 * own (lib/time/params.h), so no key can be forgotten here.
 *
 * Usage: sd-calibrate [-o DIR] [--only GROUP[,GROUP]] [--quick] [--print]
 *
 * The files: measure.c (what every group measures with), emu.c (the
 * emulator on one CPU), one file per measurement group (lines, tlb, flush,
 * switch, trap, syscall, ipi, bcast, mm: each measures the emulator's
 * costs for host.json and the kernel's for host-kernel.json), profile.c
 * (writing them) and main.c. Everything here is sd-calibrate's own: the
 * library has no measuring code to offer, and Google Benchmark times whole
 * loops, not the pinned ping-pongs and fits these need.
 */
#ifndef SD_CALIBRATE_H
#define SD_CALIBRATE_H

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <linux/membarrier.h>

#include <hwloc.h>
#include <json-c/json.h>
#include <shootdown/shootdown.h>

#include "time/params.h"

/* ---- the parameter tables, from the library's one list ---- */

enum param {
#define P_ENUM(id, key, what) P_##id,
	SD_MODEL_PARAM_LIST(P_ENUM)
#undef P_ENUM
	P_NR
};

enum dparam {
#define D_ENUM(id, key, what) D_##id,
	SD_MODEL_DIST_PARAM_LIST(D_ENUM)
#undef D_ENUM
	D_NR
};

/* Keys of the distance classes (SD_MODEL_DIST_KEYS), in profile.c. */
extern const char *const dist_key[];

enum { DIST_CORE, DIST_LLC, DIST_PACKAGE, DIST_SYSTEM };

struct cost {
	double ns;
	char src[448];
	bool set;
};

/* The profile's "mechanisms", in enum sd_mechanism's bit order: a
 * mechanism is named only once a group measured its costs here. */
#define NR_MECH 3


struct profile {
	const char *name;
	struct cost c[P_NR];
	struct cost d[D_NR][4];
	const char *mech_source[NR_MECH];   /* NULL: not in the profile */
};

/* The two profiles being measured (profile.c). */
extern struct profile host;
extern struct profile kern;

/* ---- run-wide settings (main.c) ---- */

struct calibration {
	int reps;               /* medians over this many timed repetitions */
	double scale;           /* iteration counts are multiplied by this */
	bool quick;
	hwloc_topology_t topo;
	hwloc_obj_t pu0, pu1;   /* the pair the two-CPU measurements use */
	int pair_class;         /* distance class of pu0, pu1 */
	bool hypervisor;
	bool has_invlpgb;
};
extern struct calibration cal;


/*
 * The profile the emulated machines run under: none in the first pass; in
 * the second, the first pass's host profile, so that what the emulator's
 * events cost includes charging them to a modelled clock. A workload run
 * with --sd_profile=host pays that too, and self-consistency compares
 * its modelled time with that real time.
 */
extern char emu_profile[4200];
extern bool emu_profile_writing;        /* the first pass's profile: not reported */

/* Evaluate an sd_* call; on error report it and leave the function. */
#define TRY(expr) do { int err_ = (expr); if (err_) return lib_fail(#expr, err_); } while (0)

/* ---- the emulator on one CPU (emu.c) ---- */

#define VA_HIT    UINT64_C(0x10000000)
#define VA_SEQ    UINT64_C(0x20000000)    /* 2 MiB aligned: one leaf table */
#define VA_SPREAD UINT64_C(0x40000000)    /* one page per 2 MiB region */
#define REGION    (UINT64_C(1) << 21)
#define NR_SPREAD 64
#define PAGE      SD_PAGE_SIZE

struct emu {
	struct sd_machine *m;
	struct sd_cpu *cpu;
	struct sd_mm *mm;
};

/* The TLB geometry the next emu_create() gives its machine (0: the default). */
struct emu_geometry { unsigned sets, ways, l1; };
extern struct emu_geometry emu_geom;


struct emu_tlb {
	double hit, l2, full, wc, fault;
	double l2_frac;         /* share of the L2 pattern's accesses counted as L2 hits */
};

/* ---- two attached CPUs, an initiator and a target (ipi.c) ---- */

struct duo;
typedef int (*duo_fn)(struct sd_cpu *cpu, struct duo *d);

/* Two emulated CPUs: CPU 1 runs the mm and spins, CPU 0 measures. */
struct duo {
	struct sd_mm *mm;
	duo_fn work;
	atomic_int ready, done;
	int err;
	double *a, *rtt;        /* per-call samples of the IPI measurement */
	long n;
	double flush_ns;
	uint64_t invlpgb;
	bool busy;              /* CPU 1 keeps hitting in its TLB, as a workload's CPUs do */
};

/* The signal raw_install() counts (measure.c). */
extern atomic_int raw_signals;

/* measure.c */
double now_ns(void);
int cmp_double(const void *a, const void *b);
double median(double *v, int n);
long iters(long n);
double pos(double v);
void cpu_relax(void);
__attribute__((format(printf, 4, 5)))
void set(struct profile *p, enum param k, double ns, const char *fmt, ...);
__attribute__((format(printf, 5, 6)))
void dset(struct profile *p, enum dparam k, int dist, double ns, const char *fmt, ...);
int lib_fail(const char *what, int err);
int sys_fail(const char *what);
void fit(const double *x, const double *y, int n, double *a, double *b);
double clock_overhead(void);
int spin_until(atomic_int *v, int want, double secs);
int spin_until_zero(atomic_int *v, double secs);
int bind_self(hwloc_obj_t pu);
void unbind_self(void);
int distance_class(hwloc_obj_t a, hwloc_obj_t b);
void class_partners(hwloc_obj_t partner[4]);
double syscall_ns(void);
int raw_signo(void);
void raw_install(void);
double self_signal_ns(void);

/* emu.c */
int emu_create(struct sd_machine **m, const char *strategy, unsigned nr_cpus);
int emu_open(struct emu *e, const char *strategy);
void emu_close(struct emu *e);
int emu_map(struct emu *e, unsigned nr_seq);
void emu_tlb_measure(struct emu *e, unsigned nr_seq, struct emu_tlb *out);
double emu_spread_wc_frac(struct emu *e);

/* lines.c */
int group_lines(void);
double line_ns(void);

/* tlb.c */
int host_tlb(void);
double madvise_ns(char *p, unsigned n, bool touch, bool prot);
void fit_sizes(char *p, const double *x, int n, bool prot, double *a, double *b);
int group_tlb(void);

/* flush.c */
int host_flush(void);
int group_flush(void);

/* switch.c */
int group_switch(void);
int host_switch_group(void);

/* trap.c */
double cpuid_ns(void);
int host_trap(void);
int host_trap_group(void);

/* syscall.c */
int kern_syscall(void);

/* ipi.c */
int duo_run(const char *strategy, unsigned nr_cpus, struct duo *d);
int group_ipi(void);

/* bcast.c */
int group_bcast(void);

/* mm.c */
int host_mm(void);
double fork_ns(bool use_vfork, long n);
int group_mm(void);

/* profile.c */
void no_vcpu_preemption(struct profile *p);
void no_kpti(struct profile *p);
void fill_unmeasured(struct profile *p, const char *only);
int write_profile(const struct profile *p, const char *dir, const char *desc,
			 const char *synthetic);
void print_table(void);
int make_dirs(const char *dir);
int default_dir(char *out, size_t len);

#endif
