// SPDX-License-Identifier: MIT
//
// Native-kernel twins of the emulated workloads (see native.hpp). Workers
// are real threads or real processes, pinned with hwloc to PU id % PUs as
// the emulated CPUs are, and driven in batches through a control block in
// shared memory: the benchmark thread bumps a generation word, every worker
// runs the batch and counts itself done. The same futex words serve threads
// and forked processes (no FUTEX_PRIVATE_FLAG).
#include "native.hpp"
#include "batch.hpp"

#include <hwloc.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <linux/futex.h>
#include <pthread.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace native {

bool exact_iterations = false;

namespace {

using benchmark::Counter;
using benchmark::State;

constexpr size_t kPage = 4096;

// ---- topology: hwloc, loaded once ----

// Restricted to the PUs the process may use (taskset, cpuset) as the first
// caller's thread sees them: main() asks first, before anything is pinned,
// as the library does for its own machines.
struct Topology {
	hwloc_topology_t t = nullptr;
	unsigned pus = 1;
	Topology()
	{
		hwloc_bitmap_t allowed = hwloc_bitmap_alloc();

		if (!allowed || hwloc_topology_init(&t) || hwloc_topology_load(t)) {
			hwloc_bitmap_free(allowed);
			t = nullptr;
			return;
		}
		if (!hwloc_get_cpubind(t, allowed, HWLOC_CPUBIND_THREAD) &&
		    !hwloc_bitmap_isequal(allowed, hwloc_topology_get_topology_cpuset(t)))
			hwloc_topology_restrict(t, allowed, 0);
		hwloc_bitmap_free(allowed);
		int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
		pus = n > 0 ? (unsigned)n : 1;
	}
};

Topology &topology()
{
	static Topology topo;
	return topo;
}

// Pin the calling thread to PU @pu % PUs (logical index); 0 on success.
int bind_self(unsigned pu)
{
	Topology &topo = topology();
	if (!topo.t)
		return -ENOSYS;
	hwloc_obj_t obj = hwloc_get_obj_by_type(topo.t, HWLOC_OBJ_PU, pu % topo.pus);
	if (!obj)
		return -EINVAL;
	if (hwloc_set_cpubind(topo.t, obj->cpuset, HWLOC_CPUBIND_THREAD))
		return errno ? -errno : -EINVAL;
	return 0;
}

// Pins the calling thread for a scope and restores its old binding after,
// so that later benchmarks run unpinned as before.
class ScopedBind {
public:
	explicit ScopedBind(unsigned pu)
	{
		Topology &topo = topology();
		if (topo.t && (saved_ = hwloc_bitmap_alloc()) &&
		    hwloc_get_cpubind(topo.t, saved_, HWLOC_CPUBIND_THREAD)) {
			hwloc_bitmap_free(saved_);
			saved_ = nullptr;
		}
		err_ = bind_self(pu);
	}
	~ScopedBind()
	{
		if (saved_) {
			hwloc_set_cpubind(topology().t, saved_, HWLOC_CPUBIND_THREAD);
			hwloc_bitmap_free(saved_);
		}
	}
	int error() const { return err_; }
	ScopedBind(const ScopedBind &) = delete;
	ScopedBind &operator=(const ScopedBind &) = delete;

private:
	hwloc_bitmap_t saved_ = nullptr;
	int err_ = 0;
};

// ---- futex words in shared memory ----

long futex(std::atomic<uint32_t> *w, int op, uint32_t v)
{
	return syscall(SYS_futex, reinterpret_cast<uint32_t *>(w), op, v, nullptr, nullptr, 0);
}

// Wait until *w != old: spin a little (the usual case on a free PU), then
// sleep, so oversubscribed workers give their PU away.
uint32_t wait_change(std::atomic<uint32_t> *w, uint32_t old)
{
	uint32_t v;
	for (unsigned n = 0; (v = w->load(std::memory_order_acquire)) == old; n++) {
		if (n < 2000)
			continue;
		futex(w, FUTEX_WAIT, old);
	}
	return v;
}

struct alignas(64) Ctl {
	std::atomic<uint32_t> gen{0};       // bumped to start a batch (or stop)
	alignas(64) std::atomic<uint32_t> done{0};   // workers done with it
	std::atomic<uint64_t> count{0};     // operations per worker in the batch
	std::atomic<int> err{0};            // first error, a negative errno
	std::atomic<uint32_t> stop{0};
};

// A worker's three phases, run on its own thread or in its own process.
struct Body {
	std::function<int(unsigned id)> setup;             // before the first batch
	std::function<int(unsigned id, uint64_t n)> run;   // one batch of n operations
	std::function<void(unsigned id)> teardown;         // after the last
};

void note(Ctl *c, int err)
{
	int zero = 0;
	if (err)
		c->err.compare_exchange_strong(zero, err);
}

void count_done(Ctl *c)
{
	c->done.fetch_add(1, std::memory_order_acq_rel);
	futex(&c->done, FUTEX_WAKE, INT_MAX);
}

void worker_main(Ctl *c, unsigned id, const Body &b)
{
	note(c, bind_self(id));
	note(c, b.setup ? b.setup(id) : 0);
	count_done(c);                          // ready
	for (uint32_t seen = 0;;) {
		seen = wait_change(&c->gen, seen);
		if (c->stop.load(std::memory_order_acquire))
			break;
		if (!c->err.load(std::memory_order_relaxed))
			note(c, b.run(id, c->count.load(std::memory_order_relaxed)));
		count_done(c);
	}
	if (b.teardown)
		b.teardown(id);
}

class Workers {
public:
	Workers(unsigned n, bool processes, Body body) : n_(n), body_(std::move(body))
	{
		void *p = mmap(nullptr, sizeof(Ctl), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			err_ = -errno;
			return;
		}
		ctl_ = new (p) Ctl;
		for (unsigned id = 0; id < n; id++) {
			if (!processes) {
				threads_.emplace_back([this, id] { worker_main(ctl_, id, body_); });
				continue;
			}
			pid_t pid = fork();
			if (pid == 0) {
				worker_main(ctl_, id, body_);
				_exit(0);
			}
			if (pid < 0) {
				err_ = -errno;
				break;
			}
			pids_.push_back(pid);
		}
		wait_done(started());
		err_ = err_ ? err_ : ctl_->err.load();
	}
	~Workers()
	{
		if (!ctl_)
			return;
		ctl_->stop.store(1, std::memory_order_release);
		ctl_->gen.fetch_add(1, std::memory_order_release);
		futex(&ctl_->gen, FUTEX_WAKE, INT_MAX);
		for (auto &t : threads_)
			t.join();
		for (pid_t pid : pids_)
			waitpid(pid, nullptr, 0);
		ctl_->~Ctl();
		munmap(ctl_, sizeof(Ctl));
	}
	// One batch: every worker does @count operations. 0 or a negative errno.
	int run(uint64_t count)
	{
		if (err_)
			return err_;
		ctl_->done.store(0, std::memory_order_relaxed);
		ctl_->count.store(count, std::memory_order_relaxed);
		ctl_->gen.fetch_add(1, std::memory_order_release);
		futex(&ctl_->gen, FUTEX_WAKE, INT_MAX);
		wait_done(n_);
		return err_ = ctl_->err.load();
	}
	int error() const { return err_; }
	Workers(const Workers &) = delete;
	Workers &operator=(const Workers &) = delete;

private:
	unsigned started() const { return (unsigned)(threads_.size() + pids_.size()); }
	void wait_done(unsigned want)
	{
		uint32_t d;
		while ((d = ctl_->done.load(std::memory_order_acquire)) < want)
			wait_change(&ctl_->done, d);
		ctl_->done.store(0, std::memory_order_relaxed);
	}

	unsigned n_;
	Body body_;
	Ctl *ctl_ = nullptr;
	std::vector<std::thread> threads_;
	std::vector<pid_t> pids_;
	int err_ = 0;
};

// Time batches of @batch operations per worker; time per iteration is then
// time per operation as each worker sees it.
void run_batches(State &st, Workers &w, uint64_t batch, const char *what)
{
	int err = w.error();
	for (uint64_t n; st.KeepRunningBatch(n = sdbench_batch::next_batch(st, batch, 1, exact_iterations));)
		if (!err)
			err = w.run(n);
	if (err)
		st.SkipWithError((std::string(what) + ": " + strerror(-err)).c_str());
}

double oversubscribed(unsigned workers)
{
	return workers > nr_pus() ? 1 : 0;
}

// Per-worker mappings, kept in the worker's own memory (a forked worker
// writes its own copy of this vector).
struct Regions {
	std::vector<char *> at;
	explicit Regions(unsigned n) : at(n, nullptr) {}
	int map(unsigned id, size_t len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -errno;
		at[id] = static_cast<char *>(p);
		return 0;
	}
};

} // namespace

unsigned nr_pus()
{
	return topology().pus;
}

int pu_os_index(unsigned pu)
{
	Topology &topo = topology();
	hwloc_obj_t obj = topo.t ? hwloc_get_obj_by_type(topo.t, HWLOC_OBJ_PU, pu % topo.pus)
				 : nullptr;

	return obj ? (int)obj->os_index : (int)pu;
}

void *pause_forever(void *)
{
	for (;;)
		pause();
	return nullptr;
}

void BM_mprotect(State &st, unsigned workers, bool processes)
{
	// The patch thread's mprotect-attacker-threaded.c (mprotect_threaded.cpp
	// says where): 4 MiB written whole, then mprotect of all of it, read-only
	// and back. Guard pages of PROT_NONE on both sides keep each worker's
	// buffer a VMA of its own, which a neighbour's cannot merge with (threads
	// of one process would otherwise share one). A process also gets the
	// program's second thread, which only sleeps.
	constexpr size_t kLen = 1024 * kPage;
	Regions bufs(workers);
	Body b;
	b.setup = [&bufs, processes](unsigned id) {
		int err = bufs.map(id, kLen + 2 * kPage);
		if (!err && (mprotect(bufs.at[id], kPage, PROT_NONE) ||
			     mprotect(bufs.at[id] + kPage + kLen, kPage, PROT_NONE)))
			err = -errno;
		if (!err)
			memset(bufs.at[id] + kPage, 1, kLen);
		pthread_t sleeper;
		if (!err && processes) {
			err = -pthread_create(&sleeper, nullptr, pause_forever, nullptr);
			if (!err)
				pthread_detach(sleeper);
		}
		return err;
	};
	b.run = [&bufs](unsigned id, uint64_t n) {
		char *buf = bufs.at[id] + kPage;
		for (uint64_t i = 0; i < n; i += 2) {
			if (mprotect(buf, kLen, PROT_READ) || mprotect(buf, kLen, PROT_READ | PROT_WRITE))
				return -errno;
		}
		return 0;
	};
	Workers w(workers, processes, b);
	run_batches(st, w, 2000, "native mprotect");
	st.counters["oversubscribed"] = oversubscribed(workers);
}

void BM_tlb_flush2(State &st, unsigned workers)
{
	// will-it-scale's tests/tlb_flush2.c: a 1 MiB mapping a pass, mmapped
	// before it and munmapped after it. Without that, the next pass's write
	// would find the zero page the read mapped and break it by copy-on-write
	// (wp_page_copy(): a flush, an IPI to the other threads' CPUs), two
	// flushes a loop where the source has one (/proc/interrupts' TLB line:
	// 1.87 a loop at 2 threads) -- the native table's 0.59 at 2 CPUs.
	constexpr size_t kPages = 256;         // as the emulated loop
	Regions regions(workers);
	Body b;
	b.run = [&regions](unsigned id, uint64_t n) {
		char *&base = regions.at[id];
		for (uint64_t i = 0; i < n; i++) {
			if (i % kPages == 0) {
				if (base && munmap(base, kPages * kPage))
					return -errno;
				base = nullptr;
				if (int err = regions.map(id, kPages * kPage))
					return err;
			}
			volatile char *p = base + (i % kPages) * kPage;
			*p = 1;
			if (madvise((void *)p, kPage, MADV_DONTNEED))
				return -errno;
			if (*p != 0)                   // will-it-scale's check: a fresh page
				return -EIO;
		}
		return 0;
	};
	b.teardown = [&regions](unsigned id) {
		if (regions.at[id])
			munmap(regions.at[id], kPages * kPage);
		regions.at[id] = nullptr;
	};
	Workers w(workers, false, b);
	const uint64_t batch = 1024;
	auto t0 = std::chrono::steady_clock::now();
	run_batches(st, w, batch, "native tlb_flush2");
	const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	const double loops = (double)st.iterations() * workers;
	st.counters["loops_per_s"] = wall > 0 ? loops / wall : 0;
	st.counters["loops_per_s_per_thread"] = wall > 0 ? loops / wall / workers : 0;
	st.counters["oversubscribed"] = oversubscribed(workers);
}

// /proc/interrupts: the sum over CPUs of the line labelled @label ("TLB:",
// "CAL:"), as stress-ng's stress_interrupts_tlb() reads it. 0 without one.
uint64_t proc_interrupts(const char *label)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[8192];
	uint64_t total = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = line;
		while (*p == ' ')
			p++;
		if (strncmp(p, label, strlen(label)))
			continue;
		p += strlen(label);
		for (char *end;; p = end) {
			unsigned long long v = strtoull(p, &end, 10);
			if (end == p)
				break;
			total += v;
		}
	}
	fclose(f);
	return total;
}

struct StressShm {
	std::atomic<uint32_t> go{0};
	std::atomic<uint64_t> child_loops{0};
	std::atomic<uint32_t> stop{0};
};

void stress_touch(volatile uint8_t *page, bool write)
{
	for (size_t m = 0; m < kPage; m += 64) {
		if (write)
			page[m] = (uint8_t)m;
		else
			(void)page[m];
	}
}

// stress_tlb_shootdown_child() (stress-tlb-shootdown.c at 291fc43).
void stress_child(StressShm *shm, uint8_t *mem, uint8_t *memfd, size_t stride, pid_t parent,
		  const std::vector<int> &cpus)
{
	const size_t size = 512 * kPage, mask = size - 1, fdmask = 4 * kPage - 1;
	uint32_t r = 0x9e3779b9u ^ (uint32_t)getpid();
	auto rnd = [&r] { r ^= r << 13; r ^= r >> 17; r ^= r << 5; return r; };
	unsigned idx = 0;
	cpu_set_t set;

	while (!shm->go.load())
		sched_yield();
	CPU_ZERO(&set);
	CPU_SET(cpus[0], &set);
	(void)sched_setaffinity(parent, sizeof(set), &set);   // args->pid: the parent's
	auto next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
	while (!shm->stop.load(std::memory_order_relaxed)) {
		size_t k = rnd() & mask, off = (rnd() & mask) & ~(kPage - 1);
		volatile uint8_t *v = mem;
		(void)mprotect(mem + off, kPage, PROT_READ);
		stress_touch(mem + off, false);
		(void)mprotect(mem + off, kPage, PROT_WRITE);
		stress_touch(mem + off, true);
		(void)mprotect(mem, size, PROT_READ);
		for (size_t l = 0; l < size / 64; l++, k = (k + stride) & mask)
			(void)v[k];
		(void)mprotect(mem, size, PROT_WRITE);
		for (size_t l = 0; l < size / 64; l++, k = (k + stride) & mask)
			v[k] = (uint8_t)k;
		(void)mprotect(mem, size, PROT_READ | PROT_WRITE);
		off = (rnd() & mask) & ~(kPage - 1);
		(void)madvise(mem + off, kPage, MADV_DONTNEED);
		stress_touch(mem + off, false);
		off = (rnd() & fdmask) & ~(kPage - 1);
		(void)madvise(memfd + off, kPage, MADV_DONTNEED);
		stress_touch(memfd + off, true);
		(void)msync(memfd, 4 * kPage, MS_ASYNC);
		shm->child_loops.fetch_add(1, std::memory_order_relaxed);
		if (std::chrono::steady_clock::now() >= next) {
			idx = idx + 1 >= cpus.size() ? 0 : idx + 1;
			CPU_ZERO(&set);
			CPU_SET(cpus[idx], &set);
			(void)sched_setaffinity(parent, sizeof(set), &set);
			next += std::chrono::seconds(1);
		}
	}
	_exit(0);
}

// The instance's loop for @seconds; returns its loops, or -errno.
int64_t stress_parent_loop(StressShm *shm, uint8_t *mem, uint8_t *memfd, double seconds)
{
	const size_t mask = 512 * kPage - 1, fdmask = 4 * kPage - 1;
	uint32_t r = 0x2545f491u;
	auto rnd = [&r] { r ^= r << 13; r ^= r >> 17; r ^= r << 5; return r; };
	const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
	int64_t loops = 0;

	shm->go.store(1);
	while (std::chrono::steady_clock::now() < end) {
		size_t off = (rnd() & fdmask) & ~(kPage - 1);
		(void)madvise(memfd + off, kPage, MADV_DONTNEED);
		stress_touch(memfd + off, true);
		(void)msync(memfd, 4 * kPage, MS_SYNC);
		(void)madvise(memfd + off, kPage, MADV_DONTNEED);
		stress_touch(memfd + off, false);
		(void)msync(memfd, 4 * kPage, MS_SYNC);
		off = (rnd() & mask) & ~(kPage - 1);
		(void)madvise(mem + off, kPage, MADV_DONTNEED);
		stress_touch(mem + off, false);
		(void)madvise(mem + off, kPage, MADV_DONTNEED);
		stress_touch(mem + off, true);
		loops++;
	}
	shm->stop.store(1);
	return loops;
}

void BM_stress_tlb_shootdown(State &st, double seconds)
{
	const unsigned pus = nr_pus();
	const unsigned procs = pus > 8 ? 8 : pus < 2 ? 2 : pus;
	std::vector<int> cpus;
	for (unsigned i = 0; i < pus; i++)
		cpus.push_back(pu_os_index(i));
	double tlb = 0, cal = 0, child = 0, parent = 0, wall = 0;

	for (auto _ : st) {
		char path[] = "/dev/shm/sd-stress-XXXXXX";
		int fd = mkstemp(path);
		if (fd < 0) {
			st.SkipWithError("mkstemp in /dev/shm failed");
			return;
		}
		(void)unlink(path);
		void *shm_p = mmap(nullptr, sizeof(StressShm), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		uint8_t *memfd = ftruncate(fd, 4 * kPage) ? nullptr
			: (uint8_t *)mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		uint8_t *mem = (uint8_t *)mmap(nullptr, 512 * kPage, PROT_READ | PROT_WRITE,
					       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (shm_p == MAP_FAILED || !memfd || memfd == MAP_FAILED || mem == MAP_FAILED) {
			st.SkipWithError("mmap failed");
			close(fd);
			return;
		}
		auto *shm = new (shm_p) StressShm();
		memset(mem, 0xff, 512 * kPage);
		std::vector<pid_t> kids;
		uint64_t prime = 32769;
		for (unsigned i = 0; i < procs; i++) {
			for (bool ok = false; !ok;) {     // stress_prime64_next_get()
				prime += 2;
				ok = 32768 % prime != 0;
				for (uint64_t d = 3; ok && d * d <= prime; d += 2)
					ok = prime % d != 0;
			}
			pid_t pid = fork();
			if (pid == 0)
				stress_child(shm, mem, memfd, (137 + prime) * 64, getppid(), cpus);
			if (pid > 0)
				kids.push_back(pid);
		}
		const uint64_t tlb0 = proc_interrupts("TLB:"), cal0 = proc_interrupts("CAL:");
		const auto t0 = std::chrono::steady_clock::now();
		const int64_t loops = stress_parent_loop(shm, mem, memfd, seconds);
		for (pid_t pid : kids)
			(void)waitpid(pid, nullptr, 0);
		wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
		tlb += (double)(proc_interrupts("TLB:") - tlb0);
		cal += (double)(proc_interrupts("CAL:") - cal0);
		child += (double)shm->child_loops.load();
		parent += (double)loops;
		munmap(mem, 512 * kPage);
		munmap(memfd, 4 * kPage);
		munmap(shm_p, sizeof(StressShm));
		close(fd);
		// The parent's mask back to every PU for the next run.
		cpu_set_t all;
		CPU_ZERO(&all);
		for (int c : cpus)
			CPU_SET(c, &all);
		(void)sched_setaffinity(0, sizeof(all), &all);
	}
	if (wall <= 0)
		return;
	st.counters["tlb_shootdowns_per_s"] = tlb / wall;
	st.counters["ipis_per_s"] = cal / wall;
	st.counters["bogo_ops_per_s"] = child / wall;
	st.counters["parent_loops_per_s"] = parent / wall;
	st.counters["children"] = procs;
	st.counters["oversubscribed"] = oversubscribed(procs + 1);
}

void BM_usemem_fork(State &st, unsigned sweeps)
{
	// vm-scalability's usemem -t 4 with a fork()/exec() between rounds
	// (bench/usemem_fork.cpp says where the shape comes from). Each thread
	// writes every 8-byte word of its region (p[idx] = idx), as usemem's
	// do_units() does; after the fork write-protected the parent's pages
	// and the child's exec dropped its copy, each page's first write is a
	// write fault that reuses it in place. A round is thread 0's fork, wait
	// and @sweeps sweeps; the others sweep until thread 0's batch of rounds
	// is over (its batch count, which they compare with their own).
	constexpr unsigned kThreads = 4;
	constexpr size_t kBytes = 16u << 20;      // as the emulated kUmPages
	Regions regions(kThreads);
	std::atomic<uint64_t> main_batches{0};
	std::atomic<bool> failed{false};
	std::vector<uint64_t> batches(kThreads, 0);
	std::atomic<uint64_t> pages{0};
	auto sweep = [](char *base) {
		uint64_t *p = reinterpret_cast<uint64_t *>(base);
		for (size_t i = 0; i < kBytes / sizeof(uint64_t); i++)
			p[i] = i;
		return kBytes / kPage;
	};
	Body b;
	b.setup = [&regions, &sweep](unsigned id) {
		int err = regions.map(id, kBytes);
		if (!err)
			sweep(regions.at[id]);  // populated before the rounds
		return err;
	};
	b.run = [&](unsigned id, uint64_t n) {
		char *base = regions.at[id];
		const uint64_t mine = ++batches[id];
		uint64_t done = 0;
		int err = 0;
		if (id == 0) {
			for (uint64_t r = 0; !err && r < n; r++) {
				pid_t child = fork();
				if (child == 0) {
					execl("/bin/true", "true", (char *)nullptr);
					_exit(127);
				}
				int status = 0;
				if (child < 0 || waitpid(child, &status, 0) != child)
					err = -errno;
				for (unsigned s = 0; !err && s < sweeps; s++)
					done += sweep(base);
			}
			if (err)
				failed.store(true);
			main_batches.store(mine, std::memory_order_release);
		} else {
			while (main_batches.load(std::memory_order_acquire) < mine && !failed.load())
				done += sweep(base);
		}
		pages.fetch_add(done);
		return err;
	};
	b.teardown = [&regions](unsigned id) {
		if (regions.at[id])
			munmap(regions.at[id], kBytes);
		regions.at[id] = nullptr;
	};
	Workers w(kThreads, false, b);
	auto t0 = std::chrono::steady_clock::now();
	run_batches(st, w, 1, "native usemem_fork");
	const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	st.counters["pages_per_us"] = wall > 0 ? (double)pages.load() / (wall * 1e6) : 0;
	st.counters["oversubscribed"] = oversubscribed(kThreads);
}

void BM_tlb_flush_file(State &st, unsigned workers, bool shared)
{
	// will-it-scale's tests/tlb_flush1.c and tlb_flush3.c: a file of each
	// thread's own (mkstemp, ftruncate, unlink), mapped for a pass over its
	// 128 MiB; write a page, madvise(MADV_DONTNEED) it, read it: the
	// file's 0 (private: the copy dropped) or the 1 written (shared). The
	// position carries over from batch to batch, as the emulated twin's.
	constexpr size_t kPages = (128u << 20) / kPage;
	struct File {
		int fd = -1;
		char *base = nullptr;
		size_t pos = kPages;    // a pass done: the next batch maps first
	};
	std::vector<File> files(workers);
	Body b;
	b.setup = [&files](unsigned id) {
		const char *dir = std::getenv("TMPDIR");
		std::string path = std::string(dir && *dir ? dir : "/tmp") + "/willitscale.XXXXXX";
		int fd = mkstemp(path.data());
		if (fd < 0)
			return -errno;
		unlink(path.c_str());
		if (ftruncate(fd, (off_t)(kPages * kPage))) {
			int err = -errno;
			close(fd);
			return err;
		}
		files[id].fd = fd;
		return 0;
	};
	b.run = [&files, shared](unsigned id, uint64_t n) {
		File &f = files[id];
		for (uint64_t i = 0; i < n; i++, f.pos++) {
			if (f.pos == kPages) {
				if (f.base && munmap(f.base, kPages * kPage))
					return -errno;
				void *p = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE,
					       shared ? MAP_SHARED : MAP_PRIVATE, f.fd, 0);
				if (p == MAP_FAILED)
					return -errno;
				f.base = static_cast<char *>(p);
				f.pos = 0;
			}
			volatile char *p = f.base + f.pos * kPage;
			*p = 1;
			if (madvise((void *)p, kPage, MADV_DONTNEED))
				return -errno;
			if (*p != (shared ? 1 : 0))     // will-it-scale's assert
				return -EIO;
		}
		return 0;
	};
	b.teardown = [&files](unsigned id) {
		File &f = files[id];
		if (f.base)
			munmap(f.base, kPages * kPage);
		if (f.fd >= 0)
			close(f.fd);
		f = File{};
	};
	Workers w(workers, false, b);
	auto t0 = std::chrono::steady_clock::now();
	run_batches(st, w, 1024, shared ? "native tlb_flush3" : "native tlb_flush1");
	const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	const double loops = (double)st.iterations() * workers;
	st.counters["loops_per_s"] = wall > 0 ? loops / wall : 0;
	st.counters["loops_per_s_per_thread"] = wall > 0 ? loops / wall / workers : 0;
	st.counters["oversubscribed"] = oversubscribed(workers);
}

// A context_switch pair's partner: echo a byte back until EOF.
void echo_until_eof(int in, int out)
{
	char c;
	while (read(in, &c, 1) == 1 && write(out, &c, 1) == 1)
		;
}

void BM_context_switch(State &st, unsigned pairs, bool threads)
{
	// Per pair, in the driven worker's own process: two pipes and an
	// echoing partner on the same PU, a process of its own, or with
	// @threads a thread of the worker's process (will-it-scale's
	// context_switch1 in threads mode, where no switch changes the mm). A
	// thread the worker creates inherits its affinity, as a forked
	// partner does: the same PU.
	struct Pair {
		int to[2] = { -1, -1 }, from[2] = { -1, -1 };
		pid_t echo = -1;
		std::thread echo_thread;
	};
	std::vector<Pair> pair(pairs);
	Body b;
	b.setup = [&pair, threads](unsigned id) {
		Pair &p = pair[id];
		if (pipe(p.to) || pipe(p.from))
			return -errno;
		if (threads) {
			p.echo_thread = std::thread([&p] {
				echo_until_eof(p.to[0], p.from[1]);
				close(p.to[0]);
				close(p.from[1]);
			});
			return 0;
		}
		p.echo = fork();
		if (p.echo < 0)
			return -errno;
		if (p.echo == 0) {              // the partner: echo until EOF
			close(p.to[1]);
			close(p.from[0]);
			echo_until_eof(p.to[0], p.from[1]);
			_exit(0);
		}
		close(p.to[0]);
		close(p.from[1]);
		return 0;
	};
	b.run = [&pair](unsigned id, uint64_t n) {
		Pair &p = pair[id];
		char c = 0;
		for (uint64_t i = 0; i < n; i += 2)     // a round trip: two switches
			if (write(p.to[1], &c, 1) != 1 || read(p.from[0], &c, 1) != 1)
				return -EPIPE;
		return 0;
	};
	b.teardown = [&pair](unsigned id) {
		close(pair[id].to[1]);
		if (pair[id].echo_thread.joinable())
			pair[id].echo_thread.join();
		close(pair[id].from[0]);
		if (pair[id].echo > 0)
			waitpid(pair[id].echo, nullptr, 0);
	};
	Workers w(pairs, !threads, b);
	run_batches(st, w, 4000, "native context_switch");
	st.counters["oversubscribed"] = oversubscribed(pairs);   // a pair shares its PU by design
}

void BM_trap_cpuid(State &st, unsigned threads, uint64_t reads)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	__cpuid(1, a, b, c, d);
	const bool hypervisor = c & (1u << 31);
	std::atomic<uint64_t> cpu_ns{0};
	Body body;
	body.run = [&cpu_ns](unsigned, uint64_t n) {
		struct timespec t0, t1;
		unsigned ra, rb, rc, rd, sink = 0;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		for (uint64_t i = 0; i < n; i++) {
			__cpuid_count(7, 0, ra, rb, rc, rd);
			sink += ra ^ rb ^ rc ^ rd;
		}
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
		benchmark::DoNotOptimize(sink);
		cpu_ns.fetch_add((uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll +
					    (t1.tv_nsec - t0.tv_nsec)), std::memory_order_relaxed);
		return 0;
	};
	Workers w(threads, false, body);
	int err = w.error();
	for (auto _ : st) {
		auto t0 = std::chrono::steady_clock::now();
		if (!err)
			err = w.run(reads);
		st.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
					    .count());
	}
	if (err)
		st.SkipWithError((std::string("native cpuid: ") + strerror(-err)).c_str());
	st.counters["cpu_s"] = Counter((double)cpu_ns.load() / 1e9, Counter::kAvgIterations);
	st.counters["reads_per_thread"] = (double)reads;
	st.counters["hypervisor"] = hypervisor;
	st.counters["oversubscribed"] = oversubscribed(threads);
#else
	(void)threads;
	(void)reads;
	st.SkipWithError("CPUID is x86 only");
#endif
}

void BM_membarrier(State &st, unsigned targets)
{
	if (targets > 1) {
		st.SkipWithError("membarrier: at most 1 spinning target");
		return;
	}
	if (targets && nr_pus() < 2) {
		st.SkipWithError("membarrier needs 2 PUs the process may use");
		return;
	}
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) {
		st.SkipWithError((std::string("membarrier register: ") + strerror(errno)).c_str());
		return;
	}
	std::atomic<int> stop{0}, ready{targets ? 0 : 1};
	std::thread spinner;
	if (targets)
		spinner = std::thread([&] {
			ready.store(bind_self(1) ? -1 : 1);
			while (!stop.load(std::memory_order_relaxed))
				;
		});
	while (!ready.load())
		;
	ScopedBind pin(0);
	int err = ready.load() < 0 ? -EINVAL : pin.error();
	for (auto _ : st)
		if (!err && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0))
			err = -errno;
	stop.store(1);
	if (spinner.joinable())
		spinner.join();
	if (err)
		st.SkipWithError((std::string("membarrier: ") + strerror(-err)).c_str());
	st.counters["oversubscribed"] = 0;
}

// ---- a lock and a line shared by @threads threads, a PU each ----

inline void spin_pause()
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	asm volatile("yield" ::: "memory");
#endif
}

// A ticket lock: waiters are served in the order they came, as the
// kernel's queued spinlock serves them, so with every thread hammering it
// each acquisition is a handoff from the previous holder. The protected
// counter shares the lock's line, as a spinlock's data often does.
struct alignas(64) TicketLock {
	std::atomic<uint32_t> next{0};
	std::atomic<uint32_t> owner{0};
	uint64_t protected_count = 0;
	unsigned last_holder = UINT_MAX;        // under the lock

	void lock()
	{
		const uint32_t me = next.fetch_add(1, std::memory_order_relaxed);
		// Acquire pairs with unlock()'s release: the last holder's
		// writes to the protected data are seen.
		while (owner.load(std::memory_order_acquire) != me)
			spin_pause();
	}
	void unlock()
	{
		owner.store(owner.load(std::memory_order_relaxed) + 1, std::memory_order_release);
	}
};

struct alignas(64) SharedWord {
	std::atomic<uint64_t> value{0};
};

// Thread 0 (the benchmark's, on PU 0) times its operations while threads 1
// .. @threads-1 (PU 1 and on) do the same operation until it is done.
// op(id) returns whether thread @id's operation found the lock or line
// last used by another thread: thread 0's count of those becomes the
// counter moves_per_op (1: every operation moved it; less: the hardware
// let a thread run several operations a move).
template <typename Op>
void run_shared(State &st, unsigned threads, Op op)
{
	if (threads < 1 || threads > nr_pus()) {
		st.SkipWithError("one thread a PU: at most as many threads as PUs");
		return;
	}
	std::atomic<int> stop{0}, ready{0}, failed{0};
	std::vector<std::thread> others;
	for (unsigned i = 1; i < threads; i++)
		others.emplace_back([&, i] {
			if (bind_self(i))
				failed.store(1);
			ready.fetch_add(1);
			while (!stop.load(std::memory_order_relaxed))
				op(i);
		});
	while (ready.load() != (int)threads - 1)
		;
	ScopedBind pin(0);
	const bool ok = !pin.error() && !failed.load();
	uint64_t moves = 0;
	for (auto _ : st)
		if (ok)
			moves += op(0u);
	stop.store(1);
	for (std::thread &t : others)
		t.join();
	if (!ok)
		st.SkipWithError("could not pin a thread to its PU");
	st.counters["moves_per_op"] = st.iterations() ? (double)moves / (double)st.iterations() : 0;
	st.counters["oversubscribed"] = 0;
}

void BM_lock_shared(State &st, unsigned threads)
{
	TicketLock lock;

	run_shared(st, threads, [&lock](unsigned id) {
		lock.lock();
		const bool handoff = lock.last_holder != id;
		lock.last_holder = id;
		lock.protected_count++;
		lock.unlock();
		return handoff;
	});
}

void BM_line_shared(State &st, unsigned threads)
{
	SharedWord word;
	// Thread 0's last value: an add that returns one more than it found
	// no other thread's add in between, so the line stayed.
	uint64_t last = UINT64_MAX - 1;

	run_shared(st, threads, [&word, &last](unsigned id) {
		const uint64_t old = word.value.fetch_add(1, std::memory_order_relaxed);
		if (id)
			return false;
		const bool moved = old != last + 1;
		last = old;
		return moved;
	});
}

} // namespace native
