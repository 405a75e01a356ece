/* SPDX-License-Identifier: MIT */
/**
 * @file oracle.h
 * @brief The stale-translation oracle (invariants (docs/invariants.md) 1 and 3).
 * @ingroup oracle
 *
 * In checked mode every PTE change gets a version from a machine-wide clock
 * and TLB entries carry the version they were filled from. When a flush
 * returns, the floor of each page it covered is raised to the version of the
 * change that caused it. An access reads the floor before its lookup; a hit
 * on an entry below the floor (stale) or filled for another mm (foreign) is
 * a violation. Unchecked mode makes no shared write for the oracle.
 */
#ifndef SHOOTDOWN_ORACLE_H
#define SHOOTDOWN_ORACLE_H

#include <stdint.h>
#include "export.h"
#include "machine.h"

SD_BEGIN_DECLS

/**
 * @defgroup oracle Oracle
 * The runtime check that no stale translation is ever used.
 * @{
 */

/** What was wrong with a translation. */
enum sd_violation_kind {
	SD_VIOLATION_STALE = 1,   /**< older than a completed flush of the page */
	SD_VIOLATION_FOREIGN = 2, /**< filled for another address space */
};

/** One recorded violation. */
struct sd_violation {
	enum sd_violation_kind kind; /**< stale or foreign */
	unsigned cpu;            /**< CPU whose access was served */
	uint64_t mm_id;          /**< sd_mm_id() of the accessing mm */
	uint64_t entry_mm_id;    /**< mm the entry was filled for */
	uint64_t va;             /**< page address */
	uint32_t entry_version;  /**< version the TLB entry carried */
	uint32_t floor_version;  /**< minimum valid version at the access */
};

/** How many violations are kept in detail. */
#define SD_ORACLE_MAX_DETAILS 16

/**
 * sd_oracle_checked() - 1 if @m runs in checked mode. Any thread. Never waits
 * for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_oracle_checked(const struct sd_machine *m);

/**
 * sd_oracle_violations() - violations counted so far, over all CPUs. Any
 * thread. Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT uint64_t sd_oracle_violations(const struct sd_machine *m);

/**
 * sd_oracle_violation() - the @idx-th recorded violation (in arrival order).
 * Return: 0; -ENOENT if fewer were recorded; -EINVAL for NULL. Any thread.
 * Never waits for another CPU: may be called with interrupts off.
 */
SD_EXPORT int sd_oracle_violation(const struct sd_machine *m, unsigned idx,
				  struct sd_violation *out);

/** @} */

SD_END_DECLS

#endif
