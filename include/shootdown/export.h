/* SPDX-License-Identifier: MIT */
/**
 * @file export.h
 * @brief The one export macro. Everything not marked SD_EXPORT is hidden.
 */
#ifndef SHOOTDOWN_EXPORT_H
#define SHOOTDOWN_EXPORT_H

#if defined(SD_BUILDING_LIBRARY) && defined(__GNUC__)
#define SD_EXPORT __attribute__((visibility("default")))
#else
#define SD_EXPORT
#endif

#ifdef __cplusplus
#define SD_BEGIN_DECLS extern "C" {
#define SD_END_DECLS }
#else
#define SD_BEGIN_DECLS
#define SD_END_DECLS
#endif

#endif
