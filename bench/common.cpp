// SPDX-License-Identifier: MIT
//
// shootdown-bench's shared helpers (common.hpp): the registration of the
// workload families, machine and mm wrappers, counters. Public API only.
#include "common.hpp"
#include "native.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

namespace sdbench {

Options g_opt;

// ---- registration ----

namespace {

struct Family {
	const char *name;
	int order;
	FamilyFn fn;
};

// Filled by the families' static FamilyRegistrars before main() runs;
// a function-local static, so its construction comes before the first.
std::vector<Family> &families()
{
	static std::vector<Family> f;
	return f;
}

} // namespace

FamilyRegistrar::FamilyRegistrar(const char *name, int order, FamilyFn fn)
{
	families().push_back({ name, order, fn });
}

void register_families(Set set)
{
	std::vector<Family> f = families();

	// Static initialisation order across files is unspecified: sort, and
	// break ties by name so every build registers in the same order.
	std::sort(f.begin(), f.end(), [](const Family &a, const Family &b) {
		return a.order != b.order ? a.order < b.order : std::strcmp(a.name, b.name) < 0;
	});
	for (const Family &x : f)
		x.fn(set);
}

const char *lru_name(unsigned lru)
{
	return lru == SD_LRU_GLOBAL ? "lru:global" : "lru:percpu";
}

// ---- small helpers ----

void fail(State &st, const char *what, int err)
{
	std::string msg = std::string(what) + ": " + sd_strerror(err) + ": " + sd_last_error();
	st.SkipWithError(msg.c_str());
}

uint64_t thread_cpu_ns()
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

Pin::Pin(int pu)
{
	cpu_set_t set;

	have_saved_ = !pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_);
	CPU_ZERO(&set);
	CPU_SET(native::pu_os_index(pu), &set);
	ok_ = !pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

Pin::~Pin()
{
	if (have_saved_)
		pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
}

// ---- machines and their figures ----

sd_machine_config make_config(unsigned cpus, sd_oracle_mode oracle, const char *strategy,
			      unsigned lru)
{
	sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	cfg.nr_cpus = cpus;
	cfg.strategy = strategy;
	cfg.oracle = oracle;
	cfg.lru = lru;
	if (!g_opt.profile.empty())
		cfg.profile = g_opt.profile.c_str();
	if (!g_opt.model_topology.empty())
		cfg.model_topology = g_opt.model_topology.c_str();
	cfg.model_window_ns = g_opt.model_window_ns;
	cfg.flags |= g_opt.model_flags;
	return cfg;
}

int oversubscribed(const sd_machine *m)
{
	struct sd_machine_info info;
	return sd_machine_info(m, &info) ? -1 : info.oversubscribed;
}

bool strategy_is(const sd_machine *m, const char *name)
{
	struct sd_machine_info info;

	if (sd_machine_info(m, &info))
		return false;
	size_t n = std::strcspn(info.strategy, ":");
	return n == std::strlen(name) && !std::strncmp(info.strategy, name, n);
}

// The program's own events (events.h) that this machine counted, each
// under its registered name, per iteration: a user strategy's or a
// handshake's polls and acks sit in the JSON beside the library's.
static void report_user_events(State &st, const sd_machine *m)
{
	const sd_stats all = all_stats(m);

	for (int id = SD_STAT_USER_0; id < SD_STAT_USER_0 + SD_USER_EVENTS_MAX; id++) {
		const char *name = sd_stat_name((sd_stat)id);
		if (name && all.counter[id] && std::strncmp(name, "user_", 5))
			st.counters[name] = Counter((double)all.counter[id], Counter::kAvgIterations);
	}
}

void report_machine(State &st, const sd_machine *m)
{
	struct sd_machine_info info;

	st.counters["oversubscribed"] = oversubscribed(m);
	if (sd_machine_info(m, &info))
		return;
	st.counters["pinned"] = info.all_pinned;
	if (info.oracle == SD_ORACLE_CHECKED)
		st.counters["violations"] = (double)sd_oracle_violations(m);
	report_user_events(st, m);
	// A what-if (a mechanism the profile lacks) and a mechanism the run
	// never used are said on the row itself, in counters and the label.
	sd_mechanism_info mech = SD_MECHANISM_INFO_INIT;
	if (sd_machine_mechanisms(m, &mech))
		return;
	st.counters["mechanism_missing"] = mech.missing;
	st.counters["mechanism_unused"] = mech.primary & ~mech.used;
	if (mech.note[0])
		st.SetLabel(std::string(mech.missing ? "WHAT-IF: " : "") + mech.note);
}

sd_stats cpu_stats(const sd_machine *m, unsigned cpu)
{
	sd_stats s = SD_STATS_INIT;
	sd_stats_cpu(m, cpu, &s);
	return s;
}

sd_stats all_stats(const sd_machine *m)
{
	sd_stats s = SD_STATS_INIT;
	sd_stats_snapshot(m, &s);
	return s;
}

sd_stats delta(const sd_stats &after, const sd_stats &before)
{
	sd_stats d = SD_STATS_INIT;
	sd_stats_delta(&after, &before, &d);
	return d;
}

double flush_ns_mean(const sd_stats &s)
{
	return ratio(s.flush_ns_total, s.counter[SD_STAT_FLUSH]);
}

void report_ipi_common(State &st, const sd_stats &d)
{
	const uint64_t flushes = d.counter[SD_STAT_FLUSH];

	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["ipis_per_flush"] = ratio(d.counter[SD_STAT_IPI_SENT], flushes);
	st.counters["unneeded_ipis_per_flush"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], flushes);
	st.counters["ipis_deferred_per_flush"] = ratio(d.counter[SD_STAT_IPI_DEFERRED], flushes);
	st.counters["lazy_skips_per_flush"] = ratio(d.counter[SD_STAT_LAZY_SKIP], flushes);
	st.counters["cpumask_trims"] = (double)d.counter[SD_STAT_CPUMASK_TRIM];
}

// ---- modelled time ----

void CpuClocks::reset(unsigned nr_cpus)
{
	first_.assign(nr_cpus, std::numeric_limits<uint64_t>::max());
	last_.assign(nr_cpus, 0);
}

void CpuClocks::begin(const sd_cpu *c)
{
	unsigned id = sd_cpu_id(c);

	if (id < first_.size() && first_[id] == std::numeric_limits<uint64_t>::max())
		first_[id] = sd_cpu_clock_ns(c);
}

void CpuClocks::end(const sd_cpu *c)
{
	unsigned id = sd_cpu_id(c);

	if (id < last_.size())
		last_[id] = sd_cpu_clock_ns(c);
}

uint64_t CpuClocks::span_ns() const
{
	uint64_t span = 0;

	for (size_t i = 0; i < first_.size(); i++)
		if (first_[i] != std::numeric_limits<uint64_t>::max() && last_[i] > first_[i])
			span = std::max(span, last_[i] - first_[i]);
	return span;
}

ModelSpan::ModelSpan(const sd_machine *m, const sd_cpu *self) : m_(m), self_(self)
{
	struct sd_model_info info = SD_MODEL_INFO_INIT;

	on_ = m && !sd_machine_model_info(m, &info) && info.modelled;
	strict_ = info.strict;
	window_ns_ = info.window_ns;
	if (on_)
		a_ = sample();
}

ModelSpan::Sample ModelSpan::sample() const
{
	struct sd_model_info info = SD_MODEL_INFO_INIT;
	Sample s;

	s.t = std::chrono::steady_clock::now();
	if (self_)
		s.self_ns = sd_cpu_clock_ns(self_);
	if (!sd_machine_model_info(m_, &info)) {
		s.clock_max_ns = info.clock_max_ns;
		s.window_waits = info.window_waits;
		// One mode's counters are 0 in the other: the sum is the run's.
		s.stalls = info.stalls + info.seq_stalls;
		s.late = info.seq_late;
		s.max_lead_ns = info.max_lead_ns;
	}
	return s;
}

void ModelSpan::stop(uint64_t cpu_span_ns)
{
	if (!on_ || stopped_)
		return;
	b_ = sample();
	stopped_ = true;
	span_ns_ = std::max({ cpu_span_ns, b_.self_ns - a_.self_ns,
			      b_.clock_max_ns - a_.clock_max_ns });
}

void ModelSpan::report(State &st, double ops, double host_s)
{
	if (!on_)
		return;
	stop();
	if (host_s < 0)
		host_s = std::chrono::duration<double>(b_.t - a_.t).count();
	st.counters["model_ns"] = ops > 0 ? (double)span_ns_ / ops : 0;
	st.counters["model_slowdown"] = span_ns_ ? host_s / ((double)span_ns_ * 1e-9) : 0;
	st.counters["model_window_waits"] = (double)(b_.window_waits - a_.window_waits);
	st.counters["model_strict"] = strict_;
	st.counters["model_window_ns"] = (double)window_ns_;
	st.counters["model_stalls"] = (double)(b_.stalls - a_.stalls);
	st.counters["model_late"] = (double)(b_.late - a_.late);
	st.counters["model_lead_ns"] = (double)b_.max_lead_ns;
}

// ---- Single ----

Single::Single(unsigned cpus, sd_oracle_mode oracle, uint64_t pages, const char *strategy)
{
	// --sd_oracle=checked overrides @oracle, as for RunMachine.
	sd_machine_config cfg = make_config(cpus, g_opt.oracle ? SD_ORACLE_CHECKED : oracle,
					    strategy);

	if ((err_ = sd_machine_create(&cfg, &m_))) {
		what_ = "sd_machine_create";
		return;
	}
	if ((err_ = sd_cpu_attach(m_, 0, &cpu_))) {
		what_ = "sd_cpu_attach";
		return;
	}
	if ((err_ = sd_mm_create(m_, &mm_))) {
		what_ = "sd_mm_create";
		return;
	}
	if ((err_ = sd_mmap(cpu_, mm_, kRegion, pages * SD_PAGE_SIZE,
			    SD_PROT_READ | SD_PROT_WRITE))) {
		what_ = "sd_mmap";
		return;
	}
	if ((err_ = sd_switch_mm(cpu_, mm_))) {
		what_ = "sd_switch_mm";
		return;
	}
	for (uint64_t p = 0; p < pages && !err_; p++)
		err_ = sd_access(cpu_, kRegion + p * SD_PAGE_SIZE, SD_WRITE, nullptr);
	if (err_)
		what_ = "sd_access";
}

Single::~Single()
{
	if (cpu_) {
		sd_switch_mm(cpu_, nullptr);
		sd_cpu_detach(cpu_);
	}
	if (mm_)
		sd_mm_destroy(mm_);
	if (m_)
		sd_machine_destroy(m_);
}

bool Single::ok(State &st) const
{
	if (err_)
		fail(st, what_, err_);
	return !err_;
}

// ---- RunMachine ----

RunMachine::RunMachine(unsigned cpus, sd_oracle_mode oracle, unsigned nr_mms, uint64_t pages,
		       const MachineSpec &spec)
	: mms_(nr_mms, nullptr)
{
	sd_machine_config cfg = make_config(cpus, g_opt.oracle ? SD_ORACLE_CHECKED : oracle,
					    spec.strategy, spec.lru);
	sd_cpu *cpu = nullptr;

	cfg.tlb_sets = spec.tlb.sets;
	cfg.tlb_ways = spec.tlb.ways;
	cfg.tlb_l1_entries = spec.tlb.l1_entries;

	if ((err_ = sd_machine_create(&cfg, &m_))) {
		what_ = "sd_machine_create";
		return;
	}
	if ((err_ = sd_cpu_attach(m_, 0, &cpu))) {
		what_ = "sd_cpu_attach";
		return;
	}
	for (auto &mm : mms_) {
		if ((err_ = sd_mm_create(m_, &mm))) {
			what_ = "sd_mm_create";
			break;
		}
		if ((err_ = sd_mmap(cpu, mm, kRegion, pages * SD_PAGE_SIZE,
				    SD_PROT_READ | SD_PROT_WRITE))) {
			what_ = "sd_mmap";
			break;
		}
	}
	sd_cpu_detach(cpu);
}

RunMachine::~RunMachine()
{
	for (auto mm : mms_)
		if (mm)
			sd_mm_destroy(mm);
	if (m_)
		sd_machine_destroy(m_);
}

bool RunMachine::ok(State &st) const
{
	if (err_)
		fail(st, what_, err_);
	return !err_;
}

// In modelled time, the pipe: a sender's write or a receiver's read on each
// switch, its system call's entry and exit and half of the profile's
// pipe_message (the two calls' bodies and the copy). A profile without
// pipe_message (the host's own, which times the emulator, not a kernel)
// models no message, so the switch alone is charged as before.
uint64_t message_half_ns(const sd_machine *m)
{
	double msg = sd_model_cost_ns(m, "pipe_message");

	if (msg <= 0)
		return 0;
	return (uint64_t)(sd_model_cost_ns(m, "syscall_entry") +
			  sd_model_cost_ns(m, "syscall_exit") + msg / 2 + 0.5);
}

// ---- batches of sd_machine_run() ----

namespace {

// run_batches()' body: the real one, timed by the thread's CPU and wall clocks.
void timed_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<RunArg *>(p);
	const auto w0 = std::chrono::steady_clock::now();
	const uint64_t t0 = thread_cpu_ns();

	r->clocks.begin(c);
	r->body(c, p);
	r->clocks.end(c);
	r->thread_cpu_ns.fetch_add(thread_cpu_ns() - t0, std::memory_order_relaxed);
	r->thread_wall_ns.fetch_add(
		(uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
			std::chrono::steady_clock::now() - w0).count(),
		std::memory_order_relaxed);
}

} // namespace

void note_first_error(std::atomic<int> &slot, int err)
{
	int none = 0;

	if (err)
		slot.compare_exchange_strong(none, err);
}

bool run_batches(State &st, RunMachine &rm, sd_cpu_fn body, uint64_t batch, const char *what,
		 sd_stats *d, RunArg *arg, RunTimes *times)
{
	RunArg own;
	RunArg &r = arg ? *arg : own;
	r.rm = &rm;
	r.body = body;
	r.clocks.reset(sd_machine_nr_cpus(rm.m()));
	sd_stats before = all_stats(rm.m());
	int err = 0;
	ModelSpan model(rm.m());
	const auto t0 = std::chrono::steady_clock::now();
	for (uint64_t n; st.KeepRunningBatch(n = next_batch(st, batch));) {
		r.count = n;
		if (!err && !r.err.load())
			err = sd_machine_run(rm.m(), timed_body, &r);
	}
	model.stop(r.clocks.span_ns());
	if (times) {
		times->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
		times->pu_share = ratio(r.thread_cpu_ns.load(), r.thread_wall_ns.load());
	}
	if (err || r.err.load()) {
		fail(st, what, err ? err : r.err.load());
		return false;
	}
	*d = delta(all_stats(rm.m()), before);
	// Real time is wall time / iterations (each run: every CPU does
	// @batch operations, @batch iterations): model_ns matches it.
	model.report(st, (double)st.iterations());
	return true;
}

bool run_task_batches(State &st, RunMachine &rm,
		      const std::function<int(sd_machine *, uint64_t)> &create, uint64_t batch,
		      const char *what, sd_stats *d, RunTimes *times, uint64_t unit)
{
	sd_stats before = all_stats(rm.m());
	int err = 0;
	ModelSpan model(rm.m());
	const auto t0 = std::chrono::steady_clock::now();
	for (uint64_t n; st.KeepRunningBatch(n = next_batch(st, batch, unit));) {
		if (!err)
			err = create(rm.m(), n);
		if (!err)
			err = sd_sched_run(rm.m());
	}
	model.stop();
	if (times) {
		times->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
		times->pu_share = 0;
	}
	if (err) {
		fail(st, what, err);
		return false;
	}
	*d = delta(all_stats(rm.m()), before);
	model.report(st, (double)st.iterations());
	return true;
}

} // namespace sdbench
