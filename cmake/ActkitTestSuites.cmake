# One CTest test per GoogleTest suite, listed when ctest runs.
#
# Starting a test program costs about 0.4 s before its first test (loading
# LibTorch and its operator registrations; 0.35 s of CPU on a 2-core AMD
# EPYC): with one process per test that was 40 % of the whole unit-test time
# (617 tests, 572 s summed, 2026-11-29). One process per suite keeps a
# failure's name down to its suite and each suite's tests in the order they
# were written, and pays that start-up once per suite.
#
# actkit_test_suites(<target> LABELS <label>... [TIMEOUT <s>] [SLOW <suite>...])
#   Registers "<suite>" for each suite <target> lists (`--gtest_list_tests`),
#   running `<target> --gtest_filter=<suite>.*`. Each run writes GoogleTest's
#   XML report (every test's time) into <build>/test-reports/, which
#   scripts/test.sh reads for its list of the slowest tests. SLOW names the
#   suites to start first, longest first (CTest starts the costliest tests
#   first, and a fresh build has no measured costs), so that no long suite
#   is left to run alone at the end. A suite with a skipped test passes when the rest pass: CTest
#   would otherwise report the whole suite as skipped.
set(ACTKIT_TEST_SUITES_LISTER ${CMAKE_CURRENT_LIST_DIR}/actkit_list_suites.cmake)

function(actkit_test_suites target)
  cmake_parse_arguments(arg "" "TIMEOUT" "LABELS;SLOW" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  file(GENERATE OUTPUT "${script}" CONTENT
"set(program [==[$<TARGET_FILE:${target}>]==])
set(target ${target})
set(labels [==[${arg_LABELS}]==])
set(slow [==[${arg_SLOW}]==])
set(timeout ${arg_TIMEOUT})
set(reports [==[${PROJECT_BINARY_DIR}/test-reports]==])
include([==[${ACTKIT_TEST_SUITES_LISTER}]==])
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()
