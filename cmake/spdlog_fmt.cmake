# spdlog sees the fmt it was built for, whatever LibTorch bundles.
#
# Why: spdlog compiled against an external fmt (Debian's spdlog 1.10 and fmt 9) includes
# <fmt/format.h>. PyTorch 2.x wheels ship their own fmt headers (fmt 12 in 2.11) in the same
# include folder as torch/torch.h, and that folder is searched before /usr/include, so spdlog's
# headers met fmt 12 and did not compile ('basic_runtime' is not a member of 'fmt'). Putting
# /usr/include first is not possible (the compiler keeps system folders last), so a folder of
# our own holds one link, fmt -> the fmt folder of spdlog's fmt::fmt target, and goes before
# every other include folder of every target (gpipe_target_defaults). The LibTorch headers this
# project includes (torch/torch.h, c10d's process groups and stores, c10/cuda) include no fmt
# (checked against 2.11; c10d's logging.h and the flight recorder's headers do, and are not
# used), so they are unaffected, and any LibTorch, with any bundled fmt or none, builds alike.
set(GPIPE_FMT_REDIRECT_DIR "")
if(TARGET fmt::fmt)
  get_target_property(fmt_include_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  find_path(GPIPE_FMT_INCLUDE_DIR fmt/core.h PATHS ${fmt_include_dirs} NO_DEFAULT_PATH)
  if(NOT GPIPE_FMT_INCLUDE_DIR)
    message(FATAL_ERROR "spdlog's fmt::fmt names include folders '${fmt_include_dirs}' without "
                        "fmt/core.h: reinstall libfmt-dev (scripts/install_deps.sh)")
  endif()
  set(GPIPE_FMT_REDIRECT_DIR ${CMAKE_BINARY_DIR}/spdlog_fmt)
  file(MAKE_DIRECTORY ${GPIPE_FMT_REDIRECT_DIR})
  file(CREATE_LINK ${GPIPE_FMT_INCLUDE_DIR}/fmt ${GPIPE_FMT_REDIRECT_DIR}/fmt SYMBOLIC)
  message(STATUS "gpipe: spdlog ${spdlog_VERSION} uses fmt ${fmt_VERSION} from ${GPIPE_FMT_INCLUDE_DIR}")
endif()
