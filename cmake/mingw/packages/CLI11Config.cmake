# mingw shim for find_package(CLI11): Debian's headers via the toolchain's symlink folder (see
# cmake/mingw-w64.cmake); nothing here points at /usr/include.
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
endif()
set(CLI11_FOUND TRUE)
