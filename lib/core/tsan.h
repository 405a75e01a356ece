/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_TSAN_H
#define SD_CORE_TSAN_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/tsan.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include "compiler.h"

/*
 * Happens-before edges that ThreadSanitizer cannot see by itself: liburcu's
 * barriers and lock-free structures run in uninstrumented code. A release on
 * an address before handing an object over and an acquire on it after
 * receiving it tell TSan what the real barriers guarantee. Nothing in other
 * builds.
 */
#ifdef SD_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define sd_tsan_acquire(addr) __tsan_acquire((void *)(addr))
#define sd_tsan_release(addr) __tsan_release((void *)(addr))
#else
#define sd_tsan_acquire(addr) do { (void)(addr); } while (0)
#define sd_tsan_release(addr) do { (void)(addr); } while (0)
#endif

#endif
