/* SPDX-License-Identifier: MIT */
#ifndef SD_CORE_ATOMIC_H
#define SD_CORE_ATOMIC_H

#include "layer.h"
#if SD_LAYER < SD_LAYER_CORE
#error "core/atomic.h is in a higher layer than the file including it (core/layer.h)"
#endif

/*
 * C11 atomics that C++ can read too. The library is C11; its tests and
 * benchmarks are C++17 and include internal headers to reach the layers they
 * test. g++ has no _Atomic, so internal headers spell atomic types
 * SD_ATOMIC(T): _Atomic(T) in C, std::atomic<T> in C++, which GCC lays out
 * identically for the lock-free scalar and pointer types used here, and the
 * C11 generic functions are the std:: ones of the same name.
 */
#ifdef __cplusplus
/* Tests include internal headers inside extern "C"; templates need C++. */
extern "C++" {
#include <atomic>
}
#define SD_ATOMIC(T) std::atomic<T>
#define SD_THREAD_LOCAL thread_local
using std::atomic_compare_exchange_strong;
using std::atomic_compare_exchange_strong_explicit;
using std::atomic_compare_exchange_weak_explicit;
using std::atomic_exchange;
using std::atomic_exchange_explicit;
using std::atomic_fetch_add;
using std::atomic_fetch_add_explicit;
using std::atomic_fetch_and;
using std::atomic_fetch_or;
using std::atomic_fetch_sub;
using std::atomic_init;
using std::atomic_load;
using std::atomic_load_explicit;
using std::atomic_signal_fence;
using std::atomic_store;
using std::atomic_store_explicit;
using std::atomic_thread_fence;
using std::memory_order_acq_rel;
using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;
using std::memory_order_seq_cst;
#else
#include <stdatomic.h>
#define SD_ATOMIC(T) _Atomic(T)
#define SD_THREAD_LOCAL _Thread_local
#endif

#endif
