# mingw shim for find_package(nlohmann_json): Debian's headers via the toolchain's symlink folder (see
# cmake/mingw-w64.cmake); nothing here points at /usr/include.
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
endif()
set(nlohmann_json_FOUND TRUE)
