// SPDX-License-Identifier: MIT
//
// The arm64 "skip tlbi broadcast" patch's headline workload:
// `for-each-cpu.sh ./mprotect-threaded 10000`, one process per CPU. The
// program is the one QI Fuli posted in the patch's thread ("RE: [PATCH 0/3]
// arm64: tlb: skip tlbi broadcast v2", 2020-03-18, as
// mprotect-attacker-threaded.c): a second thread that only sleeps
// (pause()), a 4 MiB private anonymous buffer written whole (memset), then
// a loop of mprotect(buf, 4 MiB, PROT_READ) and mprotect(buf, 4 MiB,
// PROT_WRITE). Each call changes 1024 PTEs of one VMA (no split) and flushes
// the range: 1024 pages is past MAX_TLBI_OPS (512), so __flush_tlb_range()
// issues one ASID-wide TLBI (flush_tlb_mm()), broadcast by stock and local
// with the patch (the sleeping thread is why the patch's nr_active_mm, not
// mm_users, decides).
//
//   mprotect_threaded/{broadcast,local}/cpus:{1,2,4,8,16}   (main: + ipi, gbcast at --sd_cpus)
//   mprotect_threaded/native:mode={processes,threads}/cpus:N  real mprotect of the same
//                                            buffer: processes (the patch's for-each-cpu.sh)
//                                            and threads of one process (native.cpp)
//
// Where it differs from the source: the buffer is mapped (RunMachine) and
// written (an untimed run of one task a process) before the timed runs,
// not inside them (in the patch's runs that is 1024 faults against 20,000
// mprotects a process); a run does the loops its
// batch asks for, not 10,000; processes start on their own CPU and are not
// pinned, as for-each-cpu.sh leaves them; the sleeping thread starts on its
// process's CPU and runs first (the scheduler here has no tick to give it
// its first slice later).
#include "common.hpp"

#include <string>
#include <vector>

namespace sdbench {
namespace {

constexpr uint64_t kMprotectPages = 1024;      // 4 MiB
constexpr uint64_t kMprotectBatch = 2000;      // mprotects a process, a batch

struct MprotectProcess {
	sd_mm *mm = nullptr;
	sd_waitq *paused = nullptr;     // the sleeping thread's pause()
	std::atomic<bool> exiting{false};
	uint64_t loops = 0;
	std::atomic<int> *err = nullptr;
};

bool process_exiting(void *p)
{
	return static_cast<MprotectProcess *>(p)->exiting.load(std::memory_order_acquire);
}

// The second thread: pause() until the process exits.
void mprotect_sleeper(sd_task *self, void *p)
{
	auto *proc = static_cast<MprotectProcess *>(p);

	note_first_error(*proc->err, sd_task_wait(self, proc->paused, process_exiting, proc));
}

void mprotect_main(sd_task *self, void *p)
{
	auto *proc = static_cast<MprotectProcess *>(p);
	sd_task_config tc = SD_TASK_CONFIG_INIT;
	constexpr uint64_t len = kMprotectPages * SD_PAGE_SIZE;
	int err;

	// pthread_create(sleeper): a thread of this mm, on this CPU; it runs
	// first and sleeps, and the CPU comes back here.
	tc.mm = proc->mm;
	tc.cpu = sd_cpu_id(sd_task_cpu(self));
	err = sd_task_create(sd_cpu_machine(sd_task_cpu(self)), &tc, mprotect_sleeper, proc, nullptr);
	if (!err)
		err = sd_task_yield(self);
	for (uint64_t i = 0; !err && i < proc->loops; i++) {
		sd_cpu *c = sd_task_cpu(self);

		err = sd_mprotect(c, proc->mm, kRegion, len, SD_PROT_READ);
		if (!err)
			err = sd_mprotect(c, proc->mm, kRegion, len, SD_PROT_READ | SD_PROT_WRITE);
	}
	note_first_error(*proc->err, err);
	// exit(): the sleeping thread goes with the process.
	proc->exiting.store(true, std::memory_order_release);
	int woken = sd_task_wake(self, proc->paused, 0);
	note_first_error(*proc->err, woken < 0 ? woken : 0);
}

// memset(buf, 1, 4 MiB): every page written, so that each mprotect has
// 1024 present PTEs to change.
void mprotect_memset(sd_task *self, void *p)
{
	auto *proc = static_cast<MprotectProcess *>(p);
	int err = 0;

	for (uint64_t pg = 0; !err && pg < kMprotectPages; pg++)
		err = sd_access(sd_task_cpu(self), kRegion + pg * SD_PAGE_SIZE, SD_WRITE, nullptr);
	note_first_error(*proc->err, err);
}

int write_buffers(sd_machine *m, std::vector<MprotectProcess> &procs)
{
	for (unsigned i = 0; i < procs.size(); i++) {
		sd_task_config tc = SD_TASK_CONFIG_INIT;

		tc.mm = procs[i].mm;
		tc.cpu = i;
		if (int e = sd_task_create(m, &tc, mprotect_memset, &procs[i], nullptr))
			return e;
	}
	return sd_sched_run(m);
}

void BM_mprotect_threaded(State &st, const char *strategy, unsigned cpus)
{
	RunMachine rm(cpus, SD_ORACLE_OFF, cpus, kMprotectPages, spec_of(strategy));
	std::vector<MprotectProcess> procs(cpus);
	std::atomic<int> err{0};
	sd_stats d = SD_STATS_INIT;

	if (!rm.ok(st))
		return;
	for (unsigned i = 0; i < cpus; i++) {
		procs[i].mm = rm.mm(i);
		procs[i].err = &err;
		if (int e = sd_waitq_create(rm.m(), "pause", &procs[i].paused)) {
			fail(st, "sd_waitq_create", e);
			return;
		}
	}
	if (int e = write_buffers(rm.m(), procs); e || err.load()) {
		fail(st, "mprotect_threaded memset", e ? e : err.load());
		for (auto &proc : procs)
			sd_waitq_destroy(proc.paused);
		return;
	}
	// An iteration is one mprotect in every process (time per mprotect as
	// each process sees it, the unit of the patch's per-process loop): a
	// batch is kMprotectBatch of them.
	auto create = [&](sd_machine *m, uint64_t batch) {
		for (unsigned i = 0; i < cpus; i++) {
			sd_task_config tc = SD_TASK_CONFIG_INIT;

			tc.mm = procs[i].mm;
			tc.cpu = i;
			procs[i].loops = batch / 2;
			procs[i].exiting.store(false, std::memory_order_relaxed);
			if (int e = sd_task_create(m, &tc, mprotect_main, &procs[i], nullptr))
				return e;
		}
		return 0;
	};
	// Pairs: each loop is an mprotect to read-only and one back.
	const bool ran = run_task_batches(st, rm, create, kMprotectBatch,
					  "mprotect_threaded run", &d, nullptr, 2);
	for (auto &proc : procs)
		sd_waitq_destroy(proc.paused);
	if (!ran)
		return;
	if (err.load()) {
		fail(st, "mprotect_threaded task", err.load());
		return;
	}
	uint64_t flushes = d.counter[SD_STAT_FLUSH];
	st.counters["flush_ns"] = flush_ns_mean(d);
	st.counters["remote_invalidations_per_flush"] =
		ratio(d.counter[SD_STAT_REMOTE_INVAL], flushes);
	st.counters["flushes_per_mprotect"] = ratio(flushes, st.iterations() * cpus);
	st.counters["local_only_flushes_per_flush"] =
		ratio(d.counter[SD_STAT_LOCAL_ONLY_FLUSH], flushes);
	st.counters["stale_switch_flushes"] = (double)d.counter[SD_STAT_STALE_SWITCH_FLUSH];
	st.counters["asid_tlbis_per_flush"] = ratio(d.counter[SD_STAT_TLBI_ASID_OP], flushes);
	st.counters["page_tlbis_per_flush"] = ratio(d.counter[SD_STAT_TLBI_PAGE_OP], flushes);
	st.counters["vma_splits"] = (double)d.counter[SD_STAT_VMA_SPLIT];
	st.counters["task_switches"] = (double)d.counter[SD_STAT_TASK_SWITCH];
	report_machine(st, rm.m());
}

void register_mprotect_threaded(Set set)
{
	static const std::vector<unsigned> all_cpus = { 1, 2, 4, 8, 16 };
	// The skip-broadcast patch: one process per CPU on a 32-CPU eMAG.
	static const std::vector<unsigned> patch_cpus = { 1, 2, 4, 8, 16, 32 };
	// With the arm64 flush selections of issue 28 beside Arcangeli's
	// `local`: Roberts' active_cpu, Lameter's tlb_mode (IPIs up to 4
	// CPUs) and Fujitsu's IPI-only flush; not among the patches'.
	static const std::vector<const char *> all = {
		"broadcast", "local", "broadcast:select=active_cpu",
		"broadcast:select=tlb_mode,ipi_max=4", "broadcast:select=ipi" };
	static const std::vector<const char *> patch_set = { "broadcast", "local" };
	static const std::vector<const char *> main_set = { "broadcast", "local", "ipi", "gbcast" };
	const std::vector<unsigned> &cpus = set == Set::main ? g_opt.cpus
					    : set == Set::patches ? patch_cpus : all_cpus;

	// broadcast ("before") first: scripts/compare divides by it.
	for (unsigned n : cpus)
		for (const char *s : set == Set::main ? main_set
				     : set == Set::patches ? patch_set : all)
			reg("mprotect_threaded/" + std::string(s) + cpus_tail(n),
			    [s, n](State &st) { BM_mprotect_threaded(st, s, n); });
	if (set == Set::patches)
		return;         // a native twin of 32 CPUs is not this host's to run
	for (unsigned n : cpus) {
		reg("mprotect_threaded/native:mode=processes" + cpus_tail(n),
		    [n](State &st) { native::BM_mprotect(st, n, true); });
		reg("mprotect_threaded/native:mode=threads" + cpus_tail(n),
		    [n](State &st) { native::BM_mprotect(st, n, false); });
	}
}

} // namespace

SD_BENCH_FAMILY(mprotect_threaded, 60, register_mprotect_threaded);

} // namespace sdbench
