# The commit that a benchmark's JSON names. NVST_GIT_COMMIT overrides it (for
# builds from a tarball); "-dirty" marks uncommitted changes.
if(DEFINED ENV{NVST_GIT_COMMIT})
  set(NVST_GIT_COMMIT "$ENV{NVST_GIT_COMMIT}")
else()
  execute_process(COMMAND git rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE NVST_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _git_rc)
  if(NOT _git_rc EQUAL 0)
    set(NVST_GIT_COMMIT "unknown")
  else()
    execute_process(COMMAND git status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                    OUTPUT_VARIABLE _git_dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_git_dirty)
      string(APPEND NVST_GIT_COMMIT "-dirty")
    endif()
  endif()
endif()
message(STATUS "nvst: commit ${NVST_GIT_COMMIT}")
