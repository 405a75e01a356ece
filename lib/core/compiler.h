/* SPDX-License-Identifier: MIT */
/* Small helpers shared by every layer. */
#ifndef SD_CORE_COMPILER_H
#define SD_CORE_COMPILER_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/compiler.h is in a higher layer than the file including it (core/layer.h)"
#endif

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "atomic.h"

#define SD_CACHELINE 64
#define sd_cacheline_aligned alignas(SD_CACHELINE)

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define SD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void sd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

#if defined(__SANITIZE_THREAD__)
#define SD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SD_TSAN 1
#endif
#endif

/*
 * Full barrier: the emulator's smp_mb(). ThreadSanitizer does not model
 * fences (GCC refuses them under -fsanitize=thread), so TSan builds use a
 * seq_cst read-modify-write on one global word instead, which gives TSan
 * the happens-before edges the fence gives real hardware.
 */
#ifdef SD_TSAN
void sd_tsan_smp_mb(void);
static inline void sd_smp_mb(void)
{
	sd_tsan_smp_mb();
}
#else
static inline void sd_smp_mb(void)
{
	atomic_thread_fence(memory_order_seq_cst);
}
#endif

/*
 * smp_mb__after_atomic(): order a preceding read-modify-write as a full
 * barrier. On x86 every locked instruction already is one (the kernel's
 * version is barrier() there); elsewhere, and for TSan, which cannot see
 * that, it is a real fence.
 */
static inline void sd_smp_mb__after_atomic(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && !defined(SD_TSAN)
	atomic_signal_fence(memory_order_seq_cst);
#else
	sd_smp_mb();
#endif
}

/* C11 aligned_alloc wants a size that is a multiple of the alignment. */
static inline size_t sd_round_up(size_t size, size_t align)
{
	return (size + align - 1) & ~(align - 1);
}

static inline bool sd_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static inline unsigned sd_ilog2(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/*
 * Owner-written counters that other threads may read: a relaxed load and
 * store, never a locked read-modify-write, so a bump costs a plain add on a
 * private line.
 */
static inline void sd_counter_add(SD_ATOMIC(uint64_t) *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

#endif
