# mingw shim for find_package(Eigen3): Debian's headers via the toolchain's symlink folder (see
# cmake/mingw-w64.cmake); nothing here points at /usr/include.
if(NOT TARGET Eigen3::Eigen)
  add_library(Eigen3::Eigen INTERFACE IMPORTED)  # -isystem /usr/include/eigen3 is global
endif()
set(Eigen3_FOUND TRUE)
