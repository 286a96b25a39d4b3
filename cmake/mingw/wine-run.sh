#!/usr/bin/env bash
# CMAKE_CROSSCOMPILING_EMULATOR for the mingw build: runs a Windows .exe under wine (Debian's
# `wine` runs wine64 when wine32 is absent). Start a detached wineserver before ctest
# (scripts/windows.sh does), or the first test's wine spawns one that inherits ctest's output
# pipe and ctest never sees the end of the output.
export WINEDEBUG="${WINEDEBUG:--all}"
exec wine "$@"
