# Cross build for Windows x64 with Debian's MinGW-w64 (posix threads), tests run under wine.
#   cmake -S . -B build-windows -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake
# Debian ships no mingw builds of the project's libraries, only their headers under /usr/include.
# /usr/include itself must never be on a mingw include path (glibc headers would shadow
# mingw's), so the libraries' header folders are exposed through a generated folder of symlinks,
# and find_package() / pkg-config are answered by shims (cmake/mingw/packages, .../pkgconfig).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

set(BATON_MINGW_PREFIX x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${BATON_MINGW_PREFIX}-gcc-posix)
set(CMAKE_CXX_COMPILER ${BATON_MINGW_PREFIX}-g++-posix)
set(CMAKE_RC_COMPILER ${BATON_MINGW_PREFIX}-windres)

# Search programs on the host, libraries and headers only in the mingw sysroot.
set(CMAKE_FIND_ROOT_PATH /usr/${BATON_MINGW_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The symlink folder: Debian's header-only libraries, plus a `Windows.h` shim (Boost 1.81
# includes <Windows.h>; mingw's header is <windows.h> and Linux file names are case-sensitive).
set(BATON_MINGW_INCLUDE ${CMAKE_BINARY_DIR}/mingw-include)
file(MAKE_DIRECTORY ${BATON_MINGW_INCLUDE})
foreach(entry boost nlohmann catch2 CLI xxhash.h)
  if(EXISTS /usr/include/${entry} AND NOT EXISTS ${BATON_MINGW_INCLUDE}/${entry})
    file(CREATE_LINK /usr/include/${entry} ${BATON_MINGW_INCLUDE}/${entry} SYMBOLIC)
  endif()
endforeach()
file(CONFIGURE OUTPUT ${BATON_MINGW_INCLUDE}/Windows.h
     CONTENT "// Boost spells it <Windows.h>; mingw ships <windows.h>.\n#include <windows.h>\n")

# -static: without it children die with 0xC0000135 (libstdc++/winpthread DLLs not found).
set(BATON_MINGW_DEFS "-D_WIN32_WINNT=0x0A00 -DWIN32_LEAN_AND_MEAN -DNOMINMAX -DBOOST_ALL_NO_LIB")
set(CMAKE_C_FLAGS_INIT "${BATON_MINGW_DEFS}")
set(CMAKE_CXX_FLAGS_INIT
    "${BATON_MINGW_DEFS} -isystem ${BATON_MINGW_INCLUDE} -isystem /usr/include/eigen3")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
set(CMAKE_CXX_STANDARD_LIBRARIES "-lws2_32 -lmswsock -lbcrypt -lntdll -lpsapi -ladvapi32")

# FindOpenMP records the import library libgomp.dll.a by full path, which -static cannot override:
# baton-worker.exe then needs libgomp-1.dll at run time and every worker dies with 0xC0000135
# (DLL not found). Point it at the static archive instead.
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgomp.a
                OUTPUT_VARIABLE BATON_MINGW_GOMP OUTPUT_STRIP_TRAILING_WHITESPACE)
if(EXISTS "${BATON_MINGW_GOMP}")
  set(OpenMP_gomp_LIBRARY ${BATON_MINGW_GOMP} CACHE FILEPATH "static libgomp (mingw -static)" FORCE)
endif()

# Tests (catch_discover_tests, ctest) run the .exe files through wine.
set(CMAKE_CROSSCOMPILING_EMULATOR ${CMAKE_CURRENT_LIST_DIR}/mingw/wine-run.sh)

# find_package() answers: each <Pkg>_DIR points at a shim config that defines the usual imported
# targets over the symlink folder. pkg-config only sees the shim .pc files (libxxhash).
set(BATON_MINGW_PACKAGES ${CMAKE_CURRENT_LIST_DIR}/mingw/packages)
foreach(pkg Boost nlohmann_json Eigen3 Catch2 CLI11)
  set(${pkg}_DIR ${BATON_MINGW_PACKAGES} CACHE PATH "mingw shim config for ${pkg}" FORCE)
endforeach()
set(ENV{PKG_CONFIG_LIBDIR} ${CMAKE_CURRENT_LIST_DIR}/mingw/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
