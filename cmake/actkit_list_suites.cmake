# Run by ctest, before it runs anything (cmake/ActkitTestSuites.cmake sets
# program, target, labels, slow, timeout, reports): adds one test per
# GoogleTest suite of ${program}.
if(NOT EXISTS "${program}")
  # Reported as a failed test naming the missing program, as GoogleTest's
  # own discovery does.
  add_test("${target}_NOT_BUILT" "${program}")
  set_tests_properties("${target}_NOT_BUILT" PROPERTIES LABELS "${labels}")
  return()
endif()
execute_process(COMMAND "${program}" --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${program} --gtest_list_tests failed (${status}):\n${errors}")
endif()
file(MAKE_DIRECTORY "${reports}")
# A suite's line starts in the first column: "Suite." or, for a typed or
# parameterized suite, "Prefix/Suite." and maybe "  # TypeParam = ...". Its
# tests follow, indented.
string(REGEX MATCHALL "(^|\n)[^ \n][^\n]*" suite_lines "${listing}")
foreach(line IN LISTS suite_lines)
  string(STRIP "${line}" line)
  if(NOT line MATCHES "^[^ ]+\\.( +#.*)?$")
    continue()  # gtest_main's own line ("Running main() from ...")
  endif()
  string(REGEX REPLACE "\\.( +#.*)?$" "" suite "${line}")
  string(REPLACE "/" "-" report "${target}-${suite}.xml")
  add_test("${suite}" "${program}" "--gtest_filter=${suite}.*" "--gtest_output=xml:${reports}/${report}")
  list(FIND slow "${suite}" slow_index)
  if(slow_index GREATER -1)
    math(EXPR cost "1000 - ${slow_index}")  # SLOW lists the longest first
  else()
    set(cost 1)
  endif()
  set_tests_properties("${suite}" PROPERTIES LABELS "${labels}" TIMEOUT "${timeout}" COST "${cost}")
endforeach()
