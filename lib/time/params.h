/* SPDX-License-Identifier: MIT */
#ifndef SD_TIME_PARAMS_H
#define SD_TIME_PARAMS_H

/*
 * The cost parameters of a machine profile: X(enum suffix, JSON key, what
 * one charge of it is). Every profile gives every one of them, in ns, with
 * its source (docs/guide.md, "Modelled time", has the file format; the
 * calibrator tools/calibrate writes them all). The distance-class tables
 * (line_transfer, lock_handoff) are separate: SD_MODEL_DIST_PARAMS.
 *
 * vcpu_preempt_interval and vcpu_preempt may be left out of a profile (a
 * machine that is not a virtual machine), pipe_message (no workload that
 * passes messages is modelled) and lru_page (a profile from before it
 * existed: the LRU lock's holds then cost their handoffs and line
 * transfers only); every other one is required. tlbi_recv and
 * invlpgb_recv are charged to the CPUs a broadcast reaches, not to its
 * issuer; a whole-ASID or whole-TLB broadcast adds tlb_scan_entry's scan
 * on each of them, as a local one does on its CPU.
 *
 * Kept free of every other header so the calibrator and the docs check
 * read the same list.
 */
#define SD_MODEL_PARAM_LIST(X)                                                   \
	X(TLB_L1_HIT,        "tlb_l1_hit",        "an access served by the L1 TLB, the load included") \
	X(TLB_L2_HIT,        "tlb_l2_hit",        "an access served by the L2 TLB, the load included") \
	X(TLB_MISS,          "tlb_miss",          "a lookup that missed both TLB levels, before the walk") \
	X(WALK_LEVEL,        "walk_level",        "one page-table level read by a walk (4 per full walk)") \
	X(TLB_FILL,          "tlb_fill",          "inserting a walked translation into the TLB") \
	X(PTE_UPDATE,        "pte_update",        "one PTE written by a mapping change (set, clear, protect)") \
	X(PAGE_FREE,         "page_free",         "one frame freed by unmap, madvise or reclaim") \
	X(LOCAL_FLUSH_ALL,   "local_flush_all",   "a local invalidation of every entry") \
	X(LOCAL_FLUSH_ASID,  "local_flush_asid",  "a local invalidation of one ASID/PCID") \
	X(LOCAL_FLUSH_PAGE,  "local_flush_page",  "a local invalidation of one page (INVLPG, TLBI VALE1)") \
	X(LOCAL_FLUSH_RANGE, "local_flush_range", "a local range invalidation, fixed part") \
	X(LOCAL_FLUSH_RANGE_PAGE, "local_flush_range_page", "a local range invalidation, per page") \
	X(TLBI_ISSUE,        "tlbi_issue",        "issuing one broadcast TLBI on the issuing CPU") \
	X(DVM_MESSAGE,       "dvm_message",       "interconnect occupancy of one broadcast message, fixed part") \
	X(DVM_TARGET,        "dvm_target",        "interconnect occupancy of one broadcast message, per target CPU") \
	X(DVM_COMPLETION,    "dvm_completion",    "from the end of a message's occupancy until every target has done it") \
	X(DSB,               "dsb",               "a DSB that finds its broadcasts complete") \
	X(TLBI_RECV,         "tlbi_recv",         "what one broadcast TLBI costs each other CPU of the inner-shareable domain it reaches (its DVM snoop stalls the core), on that CPU's own clock; at most dvm_completion") \
	X(IPI_SEND,          "ipi_send",          "sending an IPI: the first target of a shootdown") \
	X(IPI_SEND_TARGET,   "ipi_send_target",   "each further target of the same shootdown (multicast)") \
	X(IPI_DELIVERY,      "ipi_delivery",      "from the send until the target takes the interrupt") \
	X(IRQ_ENTRY,         "irq_entry",         "interrupt entry on the target") \
	X(IRQ_EXIT,          "irq_exit",          "interrupt exit on the target") \
	X(IPI_HANDLER,       "ipi_handler",       "running one queued request, apart from the flush it does") \
	X(INVLPGB_ISSUE,     "invlpgb_issue",     "issuing one INVLPGB on the issuing CPU") \
	X(INVLPGB_COMPLETION, "invlpgb_completion", "from the end of an INVLPGB's occupancy until every target has done it") \
	X(TLBSYNC,           "tlbsync",           "a TLBSYNC that finds its INVLPGBs complete") \
	X(INVLPGB_RECV,      "invlpgb_recv",      "what one INVLPGB costs each other CPU it reaches (the invalidation stalls the core), on that CPU's own clock; at most invlpgb_completion") \
	X(CONTEXT_SWITCH,    "context_switch",    "switching address spaces (switch_mm and the register write)") \
	X(SYSCALL_ENTRY,     "syscall_entry",     "system call entry (mmap, munmap, mprotect, madvise)") \
	X(SYSCALL_EXIT,      "syscall_exit",      "system call exit") \
	X(PAGE_FAULT_ENTRY,  "page_fault_entry",  "a page fault's exception entry and exit and the handler's way to the PTE (handle_mm_fault() to do_anonymous_page() or do_wp_page()), apart from a new page's allocation, zeroing and charge: all a read fault that maps the zero page costs besides its PTE write") \
	X(TRAP_ENTRY,        "trap_entry",        "an emulated instruction's exception entry") \
	X(TRAP_EXIT,         "trap_exit",         "an emulated instruction's exception return") \
	X(MM_CREATE,         "mm_create",         "creating an address space: mm_alloc, pgd_alloc, the arch's init_new_context") \
	X(MM_DESTROY,        "mm_destroy",        "tearing an address space down, apart from the tables and frames it frees: exit_mmap's fixed part, pgd_free, destroy_context") \
	X(PT_ALLOC,          "pt_alloc",          "allocating and linking one page table below the top level (__pte_alloc, __pmd_alloc, __pud_alloc)") \
	X(PT_FREE,           "pt_free",           "unlinking and freeing one page table (free_pgtables, pte_free_tlb)") \
	X(TLB_SCAN_ENTRY,    "tlb_scan_entry",    "per TLB entry (L1 + L2) scanned by a whole-ASID or whole-TLB invalidation, on top of local_flush_asid/local_flush_all (0 where the invalidation does not scan)") \
	X(VMA_CHANGE,        "vma_change",        "the kernel's own work for a call that creates, removes or changes a mapping (mmap, munmap, mprotect: find_vma, the VMA split or merge, mprotect_fixup), under the mm's lock, apart from the PTE writes, frees and flushes charged on their own") \
	X(LOCK_ACQUIRE,      "lock_acquire",      "acquiring and releasing a lock that is free, whoever held it last (an atomic read-modify-write and a release store); a handoff from another CPU adds lock_handoff") \
	X(LRU_PAGE,          "lru_page",          "one folio added to or removed from an LRU list under the lruvec lock (lruvec_add_folio() or lruvec_del_folio(): the list links, the LRU size counters, the folio's LRU flag), apart from the lines shared with the lock's last holder, which are charged as line transfers (optional, 0 when left out)") \
	X(PIPE_MESSAGE,      "pipe_message",      "a workload's message through a pipe: the write and read system calls' bodies and the copy, apart from their entries and exits, any wakeup and any context switch; charged by workloads that pass messages (hackbench's shape), not by the library (optional, 0 when left out)") \
	X(VCPU_PREEMPT_INTERVAL, "vcpu_preempt_interval", "a virtual machine's vCPUs: modelled time between two host preemptions of a vCPU, the same instants on every vCPU (0: not a virtual machine; optional, 0 when left out)") \
	X(VCPU_PREEMPT,      "vcpu_preempt",      "a virtual machine's vCPUs: how long the host keeps a vCPU off its physical CPU at each preemption, a lock it holds held on (optional, 0 when left out)") \
	X(PAGE_ALLOC,        "page_alloc",        "taking a free page for an anonymous fault (vma_alloc_folio() from the per-CPU free lists, rmqueue_pcplist()), and its rmap and counters (folio_add_new_anon_rmap()), apart from its zeroing and memcg charge (optional, 0 when left out)") \
	X(PAGE_ZERO,         "page_zero",         "clearing a new 4 KiB page (clear_page(), clear_user_highpage()) for an anonymous fault or a copy-on-write break of the zero page (optional, 0 when left out)") \
	X(PAGE_COPY,         "page_copy",         "copying a 4 KiB page for a copy-on-write break of a page fork left shared (copy_mc_user_highpage() in wp_page_copy()) (optional, 0 when left out)") \
	X(MEMCG_CHARGE,      "memcg_charge",      "charging a new anonymous page to its memory cgroup (mem_cgroup_charge(), served from the per-CPU stock) (optional, 0 when left out)") \
	X(KPTI_TRAMPOLINE,   "kpti_trampoline",   "arm64 KPTI: the trampoline's work on one entry to the kernel from EL0 and the return (tramp_vectors and tramp_exit switching TTBR1 and the ASID, with their ISBs), added to every system call, page fault and trapped instruction when the profile's features say kpti (optional, 0 when left out)") \
	X(SCHED_SWITCH,      "sched_switch",      "a task switch apart from switch_mm (context_switch above): __schedule()'s pick_next_task(), the run-queue updates, __switch_to()'s registers and finish_task_switch() (optional, 0 when left out)") \
	X(SCHED_WAKEUP,      "sched_wakeup",      "try_to_wake_up() on the waker's CPU: select_task_rq(), the enqueue on the target's run queue, apart from a reschedule IPI and the run-queue lock's line (optional, 0 when left out)") \
	X(SCHED_MIGRATE,     "sched_migrate",     "moving a queued task to another CPU's run queue: detach_task(), set_task_cpu(), attach_task(), on the CPU that moves it (optional, 0 when left out)") \
	X(TASK_FORK,         "task_fork",         "fork()'s work apart from dup_mmap() (charged as its parts): copy_process()'s task struct, credentials, files and signal state, and wake_up_new_task() (optional, 0 when left out)") \
	X(SCHED_BALANCE_INTERVAL, "sched_balance_interval", "modelled time between two periodic load balances of a CPU (sched_balance_domains(): the domain's balance_interval, in ms, is its weight); 0 or left out: 4 ms (optional)") \
	X(VMA_SPLIT,         "vma_split",         "one VMA split by munmap or mprotect (__split_vma(): the new VMA's allocation and copy, the tree's update), on top of the call's vma_change (optional, 0 when left out)") \
	X(RAR_SEND,          "rar_send",          "Intel RAR: the initiator's part of signalling one target (its action-vector byte written and its bit in the RAR IPI), charged per target and payload (optional, 0 when left out)") \
	X(RAR_DELIVERY,      "rar_delivery",      "Intel RAR: from the RAR signal until the target's microcode starts on it, interrupts off or not (optional, 0 when left out)") \
	X(RAR_SERVICE,       "rar_service",       "Intel RAR: the target's microcode on one action entry (read the payload, write SUCCESS), apart from the invalidation itself, charged as the local flush it is (optional, 0 when left out)") \
	X(SBI_ECALL,         "sbi_ecall",         "RISC-V SBI: one call into the M-mode firmware from S-mode and back (ecall, the firmware's trap entry, extension dispatch, mret), apart from the per-target work (optional, 0 when left out)") \
	X(SBI_SEND_TARGET,   "sbi_send_target",   "RISC-V SBI remote fence: the firmware's work per other target hart in the caller's call (the request queued in the target's TLB FIFO, its MSIP written) (optional, 0 when left out)") \
	X(SBI_DELIVERY,      "sbi_delivery",      "RISC-V SBI remote fence: from the MSIP write until the target hart traps into M-mode, S-mode interrupts off or not (optional, 0 when left out)") \
	X(SBI_SERVICE,       "sbi_service",       "RISC-V SBI remote fence: the target's M-mode trap entry and exit and its FIFO's processing, apart from the sfence.vma itself, charged as the local flush it is (optional, 0 when left out)") \
	X(VMA_MERGE,         "vma_merge",         "one VMA merged into its neighbour by mmap or mprotect (vma_merge(): the neighbour expanded, the other removed from the tree and freed), on top of the call's vma_change (optional, 0 when left out)") \
	X(MADVISE_ZAP,       "madvise_zap",       "madvise(MADV_DONTNEED)'s own work apart from the PTEs it clears, the frames it frees and the flush: madvise_lock() and the VMA walk, zap_page_range_single()'s mmu_gather setup and tlb_finish_mmu(), the mmu notifiers, lru_add_drain() (optional, 0 when left out)") \
	X(FILE_FAULT,        "file_fault",        "a fault on a page of a file's page cache, on top of page_fault_entry: the page-cache lookup, the folio's lock and reference, the file rmap (shmem_fault() or filemap_fault(), finish_fault()) (optional, 0 when left out)")

/* X(enum suffix, JSON key, what one charge is), each a table by distance
 * class (enum sd_model_distance: core, llc, package, system). */
#define SD_MODEL_DIST_PARAM_LIST(X)                                              \
	X(LINE_TRANSFER, "line_transfer", "a cache line last written by another CPU, fetched") \
	X(LOCK_HANDOFF,  "lock_handoff",  "a lock last released by another CPU, acquired")

/* X(bit, JSON key, what it is): the "mechanisms" a profile may name, in
 * enum sd_mechanism's bit order (include/shootdown/model.h). */
#define SD_MODEL_MECHANISM_LIST(X)                                               \
	X(0, "ipi",            "interrupts between CPUs: x86 APIC IPIs, arm64 GIC SGIs (ipi_*, irq_*)") \
	X(1, "tlbi_broadcast", "arm64 broadcast TLBI ...IS over DVM, completed by DSB (tlbi_*, dvm_*, dsb)") \
	X(2, "invlpgb",        "AMD INVLPGB broadcasts, completed by TLBSYNC (invlpgb_*, tlbsync)") \
	X(3, "rar",            "Intel RAR remote action requests, serviced by the targets' microcode (rar_*)") \
	X(4, "sbi",            "RISC-V SBI firmware (OpenSBI) remote fences, serviced by the targets' M-mode trap handlers (sbi_*)")

/* X(bit, JSON key, what it is): the CPU "features" a profile states (each
 * {"present": true|false, "source": ...}); a profile with tlbi_broadcast
 * must state both, since the arm64 kernel's flushes depend on them. */
#define SD_MODEL_FEATURE_LIST(X)                                                 \
	X(0, "range_tlbi", "FEAT_TLBIRANGE (ARMv8.4): range TLBIs; without it __flush_tlb_range() issues a TLBI a page up to MAX_TLBI_OPS, then one for the ASID") \
	X(1, "kpti",       "the kernel unmapped at EL0 (KPTI, arm64_kernel_unmapped_at_el0()): every user TLBI issued twice (__tlbi_user(), for the user ASID too) and the trampoline on each entry and exit (kpti_trampoline)") \
	X(2, "repeat_tlbi", "ARM64_WORKAROUND_REPEAT_TLBI (Cortex-A76 erratum 1286807, Cortex-A55 2441007, Cortex-A510 2441009, Falkor 1009): every TLBI followed by DSB ISH and the same TLBI again (__TLBI_0()'s ALTERNATIVE); optional, absent means not present") \
	X(3, "svinval",    "RISC-V Svinval: sinval.vma per page between one sfence.w.inval and one sfence.inval.ir, charged local_flush_range + local_flush_range_page a page (local_flush_tlb_range_threshold_asid() with has_svinval()); optional, absent means not present") \
	X(4, "no_asid",    "RISC-V: satp.ASID keeps no bit (ASIDLEN 0, \"ASID allocator disabled (0 bits)\" at boot): the kernel runs without ASIDs, flushing the whole local TLB at every switch_mm() (set_mm_noasid()); optional, absent means not present")

/* The distance classes' JSON keys, in enum sd_model_distance order. */
#define SD_MODEL_DIST_KEYS { "core", "llc", "package", "system" }

#endif
