/* SPDX-License-Identifier: MIT */
/**
 * @file version.h
 * @brief The API version, at compile time and at run time.
 * @ingroup version
 */
#ifndef SHOOTDOWN_VERSION_H
#define SHOOTDOWN_VERSION_H

#include "export.h"

SD_BEGIN_DECLS

/**
 * @defgroup version API version
 * @{
 */

/** Major version: bumped when a change breaks source or binary compatibility. */
#define SD_API_VERSION_MAJOR 0
/** Minor version: bumped when functions or struct fields are added. */
#define SD_API_VERSION_MINOR 6
/** Patch version: fixes only. */
#define SD_API_VERSION_PATCH 0
/** The version the caller compiled against, as one comparable number. */
#define SD_API_VERSION \
	((SD_API_VERSION_MAJOR << 16) | (SD_API_VERSION_MINOR << 8) | SD_API_VERSION_PATCH)

/**
 * sd_api_version() - the version of the library actually loaded.
 *
 * Compare with SD_API_VERSION to detect running against an older shared
 * library than the headers: a minor version below the headers' means newer
 * functions or fields are missing.
 *
 * Return: SD_API_VERSION of the library. Never fails. Any thread, also with
 * emulated interrupts off.
 */
SD_EXPORT unsigned sd_api_version(void);

/** @} */

SD_END_DECLS

#endif
