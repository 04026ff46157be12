# Benchmark sources of the nvst executable, and the NVSHMEM baseline plugin.
set(NVST_BENCH_SOURCES bench_p2p.cu bench_p2p_internode.cu bench_fifo.cu bench_coll.cu bench_ep.cu bench_host.cpp report.cpp
    baseline_loader.cpp shared_gpu.cpp)
if(NVST_NVSHMEM_FOUND)
  add_subdirectory(nvshmem_baseline)
endif()
