# Sanitizer builds (scripts/sanitize.sh). GPIPE_SANITIZE=address instruments every target with
# AddressSanitizer and UndefinedBehaviorSanitizer; GPIPE_SANITIZE=thread with ThreadSanitizer.
# The flags go on every compile and link of this project (the shared precompiled header too, so
# that it matches its users); LibTorch, OpenMP and Gloo stay uninstrumented. A sanitizer brings
# its own allocator, so tcmalloc is left out of these builds. Build each in its own folder.
set(GPIPE_SANITIZE "" CACHE STRING "Sanitizer build: empty, address (ASan+UBSan) or thread (TSan)")
set_property(CACHE GPIPE_SANITIZE PROPERTY STRINGS "" address thread)

if(GPIPE_SANITIZE STREQUAL "address")
  set(GPIPE_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
                            -fno-omit-frame-pointer)
  # With clang the same build carries libFuzzer's coverage, and fuzz/ adds its targets.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    list(APPEND GPIPE_SANITIZER_FLAGS -fsanitize=fuzzer-no-link)
    set(GPIPE_FUZZ ON)
  endif()
elseif(GPIPE_SANITIZE STREQUAL "thread")
  set(GPIPE_SANITIZER_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT GPIPE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "GPIPE_SANITIZE='${GPIPE_SANITIZE}' is not a sanitizer build: use "
                      "address (ASan+UBSan), thread (TSan) or leave it empty")
endif()

# GCC's instrumentation defeats its flow analysis: LibTorch's inlined optionals then raise
# -Wmaybe-uninitialized false positives (GCC's manual warns of this), so that one warning is off.
if(GPIPE_SANITIZER_FLAGS AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND GPIPE_SANITIZER_FLAGS -Wno-maybe-uninitialized)
endif()

# Limit of the end-to-end tests (subprocesses that train): instrumented, they run up to ten times
# slower (every large tensor is a fresh mmap under ASan's allocator), so they get three times as long.
set(GPIPE_E2E_TEST_TIMEOUT 300)
if(GPIPE_SANITIZER_FLAGS)
  set(GPIPE_E2E_TEST_TIMEOUT 900)
  add_compile_options(${GPIPE_SANITIZER_FLAGS})
  add_link_options(${GPIPE_SANITIZER_FLAGS})
  message(STATUS "gpipe: sanitizer build (${GPIPE_SANITIZE}): ${GPIPE_SANITIZER_FLAGS}")
endif()
