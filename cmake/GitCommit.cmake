# The commit that a benchmark's JSON names. NVST_GIT_COMMIT overrides it (for
# builds from a tarball); "-dirty" marks uncommitted changes. Run as a
# script at every build (cmake -DNVST_SOURCE_DIR=... -DIN=... -DOUT=... -P
# GitCommit.cmake, see tools/nvst), it writes OUT from IN, touching OUT only
# when the commit changed, so that the JSON names the code that was built,
# not the code of the last configure.
if(DEFINED ENV{NVST_GIT_COMMIT})
  set(NVST_GIT_COMMIT "$ENV{NVST_GIT_COMMIT}")
else()
  execute_process(COMMAND git rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${NVST_SOURCE_DIR}
                  OUTPUT_VARIABLE NVST_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _git_rc)
  if(NOT _git_rc EQUAL 0)
    set(NVST_GIT_COMMIT "unknown")
  else()
    execute_process(COMMAND git status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${NVST_SOURCE_DIR}
                    OUTPUT_VARIABLE _git_dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_git_dirty)
      string(APPEND NVST_GIT_COMMIT "-dirty")
    endif()
  endif()
endif()
configure_file(${IN} ${OUT} @ONLY)
