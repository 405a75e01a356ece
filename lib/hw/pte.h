/* SPDX-License-Identifier: MIT */
#ifndef SD_HW_PTE_H
#define SD_HW_PTE_H

#include "../core/layer.h"
#if SD_LAYER < SD_LAYER_HW
#error "hw/pte.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "../core/compiler.h"

/*
 * One 64-bit word is both a leaf PTE and a TLB entry's payload, so a walk
 * reads a translation and its oracle version in one atomic load:
 *
 *   63            32 31            8 7      0
 *  +----------------+---------------+--------+
 *  |    version     |      pfn      | flags  |
 *  +----------------+---------------+--------+
 *
 * VMA marks a page inside a mapping; PRESENT that it is populated. A VMA page
 * that is not PRESENT is populated on first access and is never cached.
 * READ and WRITE are the mapping's protection. WRPROTECT maps a page
 * read-only inside a mapping that allows writes: a write takes a
 * write-protect fault (the kernel's do_wp_page()), which gives the page a
 * frame of its own. A PRESENT PTE with frame 0 maps the shared zero page
 * (the kernel's ZERO_PAGE): what a read fault of an anonymous page maps
 * (do_anonymous_page()), always WRPROTECT, never freed, on no LRU.
 * SHARED marks a page of a shared mapping.
 */
#define SD_PTE_PRESENT (UINT64_C(1) << 0)
#define SD_PTE_READ (UINT64_C(1) << 1)
#define SD_PTE_WRITE (UINT64_C(1) << 2)
#define SD_PTE_VMA (UINT64_C(1) << 3)
#define SD_PTE_WRPROTECT (UINT64_C(1) << 4)
/* A page of a shared mapping (MAP_SHARED, file.h): fork leaves it
 * writable in both mms, on one frame (copy_present_pte() write-protects
 * only a COW mapping's pages). */
#define SD_PTE_SHARED (UINT64_C(1) << 5)
#define SD_PTE_PROT_SHIFT 1
#define SD_PTE_PROT_MASK (SD_PTE_READ | SD_PTE_WRITE)
#define SD_PTE_PFN_SHIFT 8
#define SD_PTE_FLAGS_MASK ((UINT64_C(1) << SD_PTE_PFN_SHIFT) - 1)
#define SD_PTE_PFN_BITS 24
#define SD_PTE_VERSION_SHIFT 32

#define SD_PFN_MAX ((UINT64_C(1) << SD_PTE_PFN_BITS) - 1)

static inline uint64_t sd_pte_pfn(uint64_t pte)
{
	return (pte >> SD_PTE_PFN_SHIFT) & SD_PFN_MAX;
}

static inline uint32_t sd_pte_version(uint64_t pte)
{
	return (uint32_t)(pte >> SD_PTE_VERSION_SHIFT);
}

static inline uint64_t sd_pte_make(uint64_t pfn, uint64_t flags, uint32_t version)
{
	return ((uint64_t)version << SD_PTE_VERSION_SHIFT) | (pfn << SD_PTE_PFN_SHIFT) | flags;
}

/* The shared zero page: present, frame 0 (no frame of the pool's). */
static inline bool sd_pte_is_zero_page(uint64_t pte)
{
	return (pte & SD_PTE_PRESENT) && sd_pte_pfn(pte) == 0;
}

static inline uint64_t sd_pte_flags_from_prot(unsigned prot)
{
	return ((uint64_t)prot << SD_PTE_PROT_SHIFT) & SD_PTE_PROT_MASK;
}

#endif
