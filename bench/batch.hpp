// SPDX-License-Identifier: MIT
//
// Batch sizes for KeepRunningBatch() loops, shared by the emulated workloads
// (common.hpp) and their native twins (native.hpp).
#ifndef SD_BENCH_BATCH_HPP
#define SD_BENCH_BATCH_HPP

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

namespace sdbench_batch {

// The size of the next batch of a workload whose batches hold @batch
// iterations: @batch, or, when @exact (--sd_iterations=N), the iterations
// still to run when fewer, so that N is run exactly (KeepRunningBatch()
// alone rounds N up to whole batches, and a half-length run would be the
// full one), rounded up to a multiple of @unit for a workload whose batch
// splits only so far (context_switch: one whole hackbench run, @unit =
// @batch). Call it for each KeepRunningBatch(), before it.
inline uint64_t next_batch(const benchmark::State &st, uint64_t batch, uint64_t unit, bool exact)
{
	// iterations() is 0 before the first batch, and max_iterations is N
	// when the family was registered with Iterations(N).
	const uint64_t done = (uint64_t)st.iterations(), want = (uint64_t)st.max_iterations;

	if (!exact || done >= want)
		return batch;
	return std::min(batch, (want - done + unit - 1) / unit * unit);
}

} // namespace sdbench_batch

#endif
