// SPDX-License-Identifier: MIT
// An API-sequence fuzzer: random machines (2-8 CPUs) of one strategy family,
// random shared mms, and on every CPU a random sequence of public calls,
// bad ones included (NULL and foreign objects, unaligned and empty ranges,
// another CPU's handle, interrupts off). It checks that nothing crashes,
// that every return code is one the call documents, that the oracle counts
// no stale translation, and that nothing hangs (a watchdog names the CPU
// that stopped and the call it is in).
//
//   fuzz_api --strategy broadcast|local|ipi|gbcast|rar|riscv|user [--seed N]
//            [--seconds S] [--first I] [--machines K] [--ops N] [--cpus N]
//
// --cpus 64 is the oversubscribed soak of the stress suite: 64 CPUs on a
// host with a few PUs, the same calls, the same checks.
//
// About a third of the random machines run tasks (task.h) instead of one
// body per CPU: more tasks than CPUs over the shared mms, the same calls
// on whichever CPU the task holds, and the scheduler's own besides (yield,
// sleep, affinity, a wait queue's waits and wakes, fork, exec).
//
// Every decision comes from the seed: machine i's shape from (seed, i), and
// CPU c's call sequence from (seed, i, c), each drawn on that CPU alone. The
// interleaving is real concurrency, so a replay (--seed N --first I
// --machines 1) repeats every CPU's sequence exactly, not the timing.
// `none` is broken on purpose: --strategy none is the fuzzer's self-test,
// which must report oracle violations (meson runs it with should_fail).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <shootdown/shootdown.h>
#include <shootdown/task.h>
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t P = SD_PAGE_SIZE;
// The window every CPU works in: 256 pages across a leaf-table boundary
// (and a 1 GiB one), so changes free and rebuild tables.
constexpr unsigned kWindow = 256;
// The run's file: past every page a mapping of the window and its
// neighbour can reach (len() is at most 600 pages).
constexpr unsigned kFilePages = kWindow + 2 * 600;
constexpr uint64_t kBase = 0x40000000 - kWindow / 2 * SD_PAGE_SIZE;
constexpr unsigned kMaxCpus = 64;       // --cpus; random machines have 2..8
constexpr unsigned kMaxMms = 3;
constexpr unsigned kLog = 24;            // calls remembered per CPU
constexpr double kStuckSeconds = 60;     // no call returned for this long: hang

uint64_t splitmix(uint64_t &x)
{
	uint64_t z = (x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// A per-CPU random stream: only its own CPU draws from it.
struct Rng {
	uint64_t s;
	explicit Rng(uint64_t seed) : s(seed) {}
	uint64_t next() { return splitmix(s); }
	unsigned below(unsigned n) { return (unsigned)(next() % n); }
	bool chance(unsigned pct) { return below(100) < pct; }
};

// ---- the user strategy, built from the public building blocks ----

struct IpiReq {
	sd_mm *mm;
	uint64_t va, len;
};

void user_ipi_target(sd_cpu *target, void *arg)
{
	auto *r = static_cast<IpiReq *>(arg);
	(void)sd_tlb_invalidate_local(target, r->mm, r->va, r->len);
}

std::atomic<uint64_t> user_errors{0};

// x86's shape: invalidate here, IPI every other CPU in the mask. The mask is
// read after the page-table change (the library calls flush() so).
void user_ipi_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	IpiReq r{ mm, va, len };
	const unsigned me = sd_cpu_id(cpu), n = sd_machine_nr_cpus(sd_cpu_machine(cpu));

	if (sd_tlb_invalidate_local(cpu, mm, va, len))
		user_errors++;
	for (unsigned c = sd_mm_cpumask_next(mm, 0); c < n; c = sd_mm_cpumask_next(mm, c + 1))
		if (c != me && sd_smp_call_single(cpu, c, user_ipi_target, &r))
			user_errors++;
}

// arm64's shape: one broadcast invalidation.
void user_bcast_flush(sd_cpu *cpu, sd_mm *mm, uint64_t va, uint64_t len, unsigned, void *)
{
	if (sd_tlb_invalidate_broadcast(cpu, mm, va, len))
		user_errors++;
}

void register_user_strategies()
{
	sd_strategy s = SD_STRATEGY_INIT;
	s.name = "fuzz_user_ipi";
	s.flush = user_ipi_flush;
	if (sd_strategy_register(&s))
		std::fprintf(stderr, "[fuzz] register fuzz_user_ipi: %s\n", sd_last_error());
	s.name = "fuzz_user_bcast";
	s.flush = user_bcast_flush;
	if (sd_strategy_register(&s))
		std::fprintf(stderr, "[fuzz] register fuzz_user_bcast: %s\n", sd_last_error());
}

// Strategy specs per family; a machine picks one.
const std::vector<const char *> &specs_of(const std::string &family)
{
	static const std::vector<const char *> broadcast = {
		"broadcast", "broadcast:max_tlbi_ops=1", "broadcast:range=none",
		"broadcast:range=descending,lpa2=1", "broadcast:select=active_cpu",
		"broadcast:select=active_cpu,reset=0", "broadcast:select=tlb_mode,ipi_max=2",
		"broadcast:select=ipi", "broadcast:wp_reuse=tlbi"};
	static const std::vector<const char *> local = {"local"};
	static const std::vector<const char *> ipi = {
		"ipi", "ipi:cpumask=lazy", "ipi:ceiling=0", "ipi:ceiling=4",
		"ipi:cpumask=lazy,trim_ms=1"};
	static const std::vector<const char *> gbcast = {
		"gbcast", "gbcast:pool=4,threshold=0", "gbcast:cpumask=lazy,sample=1"};
	static const std::vector<const char *> rar = {
		"rar", "rar:pool=4,threshold=0,sample=1", "rar:threshold=0,sample=1,trim_ms=1",
		"rar:threshold=0,sample=1,pti=1,payloads=8", "rar:threshold=0,sample=1,self=rar",
		"rar:threshold=1,sample=1,cpumask=eager"};
	static const std::vector<const char *> riscv = {
		"riscv", "riscv:rfence=sbi", "riscv:rfence=sbi,sbi_flush_limit=64,threshold=8",
		"riscv:rfence=ipi,threshold=0", "riscv:svinval=1,threshold=8",
		"riscv:asid=0", "riscv:rfence=sbi,asid=0,svinval=1"};
	static const std::vector<const char *> user = {"fuzz_user_ipi", "fuzz_user_bcast"};
	// Broken on purpose: the fuzzer's self-test, which must fail.
	static const std::vector<const char *> broken = {"none"};
	static const std::vector<const char *> none;
	if (family == "broadcast")
		return broadcast;
	if (family == "local")
		return local;
	if (family == "ipi")
		return ipi;
	if (family == "gbcast")
		return gbcast;
	if (family == "rar")
		return rar;
	if (family == "riscv")
		return riscv;
	if (family == "user")
		return user;
	if (family == "none")
		return broken;
	return none;
}

// ---- one machine's run ----

struct CpuState {
	std::atomic<uint64_t> calls{0};         // calls returned (progress)
	std::atomic<const char *> in_call{""};  // the call in progress
	std::atomic<bool> done{false};
	std::mutex log_lock;                    // the watchdog reads the ring live
	char log[kLog][112];                    // the last calls, a ring
	unsigned log_n = 0;
};

struct Run {
	uint64_t seed;                          // this machine's seed
	unsigned index;                         // machine number (for --first)
	unsigned nr_cpus, nr_mms, ops;
	unsigned nr_workers;                    // CPUs, or tasks in a task machine
	bool tasks = false;                     // a machine of tasks (task.h)
	sd_waitq *q = nullptr;                  // the tasks' wait queue
	std::atomic<int> tokens{0};             // what its waiters wait for
	std::atomic<unsigned> children{0};      // forked tasks not yet returned
	bool fixed_cpus;                        // --cpus given
	const char *spec;
	sd_machine *m = nullptr;
	sd_mm *mms[kMaxMms] = {};
	// A file every mm maps parts of (file.h), page i at kBase + i pages.
	sd_file *file = nullptr;
	std::atomic<sd_cpu *> cpus[kMaxCpus] = {};
	CpuState st[kMaxCpus];
	std::atomic<bool> failed{false};
	std::mutex report_lock;
};

void log_call(CpuState &s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_call(CpuState &s, const char *fmt, ...)
{
	std::lock_guard<std::mutex> g(s.log_lock);
	va_list ap;
	va_start(ap, fmt);
	std::vsnprintf(s.log[s.log_n++ % kLog], sizeof(s.log[0]), fmt, ap);
	va_end(ap);
}

void print_log(Run &r, unsigned id)
{
	CpuState &s = r.st[id];
	std::lock_guard<std::mutex> g(s.log_lock);
	unsigned first = s.log_n > kLog ? s.log_n - kLog : 0;
	std::fprintf(stderr, "  cpu %u: %llu calls returned, now in \"%s\"%s; last calls:\n", id,
		     (unsigned long long)s.calls.load(), s.in_call.load(),
		     s.done.load() ? " (finished)" : "");
	for (unsigned i = first; i < s.log_n; i++)
		std::fprintf(stderr, "    #%u %s\n", i, s.log[i % kLog]);
}

void print_replay(const Run &r, const char *family, uint64_t seed)
{
	std::fprintf(stderr, "[fuzz] replay: fuzz_api --strategy %s --seed %llu --first %u --machines 1"
			     "%s%s --ops %u (machine seed 0x%llx, %u CPUs, %u mms, spec %s)\n",
		     family, (unsigned long long)seed, r.index, r.fixed_cpus ? " --cpus " : "",
		     r.fixed_cpus ? std::to_string(r.nr_cpus).c_str() : "", r.ops,
		     (unsigned long long)r.seed, r.nr_cpus, r.nr_mms, r.spec);
}

// A return code the call does not document (or a bad call that succeeded).
void unexpected(Run &r, unsigned id, const char *call, int got, const char *want)
{
	std::lock_guard<std::mutex> g(r.report_lock);
	if (r.failed.exchange(true))
		return;
	std::fprintf(stderr, "[fuzz] FAILED: cpu %u: %s returned %d (%s), want %s; detail: %s\n", id,
		     call, got, sd_strerror(got), want, sd_last_error());
	print_log(r, id);
}

// Is @err one of the codes the call documents?
bool one_of(int err, std::initializer_list<int> ok)
{
	for (int e : ok)
		if (err == e)
			return true;
	return false;
}

struct Cpu {
	Run &r;
	sd_cpu *c;
	unsigned id;                            // the CPU, or the task's index
	Rng rng;
	sd_tlbbatch *batch = nullptr;
	bool batch_owes = false;
	sd_task *self = nullptr;                // a task machine's task

	// A task's CPU may change at any scheduling call: take it afresh, and
	// publish it for the others' "another CPU's handle" calls.
	void refresh()
	{
		if (!self)
			return;
		c = sd_task_cpu(self);
		if (c)
			r.cpus[sd_cpu_id(c)].store(c);
	}

	// Run one call: note it for the watchdog and the log, check its code.
	template <typename F>
	void call(const char *name, std::initializer_list<int> ok, const char *want, F &&fn)
	{
		CpuState &s = r.st[id];
		refresh();
		s.in_call.store(name, std::memory_order_relaxed);
		int err = fn();
		refresh();
		s.in_call.store("", std::memory_order_relaxed);
		s.calls.fetch_add(1, std::memory_order_relaxed);
		log_call(s, "%s -> %d", name, err);
		if (!one_of(err, ok))
			unexpected(r, id, name, err, want);
		else if (err < 0 && !sd_last_error()[0])
			unexpected(r, id, name, err, "a detail in sd_last_error()");
	}

	sd_mm *any_mm() { return r.mms[rng.below(r.nr_mms)]; }
	uint64_t page() { return kBase + rng.below(kWindow) * P; }
	uint64_t len() { return (1 + rng.below(rng.chance(10) ? 600 : 8)) * P; }
	unsigned prot() { return rng.below(4); }

	void good_op()
	{
		sd_mm *mm = any_mm();
		uint64_t va = page(), n = len();
		unsigned p = prot();

		switch (rng.below(self ? 14 : 13)) {
		case 0:
			call("sd_switch_mm", {0}, "0", [&] { return sd_switch_mm(c, rng.chance(10) ? nullptr : mm); });
			break;
		case 1:
			call("sd_cpu_idle", {0}, "0", [&] { return sd_cpu_idle(c); });
			break;
		case 2: {
			// Private anonymous memory mostly; else shared anonymous
			// memory, or a shared or private mapping of the run's
			// file at the offset of its address (so that neighbours
			// continue each other and merge).
			const unsigned kind = rng.below(8);
			auto map = [&](const char *what, uint64_t at, uint64_t len_, unsigned pr) {
				call(what, {0, -EEXIST, -ENOMEM}, "0/-EEXIST/-ENOMEM", [&] {
					if (kind >= 3 || !r.file)
						return sd_mmap(c, mm, at, len_, pr);
					if (kind == 0)
						return sd_mmap_file(c, mm, at, len_, pr, SD_MAP_SHARED, nullptr, 0);
					return sd_mmap_file(c, mm, at, len_, pr,
							    kind == 1 ? SD_MAP_SHARED : SD_MAP_PRIVATE,
							    r.file, at - kBase);
				});
			};
			map("sd_mmap", va, n, p);
			// A neighbour, often of the same protection: VMAs merge
			// (and split again under munmap and mprotect) while the
			// other CPUs fault on them, under the oracle.
			if (rng.chance(40))
				map("sd_mmap(adjacent)", va + n, len(), rng.chance(60) ? p : prot());
			if (r.file && rng.chance(5))
				call("sd_mmap_file(past the end)", {-EINVAL}, "-EINVAL", [&] {
					return sd_mmap_file(c, mm, va, n, p, SD_MAP_SHARED, r.file,
							    kFilePages * P);
				});
			break;
		}
		case 3:
			call("sd_munmap", {0}, "0", [&] { return sd_munmap(c, mm, va, n); });
			break;
		case 4:
			call("sd_mprotect", {0, -ENOMEM}, "0/-ENOMEM",
			     [&] { return sd_mprotect(c, mm, va, n, p); });
			break;
		case 5:
			call("sd_madvise_dontneed", {0}, "0", [&] { return sd_madvise_dontneed(c, mm, va, n); });
			// Then evict what nothing holds of the file's pages there
			// (reclaim's __remove_mapping()), while other CPUs fault
			// them in and batches owe flushes, under the oracle.
			if (r.file && rng.chance(50) && va - kBase < kFilePages * P) {
				const uint64_t off = va - kBase;
				const uint64_t l = std::min(n, kFilePages * P - off);
				call("sd_file_evict", {0}, "0 (pages evicted)", [&] {
					int e = sd_file_evict(c, r.file, off, l);
					return e < 0 ? e : 0;
				});
			}
			break;
		case 6:
			if (batch) {
				call("sd_reclaim", {0, -ENOMEM}, "0/-ENOMEM",
				     [&] { return sd_reclaim(c, batch, mm, va, n); });
				batch_owes = true;
			}
			break;
		case 7:
			if (batch) {
				call("sd_tlbbatch_flush", {0}, "0", [&] { return sd_tlbbatch_flush(c, batch); });
				batch_owes = false;
			}
			break;
		case 8: {
			// Interrupts off around accesses: allowed, and IPIs wait.
			sd_irq_disable(c);
			for (unsigned i = 0; i < 4; i++)
				call("sd_access(irqs off)", {0, -EFAULT, -EACCES, -ESRCH, -ENOMEM, -EDEADLK},
				     "an access code", [&] { return sd_access(c, page(), SD_READ, nullptr); });
			sd_irq_enable(c);
			break;
		}
		case 9: {
			unsigned t = rng.below(r.nr_cpus);
			// Another CPU may not have attached yet, or have finished and
			// be waiting for the others: both documented.
			call("sd_smp_call_single", {0, -EINVAL}, "0/-EINVAL", [&] {
				return sd_smp_call_single(c, t, [](sd_cpu *, void *) {}, nullptr);
			});
			break;
		}
		case 10:
			call("sd_trap", {0, -EILSEQ}, "0/-EILSEQ", [&] {
				return sd_trap(c, rng.chance(50) ? SD_ID_AA64ISAR0_EL1(rng.below(31))
								 : (uint32_t)rng.next());
			});
			break;
		case 11:
			if (rng.chance(50))
				private_mm(mm, va, n);
			else
				forked_mm(mm);
			break;
		case 12:
			if (self) {
				task_op();
				break;
			}
			[[fallthrough]];
		default:
			for (unsigned i = 0; i < 8; i++)
				call("sd_access", {0, -EFAULT, -EACCES, -ESRCH, -ENOMEM}, "an access code", [&] {
					return sd_access(c, page(), rng.chance(50) ? SD_WRITE : SD_READ, nullptr);
				});
			break;
		}
	}

	// The scheduler's calls, from a task.
	static bool token_or_none(void *arg)
	{
		return static_cast<Run *>(arg)->tokens.load() > 0;
	}

	static void child_main(sd_task *child, void *arg)
	{
		auto *r = static_cast<Run *>(arg);
		sd_cpu *cc = sd_task_cpu(child);
		for (unsigned i = 0; i < 4; i++)
			(void)sd_access(cc, kBase + i * 7 * P, SD_WRITE, nullptr);
		r->children--;
	}

	void task_op()
	{
		static const char *const lists[] = {"0", "1", "0-1", "1-7", "0,2-3", "", "x", "100"};

		switch (rng.below(7)) {
		case 0:
			call("sd_task_yield", {0}, "0", [&] { return sd_task_yield(self); });
			break;
		case 1:
			call("sd_task_sleep", {0}, "0",
			     [&] { return sd_task_sleep(self, rng.below(50000)); });
			break;
		case 2: {
			const char *l = lists[rng.below(sizeof(lists) / sizeof(*lists))];
			call("sd_task_set_affinity", {0, -EINVAL}, "0/-EINVAL",
			     [&] { return sd_task_set_affinity(self, self, l); });
			break;
		}
		case 3:
			// A waiter may find every other task waiting too: then the
			// wait could never end, and says so.
			call("sd_task_wait", {0, -EDEADLK}, "0/-EDEADLK", [&] {
				int err = sd_task_wait(self, r.q, token_or_none, &r);
				if (!err && r.tokens.fetch_sub(1) <= 0)
					r.tokens++;
				return err;
			});
			break;
		case 4:
			r.tokens++;
			call("sd_task_wake", {0}, "0",
			     [&] { return sd_task_wake(self, r.q, 1 + rng.below(2)) < 0 ? -EPROTO : 0; });
			break;
		case 5:
			if (r.children.load() < 4) {
				r.children++;
				call("sd_task_fork", {0, -ENOMEM, -EAGAIN}, "0/-ENOMEM/-EAGAIN", [&] {
					int err = sd_task_fork(self, child_main, &r, nullptr);
					if (err)
						r.children--;
					return err;
				});
			}
			break;
		default:
			call("sd_task_exec", {0, -ENOMEM}, "0/-ENOMEM", [&] { return sd_task_exec(self); });
			break;
		}
	}

	// An mm of this CPU's own, from birth to death, while the others change
	// the shared ones: create, run on it, switch away, destroy. Nobody else
	// ever loads it, so the last destroy must succeed. Idling on it first
	// tries the destroy while it is loaded lazily: -EBUSY is the documented
	// behaviour today ("loaded, lazily or not"); a library that switches
	// the lazy CPU away and frees it (0) is accepted too.
	void private_mm(sd_mm *back, uint64_t va, uint64_t n)
	{
		sd_mm *mine = nullptr;
		int err = -1;

		call("sd_mm_create(private)", {0, -ENOMEM}, "0/-ENOMEM",
		     [&] { return sd_mm_create(r.m, &mine); });
		if (!mine)
			return;
		call("sd_switch_mm(private)", {0}, "0", [&] { return sd_switch_mm(c, mine); });
		call("sd_mmap(private)", {0, -ENOMEM}, "0/-ENOMEM",
		     [&] { return sd_mmap(c, mine, va, n, SD_PROT_READ | SD_PROT_WRITE); });
		call("sd_access(private)", {0, -ENOMEM}, "0/-ENOMEM",
		     [&] { return sd_access(c, va, SD_WRITE, nullptr); });
		// A read-only neighbour never merges into the writable range:
		// a write to it is refused whatever the VMA boundaries (a merge
		// of different protections would let it through).
		uint64_t n2 = len();
		int mapped = -1;
		call("sd_mmap(private, read-only neighbour)", {0, -ENOMEM}, "0/-ENOMEM",
		     [&] { return mapped = sd_mmap(c, mine, va + n, n2, SD_PROT_READ); });
		if (!mapped)
			call("sd_access(private, write to the read-only neighbour)", {-EACCES}, "-EACCES",
			     [&] { return sd_access(c, va + n + rng.below(n2 / P) * P, SD_WRITE, nullptr); });
		call("sd_munmap(private)", {0}, "0", [&] { return sd_munmap(c, mine, va, n + n2); });
		if (rng.chance(50)) {
			call("sd_cpu_idle(private)", {0}, "0", [&] { return sd_cpu_idle(c); });
			call("sd_mm_destroy(private, lazy here)", {0, -EBUSY}, "0/-EBUSY",
			     [&] { return err = sd_mm_destroy(mine); });
		}
		call("sd_switch_mm(away)", {0}, "0", [&] { return sd_switch_mm(c, back); });
		if (err)
			call("sd_mm_destroy(private)", {0}, "0", [&] { return sd_mm_destroy(mine); });
	}

	// A fork of a shared mm, which the other CPUs keep changing meanwhile,
	// as this CPU's own: run on it (reads share the parent's frames, writes
	// break copy-on-write), switch away, destroy. Nobody else loads it.
	void forked_mm(sd_mm *parent)
	{
		sd_mm *child = nullptr;

		call("sd_mm_fork", {0, -ENOMEM}, "0/-ENOMEM",
		     [&] { return sd_mm_fork(c, parent, &child); });
		if (!child)
			return;
		call("sd_switch_mm(forked)", {0}, "0", [&] { return sd_switch_mm(c, child); });
		for (unsigned i = 0; i < 8; i++)
			call("sd_access(forked)", {0, -EFAULT, -EACCES, -ENOMEM}, "an access code", [&] {
				return sd_access(c, page(), rng.chance(50) ? SD_WRITE : SD_READ, nullptr);
			});
		if (rng.chance(30))
			call("sd_mm_fork(of the fork)", {0, -ENOMEM}, "0/-ENOMEM", [&] {
				sd_mm *grandchild = nullptr;
				int err = sd_mm_fork(c, child, &grandchild);
				return err ? err : sd_mm_destroy(grandchild);
			});
		call("sd_switch_mm(away)", {0}, "0", [&] { return sd_switch_mm(c, parent); });
		call("sd_mm_destroy(forked)", {0}, "0", [&] { return sd_mm_destroy(child); });
	}

	// Calls that must fail with exactly one code and change nothing.
	void bad_op()
	{
		sd_mm *mm = any_mm();
		uint64_t va = page();
		const unsigned me = self ? sd_cpu_id(c) : id;
		sd_cpu *other = r.cpus[(me + 1 + rng.below(r.nr_cpus - 1)) % r.nr_cpus].load();

		if (!other)
			return;         /* a task machine's CPU no task has run on yet */
		switch (rng.below(12)) {
		case 0:
			call("sd_mmap(NULL mm)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_mmap(c, nullptr, va, P, SD_PROT_READ); });
			break;
		case 1:
			call("sd_munmap(NULL cpu)", {-EPERM}, "-EPERM", [&] { return sd_munmap(nullptr, mm, va, P); });
			break;
		case 2:
			call("sd_mprotect(unaligned)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_mprotect(c, mm, va + 1 + rng.below(4095), P, SD_PROT_READ); });
			break;
		case 3:
			call("sd_madvise_dontneed(len 0)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_madvise_dontneed(c, mm, va, 0); });
			break;
		case 4:
			call("sd_mmap(leaves VA)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_mmap(c, mm, SD_VA_END - P, 2 * P, SD_PROT_READ); });
			break;
		case 5:
			call("sd_mmap(bad prot)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_mmap(c, mm, va, P, 4u << rng.below(28)); });
			break;
		case 6:
			// Another CPU's handle: never ours to use.
			call("sd_access(other cpu)", {-EPERM}, "-EPERM",
			     [&] { return sd_access(other, va, SD_READ, nullptr); });
			call("sd_switch_mm(other cpu)", {-EPERM}, "-EPERM", [&] { return sd_switch_mm(other, mm); });
			break;
		case 7: {
			sd_irq_disable(c);
			call("sd_munmap(irqs off)", {-EINVAL}, "-EINVAL", [&] { return sd_munmap(c, mm, va, P); });
			call("sd_smp_call_single(irqs off)", {-EDEADLK, -EINVAL}, "-EDEADLK/-EINVAL", [&] {
				return sd_smp_call_single(c, (me + 1) % r.nr_cpus, [](sd_cpu *, void *) {}, nullptr);
			});
			call("sd_trap(irqs off)", {-EINVAL}, "-EINVAL", [&] { return sd_trap(c, SD_ID_AA64ISAR0_EL1(0)); });
			if (self)
				call("sd_task_yield(irqs off)", {-EDEADLK}, "-EDEADLK",
				     [&] { return sd_task_yield(self); });
			sd_irq_enable(c);
			break;
		}
		case 8:
			call("sd_smp_call_single(self)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_smp_call_single(c, me, [](sd_cpu *, void *) {}, nullptr); });
			call("sd_smp_call_single(out of range)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_smp_call_single(c, r.nr_cpus + rng.below(100), [](sd_cpu *, void *) {}, nullptr); });
			break;
		case 9:
			// Building blocks: only under a user strategy.
			call("sd_mm_cpumask_test", {0, 1, -EOPNOTSUPP}, "0/1/-EOPNOTSUPP",
			     [&] { return sd_mm_cpumask_test(mm, me); });
			call("sd_mm_cpumask_test(out of range)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_mm_cpumask_test(mm, r.nr_cpus); });
			call("sd_mm_cpumask_next(NULL)", {0}, "0", [&] {
				return sd_mm_cpumask_next(nullptr, 0) == UINT_MAX ? 0 : -EPROTO;
			});
			break;
		case 10:
			call("sd_tlbbatch_add(NULL mm)", {-EINVAL}, "-EINVAL",
			     [&] { return batch ? sd_tlbbatch_add(c, batch, nullptr) : -EINVAL; });
			call("sd_reclaim(NULL batch)", {-EINVAL}, "-EINVAL",
			     [&] { return sd_reclaim(c, nullptr, mm, va, P); });
			break;
		default:
			call("sd_cpu_detach(other cpu)", {-EPERM}, "-EPERM", [&] { return sd_cpu_detach(other); });
			call("sd_cpu_set_reg(X31)", {-EINVAL}, "-EINVAL", [&] { return sd_cpu_set_reg(c, 31, 1); });
			break;
		}
	}

	void body()
	{
		call("sd_tlbbatch_create", {0, -ENOMEM}, "0/-ENOMEM",
		     [&] { return sd_tlbbatch_create(r.m, &batch); });
		for (unsigned i = 0; i < r.ops && !r.failed.load(std::memory_order_relaxed); i++) {
			if (rng.chance(15))
				bad_op();
			else
				good_op();
		}
		// Leave nothing owed and nothing loaded, so the mms can go.
		if (batch) {
			call("sd_tlbbatch_flush(final)", {0}, "0", [&] { return sd_tlbbatch_flush(c, batch); });
			call("sd_tlbbatch_destroy", {0}, "0", [&] { return sd_tlbbatch_destroy(batch); });
		}
		if (!self)
			call("sd_switch_mm(final NULL)", {0}, "0", [&] { return sd_switch_mm(c, nullptr); });
	}
};

void cpu_main(sd_cpu *c, void *arg)
{
	Run &r = *static_cast<Run *>(arg);
	unsigned id = sd_cpu_id(c);
	uint64_t s = r.seed ^ (0x100000001b3ull * (id + 1));

	r.cpus[id].store(c);
	Cpu cpu{r, c, id, Rng(splitmix(s))};
	cpu.body();
	r.st[id].done.store(true);
}

struct TaskArg {
	Run *r;
	unsigned index;
};

void task_main(sd_task *self, void *arg)
{
	auto *a = static_cast<TaskArg *>(arg);
	Run &r = *a->r;
	uint64_t s = r.seed ^ (0x100000001b3ull * (a->index + 1));
	Cpu cpu{r, sd_task_cpu(self), a->index, Rng(splitmix(s))};

	cpu.self = self;
	cpu.refresh();
	cpu.body();
	r.st[a->index].done.store(true);
}

// Watch a run: if some CPU that has not finished returned no call for
// kStuckSeconds, print every CPU's state and abort.
void watchdog(Run &r, std::atomic<bool> &stop, double stuck_secs, const char *family,
	      uint64_t seed)
{
	std::vector<uint64_t> last(r.nr_workers, ~0ull);
	std::vector<Clock::time_point> since(r.nr_workers, Clock::now());

	while (!stop.load()) {
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
		for (unsigned i = 0; i < r.nr_workers; i++) {
			uint64_t n = r.st[i].calls.load();
			if (n != last[i] || r.st[i].done.load()) {
				last[i] = n;
				since[i] = Clock::now();
				continue;
			}
			if (std::chrono::duration<double>(Clock::now() - since[i]).count() < stuck_secs)
				continue;
			std::lock_guard<std::mutex> g(r.report_lock);
			std::fprintf(stderr, "[fuzz] WATCHDOG: cpu %u returned no call for %.0f s "
					     "(hang or livelock); every CPU:\n", i, stuck_secs);
			for (unsigned j = 0; j < r.nr_workers; j++)
				print_log(r, j);
			print_replay(r, family, seed);
			std::fflush(stderr);
			std::abort();
		}
	}
}

struct Totals {
	uint64_t machines = 0, task_machines = 0, calls = 0, flushes = 0, ipis = 0;
};

// Build machine @index of the seed, run it, tear it down. 0 if all was well.
int run_machine(const std::string &family, uint64_t seed, unsigned index, unsigned ops,
		unsigned fixed_cpus, double stuck_secs, Totals &tot)
{
	Run r;
	uint64_t s = seed + 0x632be59bd9b4e019ull * (index + 1);
	Rng rng(splitmix(s));
	const auto &specs = specs_of(family);

	r.seed = s;
	r.index = index;
	r.nr_cpus = 2 + rng.below(7);
	r.fixed_cpus = fixed_cpus != 0;
	if (fixed_cpus)
		r.nr_cpus = fixed_cpus;
	r.nr_mms = 1 + rng.below(kMaxMms);
	r.ops = ops;
	r.spec = specs[rng.below((unsigned)specs.size())];
	r.tasks = fixed_cpus <= 8 && rng.chance(35);
	r.nr_workers = r.tasks ? r.nr_cpus + 1 + rng.below(r.nr_cpus) : r.nr_cpus;

	sd_machine_config cfg = SD_MACHINE_CONFIG_INIT;
	cfg.nr_cpus = r.nr_cpus;
	cfg.strategy = r.spec;
	cfg.oracle = SD_ORACLE_CHECKED;
	// Small TLBs and few ASIDs, so evictions and rollovers happen.
	cfg.tlb_sets = 1u << rng.below(5);
	cfg.tlb_ways = 1u << rng.below(3);
	cfg.tlb_l1_entries = 1u << rng.below(5);
	cfg.asid_bits = rng.chance(30) ? (r.nr_cpus <= 8 ? 5 : 8) : 0;  /* > nr_cpus ASIDs */
	cfg.nr_frames = rng.chance(30) && !fixed_cpus ? 256 : 8192;
	int err = sd_machine_create(&cfg, &r.m);
	if (err) {
		print_replay(r, family.c_str(), seed);
		std::fprintf(stderr, "[fuzz] FAILED: sd_machine_create: %s: %s\n", sd_strerror(err),
			     sd_last_error());
		return 1;
	}
	for (unsigned i = 0; i < r.nr_mms; i++)
		if (sd_mm_create(r.m, &r.mms[i]))
			std::fprintf(stderr, "[fuzz] FAILED: sd_mm_create: %s\n", sd_last_error());
	if (sd_file_create(r.m, kFilePages * SD_PAGE_SIZE, &r.file))
		std::fprintf(stderr, "[fuzz] FAILED: sd_file_create: %s\n", sd_last_error());

	std::vector<TaskArg> targs;
	if (r.tasks) {
		if (sd_waitq_create(r.m, "fuzz", &r.q))
			std::fprintf(stderr, "[fuzz] FAILED: sd_waitq_create: %s\n", sd_last_error());
		for (unsigned i = 0; i < r.nr_workers; i++)
			targs.push_back(TaskArg{&r, i});
		for (unsigned i = 0; i < r.nr_workers; i++) {
			sd_task_config tc = SD_TASK_CONFIG_INIT;
			tc.mm = r.mms[i % r.nr_mms];
			if (sd_task_create(r.m, &tc, task_main, &targs[i], nullptr))
				std::fprintf(stderr, "[fuzz] FAILED: sd_task_create: %s\n", sd_last_error());
		}
	}
	std::atomic<bool> stop{false};
	std::thread dog(watchdog, std::ref(r), std::ref(stop), stuck_secs, family.c_str(), seed);
	err = r.tasks ? sd_sched_run(r.m) : sd_machine_run(r.m, cpu_main, &r);
	stop.store(true);
	dog.join();
	if (r.q && sd_waitq_destroy(r.q)) {
		std::fprintf(stderr, "[fuzz] FAILED: sd_waitq_destroy: %s\n", sd_last_error());
		err = -EBUSY;
	}

	int bad = r.failed.load() || err;
	if (err)
		std::fprintf(stderr, "[fuzz] FAILED: %s: %s: %s\n",
			     r.tasks ? "sd_sched_run" : "sd_machine_run", sd_strerror(err), sd_last_error());
	uint64_t v = sd_oracle_violations(r.m);
	if (v) {
		sd_violation d{};
		sd_oracle_violation(r.m, 0, &d);
		std::fprintf(stderr, "[fuzz] FAILED: %llu oracle violations; first: cpu %u mm %llu va "
				     "0x%llx entry version %u floor %u (%s)\n",
			     (unsigned long long)v, d.cpu, (unsigned long long)d.mm_id,
			     (unsigned long long)d.va, d.entry_version, d.floor_version,
			     d.kind == SD_VIOLATION_STALE ? "stale" : "foreign");
		for (unsigned i = 0; i < r.nr_workers; i++)
			print_log(r, i);
		bad = 1;
	}
	if (user_errors.exchange(0)) {
		std::fprintf(stderr, "[fuzz] FAILED: a building block failed inside a user flush: %s\n",
			     sd_last_error());
		bad = 1;
	}
	sd_stats st = SD_STATS_INIT;
	if (!sd_stats_snapshot(r.m, &st)) {
		tot.flushes += st.counter[SD_STAT_FLUSH];
		tot.ipis += st.counter[SD_STAT_IPI_SENT];
	}
	for (unsigned i = 0; i < r.nr_workers; i++)
		tot.calls += r.st[i].calls.load();
	if (r.tasks)
		tot.task_machines++;
	for (unsigned i = 0; i < r.nr_mms; i++) {
		if (r.mms[i] && (err = sd_mm_destroy(r.mms[i]))) {
			std::fprintf(stderr, "[fuzz] FAILED: sd_mm_destroy: %s: %s\n", sd_strerror(err),
				     sd_last_error());
			bad = 1;
		}
	}
	if (r.file && (err = sd_file_close(r.file))) {
		std::fprintf(stderr, "[fuzz] FAILED: sd_file_close: %s: %s\n", sd_strerror(err),
			     sd_last_error());
		bad = 1;
	}
	if ((err = sd_machine_destroy(r.m))) {
		std::fprintf(stderr, "[fuzz] FAILED: sd_machine_destroy: %s: %s\n", sd_strerror(err),
			     sd_last_error());
		bad = 1;
	}
	if (bad)
		print_replay(r, family.c_str(), seed);
	tot.machines++;
	return bad;
}

double env_double(const char *name, double dflt)
{
	const char *v = std::getenv(name);
	return v ? std::atof(v) : dflt;
}

} // namespace

int main(int argc, char **argv)
{
	std::string family = "broadcast";
	uint64_t seed = (uint64_t)Clock::now().time_since_epoch().count();
	double seconds = env_double("SD_FUZZ_SECONDS", 6), scale = env_double("SD_FUZZ_SCALE", 1);
	unsigned first = 0, machines = UINT_MAX, ops = 300, cpus = 0;

	if (const char *e = std::getenv("SD_SEED"))
		seed = std::strtoull(e, nullptr, 0);
	for (int i = 1; i + 1 < argc; i += 2) {
		std::string a = argv[i];
		if (a == "--strategy")
			family = argv[i + 1];
		else if (a == "--seed")
			seed = std::strtoull(argv[i + 1], nullptr, 0);
		else if (a == "--seconds")
			seconds = std::atof(argv[i + 1]);
		else if (a == "--first")
			first = (unsigned)std::strtoul(argv[i + 1], nullptr, 0);
		else if (a == "--machines")
			machines = (unsigned)std::strtoul(argv[i + 1], nullptr, 0);
		else if (a == "--cpus")
			cpus = (unsigned)std::strtoul(argv[i + 1], nullptr, 0);
		else if (a == "--ops")
			ops = (unsigned)std::strtoul(argv[i + 1], nullptr, 0);
		else {
			std::fprintf(stderr, "fuzz_api: unknown argument %s\n", a.c_str());
			return 2;
		}
	}
	// The self-test stops at its first stale hit, which can take seconds
	// under a sanitizer (none in 4 s of ASan once): it keeps its full time.
	if (family != "none")
		seconds *= scale;
	// A soak (--cpus) runs each machine's calls to the end whatever the
	// time: under a sanitizer's scale its calls shrink too (TSan's 64-CPU
	// soaks took 30 s each of CI's budget at 150 calls a CPU).
	if (cpus && scale < 1)
		ops = std::max(50u, (unsigned)(ops * scale));
	if (specs_of(family).empty()) {
		std::fprintf(stderr, "fuzz_api: --strategy wants broadcast, local, ipi, gbcast, rar, riscv, user (or none)\n");
		return 2;
	}
	if (cpus == 1 || cpus > kMaxCpus) {
		std::fprintf(stderr, "fuzz_api: --cpus wants 2..%u\n", kMaxCpus);
		return 2;
	}
	// Sanitizers slow everything down: give a stuck CPU longer.
	double stuck = kStuckSeconds * env_double("SD_FUZZ_STUCK_SCALE", 1);
	register_user_strategies();
	std::setvbuf(stderr, nullptr, _IOLBF, 0);
	std::fprintf(stderr, "[fuzz] strategy %s, seed %llu, %.1f s, first machine %u, %s CPUs\n",
		     family.c_str(), (unsigned long long)seed, seconds, first,
		     cpus ? std::to_string(cpus).c_str() : "2..8");

	Totals tot;
	auto t0 = Clock::now();
	int failed = 0;
	for (unsigned i = first; i - first < machines && !failed; i++) {
		if (machines == UINT_MAX &&
		    std::chrono::duration<double>(Clock::now() - t0).count() >= seconds)
			break;
		failed = run_machine(family, seed, i, ops, cpus, stuck, tot);
	}
	std::fprintf(stderr, "[fuzz] %s: %llu machines (%llu of tasks), %llu calls, %llu flushes, "
			     "%llu IPIs in %.1f s: %s\n",
		     family.c_str(), (unsigned long long)tot.machines,
		     (unsigned long long)tot.task_machines, (unsigned long long)tot.calls,
		     (unsigned long long)tot.flushes, (unsigned long long)tot.ipis,
		     std::chrono::duration<double>(Clock::now() - t0).count(),
		     failed ? "FAILED" : "ok");
	return failed;
}
