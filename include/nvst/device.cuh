// nvst device API: what a CUDA kernel calls to talk to other PEs. Include it
// from .cu files compiled with relocatable device code and link the nvst
// library (target nvst::nvst does both). See the headers below for the
// semantics of each group; they follow OpenSHMEM/NVSHMEM one to one:
//
//   nvst::dev::p / g                       nvshmem_p / nvshmem_g
//   nvst::dev::putmem[_nbi][_warp|_block]  nvshmem[x]_putmem[_nbi][_warp|_block]
//   nvst::dev::putmem_nbi_block_tma        (ours: block put staged through the TMA)
//   nvst::dev::getmem[_nbi][_warp|_block]  nvshmem[x]_getmem[_nbi][_warp|_block]
//   nvst::dev::putmem_signal[_nbi][...]    nvshmem[x]_putmem_signal[_nbi][...]
//   nvst::dev::signal_op                   nvshmemx_signal_op
//   nvst::dev::signal_wait_until           nvshmem_signal_wait_until
//   nvst::dev::wait_until                  nvshmem_wait_until
//   nvst::dev::fence / quiet               nvshmem_fence / nvshmem_quiet
//   nvst::dev::barrier_all[_warp|_block]   nvshmem[x]_barrier_all[_warp|_block]
//   nvst::dev::atomic_fetch_add            nvshmem_TYPE_atomic_fetch_add
//   nvst::dev::atomic_compare_swap         nvshmem_TYPE_atomic_compare_swap
//   nvst::dev::atomic_swap / atomic_fetch  nvshmem_TYPE_atomic_swap / _fetch
#pragma once

#include "nvst/device/atomic.cuh"
#include "nvst/device/copy.cuh"
#include "nvst/device/rma.cuh"
#include "nvst/device/signal.cuh"
#include "nvst/device/state.cuh"
#include "nvst/device/sync.cuh"
// rma_address is used by the TMA put, so it comes after rma.cuh.
#include "nvst/device/copy_tma.cuh"
