# NVSHMEM is optional. Looked for in NVSHMEM_DIR, else in the
# nvidia-nvshmem-cu13 wheel of python3 (include/, lib/libnvshmem_host.so.3,
# lib/libnvshmem_device.a). Absent, the build says so and goes on.
set(NVST_NVSHMEM_FOUND OFF)
set(_nvshmem_dir "")
if(DEFINED ENV{NVSHMEM_DIR})
  set(_nvshmem_dir "$ENV{NVSHMEM_DIR}")
elseif(DEFINED NVSHMEM_DIR)
  set(_nvshmem_dir "${NVSHMEM_DIR}")
else()
  find_program(_python3 python3)
  if(_python3)
    execute_process(
      COMMAND ${_python3} -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'nvshmem'))"
      OUTPUT_VARIABLE _nvshmem_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
if(_nvshmem_dir AND EXISTS "${_nvshmem_dir}/include/nvshmem.h"
   AND EXISTS "${_nvshmem_dir}/lib/libnvshmem_device.a")
  file(GLOB _nvshmem_host "${_nvshmem_dir}/lib/libnvshmem_host.so*")
  if(_nvshmem_host)
    list(GET _nvshmem_host 0 NVSHMEM_HOST_LIBRARY)
    set(NVSHMEM_INCLUDE_DIR "${_nvshmem_dir}/include")
    set(NVSHMEM_DEVICE_LIBRARY "${_nvshmem_dir}/lib/libnvshmem_device.a")
    set(NVST_NVSHMEM_FOUND ON)
  endif()
endif()
if(NVST_NVSHMEM_FOUND)
  message(STATUS "nvst: NVSHMEM found in ${_nvshmem_dir} (baseline plugin will be built)")
else()
  message(STATUS "nvst: NVSHMEM not found (set NVSHMEM_DIR or pip install nvidia-nvshmem-cu13==3.4.5); building without the NVSHMEM baseline")
endif()
