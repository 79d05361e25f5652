# Helpers that give every target the same precompiled header, warnings, allocator and output
# folder. LibTorch's headers take ~20 s per translation unit; one shared precompiled header of
# torch/torch.h brings that to a few seconds.

# The precompiled header is built once, in this object library, and reused by every target.
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/gpipe_pch.cpp
     CONTENT "// translation unit that owns the shared PCH\n")
add_library(gpipe_pch OBJECT ${CMAKE_BINARY_DIR}/gpipe_pch.cpp)
# The same warning flags as its users: -Wpedantic changes predefined macros, and a PCH built
# without it would be rejected.
target_link_libraries(gpipe_pch PUBLIC torch PRIVATE gpipe_warnings)
target_compile_definitions(gpipe_pch PUBLIC $<$<BOOL:${GPIPE_WITH_CUDA}>:GPIPE_WITH_CUDA=1>)
target_precompile_headers(gpipe_pch PUBLIC
  <torch/torch.h> <vector> <string> <memory> <functional> <mutex> <thread>
  <condition_variable> <chrono> <optional>)
# Everything compiles with -fPIC, executables too, so that one PCH fits every target (gcc rejects
# a PCH built with -fPIC in a -fPIE compile).
target_compile_options(gpipe_pch PUBLIC -fPIC)
# A PCH without its build time in it, so that ccache may hand out a cached one.
if(GPIPE_CCACHE_PROGRAM AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(gpipe_pch PRIVATE "SHELL:-Xclang -fno-pch-timestamp")
endif()
# spdlog's fmt before LibTorch's (cmake/spdlog_fmt.cmake), for the PCH and every user of it.
if(GPIPE_FMT_REDIRECT_DIR)
  target_include_directories(gpipe_pch SYSTEM BEFORE PUBLIC ${GPIPE_FMT_REDIRECT_DIR})
endif()

# gpipe_target_defaults(target): PCH, warnings, position-independent code, spdlog's fmt first.
function(gpipe_target_defaults target)
  target_precompile_headers(${target} REUSE_FROM gpipe_pch)
  if(GPIPE_FMT_REDIRECT_DIR)
    target_include_directories(${target} SYSTEM BEFORE PRIVATE ${GPIPE_FMT_REDIRECT_DIR})
  endif()
  target_link_libraries(${target} PRIVATE gpipe_warnings)
  target_compile_definitions(${target} PUBLIC $<$<BOOL:${GPIPE_WITH_CUDA}>:GPIPE_WITH_CUDA=1>)
  target_compile_options(${target} PRIVATE -fPIC)
endfunction()

# gpipe_link_tcmalloc(target): every executable and test links tcmalloc, forced in even though
# nothing names its symbols.
function(gpipe_link_tcmalloc target)
  if(GPIPE_SANITIZE OR NOT TCMALLOC_MINIMAL_LIBRARY)
    return()  # the sanitizer's allocator replaces it, or the machine has none
  endif()
  target_link_libraries(${target} PRIVATE
    -Wl,--no-as-needed ${TCMALLOC_MINIMAL_LIBRARY} -Wl,--as-needed)
endfunction()

# gpipe_library(name SOURCES ... DEPS ...): a static library with public headers in include/.
function(gpipe_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC torch ${ARG_DEPS})
  gpipe_target_defaults(${name})
endfunction()

# gpipe_executable(name SOURCES ... DEPS ...): a program in build/bin.
function(gpipe_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  # libstdc++ first among the shared libraries, so the program's std:: symbols bind to it. The
  # PyTorch 2.x wheels' libtorch.so exports copies of newer libstdc++ functions of its own
  # toolchain (std::filesystem among them); listed before libstdc++, its remove_all served the
  # program's calls and jumped to a null address.
  target_link_options(${name} PRIVATE "LINKER:--push-state,--no-as-needed" -lstdc++
                      "LINKER:--pop-state")
  gpipe_target_defaults(${name})
  gpipe_link_tcmalloc(${name})
endfunction()

# gpipe_test(name SOURCES ... DEPS ...): one GoogleTest program per area. With GPIPE_TEST_SHARDS
# 0 each test case is its own CTest entry (`ctest -R` picks one case); with N > 0 the program is
# N entries `name.shard<i>`, each running every N-th case in one process (GoogleTest's sharding).
# Each entry is labelled with its program (`ctest -L core_tests`). The sanitizer builds use
# shards: a process linked with LibTorch takes 2 s to start under ASan, so one process per case
# spent ~20 minutes of CPU on starting (core_tests: 351 cases, 35 s in one process).
function(gpipe_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT GPIPE_BUILD_TESTS)
    return()
  endif()
  gpipe_executable(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
  if(GPIPE_TEST_SHARDS EQUAL 0)
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
      PROPERTIES TIMEOUT 600 LABELS ${name})
    return()
  endif()
  math(EXPR last "${GPIPE_TEST_SHARDS} - 1")
  foreach(i RANGE ${last})
    add_test(NAME ${name}.shard${i} COMMAND ${name} --gtest_brief=1)
    # COST: start the shards early rather than alone at the end of a parallel run.
    set_tests_properties(${name}.shard${i} PROPERTIES TIMEOUT 1200 COST 60 LABELS ${name} ENVIRONMENT
      "GTEST_TOTAL_SHARDS=${GPIPE_TEST_SHARDS};GTEST_SHARD_INDEX=${i}")
  endforeach()
endfunction()

# gpipe_path_header(target header NAME VALUE [NAME VALUE...]): a generated header that defines
# each NAME as the string VALUE (generator expressions allowed), for the one file that includes
# it, rather than a compile definition on the command line of every file of the target.
function(gpipe_path_header target header)
  set(content "")
  set(args ${ARGN})
  while(args)
    list(POP_FRONT args name value)
    string(APPEND content "#define ${name} \"${value}\"\n")
  endwhile()
  file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/generated/${header} CONTENT "${content}")
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)
endfunction()
