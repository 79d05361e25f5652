# Compiles through ccache where it is installed (scripts/install_deps.sh installs it), with the
# cache in ccache's own folder, ~/.cache/ccache: a build folder made afresh at the same path, or a
# CI run on a machine that built these sources in the same folder before, takes what was compiled
# from the cache instead of compiling LibTorch's headers again. The shared precompiled header
# needs sloppiness about its defines and timestamps and clang's PCH written without its
# timestamp (cmake/targets.cmake). Folders at other paths do not share entries: CMake passes the
# PCH's path after -Xclang, which ccache hashes as written, and the PCH holds its own path.
# -DGPIPE_CCACHE=OFF compiles directly.
option(GPIPE_CCACHE "Compile through ccache where it is installed" ON)
set(GPIPE_CCACHE_PROGRAM "")
if(GPIPE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(GPIPE_CCACHE_FOUND ccache)
  if(GPIPE_CCACHE_FOUND)
    set(GPIPE_CCACHE_PROGRAM ${GPIPE_CCACHE_FOUND})
    set(CMAKE_CXX_COMPILER_LAUNCHER
        ${CMAKE_COMMAND} -E env
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=true ${GPIPE_CCACHE_FOUND})
    message(STATUS "gpipe: compiling through ${GPIPE_CCACHE_FOUND}")
  endif()
endif()
