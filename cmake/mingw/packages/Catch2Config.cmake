# mingw shim for find_package(Catch2): Debian's headers via the toolchain's symlink folder (see
# cmake/mingw-w64.cmake); nothing here points at /usr/include.
if(NOT TARGET Catch2::Catch2)
  add_library(Catch2::Catch2 INTERFACE IMPORTED)
endif()
# Catch.cmake / CatchAddTests.cmake are CMake scripts, not headers: Debian's copies are fine.
list(APPEND CMAKE_MODULE_PATH /usr/lib/cmake/Catch2)
set(Catch2_FOUND TRUE)
