// SPDX-License-Identifier: MIT
//
// The arm64 "skip tlbi broadcast" patch's sort-compute shape: short-lived
// processes.
//
//   process_churn/{broadcast,local}/cpus:{1,2,4,8,16}   (main: + ipi, gbcast at --sd_cpus)
#include "common.hpp"

#include <string>
#include <vector>

namespace sdbench {
namespace {

// Short-lived processes, as a shell runs them: on each CPU a shell task
// (its own mm, pinned there) forks a child (sd_task_fork(): dup_mmap() of
// the shell's mm, its TLBs flushed), the child execs (a new, empty mm; the
// copy it forked is torn down), maps and touches 16 pages, unmaps them (a
// flush that frees tables) and exits (its mm destroyed with it), and the
// shell waits for it (wait4(): a wait queue the child wakes as it ends).
// Exercises ASID allocation (a rollover every 65535 mms), exit flushes
// and, for `local`, mms that never run anywhere else. An iteration is one
// child's life.
constexpr uint64_t kChurnPages = 16;
constexpr uint64_t kChurnBatch = 200;

struct ChurnShell {
	sd_waitq *exited = nullptr;     // the shell's wait4()
	std::atomic<bool> child_done{false};
	uint64_t children = 0;
	std::atomic<int> *err = nullptr;
};

void churn_child(sd_task *self, void *p)
{
	auto *sh = static_cast<ChurnShell *>(p);
	int err = sd_task_exec(self);
	sd_cpu *c = sd_task_cpu(self);
	sd_mm *mm = sd_task_mm(self);

	if (!err)
		err = sd_mmap(c, mm, kRegion, kChurnPages * SD_PAGE_SIZE, SD_PROT_READ | SD_PROT_WRITE);
	for (uint64_t pg = 0; !err && pg < kChurnPages; pg++)
		err = sd_access(c, kRegion + pg * SD_PAGE_SIZE, SD_WRITE, nullptr);
	if (!err)
		err = sd_munmap(c, mm, kRegion, kChurnPages * SD_PAGE_SIZE);
	note_first_error(*sh->err, err);
	// exit(): the parent's wait4() returns.
	sh->child_done.store(true, std::memory_order_release);
	int woken = sd_task_wake(self, sh->exited, 1);
	note_first_error(*sh->err, woken < 0 ? woken : 0);
}

bool churn_child_done(void *p)
{
	return static_cast<ChurnShell *>(p)->child_done.load(std::memory_order_acquire);
}

void churn_shell(sd_task *self, void *p)
{
	auto *sh = static_cast<ChurnShell *>(p);
	int err = 0;

	for (uint64_t i = 0; !err && i < sh->children; i++) {
		sh->child_done.store(false, std::memory_order_relaxed);
		err = sd_task_fork(self, churn_child, sh, nullptr);
		if (!err)
			err = sd_task_wait(self, sh->exited, churn_child_done, sh);
	}
	note_first_error(*sh->err, err);
}

void BM_process_churn(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, cpus, 1, spec_of(strategy));
	std::vector<ChurnShell> shells(cpus);
	std::atomic<int> err{0};
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	for (auto &sh : shells) {
		sh.err = &err;
		if (int e = sd_waitq_create(rm.m(), "wait4", &sh.exited)) {
			fail(st, "sd_waitq_create", e);
			return;
		}
	}
	auto create = [&](sd_machine *m, uint64_t batch) {
		for (unsigned i = 0; i < cpus; i++) {
			const std::string cpu = std::to_string(i);
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = rm.mm(i);
			tc.cpu = i;
			tc.affinity = cpu.c_str();
			shells[i].children = batch / cpus;
			if (int e = sd_task_create(m, &tc, churn_shell, &shells[i], nullptr))
				return e;
		}
		return 0;
	};
	const bool ran = run_task_batches(st, rm, create, kChurnBatch * cpus, "process_churn run",
					  &d, nullptr, cpus);
	for (auto &sh : shells)
		sd_waitq_destroy(sh.exited);
	if (!ran)
		return;
	if (err.load()) {
		fail(st, "process_churn task", err.load());
		return;
	}
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	st.counters["asid_allocations"] = (double)d.counter[SD_STAT_ASID_ALLOC];
	st.counters["asid_rollovers"] = (double)d.counter[SD_STAT_ASID_ROLLOVER];
	st.counters["forks"] = Counter((double)d.counter[SD_STAT_TASK_FORK], Counter::kAvgIterations);
	st.counters["task_switches_per_child"] = ratio(d.counter[SD_STAT_TASK_SWITCH], st.iterations());
	report_machine(st, rm.m());
}

void register_process_churn(Set set)
{
	if (set == Set::patches)
		return;
	static const std::vector<unsigned> all_cpus = { 1, 2, 4, 8, 16 };
	static const std::vector<const char *> all = { "broadcast", "local" };
	static const std::vector<const char *> main_set = { "broadcast", "local", "ipi", "gbcast" };
	const std::vector<unsigned> &cpus = set == Set::main ? g_opt.cpus : all_cpus;

	for (unsigned n : cpus)
		for (const char *s : set == Set::main ? main_set : all)
			reg("process_churn/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_process_churn(st, s, n); });
}

} // namespace

SD_BENCH_FAMILY(process_churn, 70, register_process_churn);

} // namespace sdbench
