/* SPDX-License-Identifier: MIT */
/**
 * @file tlbbatch.h
 * @brief Deferred, batched unmap flushes (the kernel's arch_tlbbatch_*).
 * @ingroup tlbbatch
 *
 * Reclaim unmaps pages of many address spaces and would pay one shootdown
 * per page. Instead it zaps the PTEs, notes each mm in a batch, and flushes
 * once at the end: on x86 (`ipi`) one shootdown to the union of the mms'
 * cpumasks, after which every target compares generations for the mm it
 * has loaded; other strategies flush each noted mm in turn. Frames reclaimed
 * into a batch are freed only after its flush.
 *
 * Until the batch is flushed, a mapping change of a noted mm (munmap,
 * mprotect, madvise) flushes the whole mm before it returns, as
 * flush_tlb_batched_pending() does, and sd_mm_destroy() refuses the mm.
 *
 * A batch is used by one thread at a time (the kernel's is per task).
 */
#ifndef SHOOTDOWN_TLBBATCH_H
#define SHOOTDOWN_TLBBATCH_H

#include <stdint.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup tlbbatch Deferred flush batches
 * arch_tlbbatch: reclaim-style unmaps whose flushes are batched.
 * @{
 */

struct sd_tlbbatch;
struct sd_mm;

/**
 * sd_tlbbatch_create() - an empty batch for machine @m.
 * Return: 0 with *@out set; -EINVAL for a NULL argument; -ENOMEM.
 * Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_tlbbatch_create(struct sd_machine *m, struct sd_tlbbatch **out);

/**
 * sd_tlbbatch_destroy() - free an empty (flushed) batch. NULL is a no-op.
 * Return: 0; -EBUSY if it still owes a flush (nothing is freed then).
 * Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_tlbbatch_destroy(struct sd_tlbbatch *batch);

/**
 * sd_tlbbatch_add() - arch_tlbbatch_add_pending(): note that translations of
 * @mm changed and that their flush is deferred into @batch. Under `ipi` this
 * bumps the mm's tlb_gen and ORs its mm_cpumask into the batch's.
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL for a
 * NULL argument or an mm or batch of another machine; -ENOMEM.
 * Attached thread; interrupts on or off.
 */
SD_EXPORT int sd_tlbbatch_add(struct sd_cpu *cpu, struct sd_tlbbatch *batch, struct sd_mm *mm);

/**
 * sd_tlbbatch_flush() - arch_tlbbatch_flush(): one shootdown for everything
 * noted in @batch, then free the frames reclaimed into it. The batch is
 * empty again afterwards. An empty batch costs nothing.
 * Return: 0; -EPERM if the caller is not attached as @cpu; -EINVAL for a
 * NULL argument, a batch of another machine, or interrupts off.
 * Attached thread, interrupts on.
 */
SD_EXPORT int sd_tlbbatch_flush(struct sd_cpu *cpu, struct sd_tlbbatch *batch);

/**
 * sd_reclaim() - try_to_unmap() with a deferred flush: take the frames of the
 * populated pages in [@va, @va + @len) of @mm (keeping the mapping, as
 * sd_madvise_dontneed() does) and add @mm to @batch. Nothing is flushed now:
 * other CPUs may keep using the old translations until sd_tlbbatch_flush(),
 * which also frees the frames.
 * Return: 0; errors as sd_madvise_dontneed(); -EINVAL also for a batch of
 * another machine; -ENOMEM if the list of frames to free cannot grow.
 * Attached thread, interrupts on.
 */
SD_EXPORT int sd_reclaim(struct sd_cpu *cpu, struct sd_tlbbatch *batch, struct sd_mm *mm,
			 uint64_t va, uint64_t len);

/** @} */

SD_END_DECLS

#endif
