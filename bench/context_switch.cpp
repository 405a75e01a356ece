// SPDX-License-Identifier: MIT
//
// The x86/mm lazy mm_cpumask patch (van Riel), on hackbench's shape: eager
// against lazy mm_cpumask, each pair run back to back.
//
//   context_switch/ipi:cpumask={eager,lazy}/cpus:{1,2,4,8}[/flush_every:{0,500}]
//                                            tasks, each its own mm, claimed from one
//                                            pool, 2 switches per message, 1 flush per
//                                            50 switches by default (flush_every:0: never,
//                                            as in hackbench itself; 2 CPUs only)
//   context_switch/native/cpus:N             N pairs of processes, pipes, one PU per pair
//
// The main set runs broadcast, local and gbcast as well, at --sd_cpus.
#include "common.hpp"

#include <sched.h>

#include <memory>

namespace sdbench {
namespace {

// A per-CPU xorshift64: no state shared between CPUs.
inline uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

// hackbench --groups G --loops L in process mode, where every task is its
// own mm. 2 groups per CPU of 6 tasks (3 senders, 3 receivers): 12 tasks
// per CPU against 6 PCID slots (the patch thread's run: 800 tasks, 72 CPUs,
// about 11 per CPU). A message is two switches on one CPU: to a sender of a
// random group, which writes the message into its buffer page and reads
// another of its pages, then to a receiver of that group, which does the
// same with its own pages (each task is its own mm: the pipe itself is
// kernel memory, which no user TLB holds). Tasks are taken from one pool by
// all CPUs, as a scheduler that moves them freely would: a CPU claims a task
// before it switches to it and lets it go after it has switched away, so a
// task never runs on two CPUs at once; about half the switches find their
// task last ran on another CPU (migrations_per_switch). Every 50th switch of
// a CPU, the task it switched to frees its buffer page (madvise(DONTNEED),
// a flush) and touches it again; the flush_every:N variants change that rate
// (flush_every:0: never, as in hackbench itself, whose pipes flush nothing).
// In modelled time each switch also pays its half of the message, the
// sender's write or the receiver's read (message_half_ns()); the wakeup of a
// sleeping receiver is not modelled.
//
// What lazy mode pays here: a flush IPIs every CPU of the mask that is in
// the middle of a switch (LOADED_MM_SWITCHING, the CVE-2025-37964 rule),
// whatever mm it is switching to, and with the lazy mask every CPU the task
// ever ran on stays in it. Each such IPI is wrong-CPU (counted in
// unneeded_ipis_per_flush; with cpumask_trims 0 and a task running on one
// CPU at a time, nothing else sends one) and costs the flusher a signal
// round trip.
//
// The TLB is kSwitchTlb (common.hpp): its PCID flush at a switch is a scan
// of the whole TLB.
constexpr unsigned kCsGroupsPerCpu = 2;
constexpr unsigned kCsTasksPerGroup = 6;
constexpr uint64_t kCsPages = 4;
constexpr uint64_t kCsFlushEvery = 50;
constexpr uint64_t kCsBatch = 4000;

struct alignas(64) CsTask {
	std::atomic<int> owner{-1};     // the CPU running it, or -1
	int last_cpu = -1;              // written by its owner only
};

struct CsArg : RunArg {
	unsigned groups = 0;
	uint64_t message_ns = 0;                // modelled: half a message a switch
	uint64_t flush_every = kCsFlushEvery;   // 0: never
	std::unique_ptr<CsTask[]> tasks;
	std::atomic<uint64_t> migrations{0};
	std::atomic<uint64_t> claim_misses{0};
};

inline bool cs_claim(CsTask *t, int id)
{
	int free_ = -1;

	return t->owner.load(std::memory_order_relaxed) == -1 &&
	       t->owner.compare_exchange_strong(free_, id, std::memory_order_acquire,
						std::memory_order_relaxed);
}

void context_switch_body(sd_cpu *c, void *p)
{
	auto *r = static_cast<CsArg *>(static_cast<RunArg *>(p));
	const int id = (int)sd_cpu_id(c);
	const unsigned half = kCsTasksPerGroup / 2;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
	uint64_t migrations = 0, misses = 0;
	unsigned g = 0;
	CsTask *cur = nullptr;
	int err = 0;

	for (uint64_t i = 0; !err && i < r->count; i++) {
		const unsigned role = (unsigned)(i & 1);    // 0: sender, 1: receiver
		unsigned idx;
		CsTask *t;

		if (!role)
			g = (unsigned)(next_rand(&rng) % r->groups);
		for (unsigned tries = 0;; tries++) {
			idx = g * kCsTasksPerGroup + role * half + (unsigned)(next_rand(&rng) % half);
			t = &r->tasks[idx];
			if (cs_claim(t, id))
				break;
			misses++;
			if (tries % 8 == 7)             // that side of the group is busy
				g = (unsigned)(next_rand(&rng) % r->groups);
			if (tries >= 64)
				sched_yield();
		}
		sd_mm *mm = r->rm->mm(idx);
		err = sd_switch_mm(c, mm);
		if (cur)
			cur->owner.store(-1, std::memory_order_release);
		cur = t;
		if (t->last_cpu != id) {
			migrations += t->last_cpu >= 0;
			t->last_cpu = id;
		}
		if (!err)
			err = sd_access(c, kRegion, SD_WRITE, nullptr);
		if (!err)
			err = sd_access(c, kRegion + (1 + (i >> 1) % (kCsPages - 1)) * SD_PAGE_SIZE,
					SD_READ, nullptr);
		if (!err && r->message_ns)
			err = sd_cpu_work(c, r->message_ns);
		if (!err && r->flush_every && (i + 1) % r->flush_every == 0) {
			err = sd_madvise_dontneed(c, mm, kRegion, SD_PAGE_SIZE);
			if (!err)
				err = sd_access(c, kRegion, SD_WRITE, nullptr);
		}
	}
	int serr = sd_switch_mm(c, nullptr);
	if (cur)
		cur->owner.store(-1, std::memory_order_release);
	r->migrations.fetch_add(migrations, std::memory_order_relaxed);
	r->claim_misses.fetch_add(misses, std::memory_order_relaxed);
	note_error(r, err ? err : serr);
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

void BM_context_switch(State &st, const char *strategy, unsigned cpus,
		       uint64_t flush_every = kCsFlushEvery)
{
	const unsigned groups = kCsGroupsPerCpu * cpus;
	const unsigned tasks = groups * kCsTasksPerGroup;
	MachineSpec spec = spec_of(strategy);
	spec.tlb = kSwitchTlb;
	RunMachine rm(cpus, SD_ORACLE_OFF, tasks, kCsPages, spec);
	CsArg arg;
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	arg.groups = groups;
	arg.flush_every = flush_every;
	arg.message_ns = message_half_ns(rm.m());
	arg.tasks.reset(new CsTask[tasks]);
	RunTimes times;
	if (!run_batches(st, rm, context_switch_body, kCsBatch, "context_switch run", &d, &arg,
			 &times))
		return;
	st.counters["pu_share"] = times.pu_share;
	st.counters["message_ns_per_switch"] = (double)arg.message_ns;
	// Every run ends with one switch to no mm per CPU: not a task switch.
	const uint64_t switches = d.counter[SD_STAT_CTX_SWITCH];
	report_ipi_common(st, d);
	st.counters["switches"] = Counter((double)switches, Counter::kAvgIterations);
	st.counters["cpumask_writes_per_switch"] = ratio(d.counter[SD_STAT_CPUMASK_WRITE], switches);
	st.counters["switch_flushes_per_switch"] = ratio(d.counter[SD_STAT_SWITCH_FLUSH], switches);
	st.counters["asid_allocations_per_switch"] = ratio(d.counter[SD_STAT_ASID_ALLOC], switches);
	st.counters["migrations_per_switch"] = ratio(arg.migrations.load(), switches);
	st.counters["claim_misses_per_switch"] = ratio(arg.claim_misses.load(), switches);
	st.counters["flushes_per_switch"] = ratio(d.counter[SD_STAT_FLUSH], switches);
	st.counters["unneeded_ipis_per_switch"] = ratio(d.counter[SD_STAT_IPI_UNNEEDED], switches);
	report_machine(st, rm.m());
}

void register_context_switch(Set set)
{
	// The lazy mm_cpumask patch: hackbench on a 36-core Milan.
	if (set == Set::patches) {
		for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			reg("context_switch/" + std::string(s) + cpus_tail(36),
			    [s](State &st) { BM_context_switch(st, s, 36); });
		return;
	}
	if (set == Set::main) {
		for (unsigned n : g_opt.cpus) {
			for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy", "broadcast",
					       "local", "gbcast" })
				reg("context_switch/" + std::string(s) + cpus_tail(n),
				    [s, n](State &st) { BM_context_switch(st, s, n); });
			reg("context_switch/native" + cpus_tail(n),
			    [n](State &st) { native::BM_context_switch(st, n); });
		}
		return;
	}
	for (unsigned n : { 1u, 2u, 4u, 8u }) {
		for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			reg("context_switch/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_context_switch(st, s, n); });
		reg("context_switch/native" + cpus_tail(n),
		    [n](State &st) { native::BM_context_switch(st, n); });
	}
	// On 2 CPUs also without flushes (hackbench's own case) and with a
	// tenth of them.
	for (uint64_t every : { 0u, 500u }) {
		for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			reg("context_switch/" + std::string(s) + "/cpus:2/flush_every:" +
				    std::to_string(every),
			    [s, every](State &st) { BM_context_switch(st, s, 2, every); });
	}
}

} // namespace

SD_BENCH_FAMILY(context_switch, 100, register_context_switch);

} // namespace sdbench
