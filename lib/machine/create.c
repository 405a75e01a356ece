/* SPDX-License-Identifier: MIT */
/*
 * The machine's creation and teardown: configuration, topology, per-CPU
 * areas, the strategy. Everything it builds is undone in reverse on failure.
 */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-qsbr.h>

#include <shootdown/error.h>

#include "../core/error.h"
#include "../hw/machine_state.h"
#include "../hw/smp.h"
#include "../strategy/registry.h"
#include "report.h"

#define SD_DEFAULT_STRATEGY "broadcast"
#define SD_DEFAULT_TLB_SETS 256
#define SD_DEFAULT_TLB_WAYS 8
#define SD_DEFAULT_TLB_L1 64
#define SD_DEFAULT_ASID_BITS 16
#define SD_DEFAULT_IPI_TIMEOUT_MS 1000
#define SD_DEFAULT_FRAMES (UINT64_C(1) << 20)

void sd_machine_config_init(struct sd_machine_config *cfg)
{
	static const struct sd_machine_config defaults = SD_MACHINE_CONFIG_INIT;

	if (!cfg) {
		sd_fail(-EINVAL, "sd_machine_config_init: NULL config");
		return;
	}
	*cfg = defaults;
}

static int check_pow2(const char *what, unsigned v, unsigned max)
{
	if (!sd_is_pow2(v) || v > max)
		return sd_fail(-EINVAL, "%s = %u: must be a power of two <= %u", what, v, max);
	return 0;
}

/*
 * The mode of a machine that names none: strict, whose results are a
 * function of the workload and the profile alone (time/sequencer.h). Lax
 * mode is faster where CPUs outnumber PUs by far but depends on the host's
 * interleaving; a user chooses it knowingly (SD_MACHINE_MODEL_LAX,
 * SD_MODEL_LAX=1).
 */
#define SD_MODEL_DEFAULT_MODE SD_MACHINE_MODEL_STRICT

/* The mode environment variable @name asks for: @on when set and not "0",
 * @off when "0", 0 when unset or empty. */
static int env_mode(const char *name, unsigned on, unsigned off)
{
	const char *env = getenv(name);

	if (!env || !*env)
		return 0;
	return (int)(strcmp(env, "0") ? on : off);
}

/* Strict or lax modelled time: the configuration's flag, else the
 * environment's, else SD_MODEL_DEFAULT_MODE. Either needs a profile; both
 * is a contradiction, never settled by a silent choice. */
static int model_mode(struct sd_machine_config *cfg)
{
	const unsigned both = SD_MACHINE_MODEL_STRICT | SD_MACHINE_MODEL_LAX;

	if ((cfg->flags & both) == both)
		return sd_fail(-EINVAL, "SD_MACHINE_MODEL_STRICT and SD_MACHINE_MODEL_LAX: "
			       "one mode or the other");
	if (cfg->flags & both) {
		if (!cfg->profile)
			return sd_fail(-EINVAL, "SD_MACHINE_MODEL_%s without a profile: there is "
				       "no modelled time", cfg->flags & SD_MACHINE_MODEL_LAX ?
				       "LAX" : "STRICT");
		return 0;
	}
	if (!cfg->profile)
		return 0;
	/* Each variable names a mode when on and the other when "0". */
	const int strict_env = env_mode("SD_MODEL_STRICT", SD_MACHINE_MODEL_STRICT,
					SD_MACHINE_MODEL_LAX);
	const int lax_env = env_mode("SD_MODEL_LAX", SD_MACHINE_MODEL_LAX,
				     SD_MACHINE_MODEL_STRICT);

	if (strict_env && lax_env && strict_env != lax_env)
		return sd_fail(-EINVAL, "SD_MODEL_STRICT=%s and SD_MODEL_LAX=%s: one mode or "
			       "the other", getenv("SD_MODEL_STRICT"), getenv("SD_MODEL_LAX"));
	cfg->flags |= strict_env ? (unsigned)strict_env :
		      lax_env ? (unsigned)lax_env : SD_MODEL_DEFAULT_MODE;
	return 0;
}

/* Copy the caller's config (any size we know) and fill in the defaults. */
static int normalise(const struct sd_machine_config *in, struct sd_machine_config *cfg)
{
	int err;

	sd_machine_config_init(cfg);
	if (in) {
		if (in->size == 0 || in->size > sizeof(*cfg))
			return sd_fail(-EINVAL, "config size %zu unknown (expected %zu): start from "
				       "SD_MACHINE_CONFIG_INIT", in->size, sizeof(*cfg));
		memcpy(cfg, in, in->size);
		cfg->size = sizeof(*cfg);
	}
	if (!cfg->strategy)
		cfg->strategy = SD_DEFAULT_STRATEGY;
	/* sd_machine_info() reports the spec whole or not at all. */
	if (strlen(cfg->strategy) >= sizeof(((struct sd_machine_info *)0)->strategy))
		return sd_fail(-EINVAL, "strategy spec '%.20s...' is longer than %zu characters",
			       cfg->strategy, sizeof(((struct sd_machine_info *)0)->strategy) - 1);
	if (!cfg->tlb_sets)
		cfg->tlb_sets = SD_DEFAULT_TLB_SETS;
	if (!cfg->tlb_ways)
		cfg->tlb_ways = SD_DEFAULT_TLB_WAYS;
	if (!cfg->tlb_l1_entries)
		cfg->tlb_l1_entries = SD_DEFAULT_TLB_L1;
	if (!cfg->asid_bits)
		cfg->asid_bits = SD_DEFAULT_ASID_BITS;
	if (!cfg->nr_frames)
		cfg->nr_frames = SD_DEFAULT_FRAMES;
	if (!cfg->ipi_signal)
		cfg->ipi_signal = SIGRTMIN + 4;
	if (!cfg->ipi_timeout_ms)
		cfg->ipi_timeout_ms = SD_DEFAULT_IPI_TIMEOUT_MS;

	if ((err = check_pow2("tlb_sets", cfg->tlb_sets, 1u << 16)) ||
	    (err = check_pow2("tlb_ways", cfg->tlb_ways, 64)) ||
	    (err = check_pow2("tlb_l1_entries", cfg->tlb_l1_entries, 1u << 12)))
		return err;
	if (cfg->ipi_signal != SIGUSR1 && cfg->ipi_signal != SIGUSR2 &&
	    (cfg->ipi_signal < SIGRTMIN || cfg->ipi_signal > SIGRTMAX))
		return sd_fail(-EINVAL, "ipi_signal %d: must be SIGUSR1, SIGUSR2 or in %d..%d",
			       cfg->ipi_signal, SIGRTMIN, SIGRTMAX);
	if (cfg->asid_bits < 4 || cfg->asid_bits > 16)
		return sd_fail(-EINVAL, "asid_bits %u: must be 4..16", cfg->asid_bits);
	if (cfg->nr_frames > SD_PFN_MAX)
		return sd_fail(-EINVAL, "nr_frames %llu: at most %llu",
			       (unsigned long long)cfg->nr_frames, (unsigned long long)SD_PFN_MAX);
	if (cfg->oracle > SD_ORACLE_CHECKED)
		return sd_fail(-EINVAL, "oracle mode %d unknown", (int)cfg->oracle);
	if (cfg->lru > SD_LRU_GLOBAL)
		return sd_fail(-EINVAL, "lru %u unknown: want SD_LRU_PERCPU or SD_LRU_GLOBAL",
			       cfg->lru);
	if (!cfg->profile) {
		const char *env = getenv("SD_PROFILE");
		cfg->profile = env && *env ? env : NULL;
	} else if (!*cfg->profile) {
		return sd_fail(-EINVAL, "profile is empty: NULL means no modelled time");
	}
	if (!cfg->model_topology && cfg->profile) {
		const char *env = getenv("SD_MODEL_TOPOLOGY");
		cfg->model_topology = env && *env ? env : NULL;
	}
	if (cfg->model_topology && !cfg->profile)
		return sd_fail(-EINVAL, "model_topology '%s' without a profile: there is no "
			       "modelled time to place it in", cfg->model_topology);
	if (cfg->model_window_ns && !cfg->profile)
		return sd_fail(-EINVAL, "model_window_ns %llu without a profile: there is no "
			       "modelled time to keep in step", (unsigned long long)cfg->model_window_ns);
	if (cfg->model_window_ns > 1000000000u)
		return sd_fail(-EINVAL, "model_window_ns %llu: at most 1000000000 (1 s)",
			       (unsigned long long)cfg->model_window_ns);
	/* A flag from a newer header must not be dropped silently. */
	const unsigned known = SD_MACHINE_STRICT_PIN | SD_MACHINE_TAKE_SIGNAL |
			       SD_MACHINE_MODEL_STRICT | SD_MACHINE_MODEL_LAX |
			       SD_MACHINE_ANY_MECHANISM;
	if (cfg->flags & ~known)
		return sd_fail(-EINVAL, "flags 0x%x: unknown bits 0x%x", cfg->flags,
			       cfg->flags & ~known);
	const char *any = getenv("SD_MODEL_ANY_MECHANISM");
	if (any && !strcmp(any, "1"))
		cfg->flags |= SD_MACHINE_ANY_MECHANISM;
	return model_mode(cfg);
	return 0;
}

static bool oracle_checked(enum sd_oracle_mode mode)
{
	const char *env;

	if (mode != SD_ORACLE_DEFAULT)
		return mode == SD_ORACLE_CHECKED;
	env = getenv("SD_ORACLE");
	return env && !strcmp(env, "1");
}

static void free_cpus(struct sd_machine *m)
{
	if (!m->cpus)
		return;
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		if (!m->cpus[i])
			continue;
		sd_smp_many_free(m->cpus[i]);
		sd_topology_free_local(&m->topo, m->cpus[i], m->cpu_area_size);
	}
	free(m->cpus);
	m->cpus = NULL;
}

static int alloc_cpus(struct sd_machine *m)
{
	const struct sd_machine_config *cfg = &m->cfg;

	m->cpu_area_size = sd_cpu_area_size(cfg->tlb_l1_entries, cfg->tlb_sets, cfg->tlb_ways);
	m->cpus = calloc(m->nr_cpus, sizeof(*m->cpus));
	if (!m->cpus)
		return -ENOMEM;
	for (unsigned i = 0; i < m->nr_cpus; i++) {
		/* On the CPU's own NUMA node, page (so line) aligned. */
		m->cpus[i] = sd_topology_alloc_local(&m->topo, i, m->cpu_area_size);
		if (!m->cpus[i])
			return -ENOMEM;
		sd_cpu_area_init(m->cpus[i], m, i, m->cpu_area_size, cfg->tlb_l1_entries,
				 cfg->tlb_sets, cfg->tlb_ways);
	}
	return 0;
}

/* The mechanisms of @mask as "a, b", into @buf. */
static void mechanism_list(unsigned mask, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (unsigned bit = 1; bit & SD_MECH_ALL; bit <<= 1)
		if ((mask & bit) && at < len)
			at += snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
				       sd_mechanism_name(bit));
	if (!at)
		snprintf(buf, len, "none");
}

/*
 * A modelled machine runs only a strategy whose mechanisms its profile has
 * (model.h, enum sd_mechanism): a missing one would be charged the 0s its
 * profile gives it and read as a cheap algorithm. The caller may ask for
 * the what-if anyway, and then sd_machine_mechanisms() says what is missing.
 */
static int check_mechanisms(struct sd_machine *m)
{
	unsigned missing;
	char need[64], have[64];

	m->mechanisms_needed = m->ops->mechanisms;
	m->mechanisms_primary = m->ops->primary_mechanism;
	if (!m->model.on)
		return 0;
	missing = m->ops->mechanisms & ~m->model.mechanisms;
	if (!missing)
		return 0;
	if (m->cfg.flags & SD_MACHINE_ANY_MECHANISM) {
		m->mechanisms_missing = missing;
		return 0;
	}
	mechanism_list(missing, need, sizeof(need));
	mechanism_list(m->model.mechanisms, have, sizeof(have));
	return sd_fail(-EOPNOTSUPP, "strategy '%s' needs %s, which profile '%s' does not have "
		       "(its mechanisms: %s); SD_MACHINE_ANY_MECHANISM, or SD_MODEL_ANY_MECHANISM=1, "
		       "runs it anyway at the profile's costs, as a what-if", m->ops->name, need,
		       m->model.name, have);
}

int sd_machine_create(const struct sd_machine_config *in, struct sd_machine **out)
{
	struct sd_opt opts[SD_OPTS_MAX];
	unsigned nr_opts;
	struct sd_machine *m;
	int err;

	if (!out)
		return sd_fail(-EINVAL, "sd_machine_create: NULL out");
	/* An attached CPU may create another machine, but not with its
	 * interrupts off: creation takes process-wide locks and may block. */
	if (sd_this_cpu && sd_this_cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_machine_create: interrupts are off on CPU %u",
			       sd_this_cpu->id);
	m = aligned_alloc(SD_CACHELINE, sd_round_up(sizeof(*m), SD_CACHELINE));
	if (!m)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	err = normalise(in, &m->cfg);
	if (!err)
		err = sd_strategy_lookup(m->cfg.strategy, &m->ops, opts, &nr_opts);
	if (err) {
		free(m);
		return err;
	}
	snprintf(m->strategy_spec, sizeof(m->strategy_spec), "%s", m->cfg.strategy);
	m->cfg.strategy = m->strategy_spec;
	m->checked = oracle_checked(m->cfg.oracle);
	m->cfg.oracle = m->checked ? SD_ORACLE_CHECKED : SD_ORACLE_OFF;
	pthread_mutex_init(&m->pin_note_lock, NULL);
	sd_spin_init(&m->lru_lock);
	sd_oracle_init(&m->oracle);

	err = sd_topology_init(&m->topo, &m->cfg, &m->nr_cpus);
	if (err)
		goto fail_topo;
	m->cfg.nr_cpus = m->nr_cpus;
	m->cfg.pu_list = NULL;         /* resolved into the placement; not ours to keep */
	err = sd_model_init(&m->model, m->cfg.profile, m->cfg.model_topology,
			    m->cfg.model_window_ns, m->nr_cpus,
			    m->cfg.tlb_l1_entries + m->cfg.tlb_sets * m->cfg.tlb_ways);
	if (err)
		goto fail_model;
	err = check_mechanisms(m);
	if (err)
		goto fail_model;
	m->arch_range_tlbi = !m->model.on || (m->model.features & SD_MODEL_FEATURE_RANGE_TLBI);
	m->arch_kpti = m->model.on && (m->model.features & SD_MODEL_FEATURE_KPTI);
	m->arch_repeat_tlbi = m->model.on && (m->model.features & SD_MODEL_FEATURE_REPEAT_TLBI);
	/* Once, for lax mode's window waits (time/sync.c), which read no
	 * topology of their own. */
	m->model.oversubscribed = sd_topology_oversubscribed(&m->topo);
	err = sd_seq_init(&m->model.seq, m->nr_cpus,
			  m->model.on && (m->cfg.flags & SD_MACHINE_MODEL_STRICT),
			  m->cfg.ipi_signal, sd_irq_replay);
	if (err)
		goto fail_model;
	/* The caller's strings are not ours to keep: point at our copies. */
	m->cfg.profile = m->model.on ? m->model.path : NULL;
	m->cfg.model_topology = m->model.on ? m->model.topology : NULL;
	m->cfg.model_window_ns = m->model.window_ps / 1000u;
	err = alloc_cpus(m);
	if (!err)
		err = sd_trace_setup(m);
	if (err)
		goto fail_cpus;
	err = sd_frame_pool_init(&m->frames, m->cfg.nr_frames);
	if (err)
		goto fail_cpus;
	err = sd_traps_init(&m->traps, m->cfg.trap_dispatch);
	if (err)
		goto fail_frames;
	err = m->ops->machine_init(m, opts, nr_opts, &m->strategy);
	if (err)
		goto fail_traps;
	err = sd_smp_call_install(m->cfg.ipi_signal, m->cfg.flags & SD_MACHINE_TAKE_SIGNAL);
	if (err)
		goto fail_strategy;
	*out = m;
	return 0;

fail_strategy:
	m->ops->machine_fini(m, m->strategy);
fail_traps:
	sd_traps_fini(&m->traps);
fail_frames:
	sd_frame_pool_fini(&m->frames);
fail_cpus:
	sd_trace_teardown(m);
	free_cpus(m);
fail_model:
	sd_seq_fini(&m->model.seq);
	sd_model_fini(&m->model);
	sd_topology_fini(&m->topo);
fail_topo:
	sd_oracle_fini(&m->oracle);
	pthread_mutex_destroy(&m->pin_note_lock);
	sd_strategy_put(m->ops);
	free(m);
	return err;
}

int sd_machine_trace_write(struct sd_machine *m, const char *path)
{
	if (!m || !path || !*path)
		return sd_fail(-EINVAL, "sd_machine_trace_write: NULL machine or NULL/empty path");
	if (!m->trace.path)
		return sd_fail(-ENODATA, "sd_machine_trace_write: the machine is not tracing "
			       "(set sd_machine_config.trace_path or SD_TRACE)");
	/* File I/O: not with interrupts off, where IPIs to us would wait. */
	if (sd_this_cpu && sd_this_cpu->irq_depth)
		return sd_fail(-EDEADLK, "sd_machine_trace_write: interrupts are off on CPU %u",
			       sd_this_cpu->id);
	return sd_trace_write_file(m, path);
}

/* The machine's last act: its trace, whole or reported. A failure does not
 * keep the machine alive (nothing a caller could do would make the write
 * succeed later): it is said on stderr, left in sd_last_error() and
 * returned by sd_machine_destroy(), and what was written is kept under the
 * temporary name the message gives. */
static int write_trace_at_exit(struct sd_machine *m)
{
	int err;

	if (!m->trace.path)
		return 0;
	err = sd_machine_trace_write(m, m->trace.path);
	if (err)
		fprintf(stderr, "libshootdown: the trace was not written: %s\n", sd_last_error());
	return err;
}

int sd_machine_destroy(struct sd_machine *m)
{
	if (!m)
		return sd_fail(-EINVAL, "sd_machine_destroy: NULL machine");
	if (atomic_load(&m->nr_attached))
		return sd_fail(-EBUSY, "%u CPU(s) still attached", atomic_load(&m->nr_attached));
	if (atomic_load(&m->nr_mms))
		return sd_fail(-EBUSY, "%u address space(s) still exist", atomic_load(&m->nr_mms));
	/* A closed file an unmapped VMA still holds goes after the VMA's grace
	 * period: wait for those first. Acquire: pairs with the last put's
	 * release (mm/file.c), whose frames are back in the pool. */
	if (atomic_load_explicit(&m->nr_files, memory_order_acquire))
		urcu_qsbr_barrier();
	if (atomic_load_explicit(&m->nr_files, memory_order_acquire))
		return sd_fail(-EBUSY, "%llu file(s) not closed (sd_file_close())",
			       (unsigned long long)atomic_load(&m->nr_files));
	/* Tasks that never ran (lib/sched): their threads end unrun. */
	if (m->sched_free)
		m->sched_free(m);
	/* Deferred page-table frees may still be queued. */
	urcu_qsbr_barrier();
	int trace_err = write_trace_at_exit(m);
	sd_smp_call_uninstall(m->cfg.ipi_signal);
	m->ops->machine_fini(m, m->strategy);
	sd_traps_fini(&m->traps);
	sd_frame_pool_fini(&m->frames);
	sd_trace_teardown(m);
	free_cpus(m);
	sd_seq_fini(&m->model.seq);
	sd_model_fini(&m->model);
	sd_topology_fini(&m->topo);
	sd_oracle_fini(&m->oracle);
	pthread_mutex_destroy(&m->pin_note_lock);
	sd_strategy_put(m->ops);
	free(m);
	return trace_err;
}

unsigned sd_machine_nr_cpus(const struct sd_machine *m)
{
	if (!m)
		return (unsigned)sd_fail(0, "sd_machine_nr_cpus: NULL machine");
	return m->nr_cpus;
}

struct sd_cpu *sd_machine_cpu(const struct sd_machine *m, unsigned id)
{
	if (!m) {
		sd_fail(-EINVAL, "sd_machine_cpu: NULL machine");
		return NULL;
	}
	if (id >= m->nr_cpus) {
		sd_fail(-EINVAL, "sd_machine_cpu: CPU %u out of range (the machine has %u)", id,
			m->nr_cpus);
		return NULL;
	}
	return m->cpus[id];
}

