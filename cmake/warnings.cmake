# gpipe_warnings: the warning flags every project target compiles with. Third-party headers come
# in as SYSTEM includes through their imported targets, so only our code is held to them.
add_library(gpipe_warnings INTERFACE)
target_compile_options(gpipe_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual
  -Wno-unused-parameter)
if(GPIPE_WERROR)
  target_compile_options(gpipe_warnings INTERFACE -Werror)
endif()
