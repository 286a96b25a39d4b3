# mingw shim for find_package(Boost): Debian's headers via the toolchain's symlink folder (see
# cmake/mingw-w64.cmake); nothing here points at /usr/include.
if(NOT TARGET Boost::headers)
  add_library(Boost::headers INTERFACE IMPORTED)
  add_library(Boost::boost ALIAS Boost::headers)
  # Debian has no mingw build of Boost.Filesystem. Nothing compiled for Windows may need its
  # compiled part (os/windows/ uses Win32 directly); a use fails at link time, not silently.
  add_library(Boost::filesystem INTERFACE IMPORTED)
  add_library(Boost::system INTERFACE IMPORTED)
endif()
foreach(c ${Boost_FIND_COMPONENTS})
  if(NOT TARGET Boost::${c})
    set(Boost_FOUND FALSE)
    set(Boost_NOT_FOUND_MESSAGE "no mingw build of Boost.${c}")
    return()
  endif()
  set(Boost_${c}_FOUND TRUE)
endforeach()
set(Boost_VERSION 1.81.0)
set(Boost_INCLUDE_DIRS "")
set(Boost_FOUND TRUE)
