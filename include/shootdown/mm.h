/* SPDX-License-Identifier: MIT */
/**
 * @file mm.h
 * @brief Address spaces: page tables, mapping changes, accesses, context switch.
 * @ingroup mm
 *
 * An address space (mm) has a 4-level radix page table over a 48-bit virtual
 * address space with 4 KiB pages, in shared memory. A mapping change edits
 * PTEs under the mm's locks, asks the machine's strategy to flush the changed
 * range with the calling CPU as initiator, then returns: when it returns, no
 * access that starts afterwards, on any CPU, is served by a translation of
 * the range older than the PTE state the call saw, including changes made by
 * a concurrent call that has not finished its own flush (invariant 1 (docs/invariants.md),
 * per call). A call that finds such a flush in flight flushes its range even
 * if it changed nothing, as tlb_finish_mmu() does when mm_tlb_flush_nested().
 *
 * Mappings are populated on first access from a pool of fake physical frames.
 * A frame freed by an unmap is reused only after its flush; a page-table page
 * is freed only after the flush and an RCU grace period.
 */
#ifndef SHOOTDOWN_MM_H
#define SHOOTDOWN_MM_H

#include <stdint.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup mm Address spaces
 * Software page tables, mapping changes (each a shootdown), accesses through the TLB, context switches.
 * @{
 */

struct sd_mm;

/** log2 of the page size: 4 KiB pages, as x86 and arm64 default to. */
#define SD_PAGE_SHIFT 12
/** The page size in bytes. */
#define SD_PAGE_SIZE (UINT64_C(1) << SD_PAGE_SHIFT)
/** Virtual address bits: four levels of 512-entry tables. */
#define SD_VA_BITS 48
/** First address past the emulated virtual address space. */
#define SD_VA_END (UINT64_C(1) << SD_VA_BITS)

/** Protection bits for sd_mmap() and sd_mprotect(). */
enum sd_prot {
	SD_PROT_NONE = 0,
	SD_PROT_READ = 1u << 0,
	SD_PROT_WRITE = 1u << 1,
};

/** The kind of an access. */
enum sd_access_kind {
	SD_READ = 0,
	SD_WRITE = 1,
};

/**
 * sd_mm_create() - create an empty address space on @m.
 * Return: 0; -EINVAL for NULL arguments; -ENOMEM. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_mm_create(struct sd_machine *m, struct sd_mm **out);

/**
 * sd_mm_destroy() - tear an address space down and free its frames and tables.
 *
 * A CPU that holds @mm only lazily (idle since it ran it: sd_cpu_idle(), or
 * a sd_machine_run() CPU whose body returned) does not keep it alive: it is
 * sent an IPI and, on its own thread with interrupts off, switches to no
 * address space through the strategy (the kernel's shooting of lazy TLB
 * users, cleanup_lazy_tlbs()). It stays idle; its next sd_switch_mm() loads
 * whatever it names. The caller waits for those acks, so a lazy CPU whose
 * thread runs with interrupts off delays the destroy until it turns them
 * on. A lazy CPU that is dropped while the destroy then fails keeps working:
 * the drop is invisible except for one extra switch.
 *
 * Switching a CPU to @mm while it is being destroyed is the caller's bug
 * (as for a task's mm in the kernel); it is caught (-EBUSY, nothing freed)
 * when the switch lands before the final check.
 *
 * Return: 0; -EINVAL for a NULL @mm; -EBUSY if a CPU runs it (not lazily),
 * or a TLB batch still owes it a flush (nothing is freed); -EDEADLK if the
 * caller is a CPU with interrupts off (it could not wait for the lazy
 * CPUs); -ENOMEM. Any thread: an attached CPU (interrupts on), or a thread
 * that is no CPU, during or after sd_machine_run().
 */
SD_EXPORT int sd_mm_destroy(struct sd_mm *mm);

/**
 * sd_mm_id() - a number that names @mm for its whole life, never reused (0,
 * which no mm has, for NULL). Never
 * waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT uint64_t sd_mm_id(const struct sd_mm *mm);

/**
 * sd_mmap() - map [@va, @va + @len) with @prot (MAP_FIXED_NOREPLACE).
 *
 * A mapping next to one of the same protection extends it rather than
 * adding one (the kernel's vma_merge(); vma_merges counts them); one of a
 * different protection stays apart, and its accesses keep their own
 * protection.
 *
 * Pages are populated on first access. No flush is needed (nothing was
 * mapped), so none is sent, unless a change of @mm is still flushing: then
 * the range may have been unmapped by it with old translations still cached,
 * and sd_mmap() flushes the range itself before returning (in the kernel,
 * munmap holds mmap_lock for write until its flush is done).
 *
 * Return: 0; -EINVAL if @mm is NULL or of another machine, @len is 0, @va or
 * @len is not page aligned, the range overflows or leaves the 48-bit space,
 * @prot has unknown bits, or interrupts are off; -EEXIST if any page of the
 * range is already mapped; -EPERM if @cpu is NULL or the caller is not
 * attached as it; -ENOMEM if the page tables for the range cannot be
 * allocated, or would alone need more pages than the machine's nr_frames
 * (and more than 65536).
 * On every error nothing is mapped and no table is left behind.
 * Attached thread, interrupts on.
 */
SD_EXPORT int sd_mmap(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va,
		      uint64_t len, unsigned prot);

/**
 * sd_munmap() - unmap [@va, @va + @len), flush, then free the frames, and
 * free emptied page-table pages after an RCU grace period. Unmapped holes in
 * the range are allowed, as with munmap(2).
 * An end of the range inside a mapping splits it (the kernel's
 * __split_vma()); holes and unmapped ends split nothing.
 * Return: 0; errors as sd_mmap() except -EEXIST; -ENOMEM only when the host
 * has no memory for a split's VMA (nothing is unmapped then; munmap(2)
 * fails the same way). Attached thread, interrupts on.
 */
SD_EXPORT int sd_munmap(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va, uint64_t len);

/**
 * sd_mprotect() - change the protection of every mapped page in the range and
 * flush it (leaf entries only: no table is freed). A mapping whose
 * protection changes in part is split at the range's ends (vma_splits), and
 * the range merges with neighbours of its new protection (vma_merges).
 * Return: 0; errors as sd_mmap() except -EEXIST; -ENOMEM (ENOMEM as mprotect(2))
 * if part of the range is not mapped, in which case nothing is changed.
 * Attached thread, interrupts on.
 */
SD_EXPORT int sd_mprotect(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va,
			  uint64_t len, unsigned prot);

/**
 * sd_madvise_dontneed() - drop the frames of populated pages in the range,
 * keeping the mapping (the next access populates a fresh frame), and flush.
 * Return: 0; errors as sd_munmap() except -ENOMEM (it splits no mapping).
 * Attached thread, interrupts on.
 */
SD_EXPORT int sd_madvise_dontneed(struct sd_cpu *cpu, struct sd_mm *mm,
				  uint64_t va, uint64_t len);

/**
 * sd_flush_tlb_range() - flush [@va, @va + @len) of @mm through the machine's
 * strategy, changing no PTE: the flush a change of that range sends, as the
 * kernel's flush_tlb_range() after a page-table update. For measuring a
 * strategy's flush alone (it is counted in flushes but not timed into the
 * latency histogram) and for strategies' own tests; a program that
 * changes mappings through sd_munmap() and friends never needs it.
 * Return: 0; errors as sd_munmap() except -ENOMEM. Attached thread, interrupts
 * on.
 */
SD_EXPORT int sd_flush_tlb_range(struct sd_cpu *cpu, struct sd_mm *mm, uint64_t va,
				 uint64_t len);

/**
 * sd_tlb_probe() - look @va up in @cpu's L1 TLB under its current ASID:
 * no L2 lookup, no walk, no fill, no counter. The first step of a TLB hit
 * in sd_access(), alone, for measuring it.
 * Return: 1 and the frame number in *@pfn (if @pfn is not NULL) on an L1
 * hit; 0 on a miss; -EPERM if @cpu is NULL or the caller is not attached as
 * it. Attached thread, interrupts on or off (it never waits).
 */
SD_EXPORT int sd_tlb_probe(const struct sd_cpu *cpu, uint64_t va, uint64_t *pfn);

/**
 * sd_mm_fork() - copy @parent into a new address space, as fork() does
 * (dup_mmap()).
 *
 * The child gets every mapping of @parent with its protection, and every
 * page @parent has populated, sharing its frame: a page of a writable
 * private mapping becomes copy-on-write in both mms (write-protected; the
 * first write in either breaks it: sd_access() copies it into a frame of
 * its own and flushes the old translation from every TLB of that mm, or
 * reuses the frame if no other mm maps it any more). Pages @parent has not
 * populated stay so in both; the zero page stays shared. @parent's TLBs are
 * flushed before the call returns (flush_tlb_mm() at the end of
 * dup_mmap()): no CPU writes a page of @parent through a translation from
 * before the fork afterwards. The child is loaded nowhere; destroy it with
 * sd_mm_destroy(), which drops its mappings of shared frames.
 *
 * Return: 0 and the child in *@child; -EPERM if the caller is not attached
 * as @cpu; -EINVAL if @parent or @child is NULL, @parent belongs to another
 * machine, or interrupts are off; -ENOMEM (nothing created, @parent as it
 * was). Attached thread, interrupts on; @parent's mmap_lock is taken for
 * write, so its other CPUs' faults and changes wait for the copy.
 */
SD_EXPORT int sd_mm_fork(struct sd_cpu *cpu, struct sd_mm *parent, struct sd_mm **child);

/**
 * sd_access() - access @va in the address space loaded on @cpu.
 *
 * Looks the page up in the CPU's TLB with its current ASID; on a miss walks
 * the page table locklessly (RCU read side, interrupts off), populating the
 * page on first touch, and fills the TLB. As Linux does for private
 * anonymous memory, a read of a page never written (or emptied by
 * sd_madvise_dontneed()) maps the shared zero page, frame 0, write-protected
 * and taking no frame; the first write to it then breaks copy-on-write: a
 * frame of its own, the old translation flushed from every TLB of the mm
 * before the write returns (page_faults and wp_faults count it). In checked
 * mode the oracle counts any hit on a translation older than the PTE state
 * seen by a mapping change of the page that returned before this access
 * started.
 *
 * Return: 0 and the frame number in *@pfn (if @pfn is not NULL; 0 for the
 * zero page, 1 and up for a frame of the machine's pool); -EFAULT if
 * @va is not mapped or outside the VA space; -EACCES if the mapping forbids
 * @kind; -ESRCH if no address space is loaded or the CPU is idle; -ENOMEM if
 * no frame is left; -EPERM if the caller is not attached as @cpu; -EINVAL
 * for an unknown @kind; -EDEADLK for a fault with interrupts off (a page
 * that is not present, or a write to the zero page): a fault is taken with
 * interrupts on only (it may wait for the mmap_lock or a page table's lock,
 * whose holder may be waiting for this CPU's IPI).
 * Attached thread, interrupts on or off (a hit needs no fault).
 */
SD_EXPORT int sd_access(struct sd_cpu *cpu, uint64_t va, enum sd_access_kind kind,
			uint64_t *pfn);

/**
 * sd_switch_mm() - context switch @cpu to @next (NULL: no user address space).
 *
 * Runs the strategy's switch hook (ASIDs, cpumasks, deferred flushes) with
 * interrupts off, leaves lazy mode, and passes an RCU quiescent state.
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL if @next
 * belongs to another machine. Attached thread, interrupts on.
 */
SD_EXPORT int sd_switch_mm(struct sd_cpu *cpu, struct sd_mm *next);

/**
 * sd_cpu_idle() - enter idle: the CPU keeps its address space loaded but in
 * lazy TLB mode (as a kernel thread would) until the next sd_switch_mm().
 * Meanwhile sd_mm_destroy() of that mm, from another thread, switches the
 * CPU to no mm (sd_cpu_current_mm() then returns NULL); the CPU stays idle.
 * Passes an RCU quiescent state. Return: 0; -EPERM if the caller is not
 * attached as @cpu. Attached thread, interrupts on.
 */
SD_EXPORT int sd_cpu_idle(struct sd_cpu *cpu);

/**
 * sd_cpu_current_mm() - the mm loaded on @cpu (lazily or not), or NULL (also
 * for a NULL @cpu). Never
 * waits for another CPU: may be called with interrupts off. Any thread.
 */
SD_EXPORT struct sd_mm *sd_cpu_current_mm(const struct sd_cpu *cpu);

/** @} */

SD_END_DECLS

#endif
