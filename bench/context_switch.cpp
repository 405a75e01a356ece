// SPDX-License-Identifier: MIT
//
// The x86/mm lazy mm_cpumask patch (van Riel), on hackbench's shape: eager
// against lazy mm_cpumask, each pair run back to back.
//
//   context_switch/ipi:cpumask={eager,lazy}/cpus:{1,2,4,8}[/flush_every:{0,250}]
//                                            hackbench --pipe, process mode: tasks
//                                            (task.h), each its own mm, receivers that
//                                            sleep and are woken; an iteration is a
//                                            message; 1 flush per 50 messages a task
//                                            by default (flush_every:0: never, as in
//                                            hackbench itself; 2 CPUs only)
//   context_switch/native/cpus:N             N pairs of processes, pipes, one PU per pair
//
// The main set runs broadcast, local and gbcast as well, at --sd_cpus.
#include "common.hpp"

#include <memory>
#include <vector>

namespace sdbench {
namespace {

// hackbench --pipe in process mode (rt-tests' hackbench.c): groups of
// senders and receivers, every task its own process (mm), one pipe per
// receiver; each sender writes kCsLoops messages to every receiver of its
// group, each receiver reads all of its group's. 2 groups per CPU of 6
// tasks (3 senders, 3 receivers, where hackbench has 20 and 20): 12 tasks
// per CPU against 6 PCID slots (the patch thread's run: 800 tasks, 72
// CPUs, about 11 per CPU); 100 loops, hackbench's default. Receivers are
// created first and sleep on their empty pipes, as hackbench's do.
// A receiver whose pipe is empty sleeps on it (sd_task_wait()), and the
// write that fills it wakes it: it preempts the writer on the writer's
// CPU, or the task running on its own (a reschedule IPI; the library's
// wakeup preemption, task.h). A sender whose receiver's pipe is full (64 KiB
// of 100-byte messages) sleeps until the reader makes room. Tasks go where
// the scheduler puts them (select_task_rq(), balancing), so they migrate.
// A message is the write's and the read's system calls (syscall_entry,
// _exit and pipe_message in modelled time) and each side touching its
// buffer page. Every kCsFlushEvery messages a task frees its buffer page
// (madvise(DONTNEED), a flush) and touches it again; flush_every:0 never
// does, as hackbench itself (whose pipes are kernel memory) never flushes.
//
// What lazy mode pays here: a flush IPIs every CPU of the mask that is in
// the middle of a switch (LOADED_MM_SWITCHING, the CVE-2025-37964 rule),
// and with the lazy mask every CPU a task ever ran on stays in it; each such
// IPI is wrong-CPU (unneeded_ipis_per_flush).
//
// The TLB is kSwitchTlb (common.hpp): its PCID flush at a switch is a scan
// of the whole TLB.
constexpr unsigned kCsGroupsPerCpu = 2;
constexpr unsigned kCsSenders = 3;              // and as many receivers
constexpr uint64_t kCsPages = 4;
constexpr uint64_t kCsFlushEvery = 50;
constexpr unsigned kCsPipeMessages = 65536 / 100;
constexpr unsigned kCsLoops = 100;              // hackbench's default loops (-l 100)

struct CsPipe {
	std::atomic<unsigned> queued{0};
	sd_waitq *readers = nullptr, *writers = nullptr;
};

struct CsArg {
	unsigned groups = 0;
	uint64_t message_ns = 0;                // modelled: one side of a message
	uint64_t flush_every = kCsFlushEvery;   // 0: never
	std::unique_ptr<CsPipe[]> pipes;        // one per receiver
	unsigned nr_pipes = 0;
	std::vector<sd_mm *> mms;               // one per task
	std::atomic<int> err{0};
};

struct CsTask {
	CsArg *a;
	unsigned index;                         // its mm
	unsigned group;
	unsigned role_index;                    // sender or receiver number in its group
	bool sender;
	uint64_t messages = 0;
};

// The pipes as a range.
struct CsPipes {
	CsPipe *b, *e;
	CsPipe *begin() const { return b; }
	CsPipe *end() const { return e; }
};

CsPipes pipes_of(CsArg &a)
{
	return CsPipes{a.pipes.get(), a.pipes.get() + a.nr_pipes};
}

bool cs_has_message(void *p)
{
	return static_cast<CsPipe *>(p)->queued.load(std::memory_order_acquire) > 0;
}

bool cs_has_room(void *p)
{
	return static_cast<CsPipe *>(p)->queued.load(std::memory_order_acquire) < kCsPipeMessages;
}

// One side of a message on the task's own mm: the system call, the buffer
// page, and now and then a freed buffer (the flush).
int cs_side(sd_task *self, CsTask *t, bool write)
{
	sd_cpu *c = sd_task_cpu(self);
	sd_mm *mm = sd_task_mm(self);
	int err = t->a->message_ns ? sd_cpu_work(c, t->a->message_ns) : 0;

	if (!err)
		err = sd_access(c, kRegion, write ? SD_WRITE : SD_READ, nullptr);
	if (!err)
		err = sd_access(c, kRegion + (1 + t->messages % (kCsPages - 1)) * SD_PAGE_SIZE,
				SD_READ, nullptr);
	t->messages++;
	if (!err && t->a->flush_every && t->messages % t->a->flush_every == 0) {
		err = sd_madvise_dontneed(c, mm, kRegion, SD_PAGE_SIZE);
		if (!err)
			err = sd_access(c, kRegion, SD_WRITE, nullptr);
	}
	return err;
}

// Wake one waiter of @q (the library's wakeup preemption runs it before
// us if it lands on our CPU).
int cs_wake(sd_task *self, sd_waitq *q)
{
	int woken = sd_task_wake(self, q, 1);

	return woken < 0 ? woken : 0;
}

void cs_sender(sd_task *self, void *p)
{
	auto *t = static_cast<CsTask *>(p);
	CsArg *a = t->a;
	int err = 0;

	for (unsigned l = 0; !err && l < kCsLoops; l++)
		for (unsigned r = 0; !err && r < kCsSenders; r++) {
			CsPipe &pipe = a->pipes[t->group * kCsSenders + r];

			err = sd_task_wait(self, pipe.writers, cs_has_room, &pipe);
			if (!err)
				err = cs_side(self, t, true);
			pipe.queued.fetch_add(1, std::memory_order_release);
			if (!err)
				err = cs_wake(self, pipe.readers);
		}
	note_first_error(a->err, err);
}

void cs_receiver(sd_task *self, void *p)
{
	auto *t = static_cast<CsTask *>(p);
	CsArg *a = t->a;
	CsPipe &pipe = a->pipes[t->group * kCsSenders + t->role_index];
	int err = 0;

	for (unsigned m = 0; !err && m < kCsLoops * kCsSenders; m++) {
		err = sd_task_wait(self, pipe.readers, cs_has_message, &pipe);
		if (!err)
			err = cs_side(self, t, false);
		pipe.queued.fetch_sub(1, std::memory_order_acq_rel);
		if (!err)
			err = cs_wake(self, pipe.writers);
	}
	note_first_error(a->err, err);
}

// Messages of one run: every sender writes kCsLoops to each receiver.
uint64_t cs_messages(unsigned groups)
{
	return (uint64_t)groups * kCsSenders * kCsSenders * kCsLoops;
}

void BM_context_switch(State &st, const char *strategy, unsigned cpus,
		       uint64_t flush_every = kCsFlushEvery)
{
	const unsigned groups = kCsGroupsPerCpu * cpus;
	const unsigned tasks = groups * 2 * kCsSenders;
	MachineSpec spec = spec_of(strategy);
	spec.tlb = kSwitchTlb;
	RunMachine rm(cpus, SD_ORACLE_OFF, tasks, kCsPages, spec);
	CsArg arg;
	std::vector<CsTask> task_args(tasks);
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	arg.groups = groups;
	arg.flush_every = flush_every;
	arg.message_ns = message_half_ns(rm.m());
	arg.nr_pipes = groups * kCsSenders;
	arg.pipes.reset(new CsPipe[arg.nr_pipes]);
	for (CsPipe &p : pipes_of(arg))
		if (sd_waitq_create(rm.m(), "pipe", &p.readers) ||
		    sd_waitq_create(rm.m(), "pipe room", &p.writers)) {
			fail(st, "sd_waitq_create", -ENOMEM);
			return;
		}
	auto create = [&](sd_machine *m, uint64_t) {
		for (CsPipe &p : pipes_of(arg))
			p.queued.store(0);
		// Receivers first, as hackbench creates them: they sleep on
		// their empty pipes before any sender writes.
		for (unsigned i = 0; i < tasks; i++) {
			CsTask &t = task_args[i];
			const unsigned in_group = i % (2 * kCsSenders);
			t = CsTask{&arg, i, i / (2 * kCsSenders), in_group % kCsSenders,
				   in_group >= kCsSenders, 0};
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = rm.mm(i);
			if (int err = sd_task_create(m, &tc, t.sender ? cs_sender : cs_receiver, &t,
						     nullptr))
				return err;
		}
		return 0;
	};
	RunTimes times;
	const uint64_t messages = cs_messages(groups);
	// One batch is one whole hackbench run (every task created, 100
	// loops): it does not split, so --sd_iterations rounds up to runs.
	if (!run_task_batches(st, rm, create, messages, "context_switch run", &d, &times,
			      messages))
		return;
	for (CsPipe &p : pipes_of(arg)) {
		sd_waitq_destroy(p.readers);
		sd_waitq_destroy(p.writers);
	}
	if (arg.err.load()) {
		fail(st, "context_switch task", arg.err.load());
		return;
	}
	st.counters["message_ns_per_side"] = (double)arg.message_ns;
	const uint64_t switches = d.counter[SD_STAT_TASK_SWITCH];
	report_ipi_common(st, d);
	st.counters["switches"] = Counter((double)switches, Counter::kAvgIterations);
	st.counters["switches_per_message"] = ratio(switches, st.iterations());
	st.counters["mm_switches_per_switch"] = ratio(d.counter[SD_STAT_CTX_SWITCH], switches);
	st.counters["wakeups_per_message"] = ratio(d.counter[SD_STAT_TASK_WAKEUP], st.iterations());
	st.counters["wakeup_ipis_per_message"] = ratio(d.counter[SD_STAT_WAKEUP_IPI], st.iterations());
	st.counters["cpumask_writes_per_switch"] = ratio(d.counter[SD_STAT_CPUMASK_WRITE], switches);
	st.counters["switch_flushes_per_switch"] = ratio(d.counter[SD_STAT_SWITCH_FLUSH], switches);
	st.counters["asid_allocations_per_switch"] = ratio(d.counter[SD_STAT_ASID_ALLOC], switches);
	st.counters["migrations_per_switch"] = ratio(d.counter[SD_STAT_TASK_MIGRATE], switches);
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
	// fifth of them (a sender writes 300 messages a run: one flush).
	for (uint64_t every : { 0u, 250u }) {
		for (const char *s : { "ipi:cpumask=eager", "ipi:cpumask=lazy" })
			reg("context_switch/" + std::string(s) + "/cpus:2/flush_every:" +
				    std::to_string(every),
			    [s, every](State &st) { BM_context_switch(st, s, 2, every); });
	}
}

} // namespace

SD_BENCH_FAMILY(context_switch, 100, register_context_switch);

} // namespace sdbench
