// SPDX-License-Identifier: MIT
//
// Components of the model, each beside a native microbenchmark of the same
// operation on this machine's kernel, for scripts/model-check --components:
// with the host-kernel profile (sd-calibrate), each emulated component
// should predict its native twin. They validate the model part by part,
// where a headline ratio can agree by two errors cancelling.
//
//   component/ipi_roundtrip/ipi/targets:1        sd_smp_call_single() from CPU 0
//                                            to CPU 1, which is busy in the same
//                                            mm; modelled ns a call
//   component/ipi_roundtrip/native/targets:{0,1} membarrier(PRIVATE_EXPEDITED) with
//                                            that many other threads of the process
//                                            running (0: no IPI); the round trip is
//                                            the difference
//   component/pipe_pingpong/ipi/cpus:{1,2}       a pair of tasks per CPU, each task its
//                                            own mm, passing a message back and forth
//                                            through two pipes; ns a switch (native
//                                            twin: context_switch/native/cpus:N, N
//                                            pairs of processes, a PU each)
//   context_switch1/{ipi,broadcast}/{threads,processes}/cpus:{1,2,8}
//                                            will-it-scale's context_switch1: the
//                                            same pairs, sharing an mm (threads)
//                                            or not (processes); --sd_set=all only
//   context_switch1/native/{processes,threads}/cpus:{1,2,8} its native twins
//
//   component/lock_shared/ipi/cpus:{1,2}       CPU 0 and the others take one sd_lock
//                                            and add to a counter under it, in a
//                                            loop; modelled ns an acquisition on
//                                            CPU 0 (native twin: .../native/cpus:N,
//                                            a ticket lock, a thread a PU)
//   component/line_shared/ipi/cpus:{1,2}       the same with an atomic add to one
//                                            word, its sd_line written each time
//
// Targets, waiters or sharers beyond 1 need more than 2 PUs natively: the
// families register the counts this machine can run natively, up to 2.
// Targets beyond 1 need an emulated multicast (smp_call_function_many(), not
// in the public API yet) and more than 2 PUs natively; not registered.
#include "common.hpp"

#include <atomic>
#include <string>
#include <vector>

namespace sdbench {
namespace {

// ---- CPU 0 timed while the others keep busy ----

struct Cpu0Arg : RunArg {
	std::atomic<bool> done{false};
	uint64_t cpu0_ns = 0;           // CPU 0's modelled time in its operations
};

// CPU 0 times a->count operations, op(c, true); every other CPU repeats
// op(c, false) until CPU 0 is done. The first error.
template <typename Op>
int cpu0_times(sd_cpu *c, Cpu0Arg *a, Op op)
{
	int err = 0;

	if (sd_cpu_id(c) != 0) {
		while (!err && !a->done.load(std::memory_order_acquire))
			err = op(c, false);
		return err;
	}
	const uint64_t t0 = sd_cpu_clock_ns(c);

	for (uint64_t i = 0; !err && i < a->count; i++)
		err = op(c, true);
	a->cpu0_ns += sd_cpu_clock_ns(c) - t0;
	// Pairs with the others' acquire load: they stop after CPU 0's last.
	a->done.store(true, std::memory_order_release);
	return err;
}

// Batches of @batch of CPU 0's operations, one sd_machine_run() of @body
// each; @model is stopped at CPU 0's span. The first error, 0 if none.
int run_cpu0_batches(State &st, RunMachine &rm, Cpu0Arg &a, sd_cpu_fn body, uint64_t batch,
		     ModelSpan &model)
{
	int err = 0;

	a.rm = &rm;
	for (uint64_t n; st.KeepRunningBatch(n = next_batch(st, batch));) {
		a.count = n;
		a.done.store(false);
		if (!err && !a.err.load())
			err = sd_machine_run(rm.m(), body, &a);
	}
	model.stop(a.cpu0_ns);
	return err ? err : a.err.load();
}

// ---- an IPI round trip ----

constexpr uint64_t kIpiBatch = 2000;

void ipi_noop(sd_cpu *, void *)
{
}

// CPU 0 sends, CPU 1 stays busy in the mm (the native twin's spinning
// thread, which membarrier IPIs because it runs the process's mm).
void ipi_body(sd_cpu *c, void *p)
{
	auto *a = static_cast<Cpu0Arg *>(p);
	int err = sd_switch_mm(c, a->rm->mm(0));

	if (!err)
		err = cpu0_times(c, a, [](sd_cpu *cpu, bool timed) {
			return timed ? sd_smp_call_single(cpu, 1, ipi_noop, nullptr)
				     : sd_access(cpu, kRegion, SD_READ, nullptr);
		});
	const int serr = sd_switch_mm(c, nullptr);
	note_error(a, err ? err : serr);
}

void BM_ipi_roundtrip(State &st)
{
	RunMachine rm(2, SD_ORACLE_OFF, 1, 1, spec_of("ipi"));
	Cpu0Arg a;

	if (!rm.ok(st))
		return;
	ModelSpan model(rm.m());
	if (int err = run_cpu0_batches(st, rm, a, ipi_body, kIpiBatch, model)) {
		fail(st, "ipi_roundtrip run", err);
		return;
	}
	model.report(st, (double)st.iterations());
	st.counters["oversubscribed"] = oversubscribed(rm.m());
}

// ---- a pipe ping-pong between two tasks on one CPU ----

constexpr uint64_t kPingBatch = 4000;

struct PingPipe {
	std::atomic<unsigned> queued{0};
	sd_waitq *readers = nullptr;
};

struct PingArg {
	uint64_t rounds = 0;            // round trips a batch: two switches each
	uint64_t message_ns = 0;        // modelled: one side of a message
	std::atomic<int> err{0};
};

struct PingPair {
	PingPipe pipe[2];               // [0]: task 0 to task 1; [1]: back
};

struct PingTask {
	PingArg *a;
	PingPair *pair;
	unsigned id;                    // 0 writes first, 1 echoes
};

// Acquire pairs with ping_write()'s release: a reader that sees the
// message sees what its writer did before sending it.
bool ping_has_message(void *p)
{
	return static_cast<PingPipe *>(p)->queued.load(std::memory_order_acquire) > 0;
}

// One side of a message, as context_switch.cpp's cs_side() without its
// flushes: the write's or read's system call and half the pipe's work in
// modelled time, and the one-byte buffer touched.
int ping_side(sd_task *self, PingArg *a, bool write)
{
	sd_cpu *c = sd_task_cpu(self);
	int err = a->message_ns ? sd_cpu_work(c, a->message_ns) : 0;

	return err ? err : sd_access(c, kRegion, write ? SD_WRITE : SD_READ, nullptr);
}

int ping_write(sd_task *self, PingArg *a, PingPipe &to)
{
	int err = ping_side(self, a, true);

	// Release pairs with ping_has_message()'s acquire. Counted even on
	// an error, so that the reader is not left waiting for it.
	to.queued.fetch_add(1, std::memory_order_release);
	if (err)
		return err;
	const int woken = sd_task_wake(self, to.readers, 1);
	return woken < 0 ? woken : 0;
}

int ping_read(sd_task *self, PingArg *a, PingPipe &from)
{
	int err = sd_task_wait(self, from.readers, ping_has_message, &from);

	if (!err)
		err = ping_side(self, a, false);
	from.queued.fetch_sub(1, std::memory_order_acq_rel);
	return err;
}

// Task 0 writes and waits for the echo; task 1 echoes, as the native
// twin's forked partner does.
void ping_task(sd_task *self, void *p)
{
	auto *t = static_cast<PingTask *>(p);
	PingArg *a = t->a;
	PingPipe *pipe = t->pair->pipe;
	int err = 0;

	for (uint64_t i = 0; !err && i < a->rounds; i++) {
		if (t->id == 0) {
			err = ping_write(self, a, pipe[0]);
			if (!err)
				err = ping_read(self, a, pipe[1]);
		} else {
			err = ping_read(self, a, pipe[0]);
			if (!err)
				err = ping_write(self, a, pipe[1]);
		}
	}
	note_first_error(a->err, err);
}

// @cpus pairs, pair i held to CPU i (affinity), as the native twin puts
// pair i on PU i: ns a switch as each CPU sees it. @threads: the two tasks
// of a pair share an mm (will-it-scale's threads mode), else each has its
// own (processes mode, and component/pipe_pingpong).
void BM_pingpong(State &st, const char *strategy, unsigned cpus, bool threads)
{
	MachineSpec spec = spec_of(strategy);
	spec.tlb = kSwitchTlb;
	RunMachine rm(cpus, SD_ORACLE_OFF, threads ? cpus : 2 * cpus, 1, spec);
	PingArg a;
	std::vector<PingPair> pairs(cpus);
	std::vector<PingTask> tasks(2 * cpus);
	std::vector<std::string> affinity(cpus);
	sd_stats d = SD_STATS_INIT;
	bool made = true;

	if (!rm.ok(st))
		return;
	a.message_ns = message_half_ns(rm.m());
	for (unsigned i = 0; i < cpus; i++) {
		affinity[i] = std::to_string(i);
		for (PingPipe &p : pairs[i].pipe)
			made = made && !sd_waitq_create(rm.m(), "pipe", &p.readers);
	}
	auto destroy = [&] {
		for (PingPair &pr : pairs)
			for (PingPipe &p : pr.pipe)
				sd_waitq_destroy(p.readers);
	};
	if (!made) {
		destroy();
		fail(st, "sd_waitq_create", -ENOMEM);
		return;
	}
	auto create = [&](sd_machine *m, uint64_t switches) {
		a.rounds = switches / 2;
		for (unsigned i = 0; i < 2 * cpus; i++) {
			const unsigned pair = i / 2, id = 1 - i % 2;     // the echo first
			tasks[i] = PingTask{&a, &pairs[pair], id};
			for (PingPipe &p : pairs[pair].pipe)
				p.queued.store(0);
		}
		for (unsigned i = 0; i < 2 * cpus; i++) {
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = rm.mm(threads ? i / 2 : i);
			tc.cpu = i / 2;
			tc.affinity = affinity[i / 2].c_str();
			if (int e = sd_task_create(m, &tc, ping_task, &tasks[i], nullptr))
				return e;
		}
		return 0;
	};
	const bool ran = run_task_batches(st, rm, create, kPingBatch, "pipe_pingpong run", &d,
					  nullptr, 2);
	destroy();
	if (!ran)
		return;
	if (a.err.load()) {
		fail(st, "pipe_pingpong task", a.err.load());
		return;
	}
	st.counters["task_switches_per_iteration"] =
		ratio(d.counter[SD_STAT_TASK_SWITCH], (double)st.iterations() * cpus);
	// switch_mm()s: none between two threads of one process.
	st.counters["mm_switches_per_iteration"] =
		ratio(d.counter[SD_STAT_CTX_SWITCH], (double)st.iterations() * cpus);
	report_machine(st, rm.m());
}

// ---- a lock or a line that every CPU hammers ----

constexpr uint64_t kSharedBatch = 20000;

// One step of the loop's own instructions between two accesses: a charge
// that ends the step in modelled time, so that strict mode runs the CPUs
// in the order of their clocks at every access, as the hardware
// interleaves them. Without it an access that hits costs nothing, the
// clock stands still, and one CPU would run a whole quantum of accesses
// before the others ran any.
constexpr uint64_t kLoopStepNs = 1;

struct SharedArg : Cpu0Arg {
	sd_lock *lock = nullptr;
	sd_line *line = nullptr;
	uint64_t protected_count = 0;       // under lock
	std::atomic<uint64_t> word{0};      // line's data
};

int shared_op(sd_cpu *c, SharedArg *a)
{
	int err = sd_cpu_work(c, kLoopStepNs);

	if (err)
		return err;
	if (a->line) {
		a->word.fetch_add(1, std::memory_order_relaxed);
		return sd_line_access(c, a->line, 1);
	}
	err = sd_lock_acquire(c, a->lock);
	if (err)
		return err;
	a->protected_count++;
	return sd_lock_release(c, a->lock);
}

void shared_body(sd_cpu *c, void *p)
{
	auto *a = static_cast<SharedArg *>(p);

	note_error(a, cpu0_times(c, a, [a](sd_cpu *cpu, bool) { return shared_op(cpu, a); }));
}

void BM_shared(State &st, unsigned cpus, bool line)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, 1, 1, spec_of("ipi"));
	SharedArg a;
	int err = 0;

	if (!rm.ok(st))
		return;
	err = line ? sd_line_create(rm.m(), &a.line) : sd_lock_create(rm.m(), "shared", &a.lock);
	if (err) {
		fail(st, line ? "sd_line_create" : "sd_lock_create", err);
		return;
	}
	ModelSpan model(rm.m());
	err = run_cpu0_batches(st, rm, a, shared_body, kSharedBatch, model);
	if (a.line)
		sd_line_destroy(a.line);
	const int derr = a.lock ? sd_lock_destroy(a.lock) : 0;
	if (err || derr) {
		fail(st, line ? "line_shared run" : "lock_shared run", err ? err : derr);
		return;
	}
	model.report(st, (double)st.iterations());
	st.counters["oversubscribed"] = oversubscribed(rm.m());
}

void register_component(Set set)
{
	// In the main set too, beside the x86 twins (mprotect_threaded/ipi)
	// that scripts/model-check --components runs with them.
	if (set == Set::patches)
		return;
	reg("component/ipi_roundtrip/ipi/targets:1", BM_ipi_roundtrip);
	for (unsigned t : {0u, 1u})
		reg("component/ipi_roundtrip/native/targets:" + std::to_string(t),
		    [t](State &st) { native::BM_membarrier(st, t); });
	for (unsigned n : {1u, 2u}) {
		reg("component/pipe_pingpong/ipi" + cpus_tail(n),
		    [n](State &st) { BM_pingpong(st, "ipi", n, false); });
		reg("component/lock_shared/ipi" + cpus_tail(n),
		    [n](State &st) { BM_shared(st, n, false); });
		reg("component/lock_shared/native" + cpus_tail(n),
		    [n](State &st) { native::BM_lock_shared(st, n); });
		reg("component/line_shared/ipi" + cpus_tail(n),
		    [n](State &st) { BM_shared(st, n, true); });
		reg("component/line_shared/native" + cpus_tail(n),
		    [n](State &st) { native::BM_line_shared(st, n); });
	}
	if (set != Set::all)
		return;
	// will-it-scale's context_switch1 (tests/context_switch1.c): each
	// instance and the partner new_task() gives it pass a byte through
	// two pipes, both on the instance's CPU (the partner inherits its
	// affinity); threads mode shares the mm, processes mode does not. The
	// native twins are context_switch/native's pairs, processes or threads.
	for (const char *s : { "ipi", "broadcast" })
		for (bool threads : { true, false })
			for (unsigned n : { 1u, 2u, 8u })
				reg("context_switch1/" + std::string(s) +
					    (threads ? "/threads" : "/processes") + cpus_tail(n),
				    [s, n, threads](State &st) { BM_pingpong(st, s, n, threads); });
	for (unsigned n : { 1u, 2u, 8u }) {
		reg("context_switch1/native/processes" + cpus_tail(n),
		    [n](State &st) { native::BM_context_switch(st, n); });
		reg("context_switch1/native/threads" + cpus_tail(n),
		    [n](State &st) { native::BM_context_switch(st, n, true); });
	}
}

} // namespace

SD_BENCH_FAMILY(component, 95, register_component);

} // namespace sdbench
